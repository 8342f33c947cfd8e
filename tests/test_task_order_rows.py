"""`task_order = "difficulty"` with rows that name their tasks (issue 41, read-only note b). The difficulty order
draws environment-owned data only; a training dataset's rows are ordered by the trainer's sampler. A user who set it
expects it to act, so a training run that cannot honour it says so once, as a WARNING (what logging shows by
default, as TRL warns of an option that has no effect), and trains on the dataset's order. It is not refused: the
run is right, and the same module, or a job-wide ORSGEN_TASK_ORDER, also serves evaluation, whose rows name their
tasks by design: there nothing is said."""

import logging

import pytest
from orsgen.runtime import client

from tests.harness import trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods

NO_EFFECT = "task_order='difficulty' has no effect here"


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    with served("examples.echo:Echo", tmp_path_factory.mktemp("order_rows"), "echo_order_rows") as found:
        yield found


def said(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "orsgen" and NO_EFFECT in r.getMessage()]


@pytest.mark.trainer
def test_a_training_dataset_with_the_difficulty_order_warns_once_and_trains_on_its_rows(echo, tmp_path, monkeypatch,
                                                                                           caplog):
    server, mod = echo
    monkeypatch.setattr(client._part(), "said", set())  # the lines said once: none yet  # this process may have said it before

    class Ordered(mod.Echo):
        task_order = "difficulty"

    Ordered.__name__ = "Echo"
    before = len(server.creates())
    trainer = trainers.trainer(Ordered, str(tmp_path / "rows"), 2, tools=tool_methods(mod.Echo()),
                               train_dataset=mod.dataset(num_tasks=4), reward_funcs=mod.outcome_reward)
    trainer.train()
    mod.close_all()
    [line] = said(caplog)  # once, over every reset of both steps
    assert line.levelno == logging.WARNING  # shown by logging's default handler, unlike INFO
    assert "dataset(pass_rates=..., weight=True)" in line.getMessage()
    opened = {c["body"]["index"] for c in server.creates()[before:]}
    assert opened <= {0, 1, 2, 3}  # the dataset's tasks, as its rows named them
    assert not any(type(c).__name__ == "OrsgenTaskOrder" for c in trainer.callback_handler.callbacks)


def test_rows_that_name_their_tasks_outside_training_say_nothing(echo, monkeypatch, caplog):
    """Evaluation (`orsgen eval`, a reset by hand) names its tasks by design."""
    _, mod = echo
    monkeypatch.setattr(client._part(), "said", set())  # the lines said once: none yet
    monkeypatch.setenv("ORSGEN_TASK_ORDER", "difficulty")
    env = mod.Echo()
    assert env.reset(task_index=1) == "Echo the word grape"
    mod.close_all()
    assert said(caplog) == []
