"""Overlapped resets: a GRPO group's first reset opens the rest of the group's sessions at once (runtime/ahead.py).
Asserted on what the server saw: when each `/create` arrived and when it was answered."""

import itertools
import re

import pytest

from examples import serve, tiny
from examples.demo import tool_methods
from tests.conftest import load, orsgen

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
    return [{"task": tasks[e["session"]], "arrived": e["arrived"], "ready": prompts[e["session"]]}
            for e in log if e["request"] == "POST /create"]


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
