"""Environment-owned data (GRPOTrainer with no train_dataset), checked against a live server's log of `POST /create`:
which task every rollout's session opened, per GRPO group, in one process, across two torchrun ranks, and the
refusal of a reset without task_index from a thread outside the trainer (AsyncGRPOTrainer's thread pool)."""

import concurrent.futures

import pytest
from orsgen.runtime import episode_of

from examples.echo import WORDS
from tests.harness import owned_data, processes, rankfork, records, servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer  # trains or runs TRL code: also under the oldest TRL (.ci/trl-oldest)


@pytest.fixture(scope="module")
def counted():
    """The echo env on a server that logs every `POST /create` (split, index, session id)."""
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        yield server


@pytest.fixture(scope="module")
def module_path(counted, tmp_path_factory):
    path = tmp_path_factory.mktemp("owned") / "echo_owned.py"
    result = in_process(counted.url, "-o", str(path))
    assert result.returncode == 0, result.stderr
    return path


def task_of(body: dict) -> tuple[str, int]:
    """(split, index) of a `POST /create` body: by split and index, or by a pinned task spec (the echo env's task
    ids are "{split}-{index}")."""
    if "index" in body:
        return body["split"], body["index"]
    split, _, index = body["task_spec"]["id"].rpartition("-")
    return split, int(index)


def created(server: servers.Served, since: int) -> list[dict]:
    """The server's `POST /create` log from entry `since` on; every one of them must have succeeded on a train task."""
    log = server.creates()[since:]
    assert all(entry["status"] == 200 and task_of(entry["body"])[0] == "train" for entry in log), log
    return log


def matched(log: list[dict], resets: list[dict]) -> None:
    """The sessions the server opened are the ones the adapters reported, on the task each adapter reported."""
    by_session = {entry["session"]: task_of(entry["body"])[1] for entry in log}
    assert len(by_session) == len(log)  # one /create per session
    assert {r["session"]: r["task_index"] for r in resets} == by_session
    for r in resets:  # and the rollout's prompt is that task's
        assert r["prompt"] == f"Echo the word {WORDS[r['task_index']]}", r


def test_groups_share_a_task_after_a_stray_reset(counted, module_path, tmp_path):
    assert len(WORDS) == 8  # the echo env's train split: enough for every group of the run to differ
    steps, per_device, generations = 3, 8, 4  # 2 groups a step, 6 in all
    mod = load(module_path)
    before = len(counted.creates())
    probe = mod.Echo()
    looked_at = probe.reset()  # a user looking at a prompt before training
    stray_session = episode_of(probe).session.sid
    probe._close(wait=True)
    env_class = owned_data.tracking(mod.Echo)
    trainer = owned_data.trainer(mod, env_class, str(tmp_path / "out"), steps, threads=1,
                                 per_device_train_batch_size=per_device, num_generations=generations)
    trainer.train()
    mod.close_all()
    settle()

    assert trainer.state.global_step == steps
    log = created(counted, before)
    assert len(log) == 1 + steps * per_device
    assert log[0]["session"] == stray_session
    stray, rollouts = task_of(log[0]["body"])[1], log[1:]
    assert looked_at == f"Echo the word {WORDS[stray]}"
    resets = env_class.resets
    assert [(r["step"], r["position"]) for r in resets] == [(s, p) for s in range(steps) for p in range(per_device)]
    matched(rollouts, resets)  # every session the server opened was a rollout's, none opened and left unused

    groups = [[r["task_index"] for r in resets[i:i + generations]] for i in range(0, len(resets), generations)]
    assert all(len(set(g)) == 1 for g in groups), groups  # every rollout of a GRPO group opened the same task
    tasks = [g[0] for g in groups]
    per_step = per_device // generations
    for s in range(steps):  # the groups of a step differ
        in_step = tasks[s * per_step:(s + 1) * per_step]
        assert len(set(in_step)) == per_step, tasks
    assert len(set(tasks)) == len(tasks)  # and within an epoch of the split no task repeats
    assert tasks[0] == stray  # the reset made before training shifted nothing: training starts at the same task
    assert all(e["rewards/Echo/mean"] == 1.0 for e in trainer.state.log_history if "rewards/Echo/mean" in e)
    assert counted.open_sessions() == []


@pytest.mark.parametrize("open_ahead", ["1", "next-step"])
def test_two_ranks_agree_on_the_task_of_a_group_that_spans_them(counted, module_path, tmp_path, open_ahead):
    """per-device batch 3, num_generations 2: the global batch of 6 is rank 0's 3 then rank 1's 3, grouped in pairs,
    so the middle group has one rollout on each rank. Opened ahead (this batch's sessions, or the next step's too),
    each rank opens only its own: every session the server opened is one a reset took, on its task."""
    steps, per_device, generations, world = 2, 3, 2, 2
    before = len(counted.creates())
    argv, env = rankfork.command("tests.harness.owned_data", str(module_path), str(tmp_path / "out"), str(steps),
                                 str(per_device), str(generations), nproc=world, env={"ORSGEN_OPEN_AHEAD": open_ahead})
    run = processes.run(argv, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = records(run.stdout, "reset", "rank")
    resets = [line["reset"] for line in lines if "reset" in line]
    reports = sorted((line for line in lines if "rank" in line), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(world))
    assert all(r["steps"] == steps and r["resets"] == steps * per_device and r["open_sessions"] == 0
               for r in reports), reports
    # Each rank opens ahead its own batch's sessions but the first (and, looking ahead, all of the next step's).
    ahead = steps * (per_device - 1) if open_ahead == "1" else (per_device - 1) + (steps - 1) * per_device
    assert all(r["ahead"] == {"opened": ahead, "taken": ahead, "unused": 0} for r in reports), reports

    where = {(r["step"], r["rank"], r["position"]): r["task_index"] for r in resets}
    assert len(where) == len(resets) == steps * world * per_device  # each (step, rank, position) reset once
    matched(created(counted, before), resets)
    seen = []
    for step in range(steps):
        batch = [where[(step, rank, p)] for rank in range(world) for p in range(per_device)]  # rank-major
        groups = [batch[i:i + generations] for i in range(0, len(batch), generations)]
        assert all(len(set(g)) == 1 for g in groups), (step, batch)  # incl. the group split across the two ranks
        assert len({g[0] for g in groups}) == len(groups), (step, batch)  # the groups of a step differ
        seen += [g[0] for g in groups]
    assert len(set(seen)) == len(seen)  # 6 groups, 8 tasks: no task twice in the epoch
    settle()
    assert counted.open_sessions() == []


def test_reset_without_task_index_from_a_thread_outside_the_trainer_is_refused(counted, module_path):
    mod = load(module_path)
    adapter = mod.Echo()
    before = len(counted.creates())
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout") as pool:  # as AsyncGRPOTrainer does
        with pytest.raises(RuntimeError) as refused:
            pool.submit(adapter.reset).result()
        message = str(refused.value)
        assert "\n" not in message, message  # one line
        assert "train_dataset=dataset()" in message
        assert "rollout" in message  # names the thread it was called from
        assert counted.creates()[before:] == []  # nothing was opened
        # the way out the message names works from the same thread: a row carrying task_index
        assert pool.submit(adapter.reset, task_index=5).result() == f"Echo the word {WORDS[5]}"
    session = episode_of(adapter).session.sid
    adapter._close(wait=True)
    assert [(e["session"], task_of(e["body"])[1]) for e in created(counted, before)] == [(session, 5)]
    assert counted.open_sessions() == []
