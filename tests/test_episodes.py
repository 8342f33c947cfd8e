"""Datasets, rewards, env-owned task order and images, through generated modules against live servers."""

import json
import sys

import pytest

from tests.harness import processes, servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    with servers.running("tests.envs.studio:Studio", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("studio") / "studio.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        yield server, load(out), out


def test_dataset_uses_task_ranges_not_one_request_per_task(studio):
    server, mod, _ = studio
    mod.close_all()  # what earlier tests left open (tests run in random order) is closed before the count starts
    settle()
    server.requests()
    ds = mod.dataset(num_tasks=64)
    counts = server.requests()
    assert ds.num_rows == 64 and ds["task_index"] == list(range(64))
    assert sum(counts.values()) <= 3, counts  # TRL's binder: 260 requests for the same dataset
    assert counts.get("POST /studio/task_range") == 1
    # task metadata never overwrites the reserved columns
    assert ds[5]["prompt"] == [{"role": "user", "content": ""}] and "environment" not in ds.column_names
    assert ds[5]["n"] == 5
    picked = mod.dataset(indices=[63, 2, 40])
    assert picked["task_index"] == [63, 2, 40] and picked["n"] == [63, 2, 40]
    assert sum(server.requests().values()) <= 3


def test_pinned_tasks_build_the_dataset_offline(studio, tmp_path):
    server, _, _ = studio
    out = tmp_path / "pinned.py"
    result = in_process(server.url, "-o", str(out), "--pin-tasks")
    assert result.returncode == 0, result.stderr
    assert "70 train tasks" in result.stdout
    pinned = json.loads((tmp_path / "pinned.tasks.json").read_text())
    assert len(pinned["splits"]["train"]) == 70
    mod = load(out)
    server.requests()
    ds = mod.dataset(indices=[69, 1], url="http://127.0.0.1:9")  # nothing listens there: a request would fail
    assert ds["n"] == [69, 1]


REWARD_CASES = [
    ([], None, None),  # no call: unscored
    ([{}], None, None),  # a call without a reward: unscored
    ([{"value": 0.0}], 0.0, 0.0),  # zero is a score
    ([{"value": -1.5}], -1.5, -1.5),  # so is a negative
    ([{"value": 2.0}, {}], 2.0, 2.0),  # a later unscored call keeps the score
    ([{"value": 2.0}, {"fail": True}], 2.0, 2.0),  # so does a later failure
    ([{"value": 1.0}, {"value": 0.5}], 0.5, 1.5),  # the last score is the outcome; the total adds them
]


@pytest.mark.parametrize("calls, outcome, total", REWARD_CASES)
def test_reward_semantics(studio, calls, outcome, total):
    _, mod, _ = studio
    env = mod.Studio()
    env.reset(task_index=0)
    for arguments in calls:
        if arguments.get("fail"):
            with pytest.raises(mod.ToolError):
                env.score(**arguments)
        else:
            env.score(**arguments)
    assert env.get_reward() == outcome
    assert mod.outcome_reward([env]) == [outcome]
    assert env.get_reward() is None  # counted by the reward function: TRL cannot count it again
    assert mod.total_reward([env]) == [total]
    env._close()


def test_finished_and_shaped_rewards(studio):
    _, mod, _ = studio
    done, open_ = mod.Studio(), mod.Studio()
    done.reset(task_index=1)
    open_.reset(task_index=2)
    done.score(value=0.7, finish=True)
    open_.score(value=0.9)
    assert mod.finished_reward([done, open_]) == [0.7, 0.0]
    penalised = mod.shaped_reward(lambda env: (env.reward or 0.0) - 0.1 * len(env.rewards), name="penalised")
    assert penalised.__name__ == "penalised"
    assert penalised([done, open_]) == pytest.approx([0.6, 0.8])
    done.reset(task_index=1)
    assert done.get_reward() is None and done.rewards == []  # a new episode starts unclaimed and unscored
    mod.close_all()


def test_tool_failures_are_errors_for_trl(studio):
    _, mod, _ = studio
    env = mod.Studio()
    env.reset(task_index=0)
    with pytest.raises(mod.ToolError, match="asked to fail"):
        env.score(fail=True)
    env._close()


@pytest.mark.slow
@pytest.mark.parametrize("pillow", [True, False])
def test_images_reach_the_model_as_content_parts(studio, pillow):
    _, _, path = studio
    script = (
        ("" if pillow else "import sys; sys.modules['PIL'] = None\n")  # as if Pillow were not installed
        + f"import sys; sys.path.insert(0, {str(path.parent)!r})\nimport {path.stem} as m\n"
        "env = m.Studio(); env.reset(task_index=0); parts = env.draw()\n"
        "print(parts[0]); print(parts[1]['type'], type(parts[1]['image']).__module__, str(parts[1]['image'])[:22])\n"
        "m.close_all()\n"
    )
    run = processes.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    text, image = run.stdout.splitlines()
    assert text == "{'type': 'text', 'text': 'a pixel'}"
    if pillow:
        assert image.startswith("image PIL.")
    else:
        assert image == "image builtins data:image/png;base64,"


def test_reset_without_task_index_outside_training_shifts_nothing(studio):
    _, mod, _ = studio

    class Seeded(mod.Studio):
        task_seed = 7

    first, second = Seeded(), Seeded()
    tasks = [int((first if i % 2 else second).reset().rsplit(" ", 1)[1]) for i in range(4)]
    import random

    order = list(range(70))
    random.Random(7 * 1_000_003).shuffle(order)
    assert tasks == [order[0]] * 4  # a look at a prompt: always the first task of the order, no counter moves
    mod.close_all()


def test_the_task_order_is_reshuffled_every_epoch(studio):
    _, mod, _ = studio
    from orsgen.runtime.tasks import Slot

    order = mod.PINNED.order
    first = [order.task("train", 70, 0, Slot("train", p)) for p in range(70)]
    second = [order.task("train", 70, 0, Slot("train", p)) for p in range(70, 140)]
    assert sorted(first) == sorted(second) == list(range(70))  # each epoch visits every task once
    assert first != second
    assert order.task("train", 70, 0, Slot("train", 3)) == first[3]  # the same slot gives the same task again


def test_a_step_never_repeats_a_task_across_an_epoch_boundary():
    from orsgen.runtime.tasks import Order, Slot

    for seed in range(200):  # 3 groups per step over 8 tasks: a step straddles an epoch boundary every few steps
        order = Order()
        tasks = [order.task("train", 8, seed, Slot("train", p, window=3)) for p in range(48)]
        assert all(len(set(tasks[p:p + 3])) == 3 for p in range(46)), (seed, tasks)
        assert all(sorted(tasks[e * 8:(e + 1) * 8]) == list(range(8)) for e in range(6))  # each epoch: every task
