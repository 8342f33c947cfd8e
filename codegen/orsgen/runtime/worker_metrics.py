"""EpisodeMetrics under AsyncGRPOTrainer, whose rollouts, and so the episodes, run in a worker process TRL spawns.

In the worker: `EpisodeMetrics()` sets ORSGEN_EPISODE_METRICS in the trainer's process, the spawned worker inherits
it, and the runtime there (`from_environment`) counts the worker's episodes; at each episode's end (and each session
start) it puts the counts since the last put on TRL's own channel, the worker's metrics queue (trl.worker), never
blocking (a full queue: the next put carries them). In the trainer: TRL's `log()` drains that queue through `Drain`,
which takes orsgen's counts out and gives TRL, once per drain (one logging window), the window's `orsgen/...`
figures, one value each: what EpisodeMetrics writes under GRPOTrainer, over the episodes the worker ended in the
window.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from typing import Any

from orsgen.runtime import hooks, trl
from orsgen.runtime.counts import Counts, figures, merge, stamped, totals
from orsgen.runtime.process import STATE

VARIABLE = "ORSGEN_EPISODE_METRICS"
KEY = "orsgen/counts"  # a put's one key: Drain takes it out before TRL reduces anything
PUT_AT = ("episode_end", "session_open")  # a start is put at once: the worker may stop before the episode ends


class Pusher:
    """Counts this process's episodes and puts them on the AsyncGRPO worker's metrics queue (`PUT_AT`). Outside a
    running worker, what was counted is let go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = Counts()
        self._before = totals()
        self.puts = 0
        self._listeners = {event: functools.partial(self._seen, event) for event in hooks.EVENTS}
        for event, listener in self._listeners.items():
            hooks.add(event, listener)

    def close(self) -> None:
        for event, listener in self._listeners.items():
            hooks.remove(event, listener)

    def _seen(self, event: str, record: Any) -> None:
        with self._lock:
            self._counts.take(event, record)
            if event not in PUT_AT:
                return
        found = trl.worker()
        size = getattr(getattr(found, "loop", None), "num_generations", None)
        with self._lock:
            counts, self._counts = self._counts, Counts()
            self._before = stamped(counts, self._before)
            if isinstance(size, int):  # a group counts once all its rollouts ended (as a step's groups do): wait
                for group in [g for g, rewards in counts.group_rewards.items() if len(rewards) < size]:
                    self._counts.group_rewards[group] = counts.group_rewards.pop(group)
        if found is None:
            return
        try:
            found.metrics.put_nowait({KEY: counts})
            self.puts += 1
        except (queue.Full, ValueError, OSError):  # full, or closed at the worker's end: the next put carries them
            with self._lock:
                self._counts.add(counts)
                for group, rewards in counts.group_rewards.items():
                    self._counts.group_rewards.setdefault(group, []).extend(rewards)


class Drain:
    """Stands in for `trainer.rollout_worker.metrics_queue` on the trainer's side (installed by EpisodeMetrics once the
    worker runs): TRL's `log()` calls `get_nowait()` until `queue.Empty`; orsgen's counts are taken out on the way, and
    at the first Empty of each drain the window's figures come instead. Anything else is the queue's own."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._parts: list[Counts] = []
        self._sessions_open = 0
        self._figures_given = False  # this drain's figures were given: the next Empty ends it

    def get_nowait(self) -> Any:
        while True:
            try:
                item = self.inner.get_nowait()
            except queue.Empty:
                if self._figures_given:
                    self._figures_given = False
                    raise
                self._figures_given = True
                return self._figures()
            if isinstance(item, dict) and set(item) == {KEY}:
                self._parts.append(item[KEY])
                continue
            return item

    def _figures(self) -> dict[str, float]:
        parts, self._parts = self._parts, []
        window = Counts()
        merge(window, parts)
        if parts:
            self._sessions_open = parts[-1].sessions_open
        window.sessions_open = self._sessions_open  # a level: the worker's last word
        return figures(window)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def install(holder: Any) -> None:
    """Put a Drain in front of `holder.metrics_queue` (TRL's AsyncRolloutWorker, or any `rollout_worker` with one)."""
    if not isinstance(holder.metrics_queue, Drain):
        holder.metrics_queue = Drain(holder.metrics_queue)


def for_children() -> None:
    """The processes this one starts (AsyncGRPOTrainer's rollout worker) count their episodes for its trainer; this
    one does not push (its EpisodeMetrics counts)."""
    made: dict[str, Pusher | None] = STATE.part("pushers", dict)
    with STATE.lock:
        made.setdefault(VARIABLE, None)
        os.environ[VARIABLE] = "1"


def from_environment() -> Pusher | None:
    """The pusher ORSGEN_EPISODE_METRICS asks for in this process (made once, by the first adapter, and kept by
    process.STATE; None when it is unset, or when this process set it for its children)."""
    made: dict[str, Pusher | None] = STATE.part("pushers", dict)
    if VARIABLE not in made and os.environ.get(VARIABLE, "").strip() == "1":
        with STATE.lock:
            if VARIABLE not in made:
                made[VARIABLE] = Pusher()
    return made.get(VARIABLE)
