"""The difficulty-aware task order (issue 33) under a real GRPOTrainer with no dataset, on the coins environment
(tests/envs/coins.py: every third task always pays, every third never, the rest by a coin per rollout): the first
pass is the shuffle's, then the pools the tasks' kinds imply, drawn by their weights, with the next step's sessions
opened ahead on the tasks the step then resets; the same on two torchrun ranks (a group spanning them included); a
run stopped at a checkpoint and resumed draws what the uninterrupted run drew; the default order opens the tasks it
opened before the difficulty order existed."""

import collections

import pytest
from transformers import TrainerCallback

from tests.envs.coins import TASKS, kind
from tests.harness import coins, processes, rankfork, records, rounds, servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer  # trains: the resumed run also under the oldest TRL (.ci/trl-oldest)
POOL_OF = {"coin": "normal", "never": "hard", "always": "easy"}  # what each kind of task measures as


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with servers.running("tests.envs.coins:Coins", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        path = tmp_path_factory.mktemp("coins") / "coins_order.py"
        assert in_process(server.url, "-o", str(path)).returncode == 0
        yield server, path


def opened_as_reported(server, since: int, resets: list[dict]) -> None:
    """Every session the server opened is one a reset took, on the task the reset reported."""
    log = server.creates()[since:]
    assert all(entry["status"] == 200 for entry in log), log
    assert {entry["session"]: entry["body"]["index"] for entry in log} == {r["session"]: r["task_index"] for r in resets}


def figures(history: list[dict]) -> list[dict]:
    return [{k[len("orsgen/"):]: v for k, v in e.items() if k.startswith("orsgen/")} for e in history
            if "orsgen/episodes" in e]


def by_step(groups: list[dict]) -> dict[int, list[dict]]:
    found = collections.defaultdict(list)
    for group in groups:
        found[group["step"]].append(group)
    return found


def test_after_the_first_pass_the_pools_decide_and_the_look_ahead_opens_what_each_step_resets(served, tmp_path):
    server, path = served
    module = load(path)
    steps, per_device, group = 16, 16, 8  # 2 groups a round: the first pass is rounds 0-5, pools known from round 7
    env_class = coins.adapter_class(module, open_ahead="next-step")
    trainer = coins.train(module, env_class, str(tmp_path / "out"), steps, callbacks=[module.EpisodeMetrics()],
                          per_device_train_batch_size=per_device, num_generations=group)
    before = len(server.creates())
    trainer.train()
    module.close_all()
    settle()

    groups = coins.groups(env_class.resets, per_device, group)  # every group's rollouts opened one task
    opened_as_reported(server, before, env_class.resets)  # every session opened ahead was taken, on its task
    ahead = module.PINNED.ahead
    assert ahead.unused == 0 and ahead.opened == ahead.taken == steps * per_device - 1
    tasks = [g["task"] for g in groups]
    shuffle = rounds.order_of("train", TASKS, "train", 2, TASKS)
    assert tasks[:TASKS] == shuffle  # tasks never drawn first, in the shuffle's first epoch

    logged, per_step = figures(trainer.state.log_history), by_step(groups)
    assert len(logged) == steps
    for step, row in enumerate(logged):
        flat = sum(len(set(g["rewards"])) == 1 for g in per_step[step])
        assert row["groups_zero_spread"] == flat / 2, (step, row, per_step[step])
        if step >= 7:  # every task measured before the round before began: drawn from the pool its kind makes
            pools = collections.Counter(POOL_OF[kind(g["task"])] for g in per_step[step])
            assert {pool: row[f"draws/{pool}"] for pool in pools} == dict(pools), (step, row)
            assert (row["pool/unseen"], row["pool/normal"], row["pool/hard"], row["pool/easy"]) == (0, 4, 4, 4)
    late = [POOL_OF[kind(g["task"])] for g in groups if g["step"] >= 7]
    assert late.count("normal") / len(late) >= 0.75  # weights 0.9 / 0.05 / 0.05 (a 2% floor over every task)
    flat_late = [len(set(g["rewards"])) == 1 for g in groups if g["step"] >= 7]
    assert sum(flat_late) / len(flat_late) <= 0.25  # the shuffle: about two thirds of its groups are flat


def test_two_ranks_draw_the_same_task_for_every_group(served, tmp_path):
    """3 groups of 8 a round over 2 ranks of 12 rollouts: the middle group has 4 rollouts on each rank."""
    _, path = served
    steps, per_device, group, world = 8, 12, 8, 2
    argv, env = rankfork.command("tests.harness.coins", str(path), str(tmp_path / "out"), str(steps), str(per_device),
                                 str(group), "difficulty", nproc=world, env={"ORSGEN_OPEN_AHEAD": "next-step"})
    run = processes.run(argv, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = records(run.stdout, "reset", "rank")
    resets = [line["reset"] for line in lines if "reset" in line]
    reports = sorted((line for line in lines if "rank" in line), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1] and all(r["steps"] == steps for r in reports)
    groups = coins.groups(resets, per_device, group, world)  # incl. the group split across the ranks
    assert [g["task"] for g in groups][:TASKS] == rounds.order_of("train", TASKS, "train", 3, TASKS)
    logged = [figures(r["log_history"]) for r in reports]
    assert logged[0] == logged[1]  # the figures are every rank's: the same in both logs
    per_step = by_step(groups)
    for step, row in enumerate(logged[0]):
        flat = sum(len(set(g["rewards"])) == 1 for g in per_step[step])
        assert row["groups_zero_spread"] == pytest.approx(flat / 3), (step, row)
        if step >= 6:  # the first pass is rounds 0-3
            pools = collections.Counter(POOL_OF[kind(g["task"])] for g in per_step[step])
            assert {pool: row[f"draws/{pool}"] for pool in pools} == dict(pools), (step, row)


class StopAt(TrainerCallback):
    """Stops training at a step's end, as a crash after a checkpoint would (the checkpoint is written first)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_a_run_resumed_from_a_checkpoint_draws_what_the_uninterrupted_run_drew(served, tmp_path):
    server, path = served
    module = load(path)
    steps, stop, per_device, group = 14, 9, 8, 4
    config = {"per_device_train_batch_size": per_device, "num_generations": group, "save_strategy": "steps",
              "save_steps": stop}

    def run(name: str, callbacks=(), resume: str | None = None) -> list[int]:
        env_class = coins.adapter_class(module, open_ahead="next-step")
        trainer = coins.train(module, env_class, str(tmp_path / name), steps, callbacks=callbacks, **config)
        trainer.train(resume_from_checkpoint=resume)
        module.close_all()
        return [g["task"] for g in coins.groups(env_class.resets, per_device, group)]

    whole = run("whole")
    first = run("stopped", [StopAt(stop)])
    checkpoint = tmp_path / "stopped" / f"checkpoint-{stop}"
    assert (checkpoint / "orsgen_task_order.json").is_file()
    resumed = run("resumed", resume=str(checkpoint))
    assert len(first) == 2 * stop and len(resumed) == 2 * (steps - stop)
    assert first + resumed == whole
    assert len(set(whole[2 * 8:])) < len(set(whole[:2 * 6]))  # past the first pass, the pools decide
    settle()
    assert server.open_sessions() == []


def test_the_default_order_opens_the_tasks_it_opened_before(served, tmp_path):
    server, path = served
    module = load(path)
    steps, per_device, group = 8, 8, 4
    env_class = coins.adapter_class(module, order="shuffle")
    trainer = coins.train(module, env_class, str(tmp_path / "out"), steps, per_device_train_batch_size=per_device,
                          num_generations=group)
    before = len(server.creates())
    trainer.train()
    module.close_all()
    settle()
    tasks = [g["task"] for g in coins.groups(env_class.resets, per_device, group)]
    # Order().task("train", 12, 0, Slot("train", p, 2)) for p in range(16), as the release before it drew them
    assert tasks == [1, 9, 8, 5, 10, 2, 3, 7, 4, 0, 11, 6, 9, 11, 3, 4]
    opened_as_reported(server, before, env_class.resets)
