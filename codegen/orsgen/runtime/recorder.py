"""The recorder: every ended episode's record (trajectories.py), built and handed to the sinks (sinks.py: its JSONL
file first, the OpenReward upload when asked) through one queue and one writer thread, off the trainer's thread.

The writer never raises into training and never blocks it: records wait in a bounded queue (a full queue drops the
record and counts it). Nothing is lost silently: a record is written whatever it holds, or counted in `dropped` with
one warning line; a writer that stopped, for whatever reason, is seen: `flush()` is False, what it could not write is
counted, and `close()` (at exit too) says in one line how many records were not written or reached no sink.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from orsgen.runtime import client, sinks
from orsgen.runtime.jsonl import JsonlSink
from orsgen.runtime.process import STATE
from orsgen.runtime.runner import runner_of
from orsgen.runtime.trajectories import MAX_RESULT_CHARS, Trace, Traces

log = logging.getLogger("orsgen")

VARIABLE = "ORSGEN_TRAJECTORIES"  # a directory (or the JSON a `Recorder` writes): every process records there
ADOPTED, ADOPTED_VALUES = "adopted", "adopted values"  # the process part's keys: a callback's recorder (weakly), what it set
MAX_QUEUED = 1_000  # records waiting for the writer; more are dropped (and counted), never held


class Recorder:
    """Records every episode this process runs as a line of `directory`/trajectories-rank{R}.jsonl (R: this
    process's rank; a process other than the one that made the recorder adds its pid, so processes never share a
    file). `attach` tells it the run, step and rank of a trainer, whose batches' episodes are then the only ones of a
    trainer it takes; `upload` also sends each record to the OpenReward runs page (upload.py). Listens on the hooks
    until `close()`.

    `orsgen eval` makes one with `path` (its run's file) and `build=False`: it builds each record itself, from the
    episode's trace (`take`), and `put`s it; `quiet`: it says itself what failed."""

    def __init__(self, directory: str | os.PathLike[str], *, max_result_chars: int | None = MAX_RESULT_CHARS,
                 upload: bool = False, run: str | None = None, max_queued: int = MAX_QUEUED,
                 owner: int | None = None, path: Path | None = None, build: bool = True, quiet: bool = False) -> None:
        if max_result_chars is not None and max_result_chars < 200:
            raise ValueError(f"Trajectories(max_result_chars={max_result_chars!r}): at least 200, or None for no cap")
        self.directory = Path(directory).resolve()
        self.max_result_chars, self.upload, self.run = max_result_chars, upload, run
        self._owner = os.getpid() if owner is None else owner
        self._fixed, self.quiet = path, quiet
        self._rank: Callable[[], int] = _env_rank
        self._step: Callable[[], int | None] = lambda: None
        self._trainer: weakref.ref[Any] | None = None  # attached: the trainer whose episodes are its run's
        self.run_info: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue(max_queued)
        self._thread: threading.Thread | None = None
        me = weakref.proxy(self)  # what the sinks, the hooks and the exit hold: a finished run's recorder goes
        self.file = JsonlSink(lambda: me.path, quiet)
        self.sinks: list[sinks.Sink] = [self.file, *sinks.made(me)]
        self._specs: dict[tuple[str, str, int], Any] = {}
        self._dropped = 0  # records that never reached the sinks (a full queue, a stopped writer, unbuildable)
        self.stopped: str | None = None  # why the writer's thread stopped before close(), if it did
        self._holding = 0  # records of the batch being written
        self.closed = False
        self._traces = Traces(self._seen if build else None)  # build=False: ended traces kept until taken
        # At exit: written while the runtime's loop still runs (a record's task spec may need a request), then closed.
        STATE.at_exit("flush records", functools.partial(_flush_at_exit, weakref.ref(self), close=False))
        STATE.at_exit("close records", functools.partial(_flush_at_exit, weakref.ref(self)))

    @property
    def path(self) -> Path:
        """The file this process writes."""
        if self._fixed is not None:
            return self._fixed
        rank = self._rank()
        mine = os.getpid() == self._owner
        return self.directory / (f"trajectories-rank{rank}.jsonl" if mine else
                                 f"trajectories-rank{rank}-pid{os.getpid()}.jsonl")

    @property
    def written(self) -> int:
        return self.file.written

    @property
    def dropped(self) -> int:
        """Records not written to the file: never reached it, or the file did not take them."""
        return self._dropped + self.file.lost

    @property
    def uploader(self) -> Any:
        """The upload's `Uploader` once the first record was sent (its sent, failed, dropped), else None."""
        return next((getattr(s, "uploader", None) for s in self.sinks if hasattr(s, "uploader")), None)

    def attach(self, *, run: str | None, step: Callable[[], int | None], rank: Callable[[], int],
               run_info: dict[str, Any], trainer: Any = None) -> None:
        """A trainer's run name, step, rank and (for the upload) RunInfo fields; from then on, of the episodes placed
        in a trainer's batch, only `trainer`'s are its run's."""
        self.run = self.run or run
        self._step, self._rank, self.run_info = step, rank, run_info
        self._trainer = None if trainer is None else weakref.ref(trainer)

    def _foreign(self, runner: Any) -> bool:
        """An episode (of `runner`) of another trainer's batch: a trainer that raised earlier in this process keeps
        its episodes, which end at a later `close_all()`, and are not this run's rollouts (they would be written as
        this run's)."""
        if self._trainer is None:
            return False
        batch = None if runner is None else runner.batch
        return batch is not None and batch.trainer is not None and batch.placed_trainer() is not self._trainer()

    # -- the episodes (the thread that did the work: quick) ------------------------------------------------------

    def _seen(self, trace: Trace) -> None:
        if self.closed:
            return
        assert trace.end is not None
        runner = runner_of(trace.end.adapter)
        if self._foreign(runner):
            return
        self._put((trace, self._step(), [] if runner is None else runner.secrets()))

    def take(self, episode: Any) -> Trace | None:
        """The trace of `episode` once it has ended (build=False), given once."""
        return self._traces.take(episode)

    def put(self, record: dict[str, Any]) -> None:
        """A record built elsewhere (orsgen eval's), written as it is."""
        self._put(record)

    def _put(self, item: Any) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._work, name="orsgen-trajectories", daemon=True)
                    self._thread.start()
        if self.stopped is not None:
            self._lost(1)
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self._dropped += 1
            self._warn("trajectories-full", "orsgen: trajectory records come faster than %s takes them: dropping "
                       "(counted in Recorder.dropped)", self.directory)

    def _lost(self, count: int) -> None:
        """Records the stopped writer will never take: counted, and said once."""
        self._dropped += count
        self._warn(f"trajectories-stopped-{id(self)}", "orsgen: the trajectory writer of %s stopped (%s): later "
                   "records are dropped (counted in Recorder.dropped); training goes on", self.directory, self.stopped)

    def _warn(self, key: str, message: str, *args: Any) -> None:
        if not self.quiet:
            client.once(key, logging.WARNING, message, *args)

    # -- the writer's thread -------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while self._batch():
                pass
        except BaseException as exc:  # noqa: BLE001 - whatever stops the writer is seen: flush() is False, what it
            if self.stopped is None:  # held and what waits are counted (a daemon thread has nobody to raise to)
                self._stopping(exc)
        finally:
            self.file.close(0)

    def _batch(self) -> bool:
        """Write the next batch of what waits; False once told to stop."""
        items = [self._queue.get()]
        while len(items) < 256:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        flushed = [item for item in items if isinstance(item, threading.Event)]
        try:
            taken = [item for item in items if item is not None and not isinstance(item, threading.Event)]
            self._holding = len(taken)
            records = [record for record in map(self._built, taken) if record is not None]
            self._holding = len(records)  # a record that could not be built is counted already
            for sink in self.sinks:
                self._write(sink, records)
            self._holding = 0
        except BaseException as exc:
            self._stopping(exc)
            raise  # to _work, which ends the thread
        finally:
            for done in flushed:  # after `stopped` is set: a flush waiting on one sees it
                done.set()
        return None not in items

    def _write(self, sink: sinks.Sink, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        try:
            sink.write(records)
        except Exception as exc:  # noqa: BLE001 - a sink's own failure: never lost unseen either
            if sink is self.file:
                self._dropped += len(records)
            self._warn(f"trajectories-failed-{id(self)}", "orsgen: trajectory records could not be written to %s "
                       "(%s): dropped, counted in Recorder.dropped; training goes on",
                       self.path if sink is self.file else type(sink).__name__, client.describe(exc))
        finally:
            if sink is self.file:
                self._holding = 0  # each counted, written or dropped

    def _stopping(self, exc: BaseException) -> None:
        """The writer is stopping on `exc`: what it held and what waits for it are counted as dropped."""
        self.stopped = client.describe(exc)
        held, self._holding = self._holding, 0
        self._lost(held + self._waiting())

    def _waiting(self) -> int:
        """Take what waits in the queue: the records among it (a flush waiting on it is let go)."""
        records = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return records
            if isinstance(item, threading.Event):
                item.set()
            elif item is not None:
                records += 1

    def _built(self, item: Any) -> dict[str, Any] | None:
        if isinstance(item, dict):
            return item
        trace, step, secrets = item
        try:
            adapter = trace.end.adapter
            pinned = getattr(adapter, "pinned", None)
            environment = None if pinned is None else (pinned.env or pinned.deployment)
            return trace.record(run=self.run, step=step, rank=self._rank(), environment=environment,  # type: ignore[no-any-return]
                                task_spec=self._spec(adapter, trace.end), secrets=secrets,
                                max_result_chars=self.max_result_chars, model=self.run_info.get("model_name"))
        except Exception:
            self._dropped += 1
            log.warning("orsgen: a trajectory record could not be built (dropped)", exc_info=True)
            return None

    def _spec(self, adapter: Any, end: Any) -> Any:
        runner = runner_of(adapter)
        if end.task_index is None or runner is None:
            return None
        key = (type(adapter).__module__, end.split, end.task_index)
        if key not in self._specs:
            if adapter.pinned.pinned_spec(end.split, end.task_index) is None and client.running() is None:
                return None  # the runtime's loop has stopped (exit): no request can be made

            try:
                self._specs[key] = runner.task_spec(end.split, end.task_index)
            except Exception:  # noqa: BLE001 - the task's spec is not essential to its record
                self._specs[key] = None
        return self._specs[key]

    # -- flushing and closing (any thread) -----------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most `timeout`) until every record so far is written (and, with `upload`, sent or counted);
        whether every one was written (and sent): False once one was dropped, failed to upload, or the writer
        stopped."""
        thread, deadline = self._thread, time.monotonic() + timeout
        if thread is not None and thread.is_alive():
            done = threading.Event()
            try:
                self._queue.put(done, timeout=timeout)
            except queue.Full:
                return False
            while not done.wait(min(0.1, max(0.0, deadline - time.monotonic()))):  # or the writer is gone
                if not thread.is_alive():
                    break
                if time.monotonic() >= deadline:
                    return False
        if self.stopped is not None:  # records put while the writer was stopping
            self._lost(self._waiting())
        flushed = [sink.flush(timeout) for sink in self.sinks if sink is not self.file]  # each, none skipped
        return self.stopped is None and self.dropped == 0 and all(flushed)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, stop listening, close the file (and the upload, waiting at most `timeout`); one
        line when a record was not written or not uploaded."""
        if self.closed:
            return
        self.flush(timeout)
        self.closed = True
        self._traces.close()
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        else:
            self.file.close(timeout)
        for sink in self.sinks:
            if sink is not self.file:
                sink.close(timeout)
        self._say_lost()

    def retire(self) -> None:
        """Its owner is gone (a `Trajectories` callback, with its trainer): stop listening at once, and let the writer
        end once it has written what is queued, without waiting for it (a finalizer's call: any thread, never
        blocking). Alive, its writer's thread would keep it listening for ever, and a later run's episodes that never
        end (a trainer that raised) would keep their adapters, and their sessions, open."""
        if self.closed:
            return
        self.closed = True
        self._traces.close()
        if self._thread is not None and self._thread.is_alive():
            threading.Thread(target=self._queue.put, args=(None,), daemon=True).start()  # a full queue: not here

    def _say_lost(self) -> None:
        """The run's end: how many records were not written (or reached no sink), in one line, when any was not."""
        if not self.dropped and not any(sink.unsent() for sink in self.sinks):
            return
        parts = [f"{self.dropped} of {self.written + self.dropped} not written to {self.path}"]
        parts += [said for sink in self.sinks if (said := sink.said()) is not None]
        if not self.quiet:
            log.warning("orsgen: trajectory records of this run: %s", "; ".join(parts))

    def variable(self) -> str:
        """What `ORSGEN_TRAJECTORIES` holds so that a process this one starts (AsyncGRPOTrainer's rollout worker)
        records into the same directory with the same settings."""
        return json.dumps({"dir": str(self.directory), "max_result_chars": self.max_result_chars,
                           "upload": self.upload, "run": self.run, "owner": self._owner})


def _env_rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _flush_at_exit(ref: weakref.ref[Recorder], close: bool = True) -> None:
    recorder = ref()
    if recorder is not None and not recorder.closed:
        recorder.close(timeout=5.0) if close else recorder.flush(timeout=5.0)


def adopt(recorder: Recorder) -> None:
    """`recorder` is this process's (a `Trajectories` callback's) for as long as it lives: `from_environment` gives it,
    and a process this one starts (AsyncGRPOTrainer's rollout worker) records with its settings (ORSGEN_TRAJECTORIES).
    Held weakly: its callback (its trainer) owns it, and once that is gone ORSGEN_TRAJECTORIES is as it was, so a later
    trainer without the callback records nothing and no listener keeps that run's adapters alive."""
    made: dict[str, Any] = STATE.part("recorders", dict)
    value = recorder.variable()
    with STATE.lock:
        adopted: set[str] = made.setdefault(ADOPTED_VALUES, set())
        previous = os.environ.get(VARIABLE)
        made[ADOPTED] = weakref.ref(recorder)
        adopted.add(value)
        os.environ[VARIABLE] = value
    weakref.finalize(recorder, _unadopted, value, None if previous in adopted else previous)


def _unadopted(value: str, previous: str | None) -> None:
    with STATE.lock:
        if os.environ.get(VARIABLE) != value:  # set again since: not this recorder's to undo
            return
        if previous is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = previous


def asked() -> dict[str, Any] | None:
    """What `ORSGEN_TRAJECTORIES` asks for (None: nothing); ValueError, one line, for a value that is not a directory
    or a recorder's JSON (checked at import: a bad value stops the process before it trains)."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        return None
    try:
        given = json.loads(value) if value.startswith("{") else {"dir": value}
        return {"directory": given["dir"], "upload": bool(given.get("upload")), "run": given.get("run"),
                "max_result_chars": given.get("max_result_chars", MAX_RESULT_CHARS), "owner": given.get("owner")}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{VARIABLE}={value!r}: a directory to write trajectory records to ({exc})") from None


def from_environment() -> Recorder | None:
    """The recorder `ORSGEN_TRAJECTORIES` asks for in this process (made once, by the first adapter or callback that
    needs it, and kept by process.STATE; None when it is unset)."""
    made: dict[str, Any] = STATE.part("recorders", dict)
    adopted = made.get(ADOPTED)
    if adopted is not None and (found := adopted()) is not None and not found.closed:
        return cast(Recorder, found)
    if VARIABLE in made:
        return cast(Recorder, made[VARIABLE])
    given = asked()
    if given is None or os.environ.get(VARIABLE) in made.get(ADOPTED_VALUES, ()):
        return None  # (or what a callback of this process set, its recorder retired: no second one made from it)
    with STATE.lock:
        if VARIABLE not in made:
            directory = given.pop("directory")
            try:
                made[VARIABLE] = Recorder(directory, **given)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{VARIABLE}={os.environ.get(VARIABLE)!r}: a directory to write trajectory records "
                                 f"to ({exc})") from None
    return cast(Recorder, made[VARIABLE])
