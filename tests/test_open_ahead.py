"""Overlapped resets: a GRPO group's first reset opens the rest of the group's sessions at once (runtime/ahead.py).
Asserted on what the server saw: when each `/create` arrived and when it was answered."""

import itertools
import re
import subprocess
import sys

import pytest

from examples import serve, tiny
from examples.demo import tool_methods
from tests.conftest import ROOT, load, orsgen, settle

GROUP = 4


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    with serve.running("tests.envs.slow_echo:SlowEcho", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("slow") / "slow_echo.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        yield server, load(out)


def first_turn(i: int, prompt: str) -> str:
    return tiny.call_text("echo", {"text": re.search(r"Echo the word (\w+)", prompt).group(1)})


def train(mod, out, steps: int = 2):
    import torch
    from trl import GRPOTrainer

    torch.set_num_threads(1)
    tok = tiny.tokenizer([tiny.conversation("Echo the word apple", "echo", {"text": "apple"}, "apple")],
                         tool_methods(mod.Slowecho()))
    trainer = GRPOTrainer(
        model=tiny.model(tok),
        processing_class=tok,
        args=tiny.grpo_config(str(out), steps, max_tool_calling_iterations=1, num_generations=GROUP),
        train_dataset=mod.dataset(num_tasks=4),
        environment_factory=mod.Slowecho,
        rollout_func=tiny.scripted_rollouts(first_turn),
    )
    trainer.train()
    return trainer


def starts(server, since: int) -> list[dict]:
    """Each session started since the `since`-th request, in arrival order: its task, when its `/create` arrived,
    and when its prompt was answered (the prompt waits for the environment's 0.3 s setup)."""
    log = server.log()[since:]
    prompts = {e["session"]: e["answered"] for e in log if e["request"].endswith("/prompt")}
    tasks = {c["session"]: c["body"]["index"] for c in server.creates()}
    return [{"task": tasks[e["session"]], "session": e["session"], "arrived": e["arrived"],
             "ready": prompts[e["session"]]} for e in log if e["request"] == "POST /create"]


def test_a_groups_sessions_open_together(slow, tmp_path):
    server, mod = slow
    before, ahead = len(server.log()), (mod.PINNED.ahead.opened, mod.PINNED.ahead.taken)
    trainer = train(mod, tmp_path)
    started = starts(server, before)
    assert len(started) == 16  # 2 steps x 8 rollouts, nothing extra
    for group in (started[i:i + GROUP] for i in range(0, 16, GROUP)):  # a group's resets follow each other
        assert len({s["task"] for s in group}) == 1  # one task per group
        # every session of the group was asked for before the first of them was ready: none opened in line
        assert max(s["arrived"] for s in group) < min(s["ready"] for s in group), group
    assert (mod.PINNED.ahead.opened - ahead[0], mod.PINNED.ahead.taken - ahead[1]) == (12, 12)  # 3 per group
    assert mod.PINNED.ahead.unused == 0
    rewards = [e["rewards/Slowecho/mean"] for e in trainer.state.log_history if "rewards/Slowecho/mean" in e]
    assert rewards and all(r == 1.0 for r in rewards)  # every rollout got its own session's prompt and scored
    # after train(): open are only the last step's 8 rollouts' sessions, which TRL's environments still hold
    assert mod.PINNED.ahead.waiting == {}
    settle()  # the first step's sessions, closed in the background at the second step's resets
    assert set(server.open_sessions()) == {s["session"] for s in started[8:]}
    mod.close_all()
    assert server.open_sessions() == []


def test_turned_off_the_resets_open_one_after_another(slow, tmp_path, monkeypatch):
    server, mod = slow
    monkeypatch.setenv("ORSGEN_OPEN_AHEAD", "0")
    before, opened = len(server.log()), mod.PINNED.ahead.opened
    train(mod, tmp_path, steps=1)
    started = starts(server, before)
    assert len(started) == 8
    assert all(b["arrived"] >= a["ready"] for a, b in itertools.pairwise(started))  # today's pattern: one by one
    assert mod.PINNED.ahead.opened == opened
    mod.close_all()
    assert server.open_sessions() == []


CRASH = """
import importlib.util
spec = importlib.util.spec_from_file_location("slow_echo_crash", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from tests.test_open_ahead import train

class Crashing(mod.Slowecho):
    resets = 0

    def reset(self, **row):
        Crashing.resets += 1
        if Crashing.resets == 2:  # the group's first reset has just opened the other three sessions ahead
            raise RuntimeError("training crashed")
        return super().reset(**row)

mod.Slowecho = Crashing
{ending}
"""
ENDINGS = {
    "uncaught": "train(mod, {out!r})",
    # caught, and the trainer with its environments dropped: no adapter is left to find the sessions through
    "caught": "import gc\ntry:\n    train(mod, {out!r})\nexcept RuntimeError:\n    print('crashed')\ngc.collect()",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_sessions_opened_ahead_are_closed_when_training_crashes_and_the_process_exits(slow, tmp_path, ending):
    """No close_all(): the trainer dies at the group's second reset, with three sessions opened ahead and never
    taken (some may still be starting); the process's exit must close them all on the server."""
    server, mod = slow
    before = len(server.creates())
    out = str(tmp_path / "out")
    script = CRASH.format(path=mod.__file__, ending=ENDINGS[ending].format(out=out))
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=False, capture_output=True, text=True,
                         timeout=600)
    if ending == "uncaught":
        assert run.returncode == 1 and "RuntimeError: training crashed" in run.stderr, run.stderr[-3000:]
    else:
        assert run.returncode == 0 and run.stdout.strip() == "crashed", run.stderr[-3000:]
    assert "Exception ignored" not in run.stderr, run.stderr[-3000:]
    opened = server.creates()[before:]
    assert len(opened) == GROUP and len({c["body"]["index"] for c in opened}) == 1  # the first and three ahead
    left = set(server.open_sessions())  # no polling: the process is gone, what it did not close stays open
    assert {c["session"] for c in opened} & left == set()
