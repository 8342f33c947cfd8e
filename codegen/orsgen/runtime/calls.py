"""A turn's tool calls run at once across the batch. GRPOTrainer calls the tools of a turn rollout by rollout, each
call waiting for the last; every call of the turn is known when the first is made (trl.tool_turn). The adapter then
starts the calls of the turn's later rollouts here, each rollout's in its own order on its own session, on the
runtime's loop; when TRL makes each of them, the adapter takes its outcome (`take`): the result, or the very error
TRL's own call would have raised.

Only calls TRL will make are started: those `trl.tool_turn` can know for certain, of the module's own tool methods
(read without running them: `capture`). A call TRL makes that is not the one started ahead is a mismatch: a warning,
counted, and the feature is off for the rest of the process. What was started ahead and not begun is dropped then;
a call already running or done cannot be called back, so it stays for TRL's call of it (sent once, never twice).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import client
from orsgen.runtime.process import STATE

log = logging.getLogger("orsgen")


class Turns:
    """A turn's calls started ahead, in this process (held by process.STATE): per adapter, its calls started ahead
    in the order TRL makes them; the last turn planned (its TRL list, held: its id names one turn); what runs them;
    whether the feature is off (a mismatch); the counts (EpisodeMetrics' figures); this thread's capture."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: weakref.WeakKeyDictionary[Any, list[Started]] = weakref.WeakKeyDictionary()
        self.turn: list[Any] = []
        self.running: set[concurrent.futures.Future[Any]] = set()
        self.off = False
        self.totals = {"started": 0, "mismatched": 0}
        self.local = threading.local()


def _turns() -> Turns:
    return STATE.part("calls", Turns)


def __getattr__(name: str) -> Any:
    if name == "totals":  # (the counts, as the figures and the tests read them)
        return _turns().totals
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Captured:
    """What a tool method would send (its wire name and payload), read in `capture` instead of sent."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Started:
    name: str
    arguments: dict[str, Any]
    outcome: concurrent.futures.Future[Any]


@contextlib.contextmanager
def capture() -> Iterator[None]:
    """While inside, this thread's tool calls return `Captured` (Adapter._call), sending nothing."""
    local = _turns().local
    local.capturing = True
    try:
        yield
    finally:
        local.capturing = False


def capturing() -> bool:
    return bool(getattr(_turns().local, "capturing", False))


def off() -> bool:
    return _turns().off


def first_of(key: Hashable, holds: Any) -> bool:
    """Whether the turn `key` is new (then it is the one planned): its later calls are started once."""
    turns = _turns()
    with turns.lock:
        if turns.turn and turns.turn[0] == key:
            return False
        turns.turn[:] = [key, holds]
        return True


def start(adapter: Any, chain: list[Captured], run: Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]]) -> None:
    """Start `adapter`'s calls `chain` one after another on the runtime's loop (`run(name, arguments)`), each
    outcome waiting for TRL's call of it."""
    started = [Started(c.name, c.arguments, concurrent.futures.Future()) for c in chain]
    turns = _turns()
    with turns.lock:
        turns.waiting.setdefault(adapter, []).extend(started)
        turns.totals["started"] += len(started)

    async def in_order() -> None:
        for call in started:
            if not call.outcome.set_running_or_notify_cancel():  # dropped (the adapter's next reset)
                continue
            try:
                call.outcome.set_result(await run(call.name, call.arguments))
            except Exception as exc:  # noqa: BLE001 - handed to TRL's call, as its own call would raise it
                call.outcome.set_exception(exc)

    future = client.loop().submit(in_order())
    turns.running.add(future)
    future.add_done_callback(turns.running.discard)


def take(adapter: Any, name: str, arguments: dict[str, Any]) -> concurrent.futures.Future[Any] | None:
    """The outcome of `adapter`'s call `name(arguments)` started ahead, when TRL's call is that one; None when none
    was started. A call that is not the next one started for the adapter is a mismatch: the feature turns off."""
    turns = _turns()
    with turns.lock:
        queue = turns.waiting.get(adapter)
        if not queue:
            return None
        head = queue[0]
        if head.name == name and head.arguments == arguments:
            queue.pop(0)
            if not queue:
                del turns.waiting[adapter]
            return head.outcome
        turns.totals["mismatched"] += 1
        turns.off = True
        for call in turns.waiting.pop(adapter):  # this rollout left the script: nothing of it is TRL's to take
            call.outcome.cancel()
        # The other rollouts': a call not begun is dropped (TRL makes it); one running or done cannot be called back,
        # so it stays for TRL's call of it, which takes its outcome: sent once, never twice.
        for other, started in list(turns.waiting.items()):
            kept = [call for call in started if not call.outcome.cancel()]
            if kept:
                turns.waiting[other] = kept
            else:
                del turns.waiting[other]
    log.warning("orsgen: TRL called %s(%s) where %s(%s) was started ahead: a turn's calls run one by one from now on",
                name, sorted(arguments), head.name, sorted(head.arguments))
    return None


def drop(adapter: Any) -> None:
    """Forget what was started ahead for `adapter` and TRL did not take (its episode ends): not begun, not sent."""
    turns = _turns()
    with turns.lock:
        left = turns.waiting.pop(adapter, [])
    for call in left:
        call.outcome.cancel()


def cancel_all() -> None:
    """Nothing started ahead is left running (close_all, exit)."""
    turns = _turns()
    with turns.lock:
        left = [c for q in turns.waiting.values() for c in q]
        turns.waiting.clear()
    for call in left:
        call.outcome.cancel()
    for future in list(turns.running):
        future.cancel()
