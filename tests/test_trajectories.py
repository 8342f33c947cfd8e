"""Trajectory records (issue 30) under a real GRPOTrainer: one record per rollout on the metered environment (a task
that never starts, one whose first start fails, one whose prompt goes stale, a failing tool), each holding the
reward get_reward() returned and the calls the server got on its session, in its order; evaluation's marked as
such; records that load with `datasets`; no secret in anything written."""

import json
import os
import signal
import subprocess
from collections import Counter

import pytest

from examples import tiny
from examples.tiny import tool_methods
from tests.harness import ROOT, metered, processes, rankfork, servers, trainers
from tests.harness.generation import load, orsgen
from tests.harness.processes import wait_until
from tests.harness.rollout_standin import standin

pytestmark = pytest.mark.trainer

CANARY_KEY, CANARY_SECRET = "canary-key-5f1e0c", "canary-secret-93ab7d"


@pytest.fixture
def echo_module(echo_server, tmp_path):
    out = tmp_path / "echo.py"
    assert orsgen(echo_server.url, "-o", str(out)).returncode == 0
    return out


@pytest.fixture
def module(tmp_path):
    with servers.running("tests.envs.metered:Metered", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path / "metered.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        yield server, load(out)


def test_one_record_per_rollout_with_the_reward_read_and_the_servers_calls(module, tmp_path, monkeypatch):
    """... and the same episodes uploaded to a stand-in of the OpenReward API: one rollout each, with its reward and
    the trainer's run info; no secret in any file or request but the key in its own header."""
    with standin() as api:
        monkeypatch.setenv("OPENREWARD_API_URL", api.url)
        train_and_check(module, tmp_path, monkeypatch, api)


def train_and_check(module, tmp_path, monkeypatch, api):
    server, mod = module
    monkeypatch.setenv("OPENREWARD_API_KEY", CANARY_KEY)
    monkeypatch.setenv("ORSGEN_TRAJECTORIES", "")  # Trajectories() sets it for processes it starts: undone after
    returned: list[tuple[int | None, str | None, float | None]] = []  # (task, stream, what get_reward gave TRL)

    base = metered.adapter_class(mod)

    class Metered(base):  # type: ignore[misc, valid-type]
        def get_reward(self) -> float | None:
            reward = super().get_reward()
            returned.append((self.task_index, "train" if trainer.model.training else "eval", reward))
            return reward

    def first_turn(i: int, prompt: str) -> str:
        return tiny.call_text("fumble" if "task 2" in prompt else "answer", {})

    rows = mod.dataset()
    rows = rows.add_column("task_prompt", [metered.STALE if i == 3 else None for i in rows["task_index"]])
    recorder = mod.Trajectories(tmp_path / "traj", upload=True)
    trainer = trainers.trainer(
        lambda: Metered(secrets={"canary": (CANARY_SECRET, ["api.example.com"])}), str(tmp_path / "out"), 4, threads=1,
        tools=tool_methods(Metered()),
        conversations=[tiny.conversation("Answer task 0", "answer", {}, "answered")], train_dataset=rows,
        eval_dataset=mod.dataset(split="test"), first_turn=first_turn, callbacks=[recorder],
        per_device_train_batch_size=2, num_generations=2, per_device_eval_batch_size=2, eval_strategy="steps",
        eval_steps=2,
    )
    trainer.train()
    mod.close_all()
    recorder.close()

    path = tmp_path / "traj" / "trajectories-rank0.jsonl"
    assert recorder.path == path
    text = path.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    assert CANARY_KEY not in text and CANARY_SECRET not in text

    # one record per rollout: 4 steps x 2 rollouts of training, 2 evaluations of 2 tasks x 2 rollouts
    assert [r["stream"] for r in records].count("train") == 8
    assert [r["stream"] for r in records].count("eval") == 8
    assert [(r["task_index"], r["stream"], r["reward"]) for r in records] == returned
    by_task = {(r["stream"], r["task_index"]): r for r in records}
    assert all(r["schema"] == "orsgen.trajectory/1" and r["rank"] == 0 and r["run"] == "out" for r in records)
    assert [r["step"] for r in records if r["stream"] == "train"] == [0, 0, 1, 1, 2, 2, 3, 3]

    never = by_task[("train", 1)]
    assert never["unscored_reason"] == "not_started" and never["reward"] is None and never["session"] is None
    assert "this task never starts" in never["start_error"]
    assert never["tool_calls"][0]["error"].startswith("answer: this episode is not scored")

    fumbled = by_task[("train", 2)]
    assert fumbled["tool_calls"][0]["name"] == "fumble" and "fumbled" in fumbled["tool_calls"][0]["error"]
    assert fumbled["unscored_reason"] == "no_tool_scored"
    assert by_task[("train", 3)]["unscored_reason"] == "stale_prompt"

    good = by_task[("train", 0)]
    assert good["tool_calls"][0] | {"seconds": 0} == {
        "name": "answer", "arguments": {}, "result": "answered", "error": None, "seconds": 0, "reward": 1.0,
        "finished": True, "cut": 0, "truncated": 0, "truncated_unit": None, "images_left_out": 0, "timed_out": False}
    assert good["reward"] == 1.0 and good["scored"] and good["finished"]
    assert good["task_spec"] == {"split": "train", "n": 0}
    assert good["prompt"][-1]["content"].endswith("Answer train task 0")  # what reset() gave, as the model got it
    assert good["completion"][0]["role"] == "assistant" and good["completion"][0]["tool_calls"]
    assert {"role": "tool", "name": "answer", "content": "answered"} in good["completion"]  # TRL's tool turn

    # the server's calls, session by session, in its order
    calls_by_session: dict[str, list[str]] = {}
    for entry in server.log():
        if entry["request"].endswith("/call"):
            calls_by_session.setdefault(entry["session"], []).append("call")
    for r in records:
        made = [c for c in r["tool_calls"] if c["error"] is None or "fumbled" in c["error"]]
        assert len(calls_by_session.get(r["session"], [])) == len(made), r

    import datasets

    loaded = datasets.load_dataset("json", data_files=str(path), split="train")
    assert loaded.num_rows == 16 and "tool_calls" in loaded.column_names

    # the upload: one rollout per record, the reward on its last message, the trainer's run info
    uploader = recorder.recorder.uploader
    assert (uploader.sent, uploader.failed, uploader.dropped) == (16, 0, 0)
    rollouts = api.rollouts()
    assert len(rollouts) == 16 and {r["runName"] for r in rollouts} == {"out"}
    assert all(r["run_info"]["framework"] == "trl" and r["run_info"]["rl_algorithm"] == "grpo" for r in rollouts)
    assert Counter((r["metadata"]["stream"], r["metadata"]["task_index"], r["messages"][-1].get("reward"))
                   for r in rollouts) == Counter((s, t, v) for t, s, v in returned)
    for seen in api.requests():
        assert CANARY_KEY not in seen.text + seen.path and CANARY_SECRET not in seen.text
        assert all(CANARY_KEY not in v for k, v in seen.headers.items() if k != "x-api-key")


def test_two_ranks_write_disjoint_files_that_add_up_to_what_the_server_saw(module, tmp_path):
    """2 torchrun workers, each with `Trajectories(dir)`: one file per rank, each rank's own rollouts (2 steps of
    one GRPO group of 2 per rank, and its share of evaluation), sessions that no other rank's records hold, and
    together every session the server ran a tool call on."""
    server, _ = module
    path = tmp_path / "metered.py"
    directory = tmp_path / "traj"
    argv, env = rankfork.command("tests.harness.metered", str(path), str(tmp_path / "out"), server.url, str(directory))
    run = processes.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in directory.iterdir()) == ["trajectories-rank0.jsonl", "trajectories-rank1.jsonl"]
    ranks = [[json.loads(line) for line in (directory / f"trajectories-rank{r}.jsonl").read_text().splitlines()]
             for r in (0, 1)]
    for rank, records in enumerate(ranks):
        assert {r["rank"] for r in records} == {rank}
        assert [r["stream"] for r in records].count("train") == 4  # 2 steps x 2 rollouts
    sessions = [{r["session"] for r in records if r["session"]} for records in ranks]
    assert not sessions[0] & sessions[1]
    called = {e["session"] for e in server.log() if e["request"].endswith("/call")}
    recorded = {r["session"] for records in ranks for r in records if any(c["error"] is None for c in r["tool_calls"])}
    assert recorded == called
    train = sorted(r["task_index"] for records in ranks for r in records if r["stream"] == "train")
    assert train == [0, 0, 1, 1, 2, 2, 3, 3]  # together, the run's rollouts: each task's group once


def test_sigint_mid_run_leaves_a_file_of_whole_records(echo_module, tmp_path):
    """Ctrl-C in the middle of training: every line of the file is a whole record, and what had been written
    before the signal is still there."""
    directory = tmp_path / "traj"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)])}
    file = directory / "trajectories-rank0.jsonl"
    argv, env = rankfork.python("-m", "tests.harness.trajectory_run", str(echo_module), str(tmp_path / "out"),
                                str(directory), env=env)
    with processes.started(argv, cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        wait_until(lambda: proc.poll() is not None or (file.exists() and file.read_text().count("\n") >= 8),
                   timeout=600, waiting_for="eight records")
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
        before = file.read_text().count("\n")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate()
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    text = file.read_text()
    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) >= before
    assert all(r["schema"] == "orsgen.trajectory/1" and r["tool_calls"][0]["name"] == "echo" for r in records)
