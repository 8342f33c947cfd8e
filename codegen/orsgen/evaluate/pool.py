"""Episodes at once: `concurrency` threads, of which a `Limiter` lets fewer run while the endpoint or the environment
answers 429 (halved at each, grown back by one per run of successes). Threads are daemons: a Ctrl-C never waits for
a reply that may not come."""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from orsgen.errors import OrsgenError

W = TypeVar("W")
FILES_PER_EPISODE = 3  # open files an episode in flight may hold: its environment and endpoint connections and one
# closing (measured by bench/eval_scale.py: 1.4 per episode at 512 at once, the process's own included)
FILES_BASE = 128  # what the process holds besides (about 50: the interpreter, the SDK, the records)
BUSY_REQUEUES = 5  # times an episode's start may be refused for capacity (after the runtime's retries) before the
# run stops: the environment stays full with one episode at a time


class Limiter:
    """How many episodes may run at once: `cap` at most, halved at each 429 (and paused for its Retry-After)."""

    def __init__(self, cap: int) -> None:
        self.cap = self.limit = cap
        self.running = 0
        self.refusals = 0
        self._good = 0
        self._until = 0.0
        self._cond = threading.Condition()

    def acquire(self, stop: threading.Event) -> bool:
        with self._cond:
            while not stop.is_set() and (self.running >= self.limit or time.monotonic() < self._until):
                self._cond.wait(timeout=max(0.05, min(1.0, self._until - time.monotonic())))
            if stop.is_set():
                return False
            self.running += 1
            return True

    def release(self, ok: bool) -> None:
        with self._cond:
            self.running -= 1
            self._good = self._good + 1 if ok else 0
            if self._good >= self.limit and self.limit < self.cap:
                self.limit, self._good = self.limit + 1, 0
            self._cond.notify_all()

    def busy(self, retry_after: float | None) -> None:
        """A 429, from the endpoint or the environment."""
        with self._cond:
            self.refusals += 1
            self.limit, self._good = max(1, self.limit // 2), 0
            self._until = max(self._until, time.monotonic() + min(retry_after if retry_after is not None else 1.0, 30))


def sessions_budget(given: int | None, concurrency: int) -> int:
    """The sessions budget per environment the episodes run with (the runtime's, slots.py): the user's (--max-sessions,
    else ORSGEN_MAX_SESSIONS), at most `concurrency`. An episode's thread does not wait for its session's close (one
    round trip to the runtime's loop fewer per episode, each a thread woken on a busy core): the next start waits on
    the loop for the place that close frees, so the server never holds more than this at once."""
    if given is None:
        from orsgen.runtime import settings

        try:
            given = settings.variable("max_sessions")
        except (ValueError, TypeError) as exc:
            raise OrsgenError(str(exc)) from None
    return concurrency if given is None else min(given, concurrency)


def open_files(concurrency: int) -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) to what `concurrency` episodes at once may need, up to the
    hard limit; OrsgenError, one line, when even that is too low: before anything starts, not as episodes failing
    with "Too many open files" halfway through."""
    try:
        import resource
    except ImportError:  # not on this platform (Windows): its own limits apply
        return
    need = FILES_BASE + FILES_PER_EPISODE * concurrency
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        fits = max(1, (hard - FILES_BASE) // FILES_PER_EPISODE)
        raise OrsgenError(f"--concurrency {concurrency} needs up to {need} open files, and this process may open "
                          f"{hard} at most (its hard limit, ulimit -Hn): lower --concurrency to {fits}, or raise the "
                          "hard limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """What the process holds before the episodes (the SDK, openai, transformers, datasets, matplotlib: some 440,000
    objects) kept out of the garbage collector's full collections while they run, then given back. Each of those walked
    them all: a pause of 0.2-0.4 s on the runtime's loop, which every request goes through (0.03-0.05 s frozen;
    measured in bench/eval_scale.py's runs at --concurrency 128)."""
    gc.collect()  # once, before any episode: nothing left to collect is kept for the run
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class Done(Generic[W]):
    work: W
    result: Any = None  # what `episode` returned
    error: BaseException | None = None


class Pool(Generic[W]):
    """Runs `episode(work)` for each work, at most `limiter.limit` at once; `results()` yields each as it ends."""

    def __init__(self, works: Iterable[W], episode: Callable[[W], Any], limiter: Limiter,
                 stop: threading.Event) -> None:
        self._todo: queue.Queue[W | None] = queue.Queue()
        self._done: queue.Queue[Done[W]] = queue.Queue()
        self.limiter, self.stop, self._episode = limiter, stop, episode
        self.pending = 0
        for work in works:
            self._todo.put(work)
            self.pending += 1
        self._threads = [threading.Thread(target=self._work, name=f"orsgen-eval-{i}", daemon=True)
                         for i in range(min(limiter.cap, max(self.pending, 1)))]
        for thread in self._threads:
            thread.start()

    def again(self, work: W) -> None:
        """Run `work` once more (its start was refused for capacity)."""
        self.pending += 1
        self._todo.put(work)

    def next(self, timeout: float) -> Done[W] | None:
        """The next episode to end (None: none within `timeout`)."""
        try:
            done = self._done.get(timeout=timeout)
        except queue.Empty:
            return None
        self.pending -= 1
        return done

    def finish(self, timeout: float) -> None:
        """Stop taking work; wait (at most `timeout`) for the episodes running to end."""
        self.stop.set()
        for _ in self._threads:
            self._todo.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while True:
            work = self._todo.get()
            if work is None or not self.limiter.acquire(self.stop):
                return
            ok = False
            try:
                result = self._episode(work)
                ok = True
                self._done.put(Done(work, result))
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which decides
                self._done.put(Done(work, error=exc))
            finally:
                self.limiter.release(ok)
