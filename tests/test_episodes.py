"""Datasets, rewards, env-owned task order and images, through generated modules against live servers."""

import json

import pytest

from examples import serve
from tests.conftest import orsgen


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    with serve.running("tests.envs.studio:Studio", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("studio") / "studio.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        from tests.conftest import load

        yield server, load(out), out


def test_dataset_uses_task_ranges_not_one_request_per_task(studio):
    server, mod, _ = studio
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
    result = orsgen(server.url, "-o", str(out), "--pin-tasks")
    assert result.returncode == 0, result.stderr
    assert "70 train tasks" in result.stdout
    pinned = json.loads((tmp_path / "pinned.tasks.json").read_text())
    assert len(pinned["splits"]["train"]) == 70
    from tests.conftest import load

    mod = load(out)
    server.requests()
    ds = mod.dataset(indices=[69, 1], url="http://127.0.0.1:9")  # nothing listens there: no request may be sent
    assert ds["n"] == [69, 1] and server.requests() == {}


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
        try:
            env.score(**arguments)
        except mod.ToolError:
            assert arguments.get("fail")
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


def test_images_reach_the_model_as_content_parts(studio):
    _, mod, _ = studio
    env = mod.Studio()
    env.reset(task_index=0)
    parts = env.draw()
    assert parts[0] == {"type": "text", "text": "a pixel"}
    assert parts[1]["type"] == "image"
    image = parts[1]["image"]
    assert getattr(image, "size", None) == (1, 1) or str(image).startswith("data:image/png;base64,")
    env._close()


def test_reset_without_task_index_follows_a_seeded_shared_order(studio):
    _, mod, _ = studio

    class Grouped(mod.Studio):
        group_size = 3
        task_seed = 7

    first, second = Grouped(), Grouped()
    prompts = [(first if i % 2 else second).reset() for i in range(9)]
    tasks = [int(p.rsplit(" ", 1)[1]) for p in prompts]
    assert tasks[0:3] == [tasks[0]] * 3 and tasks[3:6] == [tasks[3]] * 3 and tasks[6:9] == [tasks[6]] * 3
    assert len({tasks[0], tasks[3], tasks[6]}) == 3
    import random

    order = list(range(70))
    random.Random(7 * 1_000_003).shuffle(order)
    assert [tasks[0], tasks[3], tasks[6]] == order[:3]  # the documented order: shared by both adapters
    mod.close_all()
