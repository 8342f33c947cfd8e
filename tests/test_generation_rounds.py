"""Generation rounds, as TRL schedules them, and the tasks the server opened for each: gradient accumulation that
does not divide the generation schedule (`steps_per_generation * num_iterations`), environment-owned data and a
dataset whose rows lack task_index, the next step's sessions opened ahead, and evaluation passes at one global step.
Rounds are read from TRL's own micro-step counter, tasks from the server's log of `POST /create`."""

import pytest

from tests.harness import rounds, servers, trainers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer  # trains: also under the oldest TRL
PER_DEVICE, GROUP = 4, 2  # two GRPO groups a round
TASKS = 8  # the echo environment's train and test splits
PROMPT = [{"role": "user", "content": "Task: "}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        path = tmp_path_factory.mktemp("rounds") / "echo_rounds.py"
        assert in_process(server.url, "-o", str(path)).returncode == 0
        yield server, load(path)


def train(env_class, mod, out, steps, **config):
    trainer = trainers.trainer(env_class, str(out), steps, tools=trainers.tool_methods(mod.Echo()), threads=1,
                               per_device_train_batch_size=PER_DEVICE, num_generations=GROUP, **config)
    env_class.trainer = trainer
    return trainer


@pytest.mark.parametrize("data", ["environment-owned", "rows-without-task-index"])
@pytest.mark.parametrize(("accumulation", "iterations"), [(2, 1), (3, 2)], ids=["accumulate-2", "accumulate-3-iterate-2"])
def test_every_round_opens_the_next_groups_and_takes_every_session_opened_ahead(served, tmp_path, data, accumulation,
                                                                                iterations):
    """steps_per_generation=1: TRL generates at every micro-step, or at every other one (num_iterations=2), while an
    optimizer step accumulates 2 or 3 (fewer at an epoch's end: a placeholder epoch is one generation's batches), so
    rounds do not fall on optimizer steps. Each round opens the next two groups of the task order, none skipped, none
    repeated in the epoch; with open_ahead="next-step" every session opened ahead is taken, and the last round opens
    none ahead."""
    from datasets import Dataset

    server, mod = served
    steps = 2
    env_class = rounds.watching(mod.Echo, open_ahead="next-step")
    rows = Dataset.from_dict({"prompt": [PROMPT] * 4}) if data == "rows-without-task-index" else None
    trainer = train(env_class, mod, tmp_path, steps, train_dataset=rows, gradient_accumulation_steps=accumulation,
                    steps_per_generation=1, num_iterations=iterations)
    before, ahead = len(server.creates()), rounds.ahead_counts(mod)
    trainer.train()
    mod.close_all()
    settle()

    assert trainer.state.global_step == steps
    expected = rounds.generations(trainer)  # what TRL generated: 2 or 4 rounds (a placeholder epoch is one batch)
    found = rounds.rounds(rounds.checked(env_class.resets, server, before))
    assert len(found) == expected > steps // 2 and all(len(r) == PER_DEVICE for r in found), found
    tasks = [t for r in found for t in rounds.groups(r, GROUP)]
    assert len(set(tasks)) == len(tasks), tasks  # no round repeats another's tasks (8 or 6 groups, 8 tasks)
    assert tasks == rounds.order_of("train", TASKS, "train", PER_DEVICE // GROUP, len(tasks))  # none skipped
    assert len(server.creates()) - before == expected * PER_DEVICE  # every session opened was a reset's
    # Round 1's others, then every later round's whole batch, opened ahead: all taken, none opened past the end.
    opened = (PER_DEVICE - 1) + (expected - 1) * PER_DEVICE
    now = rounds.ahead_counts(mod)
    assert {k: now[k] - ahead[k] for k in now} == {"opened": opened, "taken": opened, "unused": 0}
    assert server.open_sessions() == []


def test_every_evaluation_pass_at_one_global_step_opens_the_same_tasks(served, tmp_path):
    """Placeholder eval rows on the test split (2 batches a pass): the in-training evaluation at the final step, then
    evaluate() twice at that same global step: three passes, the same tasks in the same order; training's rounds are
    untouched by them."""
    from datasets import Dataset

    server, mod = served
    steps = 2
    env_class = rounds.watching(mod.Echo)
    placeholders = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * 4, "split": ["test"] * 4})
    trainer = train(env_class, mod, tmp_path, steps, eval_dataset=placeholders, per_device_eval_batch_size=PER_DEVICE,
                    eval_strategy="steps", eval_steps=steps)
    before = len(server.creates())
    trainer.train()
    trainer.evaluate()
    trainer.evaluate()
    mod.close_all()
    settle()

    resets = rounds.checked(env_class.resets, server, before)
    evaluated = [r for r in resets if not r["training"]]
    assert {(r["split"], r["global_step"]) for r in evaluated} == {("test", steps)}
    per_pass = 4 * GROUP  # 4 rows, each rolled out GROUP times
    assert len(evaluated) == 3 * per_pass
    passes = [[r["task_index"] for r in evaluated[i:i + per_pass]] for i in range(0, len(evaluated), per_pass)]
    assert passes[0] == passes[1] == passes[2], passes  # the same tasks, in the same order, every pass
    first = [t for i in range(0, per_pass, PER_DEVICE) for t in rounds.groups(passes[0][i:i + PER_DEVICE], GROUP)]
    assert first == rounds.order_of("test", TASKS, "eval", PER_DEVICE // GROUP, 4)  # batch numbers 0 and 1
    trained = [t for r in rounds.rounds(resets) for t in rounds.groups(r, GROUP)]
    assert trained == rounds.order_of("train", TASKS, "train", PER_DEVICE // GROUP, 2 * steps)
    assert server.open_sessions() == []
