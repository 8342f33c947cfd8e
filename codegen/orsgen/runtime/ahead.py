"""Sessions opened ahead for the rest of a GRPO group: TRL resets a batch's rollouts one after another, and the
rollouts of a group follow each other with the same task, so the group's first reset opens the others' sessions
at once and the resets that follow take them, ready or nearly so. A group pays about one reset instead of
`num_generations`. Never more than the group's sessions are opened ahead; one not taken is closed and counted."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Hashable
from typing import Any

Opening = concurrent.futures.Future[Any]  # resolves to (session, prompt)
# Every instance, held: what one holds must be closed even when the trainer, its adapters or the module are gone.
_every: list[Ahead] = []


def drain_all() -> list[Opening]:
    """What no reset took, in every module: close_all() and the exit close them."""
    return [opening for ahead in _every for opening in ahead.drain()]


class Ahead:
    def __init__(self) -> None:
        _every.append(self)
        self.lock = threading.Lock()
        self.waiting: dict[Hashable, list[Opening]] = {}
        self.opened = self.taken = self.unused = 0  # counts, for the benchmark and the tests

    def put(self, key: Hashable, openings: list[Opening]) -> None:
        with self.lock:
            self.waiting.setdefault(key, []).extend(openings)
            self.opened += len(openings)

    def take(self, key: Hashable) -> Opening | None:
        with self.lock:
            queue = self.waiting.get(key)
            if not queue:
                return None
            self.taken += 1
            opening = queue.pop(0)
            if not queue:
                del self.waiting[key]
            return opening

    def drain(self) -> list[Opening]:
        """Every opening nobody took (a new batch began, or the run ends): the caller closes them."""
        with self.lock:
            left = [o for queue in self.waiting.values() for o in queue]
            self.waiting.clear()
            self.unused += len(left)
            return left
