"""A rollout whose tool result TRL rolled back (it would overflow max_completion_length) leaves the tool loop, and a
turn's calls started ahead never include it (issue 28): with two turns, the server sees the same calls with the
feature off and on, and the rolled-back rollout's session only its first one."""

import json

import pytest
from orsgen.runtime import calls

from tests.harness import trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods


def call(name: str, arguments: dict) -> str:
    return "<tool>" + json.dumps({"name": name, "arguments": arguments}) + "</tool><|eot|>"


def first_turn(i: int, prompt: str) -> str:
    return call("spill", {"n": 400}) if i == 0 else call("add", {"n": 1})  # rollout 0's result cannot fit


@pytest.fixture(scope="module")
def tally(tmp_path_factory):
    with served("tests.envs.tally:Tally", tmp_path_factory.mktemp("tally"), "tally") as found:
        yield found


def two_turns(mod, out_dir: str, monkeypatch, batch_calls: str) -> tuple[dict[str, int], int]:
    """One GRPO step of 8 rollouts, two tool turns (the second scripted: `add` again): calls per session, and the
    calls started ahead."""
    from trl import GRPOTrainer

    class SecondTurn(GRPOTrainer):  # type: ignore[misc]
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):  # TRL 1.13 and 1.16 differ after prompt_ids
            tok = self.processing_class
            return [tok(call("add", {"n": 1}), add_special_tokens=False)["input_ids"] for _ in prompt_ids], None

    monkeypatch.setenv("ORSGEN_BATCH_CALLS", batch_calls)
    conversation = [{"role": "user", "content": "tally task 0"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": "add", "arguments": {"n": 1}}}]},
                    {"role": "assistant", "content": "done"}]
    server, _ = mod
    before, started = len(server.log()), calls.totals["started"]
    trainer = trainers.trainer(mod[1].Tally, out_dir, 1, tools=tool_methods(mod[1].Tally()),
                               conversations=[conversation], train_dataset=mod[1].dataset(num_tasks=2),
                               first_turn=first_turn, trainer_class=SecondTurn, max_tool_calling_iterations=2,
                               max_completion_length=128)
    trainer.train()
    mod[1].close_all()
    counts: dict[str, int] = {}
    for entry in server.log()[before:]:
        if entry["request"].endswith("/call"):
            counts[entry["session"]] = counts.get(entry["session"], 0) + 1
    return counts, calls.totals["started"] - started


@pytest.mark.trainer
def test_a_rolled_back_rollout_is_never_called_again(tally, tmp_path, monkeypatch):
    off, none = two_turns(tally, str(tmp_path / "off"), monkeypatch, "0")
    on, ahead = two_turns(tally, str(tmp_path / "on"), monkeypatch, "1")
    assert sorted(off.values()) == sorted(on.values()) == [1] + [2] * 7, (off, on)  # rollout 0: its spill only
    assert (none, ahead) == (0, 7 + 6)  # turn 1: rollouts 1-7 at rollout 0's call; turn 2: 2-7 at rollout 1's
