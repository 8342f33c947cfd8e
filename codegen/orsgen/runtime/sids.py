"""Session ids asked for ahead. The SDK opens a session with three requests in a row: `POST /create_session` (an id),
`POST /create` (the task, under that id), the prompt. The first makes no state on the SDK's server (it hands out a
uuid), so the ids of a trainer's next batch are asked for while it trains on this one (once TRL has read the batch's
rewards, batch.py), and that batch's starts, in line or ahead, send two requests: one round trip less in line.

Each id is taken once, by one session's start, and never handed out again. One not taken within `FRESH_S` (a
server that places sessions at `/create_session` may not keep it longer) or left when the runtime closes
everything is given back with the `POST /delete_session` the SDK sends for an id it never used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

FRESH_S = 60.0  # half the 120 s the SDK server keeps a session without a ping

Ask = Callable[[], Coroutine[Any, Any, str]]  # one `POST /create_session`: its id
Give = Callable[[str], Coroutine[Any, Any, None]]  # one `POST /delete_session` of an id never used
Submit = Callable[[Coroutine[Any, Any, Any]], "concurrent.futures.Future[Any]"]  # runs a coroutine (the runtime's loop)


class Sids:
    """The ids asked for ahead for one connection of one environment: asked for by `want`, taken once by `take`,
    given back by `drain` (and by `take`, those past `FRESH_S`). Requests go through `submit` (the runtime's loop,
    tracked: close_all() and the exit wait for them)."""

    def __init__(self, ask: Ask, give: Give, submit: Submit, clock: Callable[[], float] = time.monotonic) -> None:
        self._ask, self._give, self._submit, self._clock = ask, give, submit, clock
        self.lock = threading.Lock()
        self.waiting: list[tuple[float, concurrent.futures.Future[str]]] = []  # (asked at, the id), oldest first
        self.asked = self.taken = 0  # counts, for the tests and the benchmark

    def want(self, count: int) -> None:
        """Ask for ids until `count` are waiting or on their way (never more: a batch's worth at most)."""
        with self.lock:
            for _ in range(count - len(self.waiting)):
                self.waiting.append((self._clock(), self._submit(self._ask())))
                self.asked += 1

    def take(self) -> concurrent.futures.Future[str] | None:
        """The oldest id still fresh (None: none waits), handed to this caller only; those past `FRESH_S` are given
        back."""
        with self.lock:
            now, stale = self._clock(), []
            while self.waiting and now - self.waiting[0][0] > FRESH_S:
                stale.append(self.waiting.pop(0)[1])
            taken = self.waiting.pop(0)[1] if self.waiting else None
            self.taken += taken is not None
        for future in stale:
            self._submit(self._give_back(future))
        return taken

    def drain(self) -> list[concurrent.futures.Future[None]]:
        """Give back every id nobody took; the requests' futures."""
        with self.lock:
            left, self.waiting = [future for _, future in self.waiting], []
        return [self._submit(self._give_back(future)) for future in left]

    async def _give_back(self, asked: concurrent.futures.Future[str]) -> None:
        with contextlib.suppress(Exception):  # an id never given, or a server that is gone: nothing to give back
            await self._give(await asyncio.wrap_future(asked))
