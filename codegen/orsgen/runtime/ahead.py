"""Sessions opened ahead. TRL resets a batch's rollouts one after another, each waiting for its session; the batch's
first reset instead opens every session of the batch whose task it can know, and the resets that follow take them,
ready or nearly so: a batch pays about one start. With environment-owned data and `open_ahead = "next-step"`, the
next step's sessions open too, once this batch's are, while this step resets, generates and trains. What is not
taken is closed at the next batch of its stream, when the trainer it was opened for ends its training or is
collected (`release`), or at close_all/exit, and counted.

The store (`Ahead`, one per pinned environment) and the planning that fills it live here; what opens a session is
the environment's opener (sessions.py), handed in as each `Seat`'s `open`. The adapter says which seats a batch has.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import client, sessions, trl
from orsgen.runtime.process import STATE
from orsgen.runtime.sessions import Planned

Opening = concurrent.futures.Future[Any]  # resolves to (session, prompt), or to None: "open it in line"
Tag = tuple[str, int]  # the batch an opening is for (trl.Batch.tag: stream, first position)


class Stores:
    """What is opened ahead in this process (held by process.STATE): the stores holding openings, held (what one
    holds must be closed even when the trainer, its adapters or the module are gone; one that holds nothing is
    dropped, so this never grows beyond the modules in use); the counts of every store this process had (EpisodeMetrics'
    figures); the trainers openings were made for (weakly) and their tokens (`release`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holding: set[Ahead] = set()
        self.totals = {"opened": 0, "taken": 0, "unused": 0}
        self.owners: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.tokens = itertools.count(1)


def _stores() -> Stores:
    return STATE.part("ahead", Stores)


def __getattr__(name: str) -> Any:
    if name in ("totals", "_holding"):  # (the counts, and the stores holding openings, as tests and figures read them)
        return _stores().totals if name == "totals" else _stores().holding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _count(what: str, n: int) -> None:
    stores = _stores()
    with stores.lock:
        stores.totals[what] += n


def drain_all(keep: Tag | None = None) -> list[Opening]:
    """What no reset took, in every module (but what was opened for the batch `keep`): the caller closes them."""
    return [opening for ahead in list(_stores().holding) for opening in ahead.drain(keep)]


def release(owner: Hashable) -> list[Opening]:
    """What no reset took of what was opened for `owner`'s batches, in every module: the caller closes them."""
    return [opening for ahead in list(_stores().holding) for opening in ahead.drain(owner=owner)]


def openings(tag: Tag) -> list[Opening]:
    """Every opening waiting for the batch `tag`, in every module."""
    return [opening for ahead in list(_stores().holding) for opening in ahead.waiting_for(tag)]


class Ahead:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[tuple[Tag, Hashable], list[Opening]] = {}
        self.opened = self.taken = self.unused = 0  # counts, for the metrics, the benchmark and the tests
        # Failed look-ahead attempts (openings resolved to None) per batch and key, not yet retried in line.
        self.owed: dict[tuple[Tag, Hashable], int] = {}

    def put(self, tag: Tag, key: Hashable, opening: Opening) -> None:
        with self.lock:
            self.waiting.setdefault((tag, key), []).append(opening)
            self.opened += 1
            _count("opened", 1)
            _stores().holding.add(self)

    def count(self, tag: Tag, key: Hashable) -> int:
        with self.lock:
            return len(self.waiting.get((tag, key), ()))

    def waiting_for(self, tag: Tag) -> list[Opening]:
        with self.lock:
            return [o for (t, _), queue in self.waiting.items() if t == tag for o in queue]

    def take(self, tag: Tag, key: Hashable) -> Opening | None:
        with self.lock:
            queue = self.waiting.get((tag, key))
            if not queue:
                return None
            self.taken += 1
            _count("taken", 1)
            opening = queue.pop(0)
            if not queue:
                del self.waiting[(tag, key)]
                self._held()
            return opening

    def owe(self, tag: Tag, key: Hashable) -> None:
        """A look-ahead attempt for `key` failed: the next in-line start of `key` in that batch is its retry."""
        with self.lock:
            self.owed[tag, key] = self.owed.get((tag, key), 0) + 1

    def repay(self, tag: Tag, key: Hashable) -> bool:
        """Whether an in-line start of `key` in the batch `tag` retries a failed look-ahead attempt (counted once)."""
        with self.lock:
            left = self.owed.pop((tag, key), 0)
            if left > 1:
                self.owed[tag, key] = left - 1
            return left > 0

    def drain(self, keep: Tag | None = None, owner: Hashable | None = None) -> list[Opening]:
        """Every opening nobody took (the run ends); with `keep`, a batch (stream, first) that begins: those of the
        same stream's other batches (an evaluation pass leaves training's look-ahead alone); with `owner`, those
        opened for that trainer's batches."""
        with self.lock:
            def stale(tag: Any, opening: Opening | None) -> bool:
                if owner is not None:
                    return getattr(opening, "owner", None) == owner
                return keep is None or (tag != keep and tag[0] == keep[0])

            left = [o for (tag, _), queue in self.waiting.items() for o in queue if stale(tag, o)]
            kept = {k: [o for o in q if not stale(k[0], o)] for k, q in self.waiting.items()}
            self.waiting = {k: q for k, q in kept.items() if q}
            if owner is None:
                self.owed = {k: n for k, n in self.owed.items() if keep is not None and not stale(k[0], None)}
            self.unused += len(left)
            _count("unused", len(left))
            self._held()
        for opening in left:
            if isinstance(opening, Planned):
                opening.cancel()  # still pending: the look-ahead skips it; already opened: closed by the caller
        return left

    def _held(self) -> None:  # under self.lock
        if not self.waiting:
            _stores().holding.discard(self)


# -- planning ---------------------------------------------------------------------------------------------------

Start = Callable[..., Coroutine[Any, Any, Any]]  # start(retries=None, first=0): opens the seat's session


@dataclass(frozen=True)
class Seat:
    """A rollout of a batch whose session can open before its reset: the store its opening waits in, the task's
    key there, and what opens it (its adapter's opener, connection, task and settings)."""

    store: Ahead
    key: Hashable
    start: Start


def open_batch(seats: list[Seat], tag: Tag, owner: int | None) -> None:
    """Open the seats' sessions at once, each put in its store before it is requested: all but those the
    look-ahead already opened for them."""
    running = client.loop()
    wanted: dict[tuple[int, Hashable], int] = {}
    for seat in seats:
        key = (id(seat.store), seat.key)
        wanted[key] = wanted.get(key, 0) + 1
        if wanted[key] > seat.store.count(tag, seat.key):
            opening = Planned(owner)
            seat.store.put(tag, seat.key, opening)
            retry = seat.store.repay(tag, seat.key)  # in place of a failed look-ahead attempt
            running.submit(sessions.fill(opening, seat.start(first=int(retry))))


def open_next(seats: list[Seat], after: list[Opening], tag: Tag, owner: int | None) -> None:
    """Open the next batch's (`tag`) seats once `after` are done, while this step resets, generates and trains."""
    plan = []
    for seat in seats:
        opening = Planned(owner)
        seat.store.put(tag, seat.key, opening)
        plan.append((seat, opening))
    client.loop().track(_look_ahead(plan, after, tag))  # what it opens as close_all() or the exit drain, it closes


async def _look_ahead(plan: list[tuple[Seat, Planned]], after: list[Opening], tag: Tag) -> None:
    """Once `after` are done, open the planned sessions at once, without retries: one that fails, or is refused for
    capacity (429), resolves to None and its reset opens it in line, with the whole start-failure contract. The
    failed attempt is owed a retry from then on, whoever starts the task next."""
    await asyncio.gather(*(asyncio.wrap_future(opening) for opening in after), return_exceptions=True)

    async def one(seat: Seat, opening: Planned) -> None:
        if not opening.set_running_or_notify_cancel():  # drained before it began (close_all, exit): never opened
            return
        try:
            opening.set_result(await seat.start(retries=0))
        except Exception as exc:  # noqa: BLE001 - left to the reset
            seat.store.owe(tag, seat.key)  # before anyone can see the None
            opening.set_result(None)
            if client.status(exc) == 429:
                client.once("look-ahead-429", logging.INFO, "orsgen: the environment is at capacity (429): what the "
                            "look-ahead could not open, the resets open in line")

    await asyncio.gather(*(one(seat, opening) for seat, opening in plan))


async def take(taken: Opening, seat: Seat, tag: Tag) -> Any:
    """The session opened ahead for `seat`. One the look-ahead could not open (None) is replaced by another opened
    for the same task, which a later rollout would have taken (at capacity, the later rollouts' sessions are what
    holds the places), else opened now. Each failed attempt is owed a retry: the next in-line start of the task."""
    opened = await asyncio.wrap_future(taken)
    while opened is None:  # a failed attempt, owed a retry when it failed (_look_ahead)
        other = seat.store.take(tag, seat.key)
        if other is None:
            return await seat.start(first=int(seat.store.repay(tag, seat.key)))
        opened = await asyncio.wrap_future(other)
    return opened


def owner(trainer: Any | None) -> int | None:
    """The token of `trainer` for what is opened ahead for its batches. At its first sight, its collection and
    the end of its training (trl.on_training_end) are tied to closing what it still has waiting."""
    if trainer is None:
        return None
    stores = _stores()
    with stores.lock:
        token = stores.owners.get(trainer)
        if token is None:
            token = stores.owners[trainer] = next(stores.tokens)
            weakref.finalize(trainer, _release, token).atexit = False  # at exit, the exit hook closes them
            trl.on_training_end(trainer, functools.partial(_release, token))
    return token


def _release(token: int) -> None:
    for left in release(token):
        sessions.close(None, left)
