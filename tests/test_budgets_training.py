"""A budget makes a long tool result reach the completion GRPOTrainer scores (issue 32): one GRPO step whose rollouts
all call `huge` (200,000 characters) first, with a `max_completion_length` the raw result cannot fit. Without a cap
TRL rolls the result back (the completion holds no tool turn: the model never read it); with `max-output-chars`
pinned small, the capped text and its line are the tool turn of every completion, and EpisodeMetrics counts the cut.
TRL 1.13 and 1.16 roll back alike (tests/test_batch_calls_rollback.py)."""

import json

import pytest
from orsgen.runtime.budgets import Budgets

from examples import tiny
from tests.envs.budgeted import HUGE
from tests.harness import trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods

pytestmark = pytest.mark.trainer

CAP = 20
CAPPED = Budgets({"max-output-chars": CAP}).cap("huge", HUGE)[0]  # what the model reads: 38 tokens of the tokenizer
LENGTH = 96  # the completion budget: the call (13 tokens), the capped result and the tool turn's frame fit


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory):
    with served("tests.envs.budgeted:Budgeted", tmp_path_factory.mktemp("budgets"), "budgeted") as found:
        yield found


def one_step(mod, folder, monkeypatch, budgets: dict) -> tuple[list[dict], dict]:
    """One GRPO step of 8 rollouts calling `huge`: the trajectory records and the step's orsgen figures."""
    monkeypatch.setattr(mod.PINNED, "budgets", budgets)
    monkeypatch.setenv("ORSGEN_TRAJECTORIES", "")  # Trajectories() sets it for processes it starts: undone after
    records = mod.Trajectories(folder / "traj")
    trainer = trainers.trainer(mod.Budgeted, str(folder / "out"), 1, tools=tool_methods(mod.Budgeted()),
                               conversations=[tiny.conversation("budgeted task 0", "huge", {}, CAPPED)],
                               train_dataset=mod.dataset(num_tasks=2),
                               first_turn=lambda i, prompt: tiny.call_text("huge", {}),
                               max_completion_length=LENGTH, callbacks=[records, mod.EpisodeMetrics()])
    trainer.train()
    mod.close_all()
    records.close()
    [figures] = [{k.removeprefix("orsgen/"): v for k, v in e.items()} for e in trainer.state.log_history
                 if "orsgen/episodes" in e]
    return [json.loads(line) for line in records.path.read_text().splitlines()], figures


def tool_turns(record: dict) -> list:
    return [turn for turn in record["completion"] if turn["role"] == "tool"]


def test_a_result_over_the_completion_length_reaches_the_model_only_capped(budgeted, tmp_path, monkeypatch):
    _, mod = budgeted
    raw, figures = one_step(mod, tmp_path / "raw", monkeypatch, {})
    assert len(raw) == 8 and all(r["tool_calls"][0]["name"] == "huge" for r in raw)
    assert all(tool_turns(r) == [] for r in raw)  # rolled back: the model never read it
    assert all(r["tool_calls"][0]["truncated"] == 0 and r["tool_calls"][0]["cut"] > 0 for r in raw)
    assert (figures["outputs_truncated"], figures["chars_cut"]) == (0, 0)

    capped, figures = one_step(mod, tmp_path / "capped", monkeypatch, {"max-output-chars": CAP})
    assert len(capped) == 8
    assert all(tool_turns(r) == [{"role": "tool", "name": "huge", "content": CAPPED}] for r in capped)
    assert "(max-output-chars 20): ask for less]" in CAPPED and CAPPED.startswith(HUGE[:10])
    assert all((r["tool_calls"][0]["result"], r["tool_calls"][0]["truncated"], r["tool_calls"][0]["cut"]) ==
               (CAPPED, len(HUGE) - CAP, 0) for r in capped)
    assert (figures["outputs_truncated"], figures["chars_cut"], figures["tool_timeouts"]) == (
        8, 8 * (len(HUGE) - CAP), 0)
