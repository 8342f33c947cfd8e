"""The difficulty-aware task order (issue 33), its sampler alone, with no trainer: the pools a task's recent groups put
it in, draws that follow the pools' weights, tasks never drawn first, the floor, the same draws for the same state
(a state saved and restored included), the lag (a round's draws use the pools as they stood when the round before
began, so the look-ahead draws what the round resets), the default order byte for byte what it was, the settings'
refusals, `dataset(pass_rates=..., weight=True)` and the zero-spread figure."""

import collections
import json
import math
import re
from typing import ClassVar

import pytest
from orsgen.runtime import settings
from orsgen.runtime.counts import Counts, figures
from orsgen.runtime.rows import kept
from orsgen.runtime.tasks import Difficulty, Order, Pools, spreads
from orsgen.runtime.trl import Slot

FLAT_ONE, FLAT_ZERO, SPREAD = [1.0] * 4, [0.0] * 4, [1.0, 0.0, 1.0, 0.0]


def measure(order: Difficulty, rewards_of: dict[int, list[float | None]], start: int = 0) -> None:
    """One measured group per task, numbered from `start`."""
    order.measured([(start + i, task, rewards) for i, (task, rewards) in enumerate(sorted(rewards_of.items()))])


def pools_now(order: Difficulty, round_: int) -> dict[str, set[int]]:
    """The pools as they stand at round `round_`'s start (every task drawn before is normal unless hard or easy)."""
    order.begin(round_)
    view = order.views[round_]
    return {"hard": set(view.hard), "easy": set(view.easy)}


def drawn_everything(order: Difficulty) -> int:
    """Draw rounds until every task was drawn once; the next round."""
    r = 0
    while len(order.first) < order.size:
        order.begin(r)
        order.draw(r)
        r += 1
    return r


# -- pools ------------------------------------------------------------------------------------------------------------


def test_a_task_is_normal_while_a_recent_group_spread_and_hard_or_easy_once_none_did():
    order = Difficulty(6, 0, 1, {"recent": 2})
    measure(order, {0: FLAT_ONE, 1: FLAT_ZERO, 2: SPREAD, 3: [0.5] * 4, 4: [None, None, None, None], 5: [1.0, None]})
    # 3: flat below the best seen; 4: none scored; 5: unscored rollouts are left out, as GRPO leaves them out
    assert pools_now(order, 0) == {"easy": {0, 5}, "hard": {1, 3, 4}}
    measure(order, {0: SPREAD, 2: FLAT_ONE}, start=10)  # 0 spread once in its last 2 groups; 2 still did
    assert pools_now(order, 1) == {"easy": {5}, "hard": {1, 3, 4}}
    measure(order, {0: FLAT_ONE, 2: FLAT_ONE}, start=20)
    measure(order, {0: FLAT_ONE, 2: FLAT_ONE}, start=30)  # no spread in their last 2 groups: at the best seen, easy
    assert pools_now(order, 2) == {"easy": {0, 2, 5}, "hard": {1, 3, 4}}


def test_rewards_of_any_scale_the_bar_is_the_best_seen_or_solved():
    order = Difficulty(3, 0, 1)
    measure(order, {0: [-3.0] * 4, 1: [7.5] * 4, 2: [2.0, 7.5, 2.0, 2.0]})
    assert pools_now(order, 0) == {"easy": {1}, "hard": {0}}
    same = Difficulty(2, 0, 1)  # every reward seen is the same: nothing tells solved from failed, so none is easy
    measure(same, {0: FLAT_ONE, 1: FLAT_ONE})
    assert pools_now(same, 0) == {"easy": set(), "hard": {0, 1}}
    bar = Difficulty(3, 0, 1, {"solved": 0.5})  # a flat task paid at least `solved` is easy
    measure(bar, {0: [0.5] * 4, 1: [0.4] * 4, 2: FLAT_ONE})
    assert pools_now(bar, 0) == {"easy": {0, 2}, "hard": {1}}


def test_spread_is_grpos_nonzero_standard_deviation_of_the_scored_rewards():
    assert spreads([1.0, 0.0]) and spreads([0.3, 0.3, 0.30001])
    assert not spreads([1.0, 1.0]) and not spreads([0.3, 0.3 + 1e-10]) and not spreads([1.0, None, None])
    assert not spreads([]) and not spreads([None]) and not spreads([math.nan, 1.0])


# -- draws ------------------------------------------------------------------------------------------------------------


def mixed(size: int = 30, **pools) -> tuple[Difficulty, int]:
    """An order whose tasks were each drawn and measured once: a third spread (normal), a third failed (hard), a
    third solved (easy); the next round to draw."""
    order = Difficulty(size, 0, 1, pools)
    start = drawn_everything(order)
    measure(order, {t: (SPREAD, FLAT_ZERO, FLAT_ONE)[t % 3] for t in range(size)})
    order.begin(start)  # the pools as measured: round start + 1 draws from them
    order.draw(start)
    return order, start + 1


def shares(order: Difficulty, start: int, rounds: int) -> tuple[dict[str, float], float]:
    """Each pool's share of `rounds` rounds' draws, and the floor's."""
    routes, floors = collections.Counter(), 0
    for r in range(start, start + rounds):
        order.begin(r)
        draw = order.draw(r)
        routes.update(draw.routes)
        floors += sum(draw.floors)
    total = sum(routes.values())
    return {pool: routes[pool] / total for pool in ("normal", "hard", "easy")}, floors / total


def test_draws_follow_the_pools_weights_with_the_floor_spread_over_every_task():
    order, start = mixed()
    found, floor = shares(order, start, 4000)
    f = Pools().floor  # a floor draw takes any task: each pool gets its size's share of them
    expected = {pool: (1 - f) * getattr(Pools(), pool) + f / 3 for pool in ("normal", "hard", "easy")}
    assert expected == pytest.approx({"normal": 0.8886, "hard": 0.0557, "easy": 0.0557}, abs=1e-4)
    for pool, share in expected.items():  # within 4 standard errors of 4000 draws
        assert abs(found[pool] - share) < 4 * math.sqrt(share * (1 - share) / 4000), found
    assert abs(floor - f) < 0.01
    tuned, start = mixed(normal=1, hard=1, easy=2, floor=0)  # weights in proportion, any scale
    found, floor = shares(tuned, start, 4000)
    assert found == pytest.approx({"normal": 0.25, "hard": 0.25, "easy": 0.5}, abs=0.03) and floor == 0


def test_tasks_never_drawn_come_first_in_the_shuffles_first_epoch():
    size, width = 10, 3
    shuffle = [Order().task("train", size, 4, Slot("train", p, width)) for p in range(size)]
    order = Order()
    first = [order.task("train", size, 4, Slot("train", p, width), "difficulty") for p in range(size)]
    assert first == shuffle  # the first pass over the split is the shuffle's first epoch
    later = order.difficulty("train", size, 4, width)
    assert set(later.first) == set(range(size))
    draw = later.draw(size // width)  # the round that drew the last unseen task fills itself from the pools
    assert draw.routes[0] == "unseen" and draw.routes[1:] != ["unseen"] * (width - 1)
    assert draw.sizes["unseen"] == 1 and len(set(draw.tasks)) == width  # a round draws a task once while it can


def test_the_floor_keeps_drawing_tasks_whose_pools_weigh_nothing():
    starved, start = mixed(hard=0, easy=0, floor=0)
    found, _ = shares(starved, start, 600)
    assert found["hard"] == found["easy"] == 0
    floored, start = mixed(hard=0, easy=0, floor=0.3)
    found, floor = shares(floored, start, 3000)
    assert floor == pytest.approx(0.3, abs=0.03)
    assert found["hard"] == pytest.approx(0.1, abs=0.03) and found["easy"] == pytest.approx(0.1, abs=0.03)
    drawn = collections.Counter()
    for r in range(start, start + 3000):
        floored.begin(r)
        drawn.update(floored.draw(r).tasks)
    assert set(drawn) == set(range(30))  # every task drawn again: none starved


def test_the_same_state_draws_the_same_and_a_saved_state_continues_as_the_run_would():
    def run(order: Difficulty, rounds: range) -> list[list[int]]:
        drawn = []
        for r in rounds:
            drawn.append([order.task(Slot("train", r * 2 + g, 2)) for g in range(2)])
            measure(order, {t: (SPREAD, FLAT_ZERO, FLAT_ONE)[t % 3] for t in drawn[-1]}, start=100 * r)
        return drawn

    one, two = Difficulty(9, 3, 2), Difficulty(9, 3, 2)
    assert run(one, range(30)) == run(two, range(30))
    assert run(Difficulty(9, 4, 2), range(30)) != run(Difficulty(9, 3, 2), range(30))  # another seed, other draws
    whole, stopped = Difficulty(9, 3, 2), Difficulty(9, 3, 2)
    expected = run(whole, range(40))
    first = run(stopped, range(20))
    saved = json.loads(json.dumps(stopped.state()))  # as orsgen_task_order.json holds it
    resumed = Difficulty.restored({"size": 9, "seed": 3, "width": 2, **saved})
    assert first + run(resumed, range(20, 40)) == expected


def test_a_rounds_draws_use_the_pools_from_the_previous_rounds_start():
    """Round r's draws use what was measured before round r-1 began: the look-ahead, at round r-1's first reset,
    draws what round r then resets, whatever is measured in between."""
    def history(ahead: bool, late: bool) -> list[list[int]]:
        order, drawn = Difficulty(9, 0, 2), []
        for r in range(25):
            drawn.append([order.task(Slot("train", r * 2 + g, 2)) for g in range(2)])  # round r's resets
            if ahead:  # open_ahead = "next-step": the next round's tasks, asked now
                [order.task(Slot("train", (r + 1) * 2 + g, 2, ahead=1)) for g in range(2)]
            measure(order, {t: (SPREAD, FLAT_ZERO, FLAT_ONE)[t % 3] for t in drawn[-1]}, start=100 * r)
            if late and r == 12:  # measured after round 12 began: round 13's draws must not see it
                measure(order, {t: FLAT_ZERO for t in range(9)}, start=10_000)
        return drawn

    in_line, looked_ahead = history(False, False), history(True, False)
    assert in_line == looked_ahead
    late = history(False, True)
    assert late[:14] == in_line[:14] and late != in_line  # round 13 as before; from round 14 on, it counts

    order = Difficulty(6, 0, 2, {"recent": 1})  # rounds 0-2 draw the 6 tasks; then tasks 0-2 pay 1, 3-5 spread
    for r in range(3):
        order.begin(r)
        order.draw(r)
    measure(order, {t: FLAT_ONE if t < 3 else SPREAD for t in range(6)})
    order.begin(3)  # round 3 begins: what was measured is in its view, which round 4 draws from
    assert order.views[2].easy == set() and order.views[3].easy == {0, 1, 2}
    assert order.draw(3).sizes == {"unseen": 0, "normal": 6, "hard": 0, "easy": 0}
    measure(order, {t: FLAT_ZERO for t in range(3, 6)}, start=10)  # measured during round 3: not in round 4's draws
    assert order.draw(4).sizes == {"unseen": 0, "normal": 3, "hard": 0, "easy": 3}
    order.begin(4)
    assert order.draw(5).sizes == {"unseen": 0, "normal": 0, "hard": 3, "easy": 3}


def test_the_default_order_is_the_shuffle_it_was():
    """The tasks of the seeded shuffle for these seeds and windows, as the release before the difficulty order drew
    them: every run that does not opt in opens the same tasks."""
    def tasks(split, size, seed, stream, window, count, **extra):
        order = Order()
        return [order.task(split, size, seed, Slot(stream, p, window), **extra) for p in range(count)]

    assert tasks("train", 12, 0, "train", 2, 30) == [
        1, 9, 8, 5, 10, 2, 3, 7, 4, 0, 11, 6, 9, 11, 3, 4, 7, 6, 8, 2, 5, 10, 1, 0, 11, 2, 8, 10, 5, 0]
    assert tasks("train", 12, 7, "train", 3, 30) == [
        0, 5, 11, 1, 6, 4, 7, 8, 9, 10, 3, 2, 5, 9, 7, 0, 3, 2, 10, 8, 1, 4, 6, 11, 7, 1, 11, 6, 0, 5]
    assert tasks("train", 5, 3, "train", 1, 12) == [3, 1, 2, 4, 0, 1, 2, 3, 0, 4, 3, 2]
    assert tasks("test", 6, 0, "eval", 2, 8) == [2, 3, 5, 0, 4, 1, 0, 2]
    # evaluation keeps the shuffle under task_order = "difficulty"
    assert tasks("test", 6, 0, "eval", 2, 8, order="difficulty") == [2, 3, 5, 0, 4, 1, 0, 2]
    assert settings.resolve(None).task_order == "shuffle"


# -- settings, datasets, figures --------------------------------------------------------------------------------------


def test_the_settings_refuse_what_no_order_could_draw_in_one_line(monkeypatch):
    from orsgen.runtime import Adapter

    class Ordered(Adapter):
        task_order = "difficulty"
        task_pools: ClassVar[dict[str, float]] = {"hard": 0.2}

    resolved = settings.resolve(Ordered)
    assert resolved.task_order == "difficulty"
    assert resolved.task_pools == {**settings.POOLS, "hard": 0.2}  # the defaults, overridden key by key
    monkeypatch.setenv("ORSGEN_TASK_ORDER", "Shuffle")
    assert settings.resolve(Ordered).task_order == "shuffle"
    monkeypatch.setenv("ORSGEN_TASK_ORDER", "hardest")
    with pytest.raises(ValueError, match=r"^ORSGEN_TASK_ORDER='hardest': one of 'shuffle', 'difficulty'$"):
        settings.resolve(Ordered)
    monkeypatch.delenv("ORSGEN_TASK_ORDER")
    for given, why in [({"medium": 1}, "no key 'medium'"), ({"hard": -1}, "hard: a weight"),
                       ({"floor": 2}, "floor: the share"), ({"recent": 0}, "recent: the groups"),
                       ({"solved": "max"}, "solved: a reward"), ([("hard", 1)], "{key: value}"),
                       ({"normal": 0, "hard": 0, "easy": 0, "floor": 0}, "every weight is 0")]:
        with pytest.raises(ValueError, match=r"^Ordered\(settings=\{'task_pools': .*\}\): " + re.escape(why)) as e:
            settings.resolve(Ordered, {"task_pools": given})
        assert "\n" not in str(e.value)


def test_a_dataset_weighted_by_pass_rates_repeats_the_tasks_that_spread_most(caplog):
    from datasets import Dataset

    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * 6, "task_index": list(range(6)),
                              "split": ["train"] * 6})
    rates = {0: 0.0, 1: 0.5, 2: 0.1, 3: 0.8, 4: 1.0, 5: 0.45}
    with caplog.at_level("WARNING", logger="orsgen"):
        plain = kept(rows, rates, (0.0, 1.0), "train")
        weighted = kept(rows, rates, (0.0, 1.0), "train", weight=True)
    assert plain["task_index"] == [1, 2, 3, 5]
    # 4 p(1-p) x 4 copies, at least one: 0.5 -> 4, 0.1 -> 1, 0.8 -> 3, 0.45 -> 4; spread out, not in runs
    assert collections.Counter(weighted["task_index"]) == {1: 4, 2: 1, 3: 3, 5: 4}
    assert weighted["task_index"][:4] == [1, 2, 3, 5]
    assert "12 rows for 4 tasks, weighted by p(1-p)" in caplog.text


def test_the_zero_spread_figure_is_the_windows_flat_groups_over_its_groups():
    assert figures(Counts(groups=8, zero_spread=2))["orsgen/groups_zero_spread"] == 0.25
    assert "orsgen/groups_zero_spread" not in figures(Counts())
    assert not any("/pool/" in k or "/draws/" in k for k in figures(Counts(groups=1)))  # the shuffle draws no pools

