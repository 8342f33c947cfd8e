"""AsyncGRPOTrainer as a first-class trainer (issue 34): the `orsgen/...` figures and the trajectory records come
from its rollout worker, where the episodes run, through TRL's own channel (the worker's metrics queue, drained by
the trainer's `log()`). TRL's own worker code runs: `_child_main` in a thread of this process (so the adapters can be
counted) and `AsyncRolloutWorker` with its spawned child; the trainer's drain is TRL's loop with TRL's reduction
(tests/harness/async_worker.log_window). What is counted is checked against the server's log and the worker's own
calls of `get_reward()`."""

import importlib
import json
import queue
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from orsgen.runtime import worker_metrics

from examples import tiny
from tests.harness import servers
from tests.harness.async_worker import (
    QUESTIONS,
    accepted,
    cause_line,
    collect,
    complete_groups,
    dies_with_its_stop_watcher_waiting,
    draining,
    groups,
    instrumented,
    log_window,
    run_worker,
    stop,
    user_text,
)
from tests.harness.completions import serving
from tests.harness.generation import in_process, load
from tests.harness.processes import wait_until
from tests.harness.trainers import tool_methods

pytestmark = pytest.mark.trainer  # runs TRL code: also under the oldest TRL (.ci/trl-oldest)


@pytest.fixture(scope="module")
def quiz(tmp_path_factory):
    """The quiz environment (an answer: 1.0 and finished, or -0.5) served live; its adapter (sync tools: TRL 1.13's
    worker refuses async ones)."""
    with servers.running("tests.envs.quiz:Quiz", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        folder = tmp_path_factory.mktemp("parity")
        out = folder / "parity_quiz_adapter.py"
        made = in_process(server.url, "-o", str(out))
        assert made.returncode == 0, made.stderr
        yield server, out


def tokenizer_and_script(mod: Any) -> tuple[Any, Any]:
    """The tiny tokenizer, and a model that answers each question right, then wrong, in turn."""
    conversations = [tiny.conversation(q, "answer", {"answer": a}, "correct") for q, a in QUESTIONS.values()]
    conversations += [tiny.conversation(q, "answer", {"answer": "nope"}, "wrong") for q, _ in QUESTIONS.values()]
    tok = tiny.tokenizer(conversations, tool_methods(mod.Quiz()))
    answers = {q: a for q, a in QUESTIONS.values()}
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(prompt_text: str) -> str:
        if "<|tool|>" in prompt_text:
            return "done<|eot|>"
        question = user_text(prompt_text)
        with lock:
            n = seen[question] = seen.get(question, -1) + 1
        return tiny.call_text("answer", {"answer": answers[question] if n % 2 == 0 else "nope"})

    return tok, script


def windows(payloads: list[dict[str, Any]], cuts: int) -> list[dict[str, float]]:
    """The worker's puts, as the trainer's log() drains them through EpisodeMetrics' Drain, in `cuts` windows."""
    holder = type("Worker", (), {})()
    holder.metrics_queue = queue.Queue()
    worker_metrics.install(holder)
    out = []
    size = -(-len(payloads) // cuts)
    for n in range(cuts):
        for payload in payloads[n * size:(n + 1) * size]:
            holder.metrics_queue.inner.put(payload)
        out.append(log_window(holder.metrics_queue))
    return out


def total(logged: list[dict[str, float]], key: str, per: str | None = None) -> float:
    """A count over windows; with `per` (a per-episode figure), that figure times the window's episodes."""
    if per is None:
        return sum(w.get(f"orsgen/{key}", 0.0) for w in logged)
    return sum(w[f"orsgen/{per}"] * w["orsgen/episodes"] for w in logged if w.get("orsgen/episodes"))


def test_the_workers_figures_reach_the_trainers_log_and_match_the_server(quiz):
    server, path = quiz
    mod = load(path)
    Quiz = instrumented(mod.Quiz, __name__="Quiz")
    tok, script = tokenizer_and_script(mod)
    creates_before = len(server.creates())
    server.requests()
    pusher = worker_metrics.Pusher()  # what ORSGEN_EPISODE_METRICS makes in the worker's process
    try:
        with serving(tok, script) as completions:
            run = run_worker(
                complete_groups(3, 4), timeout=90,
                model_name="tiny", dataset=mod.dataset(), reward_funcs=[], processing_class=tok,
                eos_token_ids=[tok.eos_token_id], environment_factory=Quiz, num_generations=4, max_inflight_tasks=8,
                vllm_server_url=completions.url, max_tokens=64, max_tool_calling_iterations=2,
            )
    finally:
        pusher.close()
    assert run.error is None and not run.failed, run.exception_info
    seen = server.requests()
    creates = server.creates()[creates_before:]
    mod.close_all()  # episodes ended here are out of the worker: not its figures

    mine = [p for p in run.metrics if worker_metrics.KEY in p]
    assert mine and pusher.puts == len(mine)
    logged = windows(run.metrics, 3)
    assert all(len([k for k in w if k == "orsgen/episodes"]) == 1 for w in logged)
    assert any("rollout/duration_s" in w for w in logged)  # TRL's own figures pass through untouched

    rewards = [e for e in Quiz.events if e["kind"] == "reward"]
    assert total(logged, "episodes") == len(rewards) >= 12
    assert total(logged, "starts") == len(creates) == seen.get("POST /create", 0)
    assert total(logged, "start_failures") == 0
    assert total(logged, "scored", per="scored_fraction") == pytest.approx(sum(e["value"] is not None for e in rewards))
    assert total(logged, "finished", per="finished_fraction") == pytest.approx(sum(e["value"] == 1.0 for e in rewards))
    # each rollout answers once before it ends; the server also saw the calls of rollouts the stop cut short
    assert total(logged, "calls", per="tool_calls_per_episode") == len(rewards) <= seen.get("POST /quiz/call", 0)
    assert all(w.get(f"orsgen/unscored/{reason}", 0.0) == 0.0 for w in logged for reason in
               ("not_started", "stale_prompt", "no_tool_scored", "timed_out", "too_many_calls"))
    assert any("orsgen/reset_seconds_p95" in w and "orsgen/tool_seconds_p50" in w for w in logged)
    # the worker's groups are known (TRL's group ids), each counted once all its rollouts ended: right answers
    # alternate with wrong ones, so every group's rewards spread
    spread = [w["orsgen/groups_zero_spread"] for w in logged if "orsgen/groups_zero_spread" in w]
    assert spread and set(spread) == {0.0}


class Trainer:
    """What EpisodeMetrics reads of AsyncGRPOTrainer, which cannot be built on a CPU (FlashAttention; 1.16 also reads
    the GPU's peak FLOPs): its rollout worker, its `_metrics`, the main process; the callback finds it as it finds the real one,
    the `self` up the stack whose callback handler holds it."""

    def __init__(self, worker: Any, callback: Any) -> None:
        self.rollout_worker = worker
        self._metrics: dict[str, dict[str, list[float]]] = {"train": {}, "eval": {}}
        self.accelerator = SimpleNamespace(is_main_process=True, num_processes=1, process_index=0)
        self.model = SimpleNamespace(training=True)
        self.callback_handler = SimpleNamespace(callbacks=[callback])

    def step_end(self) -> None:
        for callback in self.callback_handler.callbacks:
            callback.on_step_end(None, None, None)


def test_async_rollout_worker_child_counts_and_records_with_its_policy_version(quiz, monkeypatch, tmp_path):
    """The user's two lines in the trainer's process (EpisodeMetrics(), Trajectories(...)) reach the spawned child;
    its figures come back over TRL's metrics queue, its records say which policy version generated them."""
    from accelerate.state import PartialState
    from orsgen.runtime import EpisodeMetrics, Trajectories
    from trl.experimental.async_grpo import async_rollout_worker as arw

    server, path = quiz
    PartialState()
    monkeypatch.setattr(arw, "is_vllm_available", lambda: True)  # the one bypass: vLLM cannot run here
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setenv(worker_metrics.VARIABLE, "")  # undone after the test: EpisodeMetrics() sets it
    monkeypatch.setenv("ORSGEN_TRAJECTORIES", "")
    mod = importlib.import_module(path.stem)
    tok, script = tokenizer_and_script(mod)
    callback = EpisodeMetrics()
    recorder = Trajectories(tmp_path / "traj", run="parity")
    creates_before = len(server.creates())
    with serving(tok, script) as completions:
        worker = arw.AsyncRolloutWorker(**accepted({
            "model_name": "tiny", "dataset": mod.dataset(), "reward_funcs": [], "processing_class": tok,
            "eos_token_ids": [tok.eos_token_id], "environment_factory": mod.Quiz, "num_generations": 4,
            "max_inflight_tasks": 4, "max_tokens": 64, "max_tool_calling_iterations": 2,
            "vllm_server_url": completions.url, "child_ready_timeout": 240,
        }, arw.AsyncRolloutWorker, arw._AsyncRolloutLoop))
        worker.update_model_version(3)  # as the trainer does after its first weight sync
        worker.start()
        Trainer(worker, callback).step_end()  # the first step's end: EpisodeMetrics puts its Drain in
        assert isinstance(worker.metrics_queue, worker_metrics.Drain)
        logged: list[dict[str, float]] = []

        def sync_once(samples: list[Any]) -> None:
            if len(samples) >= 8 and worker.model_version == 3:
                worker.update_model_version(5)  # a weight sync
                logged.append(log_window(worker.metrics_queue))

        try:
            samples = collect(worker, complete_groups(4, 4), each=sync_once)
        finally:
            child, left = stop(worker)
        assert child is not None and child.exitcode == 0
        logged += windows(left, 1)  # what the child put until it exited
    creates = server.creates()[creates_before:]
    recorder.close()
    del callback

    (file,) = (tmp_path / "traj").glob("trajectories-rank0-pid*.jsonl")
    records = [json.loads(line) for line in file.read_text().splitlines()]
    rewarded = [r for r in records if r["tool_calls"]]
    assert total(logged, "starts") == len(creates) >= 16
    counted = int(total(logged, "episodes"))
    assert 16 <= counted <= len(records)
    # Each figure is that of `counted` of the records: exactly theirs when every record was counted. An episode that
    # ended in TRL's thread pool as the worker stopped has a record, but may have missed the worker's last put.
    for key, per, of in (("finished", "finished_fraction", lambda r: r["finished"]),
                         ("scored", "scored_fraction", lambda r: r["scored"]),
                         ("calls", "tool_calls_per_episode", lambda r: len(r["tool_calls"]))):
        values = sorted(of(r) for r in records)
        low, high = sum(values[:counted]), sum(values[len(values) - counted:])
        assert low - 1e-6 <= total(logged, key, per=per) <= high + 1e-6, (key, low, high)
    read = [r for r in records if r["completion"] is not None]  # not those the stop cut before their reward
    assert len(read) >= 16
    for r in read:  # the turns as TRL held them when the rollout ended, in the worker's stream
        question, _ = QUESTIONS[r["task_index"]]
        assert r["stream"] == "train" and r["prompt"][-1] == {"role": "user", "content": question}, r["prompt"]
        assert r["completion"][0]["tool_calls"][0]["function"]["name"] == "answer" == r["tool_calls"][0]["name"]
    versions = [r["policy_version"] for r in rewarded]
    assert set(versions) == {3, 5}, versions  # before and after the sync
    assert {s.model_version for s in samples} == {3, 5}
    assert versions.index(5) >= 8  # the first two groups ended before the sync
    by_group = groups(samples)
    assert all(len(rows) == 4 for g, rows in by_group.items() if g < 4)


def test_a_group_the_worker_cannot_match_stops_it_with_one_line_and_stop_returns(monkeypatch, tmp_path):
    """group_reward under a name of its own (a partial): orsgen kept no group for it, so the worker's scoring of the
    first group stops it with one line, which check_health() raises in the trainer's process; stop() then returns, also
    once the child is gone (orsgen set TRL's stop event on the child's way out), nothing was scored, no session is
    left open."""
    import functools

    from accelerate.state import PartialState
    from trl.experimental.async_grpo import async_rollout_worker as arw

    from tests.harness.generation import orsgen

    log = tmp_path / "judged.jsonl"
    with servers.running("tests.envs.judged:Judged", env={"ORSGEN_COUNT_REQUESTS": "1", "JUDGED_LOG": str(log)}) as server:
        path = tmp_path / "judged_unnamed.py"
        assert orsgen(server.url, "-o", str(path)).returncode == 0
        PartialState()
        monkeypatch.setattr(arw, "is_vllm_available", lambda: True)
        monkeypatch.syspath_prepend(str(tmp_path))
        mod = importlib.import_module(path.stem)
        rows = mod.dataset(indices=[0], prompts=True)
        tok = tiny.tokenizer([[*rows[0]["prompt"][:-1], *tiny.conversation(rows[0]["task_prompt"], "answer",
                                                                            {"text": "Paris"}, "correct")]],
                             tool_methods(mod.Judged()))

        def script(text: str) -> str:
            return "done<|eot|>" if "<|tool|>" in text else tiny.call_text("answer", {"text": "Paris"})

        with serving(tok, script) as completions:
            worker = arw.AsyncRolloutWorker(**accepted({
                "model_name": "tiny", "dataset": rows, "reward_funcs": [functools.partial(mod.group_reward)],
                "processing_class": tok, "eos_token_ids": [tok.eos_token_id], "environment_factory": mod.Judged,
                "num_generations": 4, "max_inflight_tasks": 4, "max_tokens": 64, "max_tool_calling_iterations": 1,
                "vllm_server_url": completions.url, "child_ready_timeout": 240,
            }, arw.AsyncRolloutWorker, arw._AsyncRolloutLoop))
            worker.start()
            child = worker._process
            try:
                with pytest.raises(RuntimeError, match="child has failed") as failure:
                    collect(worker, lambda samples: False, timeout=60)
                with draining(worker):  # the child is gone before stop(): its stop watcher died waiting, unless
                    child.join(60)  # orsgen woke it
                assert child.exitcode == 1
            finally:
                stopping = threading.Thread(target=stop, args=(worker,), daemon=True)
                stopping.start()
                stopping.join(40)  # joined, or terminated after TRL's 15 s
            assert not stopping.is_alive(), "AsyncRolloutWorker.stop() waits for ever on the dead child's stop watcher"
        first = cause_line(worker, failure.value)
        assert first.startswith("RuntimeError: group_reward: AsyncGRPOTrainer's worker asked for the scores of a group")
        assert "pass the module's group_reward itself in reward_funcs" in first
        assert not log.exists()  # nothing was posted
        # the child's exit hook closes its sessions
        wait_until(lambda: not server.open_sessions(), waiting_for="the child's sessions closed")
        assert server.open_sessions() == []


def test_a_worker_that_died_leaves_no_waiter_on_its_stop_event():
    """The mechanism under the test above, with no race left to chance: a child dies at once after its exit hook set
    the stop event, so TRL's stop watcher is stopped mid-wakeup unless orsgen waited for it; the trainer's set() then
    returns (without the wait it hung every time)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    for _ in range(3):
        event = ctx.Event()
        child = ctx.Process(target=dies_with_its_stop_watcher_waiting, args=(event,))
        child.start()
        child.join(120)
        assert child.exitcode == 1
        setting = threading.Thread(target=event.set, daemon=True)  # what AsyncRolloutWorker.stop() does first
        setting.start()
        setting.join(10)
        assert not setting.is_alive(), "the stop event's set() waits for ever on the dead child's watcher"
