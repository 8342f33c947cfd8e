"""What orsgen assumes about TRL (runtime/trl.py), tried the ways TRL changes between releases: a generation method
renamed, resets moved into a helper, a rollout worker on its process's main thread, a trainer missing what the
runtime reads. Each either places its rollouts right or refuses with one line; none opens "the first task". Asserted
on the server's log of `POST /create`. And the adapter's public names, which are a contract with committed modules."""

import logging
import types

import pytest
from orsgen.runtime import Adapter

from examples.echo import WORDS
from tests.harness import ROOT, owned_data, rounds, servers, trainers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer
ROW = {"prompt": [{"role": "user", "content": ""}]}  # TRL's placeholder row without a train_dataset


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        path = tmp_path_factory.mktemp("contract") / "echo_contract.py"
        assert in_process(server.url, "-o", str(path)).returncode == 0
        yield server, load(path)


@pytest.fixture(scope="module")
def trainer(served, tmp_path_factory):
    """A real GRPOTrainer without a train_dataset (groups of 2), never trained: its batch is set by hand."""
    _, mod = served
    return owned_data.trainer(mod, mod.Echo, str(tmp_path_factory.mktemp("contract_out")), 1,
                              per_device_train_batch_size=4, num_generations=2)


def tasks_created(server, since: int) -> list[int]:
    log = server.creates()[since:]
    assert all(entry["status"] == 200 for entry in log), log
    return [entry["body"]["index"] for entry in log]


def refused(call, server) -> str:
    """The one line a call is refused with, after checking the server was asked for nothing."""
    before = len(server.creates())
    with pytest.raises(RuntimeError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message and "train_dataset=dataset()" in message, message
    assert server.creates()[before:] == []  # no session for "the first task"
    return message


def reset_each(environments, rows):
    """A reset loop moved out of the trainer's method into a module-level helper that never sees the trainer."""
    return [env.reset(**row) for env, row in zip(environments, rows, strict=True)]


def reset_all(trainer, rows):
    """The trainer's method (here bound by hand, as a subclass's would be) handing its batch to that helper."""
    return types.MethodType(lambda self, inputs: reset_each(self.environments, inputs), trainer)(rows)


def test_resets_from_a_helper_that_holds_the_trainer_are_placed(served, trainer):
    server, mod = served
    trainer.environments = [mod.Echo() for _ in range(4)]
    before = len(server.creates())
    prompts = reset_all(trainer, [dict(ROW) for _ in range(4)])
    tasks = tasks_created(server, before)
    assert sorted(tasks) == sorted(env.task_index for env in trainer.environments)
    groups = [env.task_index for env in trainer.environments]
    assert groups[0] == groups[1] != groups[2] == groups[3], groups  # two GRPO groups of 2, one task each
    assert prompts == [f"Echo the word {WORDS[t]}" for t in groups]
    mod.close_all()


# A module-level function and a rollout worker as TRL could write them: code whose module is TRL's, holding no
# trainer (a reset loop moved into a helper of `trl.trainer`, the AsyncGRPO worker of TRL 1.13-1.15 resetting on its
# child process's main thread).
STAND_INS = '''
def reset_environments(environments, rows):
    return [env.reset(**row) for env, row in zip(environments, rows)]

class _AsyncRolloutLoop:
    def _generate_loop(self, environment, row):
        return environment.reset(**row)
'''


def stand_in(module: str) -> types.SimpleNamespace:
    namespace = {"__name__": module}
    exec(compile(STAND_INS, f"<{module}>", "exec"), namespace)  # noqa: S102 - the stand-in's code is ours
    return types.SimpleNamespace(**namespace)


def test_a_reset_helper_of_trl_without_the_trainer_is_refused(served):
    server, mod = served
    helper = stand_in("trl.trainer.stand_in")
    message = refused(lambda: helper.reset_environments([mod.Echo(), mod.Echo()], [dict(ROW), dict(ROW)]), server)
    assert "trl.trainer.stand_in.reset_environments" in message and "TRL 1." in message and ">=1.13,<1.17" in message


def test_an_async_rollout_worker_on_its_main_thread_is_refused_and_a_row_with_task_index_works(served, caplog):
    server, mod = served
    worker = stand_in("trl.experimental.async_grpo.async_rollout_worker")._AsyncRolloutLoop()
    adapter = mod.Echo()
    message = refused(lambda: worker._generate_loop(adapter, dict(ROW)), server)
    assert "_AsyncRolloutLoop._generate_loop" in message
    before = len(server.creates())
    with caplog.at_level(logging.INFO, logger="orsgen"):
        assert worker._generate_loop(adapter, {**ROW, "task_index": 3}) == f"Echo the word {WORDS[3]}"
        worker._generate_loop(adapter, {**ROW, "task_index": 4})
    assert tasks_created(server, before) == [3, 4]
    notices = [r.getMessage() for r in caplog.records if "open-ahead" in r.getMessage()]
    assert len(notices) <= 1  # said once per process (an earlier test may have said it already)
    mod.close_all()


def test_a_trainer_missing_what_the_runtime_reads_is_refused_with_the_trl_range(served, trainer):
    server, mod = served
    trainer.environments = [mod.Echo() for _ in range(4)]
    del trainer.num_iterations  # as a TRL release without it would be
    try:
        message = refused(lambda: reset_all(trainer, [dict(ROW) for _ in range(4)]), server)
    finally:
        trainer.num_iterations = 1
    assert "has no num_iterations" in message and ">=1.13,<1.17" in message, message


def test_a_trl_release_outside_the_range_is_named_once(served, trainer, monkeypatch, caplog):
    from orsgen.runtime import trl as boundary

    _, mod = served
    monkeypatch.setattr(boundary, "version", lambda name: "1.99.0")
    boundary._check_version.cache_clear()  # checked once per process: again, for the release above
    trainer.environments = [mod.Echo() for _ in range(2)]
    with caplog.at_level(logging.WARNING, logger="orsgen"):
        reset_all(trainer, [dict(ROW), dict(ROW)])
        reset_all(trainer, [dict(ROW), dict(ROW)])
    boundary._check_version.cache_clear()
    lines = [r.getMessage() for r in caplog.records if "outside the range" in r.getMessage()]
    assert len(lines) == 1 and "TRL 1.99.0" in lines[0] and ">=1.13,<1.17" in lines[0], lines
    mod.close_all()


def test_a_renamed_generation_method_still_gets_its_groups_right(served, tmp_path):
    """TRL's own generation method under another name (its code object renamed, as a refactor would), training
    without a train_dataset: every GRPO group opens one task, the groups of a step differ."""
    from trl import GRPOTrainer

    server, mod = served
    original = GRPOTrainer._generate_and_score_completions
    code = original.__code__.replace(co_name="_roll_out_batch", co_qualname="Renamed._roll_out_batch")

    class Renamed(GRPOTrainer):
        _roll_out_batch = types.FunctionType(code, original.__globals__, "_roll_out_batch", original.__defaults__,
                                             original.__closure__)

        def _generate_and_score_completions(self, inputs):
            return self._roll_out_batch(inputs)

    env_class = owned_data.tracking(mod.Echo)
    run = trainers.trainer(env_class, str(tmp_path), 2, tools=[mod.Echo().echo], threads=1, trainer_class=Renamed,
                           per_device_train_batch_size=8, num_generations=4)
    env_class.trainer = run
    before = len(server.creates())
    run.train()
    tasks = tasks_created(server, before)
    assert len(tasks) == 16
    groups = [[r["task_index"] for r in env_class.resets[i:i + 4]] for i in range(0, 16, 4)]
    assert all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == 4, groups
    assert sorted(tasks) == sorted(r["task_index"] for r in env_class.resets)
    mod.close_all()
    settle()
    assert server.open_sessions() == []


# The public functions and attributes of runtime.Adapter for runtime API 1. TRL offers every public function of an
# environment class to the model as a tool, and a committed module's tool methods shadow any public attribute: adding
# or removing a name here is an API change (runtime.API and runtime.require).
PUBLIC_API_1 = {
    "functions": {"reset", "get_reward"},
    "attributes": {"pinned", "open_in_background", "task_seed", "unscored_reward", "start_failures", "start_retries",
                   "max_start_failures", "down_after", "open_ahead", "reward", "rewards", "metadata", "finished", "last_output",
                   "task_index", "prompt_mismatch"},
}


def test_the_adapters_public_names_are_frozen_for_the_runtime_api():
    from orsgen import runtime

    assert runtime.API == 1
    names = {n for n in dir(Adapter) if not n.startswith("_")} | {
        n for n in Adapter.__annotations__ if not n.startswith("_")}
    functions = {n for n in names if callable(getattr(Adapter, n, None))}
    assert {"functions": functions, "attributes": names - functions} == PUBLIC_API_1


def test_the_declared_range_is_the_one_the_runtime_names():
    """The `train` extra, the runtime's one-line messages and the version check speak of the same TRL releases."""
    import tomllib

    from orsgen.runtime import trl as boundary

    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    assert f"trl{boundary.SUPPORTED}" in train
    assert [boundary._in_range(v) for v in ("1.12.9", "1.13.0", "1.16.2", "1.17.0")] == [False, True, True, False]


# Gradient accumulation that does not divide the generation schedule: (gradient_accumulation_steps,
# steps_per_generation, num_iterations). TRL generates every steps_per_generation x num_iterations micro-steps, so a
# round may begin inside an optimizer step, and two rounds may share one.
SCHEDULES = [(2, 3, 1), (3, 2, 1)]


@pytest.mark.parametrize(("accumulation", "per_generation", "iterations"), SCHEDULES,
                         ids=[f"accumulate-{a}-generate-every-{g * i}" for a, g, i in SCHEDULES])
def test_each_generation_round_of_trls_schedule_opens_the_next_groups(served, tmp_path, accumulation, per_generation,
                                                                       iterations):
    """Rows without task_index: every round TRL generated (read from its own micro-step count) opened the next groups
    of the task order, each GRPO group one task; the next step's sessions opened ahead were all taken."""
    from datasets import Dataset

    server, mod = served
    env_class = rounds.watching(mod.Echo, open_ahead="next-step")
    run = trainers.trainer(env_class, str(tmp_path), 2, tools=[mod.Echo().echo], threads=1,
                           train_dataset=Dataset.from_dict({"prompt": [ROW["prompt"]] * 8}),
                           per_device_train_batch_size=2, num_generations=2,
                           gradient_accumulation_steps=accumulation, steps_per_generation=per_generation,
                           num_iterations=iterations)
    env_class.trainer = run
    before, ahead = len(server.creates()), rounds.ahead_counts(mod)
    run.train()
    mod.close_all()
    settle()
    size = 2 * per_generation  # a round's rollouts: per_generation micro-batches of 2
    found = rounds.rounds(rounds.checked(env_class.resets, server, before))
    assert len(found) == rounds.generations(run) > 1 and all(len(r) == size for r in found), found
    tasks = [t for r in found for t in rounds.groups(r, 2)]
    assert tasks == rounds.order_of("train", len(WORDS), "train", size // 2, len(tasks))
    assert len(set(tasks)) == len(tasks)
    opened = size - 1 + (len(found) - 1) * size
    now = rounds.ahead_counts(mod)
    assert {k: now[k] - ahead[k] for k in now} == {"opened": opened, "taken": opened, "unused": 0}
    assert server.open_sessions() == []


def test_a_resumed_run_continues_with_the_rounds_after_its_checkpoint(served, tmp_path):
    """Environment-owned data, steps_per_generation=2: one round covers two optimizer steps. A run saved at step 1
    (inside round 0) and resumed to step 3 generates once more: the next groups of the order, not round 0's again,
    and nothing opened ahead past its end."""
    server, mod = served
    config = {"per_device_train_batch_size": 2, "num_generations": 2, "steps_per_generation": 2,
              "save_strategy": "steps", "save_steps": 1}
    first = rounds.watching(mod.Echo, open_ahead="next-step")
    before, ahead = len(server.creates()), rounds.ahead_counts(mod)
    run = trainers.trainer(first, str(tmp_path), 1, tools=[mod.Echo().echo], threads=1, **config)
    first.trainer = run
    run.train()
    second = rounds.watching(mod.Echo, open_ahead="next-step")
    resumed = trainers.trainer(second, str(tmp_path), 3, tools=[mod.Echo().echo], threads=1, **config)
    second.trainer = resumed
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    mod.close_all()
    settle()
    assert resumed.state.global_step == 3
    found = [rounds.rounds(rounds.checked(c.resets, server, before)) for c in (first, second)]
    assert [len(f) for f in found] == [1, 1], found
    tasks = [t for f in found for t in rounds.groups(f[0], 2)]
    assert tasks == rounds.order_of("train", len(WORDS), "train", 2, 4)  # round 0, then round 1
    now = rounds.ahead_counts(mod)
    assert {k: now[k] - ahead[k] for k in now} == {"opened": 6, "taken": 6, "unused": 0}  # each round's 3 others
    assert server.open_sessions() == []


def test_two_trainers_and_evaluation_batches_do_not_shift_each_others_rounds(served, tmp_path):
    """Two trainers in one process, batches set by hand and interleaved, an evaluation batch between: each trainer's
    training rounds open the order's groups from its first, as if it were alone."""
    server, mod = served
    built = [owned_data.trainer(mod, mod.Echo, str(tmp_path / str(i)), 2, per_device_train_batch_size=4,
                                num_generations=2) for i in range(2)]
    seen: list[list[int]] = [[], []]
    for which in (0, 1, 1, 0):
        trainer = built[which]
        trainer.environments = [mod.Echo() for _ in range(4)]
        reset_all(trainer, [dict(ROW) for _ in range(4)])
        seen[which] += [e.task_index for e in trainer.environments][::2]
        trainer.model.eval()  # an evaluation batch: its own stream
        trainer.environments = [mod.Echo() for _ in range(4)]
        reset_all(trainer, [dict(ROW) for _ in range(4)])
        trainer.model.train()
    assert seen[0] == seen[1] == rounds.order_of("train", len(WORDS), "train", 2, 4), seen
    mod.close_all()
    settle()
    assert server.open_sessions() == []
