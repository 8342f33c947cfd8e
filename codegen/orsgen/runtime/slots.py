"""The sessions budget of one environment in one process (the `max_sessions` setting, ORSGEN_MAX_SESSIONS, `orsgen
eval --max-sessions`): at most that many of its sessions open or opening at once, its look-ahead's included. A start
past it waits, first come first served, for a session of the environment to close: waiting is not a failure, and
the seconds waited are reported with the start (`hooks.SessionOpen.waited`, the `orsgen/slot_wait_seconds` figure).

Used on the runtime's loop only (`Sessions.open` takes a place before its request, `sessions.end` gives it back once
the server has the session closed), so it needs no lock.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any


class Slots:
    """The places one environment's sessions hold in this process: `held` of them, a session's place owned from
    its start to its close."""

    def __init__(self) -> None:
        self.held = 0
        self.peak = 0
        self._owned: set[Any] = set()  # the sessions that hold a place
        self._waiting: collections.deque[tuple[asyncio.Future[None], int]] = collections.deque()

    async def take(self, limit: int | None) -> float:
        """Wait for a place (`limit`: the budget, None for none); the seconds waited. Cancelled while waiting, it
        takes no place."""
        if limit is None or (self.held < limit and not self._waiting):
            self._add()
            return 0.0
        began = time.perf_counter()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((turn, limit))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given a place as it was cancelled: hand it on
                self.give()
            else:
                self._waiting = collections.deque(w for w in self._waiting if w[0] is not turn)
            raise
        return time.perf_counter() - began

    def own(self, session: Any) -> None:
        """`session` holds the place its start took (given back by `release(session)`)."""
        self._owned.add(session)

    def release(self, session: Any) -> None:
        """The place of `session`, if it holds one, given back (once)."""
        if session in self._owned:
            self._owned.discard(session)
            self.give()

    def give(self) -> None:
        """A place given back (a start that made no session gives its place back here)."""
        self.held -= 1
        while self._waiting:
            turn, limit = self._waiting[0]
            if turn.done():  # cancelled while waiting
                self._waiting.popleft()
                continue
            if self.held >= limit:
                break
            self._waiting.popleft()
            self._add()
            turn.set_result(None)

    def _add(self) -> None:
        self.held += 1
        self.peak = max(self.peak, self.held)
