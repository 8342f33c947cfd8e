"""A trainer's batch as an object (issue 43): `batch.Batch` against fakes of its members (what each orsgen adapter's
runner answers) and of their task orders: the slots' tasks, sessions opened ahead and taken, the last batch's closed
at the first reset, closing once the batch's rewards are read."""

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
from orsgen.runtime import ahead, trl
from orsgen.runtime.batch import Batch, task
from orsgen.runtime.settings import DEFAULTS, resolve


class Order:
    """A task order that answers each slot's position, and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []

    def task(self, split, size, seed, slot, order="shuffle", pools=None):
        self.asked.append((split, size, seed, slot, order))
        return slot.position


@dataclass
class Episode:
    settings: Any = DEFAULTS


@dataclass
class Member:
    """One rollout as a batch sees it."""

    adapter: Any
    store: ahead.Ahead
    order: Order = field(default_factory=Order)
    episode: Episode = field(default_factory=Episode)
    config: Any = DEFAULTS
    closed: list[bool] = field(default_factory=list)
    followed: list[Any] = field(default_factory=list)
    started: list[tuple[int, int | None, int]] = field(default_factory=list)
    pool: Any = None  # where its next starts find session ids asked for ahead

    def settings(self):
        return self.config

    def split_of(self, row):
        return row.get("split") or "train"

    def environment(self):
        return "env"

    def size(self, env, split):
        return 8

    def follow(self, trainer):
        self.followed.append(trainer)

    def seat(self, env, split, index, stream, config):
        async def start(retries=None, first=0):
            self.started.append((index, retries, first))
            return f"session {index}", f"prompt {index}"

        return ahead.Seat(self.store, ("key", split, index), start)

    def close(self, wait=False, rewards_read=False):
        self.closed.append(rewards_read)

    def sids(self):
        return self.pool

    def capture(self, call):
        return None

    async def call_ahead(self, name, arguments):
        raise AssertionError("no call is started ahead here")


def made(size=4, group=2, first=8, stream="train", rows=None, foreign=()):
    """A batch of `size` rollouts (those at `foreign` of another kind of environment), each an orsgen one's member."""
    store = ahead.Ahead()
    adapters = [object() for _ in range(size)]
    members = {id(a): Member(a, store) for i, a in enumerate(adapters) if i not in foreign}
    facts = trl.Batch(adapters, rows or [{"prompt": "p"}] * size, 0, group, stream, first, size, True)
    return Batch(facts, None, lambda adapter: members.get(id(adapter))), [members.get(id(a)) for a in adapters]


def test_a_slots_task_is_its_members_orders_for_the_slots_group():
    batch, members = made()
    assert [batch.task(m, "env", "train", DEFAULTS, p) for p, m in enumerate(members)] == [4, 4, 5, 5]
    assert batch.task(members[3], "env", "train", DEFAULTS, 3, rounds_ahead=1) == 7  # the next round's slot
    split, size, _, slot, order = members[3].order.asked[-1]
    assert (split, size, slot) == ("train", 8, trl.Slot("train", 7, 2, 1)) and order == "shuffle"
    assert all(m.followed == [] for m in members)


def test_the_difficulty_order_follows_the_batchs_trainer_before_any_draw():
    batch, members = made()
    config = resolve(None, {"task_order": "difficulty"})
    batch.task(members[0], "env", "train", config, 0)
    assert members[0].followed == [None] and members[0].order.asked[0][4] == "difficulty"
    evaluation, members = made(stream="eval")
    evaluation.task(members[0], "env", "train", config, 0)
    assert members[0].followed == []  # evaluation draws no difficulty


def test_a_row_naming_its_task_is_that_task_and_outside_a_batch_the_first_of_the_order():
    batch, members = made()
    assert task(members[0], "env", "train", {"task_index": 6}, DEFAULTS, trl.Place(batch.facts), batch, 0) == 6
    assert members[0].order.asked == []
    assert task(members[0], "env", "train", {}, DEFAULTS, trl.Place(None), None, 0) == 0
    assert members[0].order.asked[-1][3] == trl.Slot("train", 0)
    with pytest.raises(RuntimeError, match="reset\\(\\) without task_index inside trl.x"):
        task(members[0], "env", "train", {}, DEFAULTS, trl.Place(None, "trl.x", "unread"), None, 0)


def test_a_reset_takes_what_was_opened_ahead_for_it_else_opens_in_line_retrying_a_failed_look_ahead():
    batch, members = made()
    seat = members[1].seat("env", "train", 4, "train", DEFAULTS)
    opened = ahead.Planned()
    seat.store.put(batch.tag, seat.key, opened)
    start, taken = batch.start(seat)
    assert taken is True
    start.close()
    start, taken = batch.start(seat)  # nothing left ahead for it: its own start
    assert taken is False and asyncio.run(start) == ("session 4", "prompt 4") and members[1].started == [(4, None, 0)]
    seat.store.owe(batch.tag, seat.key)  # a look-ahead attempt for it failed: the in-line start is its retry
    start, _ = batch.start(seat)
    asyncio.run(start)
    assert members[1].started[-1] == (4, None, 1)
    seat.store.drain()


def test_the_first_reset_opens_the_later_rollouts_sessions_ahead():
    batch, members = made(foreign=(2,))
    batch.open_ahead(members[0], 0, ahead.Planned())
    store = members[0].store
    try:
        assert [store.count(batch.tag, ("key", "train", t)) for t in (4, 5)] == [1, 1]  # positions 1 and 3
        assert members[0].started == [] and members[2] is None
    finally:
        store.drain()


def test_the_first_reset_closes_what_the_batchs_other_rollouts_held():
    batch, members = made(foreign=(3,))
    batch.begin(members[0], (None, None))
    assert [m.closed for m in members[:3]] == [[], [False], [False]]


def test_once_the_rewards_are_read_every_orsgen_rollout_closes_as_read():
    batch, members = made(foreign=(1,))
    batch.rewards_read(batch.facts.adapters)
    assert batch.closed and [m.closed if m else None for m in members] == [[True], None, [True], [True]]


class Pool:
    """Session ids asked for ahead, as a batch asks for them: how many, each time."""

    def __init__(self) -> None:
        self.wanted: list[int] = []

    def want(self, count):
        self.wanted.append(count)


def test_at_the_rewards_read_the_next_batchs_ids_are_asked_one_per_rollout_opening_ahead_none_after_the_last():
    batch, members = made(size=6, foreign=(1,))
    mine, other = Pool(), Pool()  # two connections (or environments): each its own ids
    for member, pool in zip([m for m in members if m], [mine, mine, other, mine, mine]):
        member.pool = pool
    members[5].config = resolve(None, {"open_ahead": False})  # opens nothing ahead: asks for nothing
    batch.rewards_read(batch.facts.adapters)
    assert mine.wanted == [3] and other.wanted == [1]  # asked once per pool, for the batch's count
    last, members = made()
    last.facts = dataclasses.replace(last.facts, more=False)  # no round follows: the run's last step
    for member in members:
        member.pool = mine
    last.rewards_read(last.facts.adapters)
    assert mine.wanted == [3]  # nothing asked for a batch that never comes


def test_a_reset_is_placed_in_the_batch_of_its_environments_list_and_tag():
    batch, _ = made()
    facts = batch.facts
    assert batch.same(trl.Batch(facts.adapters, facts.rows, 3, 2, "train", 8, 4, True))
    assert not batch.same(trl.Batch(list(facts.adapters), facts.rows, 3, 2, "train", 8, 4, True))  # another list
    assert not batch.same(trl.Batch(facts.adapters, facts.rows, 3, 2, "train", 12, 4, True))  # another round
