"""A trainer's batch as an object: one `Batch` per GRPOTrainer generation batch, made at the batch's first reset from
what `trl` placed (the trainer's `environments`, the rows, the batch's place in its stream), found again by the rest of
its resets. It owns what is the batch's, not one rollout's: the slots and their tasks (the seeded shuffle, or the
difficulty order), the sessions opened ahead (ahead.py), a turn's calls started at once (calls.py), the batch's
sessions closed once TRL has read its rewards; AsyncGRPOTrainer's worker has no such batch, and its groups are
scoring.py's.

A batch works with its rollouts through `Member` (each orsgen adapter's runner, runner.py), never with the adapter: a
new batch-level feature edits this object and its own module.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from orsgen.runtime import ahead, calls, client, sessions, trl
from orsgen.runtime.process import STATE
from orsgen.runtime.settings import Settings
from orsgen.runtime.sids import Sids
from orsgen.runtime.tasks import Order

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncEnvironment

    from orsgen.runtime.episode import Episode

log = logging.getLogger("orsgen")


class Member(Protocol):
    """What a batch asks of one of its rollouts: an orsgen adapter's runner (runner.py)."""

    episode: Episode[Any]

    @property
    def order(self) -> Order:
        """Its environment's task order."""

    @property
    def adapter(self) -> Any:
        """The environment TRL holds for this rollout: what identifies it in TRL's lists (never called here)."""

    def settings(self) -> Settings: ...

    def split_of(self, row: Mapping[str, Any]) -> str: ...

    def environment(self) -> AsyncEnvironment: ...

    def size(self, env: AsyncEnvironment, split: str) -> int:
        """The split's number of tasks."""

    def seat(self, env: AsyncEnvironment, split: str, index: int, stream: str | None,
             config: Settings) -> ahead.Seat: ...

    def sids(self) -> Sids | None:
        """Where its next starts find session ids asked for ahead (sids.py; None: not here)."""

    def follow(self, trainer: Any) -> None:
        """The difficulty order's statistics follow `trainer` (curriculum.py)."""

    def close(self, wait: bool = False, rewards_read: bool = False) -> concurrent.futures.Future[None] | None: ...

    def capture(self, call: trl.Call) -> calls.Captured | None:
        """What a later call of a turn would send, read without sending it (None: it runs as TRL makes it)."""

    async def call_ahead(self, name: str, arguments: dict[str, Any]) -> Any: ...


Members = Any  # (adapter) -> Member | None: the runner of an orsgen adapter, None for an environment of another kind


class Batch:
    """One GRPOTrainer generation batch (`facts`: what trl placed, the rollout's own index aside)."""

    def __init__(self, facts: trl.Batch, trainer: Any, members: Members) -> None:
        self.facts = facts
        self.trainer = weakref.ref(trainer) if trainer is not None else None
        self._members = members
        self.closed = False  # its sessions were closed once TRL had read its rewards

    @property
    def tag(self) -> tuple[str, int]:
        return self.facts.tag

    @property
    def stream(self) -> str:
        return self.facts.stream

    def member(self, position: int) -> Member | None:
        return self._members(self.facts.adapters[position])  # type: ignore[no-any-return]

    def same(self, facts: trl.Batch) -> bool:
        """Whether `facts` place a reset in this batch."""
        return facts.adapters is self.facts.adapters and facts.tag == self.facts.tag

    def placed_trainer(self) -> Any | None:
        return self.trainer() if self.trainer is not None else None

    # -- slots and their tasks ------------------------------------------------------------------------------------

    def slot(self, position: int, rounds_ahead: int = 0) -> trl.Slot:
        return self.facts.slot(position, rounds_ahead)

    def task(self, member: Member, env: AsyncEnvironment, split: str, config: Settings, position: int,
             rounds_ahead: int = 0) -> int:
        """The task of the slot at `position` (of this batch, or of the one `rounds_ahead` later), by `task_order`:
        the seeded shuffle, or by difficulty in training's batches."""
        at = self.slot(position, rounds_ahead)
        if config.task_order == "difficulty" and at.stream == "train":
            member.follow(self.placed_trainer())  # before any draw: a resume restores the order
        return member.order.task(split, member.size(env, split), config.task_seed, at, config.task_order,
                                 config.task_pools)

    # -- sessions: the last batch's closed, this one's opened ahead -----------------------------------------------

    def begin(self, first: Member, held: tuple[Any, Any]) -> None:
        """At the batch's first reset: close what the last batch left and wait for it (bounded, ORSGEN_CLOSE_TIMEOUT)
        before this batch opens anything, so a pool the size of one batch holds it: the first reset's session
        (`held`), those of the batch's other orsgen rollouts (its reward functions and group scoring read them before
        this batch began) and what earlier batches of this stream left opened ahead."""
        closing = [sessions.close(*held)]
        closing += [m.close() for m in map(self.member, range(len(self.facts.adapters))) if m is not None
                    and m is not first]
        closing += [sessions.close(None, left) for left in ahead.drain_all(keep=self.tag)]
        closing += sessions.freeing()  # those closed once TRL read the batch's rewards: done by now, as a rule
        concurrent.futures.wait([f for f in closing if f is not None], timeout=client.timeout("close"))

    def start(self, seat: ahead.Seat) -> tuple[Coroutine[Any, Any, Any], bool]:
        """What opens a reset's session: the one opened ahead for it, else its own start (the retry of a failed
        look-ahead attempt for its task, if one is owed); and whether one was opened ahead."""
        taken = seat.store.take(self.tag, seat.key)
        if taken is not None:
            return ahead.take(taken, seat, self.tag), True
        return seat.start(first=int(seat.store.repay(self.tag, seat.key))), False

    def open_ahead(self, first: Member, position: int, mine: ahead.Opening) -> None:
        """The batch's first reset (at `position`), its own start sent: open the others' sessions and (open_ahead =
        "next-step") the next step's, once this batch's are open, all tied to the trainer that will take them."""
        owner = ahead.owner(self.placed_trainer())
        ahead.open_batch(self._seats(range(position + 1, len(self.facts.adapters))), self.tag, owner)
        if self.facts.more and first.episode.settings.open_ahead == "next-step":  # once this batch's are open
            if any(row.get("task_index") is not None for row in self.facts.rows):
                return  # a dataset's next rows are the sampler's: unknown here
            tag = (self.stream, self.facts.first + self.facts.width)
            seats = self._seats(range(len(self.facts.adapters)), rounds_ahead=1)
            ahead.open_next(seats, [mine, *ahead.openings(self.tag)], tag, owner)

    def _seats(self, positions: range, rounds_ahead: int = 0) -> list[ahead.Seat]:
        """The seats of the batch's orsgen rollouts at `positions` that open ahead (`rounds_ahead`: in the batch that
        many rounds later), each with its own settings, connection and task."""
        seats = []
        for position in positions:
            member, row = self.member(position), self.facts.rows[position]
            if member is None:
                continue
            config = member.settings()
            if config.open_ahead is False:
                continue
            split, env = member.split_of(row), member.environment()
            index = task(member, env, split, row, config, trl.Place(self.facts), self, position, rounds_ahead)
            seats.append(member.seat(env, split, index, self.stream, config))
        return seats

    # -- a turn's calls at once ---------------------------------------------------------------------------------

    def turn(self, member: Member) -> None:
        """At the first call of a turn of GRPOTrainer's tool loop: the turn's later calls started at once."""
        turn(member, self._members)

    # -- its rewards read --------------------------------------------------------------------------------------

    def rewards_read(self, environments: list[Any]) -> None:
        """TRL is done with the batch (`environments`, as its reward computation holds them): its sessions close
        while the trainer trains on it."""
        self.closed = True
        closed_at_rewards(environments, self._members)
        self.ask_sids(environments)

    def ask_sids(self, environments: list[Any]) -> None:
        """The next batch's session ids, asked for while the trainer trains on this one: one per rollout that opens
        ahead (its starts then send two requests in a row, not three); none after a stream's last round."""
        if not self.facts.more:
            return
        wanted: dict[Sids, int] = {}
        for env in environments:
            member = self._members(env)
            if member is not None and member.settings().open_ahead is not False:
                found = member.sids()
                if found is not None:
                    wanted[found] = wanted.get(found, 0) + 1
        for found, count in wanted.items():
            found.want(count)


def closed_at_rewards(environments: list[Any], members: Members) -> None:
    """Close the sessions of a batch whose rewards TRL has read (a batch the runtime could not place too)."""
    for env in environments:
        member = members(env)
        if member is not None:
            member.close(rewards_read=True)


def turn(member: Member, members: Members) -> None:
    """At the first call of a turn of GRPOTrainer's tool loop, start the turn's calls of its later rollouts
    (calls.py): those TRL will make for certain (trl.tool_turn), of the modules' own tool methods."""
    if calls.off() or not member.episode.settings.batch_calls:
        return
    found = trl.tool_turn(member.adapter)
    if isinstance(found, str):
        client.once("batch-calls-off", logging.INFO, "orsgen: a turn's tool calls run one by one, as TRL makes "
                    "them: %s", found)
    if not isinstance(found, trl.Turn) or not calls.first_of(found.key, found.calls):
        return
    for rollout in found.later:
        chain = []
        for call in rollout:
            other = members(call.adapter)
            captured = None if other is None else other.capture(call)
            if captured is None:
                break  # this one runs as TRL makes it, and so does every later call of the rollout
            chain.append(captured)
        if chain:
            adapter = rollout[0].adapter
            calls.start(adapter, chain, members(adapter).call_ahead)


def task(member: Member, env: AsyncEnvironment, split: str, row: Mapping[str, Any], config: Settings,
         where: trl.Place, batch: Batch | None, position: int, rounds_ahead: int = 0) -> int:
    """The row's task_index; without one, the task of the rollout's slot in the trainer's batch (`Batch.task`), or
    outside any batch the first task of the order."""
    if row.get("task_index") is not None:
        if config.task_order != "shuffle" and (where.batch.stream == "train" if where.batch is not None
                                               else trl.worker() is not None):
            # A WARNING, once, as TRL says of an option that has no effect: the run is right (the sampler's order),
            # only not what was asked. Not a refusal: evaluation and a job-wide ORSGEN_TASK_ORDER read the same rows,
            # and an evaluation batch (or `orsgen eval`) naming its tasks is no mistake.
            client.once("task-order-rows", logging.WARNING, "orsgen: task_order=%r has no effect here: the training "
                        "rows name their tasks (task_index), so the trainer's sampler orders them; it orders "
                        "environment-owned data (no train_dataset, or rows without task_index). With a dataset, "
                        "dataset(pass_rates=..., weight=True) weights its tasks", config.task_order)
        return int(row["task_index"])
    if not where.placeable():
        raise RuntimeError(where.refusal())
    if batch is None:  # a look at a prompt outside training: the first task of the order, shifting nothing
        return member.order.task(split, member.size(env, split), config.task_seed, trl.Slot("train", 0))
    return batch.task(member, env, split, config, position, rounds_ahead)



class Batches:
    """The batches of this process (held by process.STATE): what placing remembers (each trainer's generation
    rounds, the batch last placed), and each trainer's current batch (by trainer, weakly)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.memory = trl.Memory()
        self.current: weakref.WeakKeyDictionary[Any, Batch] = weakref.WeakKeyDictionary()


def _batches() -> Batches:
    return STATE.part("batches", Batches)


def place(adapter: Any, row: Mapping[str, Any], members: Members) -> tuple[trl.Place, Batch | None, bool]:
    """Where a reset sits (trl.place), its batch (None outside one), and whether this reset made the batch: the
    batch's first."""
    batches = _batches()
    where = trl.place(adapter, row, batches.memory)
    if where.batch is None:
        return where, None, False
    trainer = trl.placed_trainer(batches.memory)
    with batches.lock:
        current = batches.current.get(trainer) if trainer is not None else None
        if current is not None and current.same(where.batch):
            return where, current, False
        made = Batch(where.batch, trainer, members)
        if trainer is not None:
            batches.current[trainer] = made
    return where, made, True
