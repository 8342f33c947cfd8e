"""Sessions opened ahead. TRL resets a batch's rollouts one after another, each waiting for its session; the batch's
first reset instead opens every session of the batch whose task it can know, and the resets that follow take them,
ready or nearly so: a batch pays about one start. With environment-owned data and `open_ahead = "next-step"`, the
next step's sessions open too, once this batch's are, while this step resets, generates and trains. What is not
taken is closed at the next batch of its stream, when the trainer it was opened for ends its training or is
collected (`release`), or at close_all/exit, and counted."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Hashable
from typing import Any

Opening = concurrent.futures.Future[Any]  # resolves to (session, prompt), or to None: "open it in line"
Tag = tuple[str, int]  # the batch an opening is for (trl.Batch.tag: stream, first position)
# The instances holding openings, held: what one holds must be closed even when the trainer, its adapters or the
# module are gone; one that holds nothing is dropped, so this never grows beyond the modules in use.
_holding: set[Ahead] = set()
totals = {"opened": 0, "taken": 0, "unused": 0}  # of every instance this process had (EpisodeMetrics' figures)
_totals_lock = threading.Lock()


class Planned(concurrent.futures.Future[Any]):
    """An opening owned before its session is requested. Whoever opens it first marks it running
    (`set_running_or_notify_cancel`); one cancelled before that is never opened. `owner`: the token of the trainer
    whose batch it is for (`release`)."""

    def __init__(self, owner: Hashable | None = None) -> None:
        super().__init__()
        self.owner = owner


def _count(what: str, n: int) -> None:
    with _totals_lock:
        totals[what] += n


def drain_all(keep: Tag | None = None) -> list[Opening]:
    """What no reset took, in every module (but what was opened for the batch `keep`): the caller closes them."""
    return [opening for ahead in list(_holding) for opening in ahead.drain(keep)]


def release(owner: Hashable) -> list[Opening]:
    """What no reset took of what was opened for `owner`'s batches, in every module: the caller closes them."""
    return [opening for ahead in list(_holding) for opening in ahead.drain(owner=owner)]


def openings(tag: Tag) -> list[Opening]:
    """Every opening waiting for the batch `tag`, in every module."""
    return [opening for ahead in list(_holding) for opening in ahead.waiting_for(tag)]


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
            _holding.add(self)

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
            _holding.discard(self)
