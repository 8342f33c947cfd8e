"""TRL's AsyncGRPOTrainer rollout worker, run for real against a live ORS server through a generated `--async-tools`
adapter, with a scripted `/v1/completions` server standing in for vLLM (tests/harness/completions.py).

What runs is TRL's own code: `_child_main` -> `_AsyncRolloutLoop` (dispatch, `reset` in its tool thread pool, async
tools awaited on its event loop, `get_reward`, scoring, the mp queues), in a thread of the test process so the adapter
instances can be inspected; and, in the last test, `AsyncRolloutWorker` itself with its spawned child process. The only
thing bypassed is `is_vllm_available()` in `AsyncRolloutWorker.__init__` (vLLM cannot run here); the worker's HTTP
client talks to the scripted server exactly as it talks to vLLM (it calls nothing but `POST /v1/completions`).
"""

import inspect
import json
import threading
import time
from typing import Any

import pytest

from examples import tiny
from tests.harness import servers
from tests.harness.async_worker import (
    QUESTIONS,
    accepted,
    cause_line,
    collect,
    complete_groups,
    groups,
    instrumented,
    run_worker,
    stop,
    user_text,
)
from tests.harness.completions import serving
from tests.harness.generation import in_process, load
from tests.harness.processes import wait_until
from tests.harness.trainers import tool_methods

pytestmark = pytest.mark.trainer  # runs TRL 1.16 code (1.13 refuses --async-tools): under the newest TRL only


# -- servers and adapters ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def faulty_async(tmp_path_factory):
    """The faulty environment served live, and its adapter generated with --async-tools."""
    with servers.running("tests.envs.faulty:Faulty") as server:
        out = tmp_path_factory.mktemp("agrpo") / "faulty_async.py"
        made = in_process(server.url, "--async-tools", "-o", str(out))
        assert made.returncode == 0, made.stderr
        yield server, out


@pytest.fixture(scope="module")
def quiz_async(tmp_path_factory):
    """The quiz environment (rewards 1.0 / -0.5) served live; its --async-tools adapter in an importable folder."""
    with servers.running("tests.envs.quiz:Quiz", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        folder = tmp_path_factory.mktemp("agrpo_quiz")
        out = folder / "agrpo_quiz_adapter.py"
        made = in_process(server.url, "--async-tools", "-o", str(out))
        assert made.returncode == 0, made.stderr
        yield server, out


# -- running TRL's worker ------------------------------------------------------------------------------------------


def tool_contents(completion: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in completion if m["role"] == "tool"]


# -- the tests -----------------------------------------------------------------------------------------------------


def test_worker_rolls_out_groups_on_their_tasks_and_takes_rewards_from_get_reward(quiz_async):
    server, path = quiz_async
    before = set(server.open_sessions())
    mod = load(path)
    Quiz = instrumented(mod.Quiz)
    train = mod.dataset()  # 3 tasks: prompt, task_index, split, answer/question/topic
    assert list(train["task_index"]) == [0, 1, 2]
    probe = mod.Quiz()
    conversations = [tiny.conversation(q, "answer", {"answer": a}, "correct") for q, a in QUESTIONS.values()]
    conversations += [tiny.conversation(q, "answer", {"answer": "nope"}, "wrong") for q, _ in QUESTIONS.values()]
    tok = tiny.tokenizer(conversations, tool_methods(probe))
    answers = {q: a for q, a in QUESTIONS.values()}
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(prompt_text: str) -> str:
        if "<|tool|>" in prompt_text:  # the tool answered: the episode is over
            return "done<|eot|>"
        question = user_text(prompt_text)
        with lock:
            n = seen[question] = seen.get(question, -1) + 1
        return tiny.call_text("answer", {"answer": answers[question] if n % 2 == 0 else "nope"})  # right, wrong, ...

    with serving(tok, script) as completions:
        run = run_worker(
            complete_groups(3, 4), timeout=90,
            model_name="tiny", dataset=train, reward_funcs=[], processing_class=tok,
            eos_token_ids=[tok.eos_token_id], environment_factory=Quiz, num_generations=4, max_inflight_tasks=12,
            vllm_server_url=completions.url, max_tokens=64, max_tool_calling_iterations=2,
        )
    mod.close_all()
    assert set(server.open_sessions()) - before == set()  # the worker's pooled adapters, closed by close_all()
    print(f"worker ready to {len(run.samples)} samples: {run.finished - run.started:.1f}s, stop: {run.stopped_in:.1f}s")
    assert run.error is None and not run.failed, run.exception_info

    # The worker called nothing but /v1/completions, with token ids, asking for token ids and logprobs back.
    assert completions.other_paths == []
    first = completions.requests[0].payload
    assert isinstance(first["prompt"], list) and all(isinstance(i, int) for i in first["prompt"])
    assert (first["model"], first["n"], first["return_token_ids"], first["logprobs"]) == ("tiny", 1, True, 0)

    # The tools TRL offered are the generated async ones; the reward column is the adapter class's.
    loop = run.loop
    assert sorted(t.__name__ for t in loop._env_tools[None]) == sorted(t.__name__ for t in tool_methods(probe))
    assert all(inspect.iscoroutinefunction(t) for t in loop._env_tools[None])
    assert loop.reward_func_names == ["Quiz"]

    events = Quiz.events
    resets = [e for e in events if e["kind"] == "reset"]
    calls = [e for e in events if e["kind"] == "tool"]
    rewards = [e for e in events if e["kind"] == "reward"]
    assert len(resets) >= 12 and len(calls) >= 12 and len(rewards) >= 12
    # reset() ran in the worker's tool thread pool; the async tools were awaited on the worker's own event loop.
    assert {e["thread"].split("_")[0] for e in resets} == {"grpo-tool"}
    assert all(e["loop"] is loop._loop and e["thread"] == "grpo-worker-under-test" for e in calls)
    # Every reset opened the task its row named (the pool reuses adapters, each reset is a fresh episode).
    assert all(e["task_index"] == e["row_task"] and "error" not in e for e in resets)
    assert len({e["adapter"] for e in resets}) <= 12  # construct once, reset often

    by_group = groups(run.samples)
    for group_id in range(3):
        rows = by_group[group_id]
        task = train[group_id]["task_index"]  # _repeat_iterator: group g is row g of the dataset
        question, _ = QUESTIONS[task]
        assert len(rows) == 4
        outcomes = []
        for sample in rows:
            # The prompt the model saw is the live prompt of the session reset() opened: the row's task.
            assert sample.prompt[-1]["content"] == question
            # The server judged the answer against that session's task, and get_reward() reached the sample.
            (result,) = tool_contents(sample.completion)
            expected = {"correct": 1.0, "wrong": -0.5}[result]
            assert sample.metrics["rewards/Quiz"] == expected == sample.metrics["reward"]
            assert (sample.advantage > 0) == (expected > 0)
            assert sample.completion[0]["tool_calls"][0]["function"]["name"] == "answer"
            assert sample.completion_mask.sum() > 0 and len(sample.old_log_probs) == len(sample.input_ids)
            outcomes.append(result)
        assert sorted(outcomes) == ["correct", "correct", "wrong", "wrong"]
    # The values TRL scored are exactly what get_reward() returned, episode by episode.
    first_wave = sorted(e["episode"] for e in resets)[:12]  # the 12 rollouts of groups 0-2 (12 slots)
    returned = sorted(e["value"] for e in rewards if e["episode"] in first_wave)
    assert returned == sorted(s.metrics["rewards/Quiz"] for s in run.samples if s.group_id < 3)
    tool_metrics = [m for m in run.metrics if "tools/answer/call_total" in m]
    assert sum(m["tools/answer/call_total"] for m in tool_metrics) >= 12
    assert not any(m.get("tools/answer/failure_total") for m in run.metrics)


def test_a_slow_session_start_or_slow_tool_does_not_hold_back_other_rollouts(faulty_async):
    _, path = faulty_async
    mod = load(path)
    # Task 5 takes 8 s to start: opened in the background, reset() returns the pinned prompt at once.
    Faulty = instrumented(mod.Faulty, open_in_background=True, unscored_reward=0.25, __name__="BackgroundFaulty")
    train = mod.dataset(indices=[5, 0, 1, 2], prompts=True)
    assert list(train["task_prompt"]) == [f"faulty task {i}" for i in (5, 0, 1, 2)]
    probe = mod.Faulty()
    conversations = [tiny.conversation(f"faulty task {i}", "slow", {"seconds": s}, f"slept {float(s)}")
                     for i, s in ((0, 0.2), (1, 3), (2, 0.2), (5, 0.2))]
    tok = tiny.tokenizer(conversations, tool_methods(probe))
    by_task = {0: 0.2, 1: 3, 2: 0.2, 5: 0.2}
    seconds = {f"faulty task {task}": s for task, s in by_task.items()}

    def script(prompt_text: str) -> str:
        if "<|tool|>" in prompt_text:
            return "done<|eot|>"
        return tiny.call_text("slow", {"seconds": seconds[user_text(prompt_text)]})

    with serving(tok, script) as completions:
        run = run_worker(
            complete_groups(4, 2), timeout=90,
            model_name="tiny", dataset=train, reward_funcs=[], processing_class=tok,
            eos_token_ids=[tok.eos_token_id], environment_factory=Faulty, num_generations=2, max_inflight_tasks=8,
            vllm_server_url=completions.url, max_tokens=64, max_tool_calling_iterations=1,
        )
    mod.close_all()
    print(f"worker ready to {len(run.samples)} samples: {run.finished - run.started:.1f}s, stop: {run.stopped_in:.1f}s")
    assert run.error is None and not run.failed, run.exception_info
    assert completions.other_paths == []

    events = Faulty.events
    first_wave = sorted({e["episode"] for e in events if e["kind"] == "reset"})[:8]  # the 8 rollouts of groups 0-3
    resets = {e["episode"]: e for e in events if e["kind"] == "reset" and e["episode"] in first_wave}
    calls = {e["episode"]: e for e in events if e["kind"] == "tool" and e["episode"] in first_wave}
    assert sorted(e["task_index"] for e in resets.values()) == [0, 0, 1, 1, 2, 2, 5, 5]
    assert all(e["task_index"] == e["row_task"] and e["thread"].startswith("grpo-tool") for e in resets.values())
    assert all(e["prompt"] == f"faulty task {e['task_index']}" for e in resets.values())
    assert all(e["loop"] is run.loop._loop for e in calls.values())
    t0 = min(e["start"] for e in resets.values())
    # Every reset returned at once, task 5's included (its session opens behind it): all 8 rollouts were in flight
    # long before task 5's session could open.
    assert all(e["end"] - e["start"] < 2.0 for e in resets.values())
    assert max(e["end"] for e in resets.values()) - t0 < 4.0

    def done(task: int) -> list[float]:
        return [calls[ep]["end"] - t0 for ep, r in resets.items() if r["task_index"] == task]

    fast, slow_tool, slow_start = done(0) + done(2), done(1), done(5)
    timings = {"fast": fast, "slow tool (3 s)": slow_tool, "slow start (8 s)": slow_start}
    print("tool calls finished, seconds after the first reset:", json.dumps(timings, default=lambda x: round(x, 2)))
    assert max(fast) + 0.5 < min(slow_tool), timings  # not held back by the slow tool calls...
    first, second = (calls[ep] for ep, r in resets.items() if r["task_index"] == 1)
    assert first["start"] < second["end"] - 2.5 and second["start"] < first["end"] - 2.5  # 3 s calls side by side
    assert min(slow_start) > 7.5, timings  # task 5's first call waited for its session...
    assert max(fast) + 4 < min(slow_start), timings  # ...nor by the slow start: they finished well before it
    # Task 5's tool calls were issued right away and awaited the session without blocking the loop.
    assert all(calls[ep]["start"] - t0 < 4.0 for ep, r in resets.items() if r["task_index"] == 5)
    for ep, r in resets.items():
        assert calls[ep]["result"] == f"slept {float(by_task[r['task_index']])}"

    # Results: each group's rollouts ran on the row's task; get_reward() (0.25: unscored, not voided) reached them.
    by_group = groups(run.samples)
    enqueued = {}
    for group_id in range(4):
        task = train[group_id]["task_index"]
        rows = by_group[group_id]
        assert len(rows) == 2
        for sample in rows:
            assert sample.prompt[-1]["content"] == f"faulty task {task}"
            assert tool_contents(sample.completion) == [f"slept {float(by_task[task])}"]
            assert sample.metrics["rewards/BackgroundFaulty"] == 0.25
        enqueued[task] = max(s.enqueued_at for s in rows)
    assert enqueued[0] + 4 < enqueued[5] and enqueued[2] + 4 < enqueued[5]  # wall clock, when scored
    first_rewards = [e for e in events if e["kind"] == "reward" and e["episode"] in first_wave]
    assert len(first_rewards) == 8 and all(e["void"] is None and e["mismatch"] is None for e in first_rewards)


def test_rows_without_task_index_stop_the_worker_with_one_line(faulty_async):
    from datasets import Dataset

    _, path = faulty_async
    mod = load(path)
    Faulty = instrumented(mod.Faulty)
    probe = mod.Faulty()
    tok = tiny.tokenizer([tiny.conversation("faulty task 0", "slow", {"seconds": 0}, "slept 0.0")],
                         tool_methods(probe))
    bare = Dataset.from_dict({"prompt": [[{"role": "user", "content": "go"}]] * 2})  # no task_index column

    with serving(tok, lambda text: tiny.call_text("slow", {"seconds": 0})) as completions:
        run = run_worker(
            lambda samples: False, timeout=30,
            model_name="tiny", dataset=bare, reward_funcs=[], processing_class=tok,
            eos_token_ids=[tok.eos_token_id], environment_factory=Faulty, num_generations=2, max_inflight_tasks=4,
            vllm_server_url=completions.url, max_tokens=64,
        )
    mod.close_all()
    assert isinstance(run.error, RuntimeError), run.error
    message = str(run.error)
    assert "\n" not in message and "train_dataset=dataset()" in message
    assert "thread 'grpo-tool" in message  # it names where the reset ran
    # What the trainer sees: the failure flag and the error on the exception queue (check_health raises from it).
    assert run.failed
    assert run.exception_info is not None and run.exception_info[:2] == ("RuntimeError", message)
    assert run.samples == [] and completions.requests == []  # nothing was generated on a guessed task
    (reset,) = [e for e in Faulty.events if e["kind"] == "reset"]
    assert reset["row_task"] is None and isinstance(reset["error"], RuntimeError)


def test_async_rollout_worker_in_its_spawned_child(quiz_async, monkeypatch, tmp_path):
    """AsyncRolloutWorker as the trainer drives it: pickled kwargs, a spawned child, samples over the mp queue,
    check_health(), stop(). The generated module is imported by name in the child (it must be importable there)."""
    import importlib

    from accelerate.state import PartialState
    from datasets import Dataset
    from trl.experimental.async_grpo import async_rollout_worker as arw

    server, path = quiz_async
    PartialState()  # the trainer's Accelerator does this; AsyncRolloutWorker.start() logs through accelerate
    monkeypatch.setattr(arw, "is_vllm_available", lambda: True)  # the one bypass: vLLM cannot run here
    monkeypatch.syspath_prepend(str(path.parent))  # spawn hands sys.path to the child
    mod = importlib.import_module(path.stem)
    train = mod.dataset()
    probe = mod.Quiz()
    conversations = [tiny.conversation(q, "answer", {"answer": a}, "correct") for q, a in QUESTIONS.values()]
    tok = tiny.tokenizer(conversations, tool_methods(probe))
    answers = {q: a for q, a in QUESTIONS.values()}

    def script(prompt_text: str) -> str:
        if "<|tool|>" in prompt_text:
            return "done<|eot|>"
        return tiny.call_text("answer", {"answer": answers[user_text(prompt_text)]})

    common: dict[str, Any] = {
        "model_name": "tiny", "reward_funcs": [], "processing_class": tok, "eos_token_ids": [tok.eos_token_id],
        "environment_factory": mod.Quiz, "num_generations": 4, "max_inflight_tasks": 12, "max_tokens": 64,
        "max_tool_calling_iterations": 2, "child_ready_timeout": 240,
    }
    before = set(server.open_sessions())
    monkeypatch.setenv("ORSGEN_TRAJECTORIES", "")  # set below for the child; undone after the test
    recorder = mod.Trajectories(tmp_path / "traj", run="async-run")  # in the parent, where the user writes it
    with serving(tok, script) as completions:
        worker = arw.AsyncRolloutWorker(**accepted({"dataset": train, "vllm_server_url": completions.url, **common},
                                                   arw.AsyncRolloutWorker, arw._AsyncRolloutLoop))
        started = time.monotonic()
        worker.start()
        ready = time.monotonic() - started
        try:
            samples = collect(worker, complete_groups(3, 4))
        finally:
            stopping = time.monotonic()
            child, _ = stop(worker)
        stopped_in = time.monotonic() - stopping
        print(f"spawned worker: ready in {ready:.1f}s, 3 groups in {stopping - started - ready:.1f}s, "
              f"stopped in {stopped_in:.1f}s")
        # stop() terminates a child that does not finish its in-flight rollouts within 15 s: no exit hook runs then.
        assert child is not None and child.exitcode == 0, f"child exit code {child and child.exitcode} ({stopped_in:.0f}s)"

        by_group = groups(samples)
        for group_id in range(3):
            question, _ = QUESTIONS[train[group_id]["task_index"]]
            rows = by_group[group_id]
            assert [s.prompt[-1]["content"] for s in rows] == [question] * 4
            assert [tool_contents(s.completion) for s in rows] == [["correct"]] * 4
            assert [s.metrics["rewards/Quiz"] for s in rows] == [1.0] * 4  # get_reward() in the child, per rollout
        # The child closed its sessions when it exited (the runtime's exit hook runs in a spawned child too).
        wait_until(lambda: not set(server.open_sessions()) - before, waiting_for="the child's sessions closed")
        assert set(server.open_sessions()) - before == set()

        # The child recorded its episodes (the parent ran none): one record per rollout it finished, in a file of
        # its own, each with get_reward()'s reward and its tool call.
        recorder.close()
        assert not recorder.path.exists()
        (file,) = (tmp_path / "traj").glob("trajectories-rank0-pid*.jsonl")
        records = [json.loads(line) for line in file.read_text().splitlines()]
        finished = [r for r in records if r["tool_calls"]]
        assert len(finished) >= 12 and all(r["run"] == "async-run" for r in records)
        for r in finished:
            question, answer = QUESTIONS[r["task_index"]]
            assert r["reward"] == 1.0 and r["tool_calls"][0]["arguments"] == {"answer": answer}

        # Rows without task_index: the child dies on the first reset; check_health() raises with the one line.
        bare = Dataset.from_dict({"prompt": [[{"role": "user", "content": "go"}]] * 2})
        worker = arw.AsyncRolloutWorker(dataset=bare, vllm_server_url=completions.url, **common)
        asked = len(completions.requests)
        worker.start()
        try:
            deadline = time.monotonic() + 60
            with pytest.raises(RuntimeError, match="child has failed") as failure:
                while time.monotonic() < deadline:
                    worker.check_health(stale_after_s=60)
                    time.sleep(0.2)
        finally:
            worker.stop()
        first_line = cause_line(worker, failure.value)
        assert first_line.startswith("RuntimeError: reset() without task_index") and "train_dataset=dataset()" in first_line
        assert len(completions.requests) == asked  # nothing was generated
