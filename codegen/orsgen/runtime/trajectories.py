"""Trajectory records: one JSON object per ended episode (the schema below, `SCHEMA`), appended as a line to a JSONL
file per process, off the trainer's thread. The training callback (`Trajectories`, recording.py) and the evaluation
command write the same records; `build` is the one place a record is made.

A record (schema "orsgen.trajectory/1"; docs/reference.md, "Trajectory records", has the table):

    schema, run, step, policy_version, rank, stream, environment, adapter, split, task_index, task_spec, session,
    rollout, model, prompt, completion, tool_calls[{name, arguments, result, error, seconds, reward, finished, cut, truncated,
    truncated_unit, images_left_out, timed_out}],
    reward, scored, unscored_reason, finished, start_error, error, usage, seconds{reset, tools, model, episode},
    ended_at

`orsgen eval` fills what only it knows: `rollout` (the episode's number among its task's), `usage` (the tokens the
endpoint reported), `seconds.model`, and `error` with `unscored_reason` "endpoint_error" when the model's endpoint
failed the episode; a trainer leaves them null. `policy_version` is AsyncGRPOTrainer's: in its rollout worker, the
version of the policy the worker generated with when the episode started (the trainer's weight-sync count); null
elsewhere (under GRPOTrainer, `step`'s policy generated it).

What a record holds is redacted before it leaves the process: every API key and secret value an adapter sends is
replaced by "[secret]", wherever it appears (a tool that echoes its environment included). A tool result longer than
`max_result_chars` keeps its head and tail around a marker that says how much was cut; `cut` counts it. What the
tool's budget cut before the model read the result is another thing: `truncated` (and its unit), `images_left_out`.

The writer never raises into training and never blocks it: records wait in a bounded queue (a full queue drops the
record and counts it), the file is opened for appending, each batch of whole lines goes in one write, and a line
left cut by a killed process is removed when the file is next opened, so every line of the file is a record.

Nothing is lost silently. A record is written whatever it holds (a model's lone surrogate as its `\\uXXXX` escape,
jsontext.py), or counted in `dropped` with one warning line; a writer that stopped, for whatever reason, is seen:
`flush()` is False, what it could not write is counted, and `close()` (at exit too) says in one line how many
records were not written or uploaded.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import json
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orsgen.runtime import client, hooks, jsontext, trl

log = logging.getLogger("orsgen")

SCHEMA = "orsgen.trajectory/1"
VARIABLE = "ORSGEN_TRAJECTORIES"  # a directory (or the JSON a `Recorder` writes): every process records there
MAX_RESULT_CHARS = 20_000
MAX_QUEUED = 1_000  # records waiting for the writer; more are dropped (and counted), never held
SECRET = "[secret]"
ENDPOINT_ERROR = "endpoint_error"  # the unscored reason of an episode the model's endpoint failed (orsgen eval)


def cut(text: str, limit: int | None) -> tuple[str, int]:
    """`text` within `limit` characters around a marker that says what was cut, and how many were."""
    if limit is None or len(text) <= limit:
        return text, 0
    dropped = len(text) - limit
    head = limit - limit // 2
    marker = f"\n[orsgen: {dropped} of {len(text)} characters cut from this tool result]\n"
    return text[:head] + marker + text[len(text) - limit // 2:], dropped


def _plain(value: Any) -> Any:
    """What JSON cannot hold, as a short description (images are described, not embedded)."""
    size = getattr(value, "size", None)
    if hasattr(value, "mode") and isinstance(size, tuple):  # a PIL image
        return f"[image {size[0]}x{size[1]}]"
    if isinstance(value, bytes | bytearray):
        return f"[{len(value)} bytes]"
    return repr(value)


def _cut_result(value: Any, limit: int | None) -> tuple[Any, int]:
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, list):  # content parts: each text part capped
        parts, total = [], 0
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                text, n = cut(part["text"], limit)
                part, total = {**part, "text": text}, total + n
            parts.append(part)
        return parts, total
    return value, 0


def _turns(turns: Any, limit: int | None) -> Any:
    """TRL's turns with the content of its tool turns capped as tool results are."""
    if not isinstance(turns, list):
        return turns
    return [{**turn, "content": _cut_result(turn.get("content"), limit)[0]}
            if isinstance(turn, dict) and turn.get("role") == "tool" else turn for turn in turns]


def _redact(value: Any, secrets: Iterable[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, SECRET)
        return value
    if isinstance(value, dict):
        return {_redact(str(k), secrets): _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, secrets) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return _redact(_plain(value), secrets)


def build(start: hooks.EpisodeStart[Any] | None, calls: list[hooks.ToolCall[Any]], end: hooks.EpisodeEnd[Any], *,
          run: str | None = None, step: int | None = None, rank: int = 0, environment: str | None = None,
          task_spec: Any = None, session: str | None = None, prompt: Any = None, completion: Any = None,
          secrets: Iterable[str] = (), max_result_chars: int | None = MAX_RESULT_CHARS,
          ended_at: float | None = None, model: str | None = None, rollout: int | None = None,
          usage: dict[str, int] | None = None, model_seconds: float | None = None,
          error: str | None = None, policy_version: int | None = None) -> dict[str, Any]:
    """One episode's record from its hook records (`prompt`/`completion`: the turns, when not the end's own; `error`:
    what failed the episode outside the environment, which makes it unscored "endpoint_error"). Secrets are replaced
    first, so a cut never leaves part of one."""
    stamp = datetime.datetime.now(datetime.UTC) if ended_at is None else datetime.datetime.fromtimestamp(
        ended_at, datetime.UTC)
    record = {
        "schema": SCHEMA, "run": run, "step": step, "policy_version": policy_version, "rank": rank,
        "stream": end.stream, "environment": environment,
        "adapter": type(end.adapter).__name__, "split": end.split, "task_index": end.task_index,
        "task_spec": task_spec, "session": session, "rollout": rollout, "model": model,
        "prompt": end.prompt if prompt is None else prompt,
        "completion": end.completion if completion is None else completion,
        "tool_calls": [{"name": call.name, "arguments": call.arguments, "result": call.result, "error": call.error,
                        "seconds": round(call.seconds, 6), "reward": call.reward, "finished": call.finished, "cut": 0,
                        "truncated": call.truncated, "truncated_unit": call.truncated_unit,
                        "images_left_out": call.images_left_out, "timed_out": call.timed_out}
                       for call in calls],
        "reward": None if error else end.reward, "scored": end.scored and not error,
        "unscored_reason": ENDPOINT_ERROR if error else end.reason, "finished": end.finished,
        "start_error": None if start is None else start.error, "error": error, "usage": usage,
        "seconds": {"reset": None if start is None else round(start.seconds, 6),
                    "tools": round(sum(call.seconds for call in calls), 6),
                    "model": None if model_seconds is None else round(model_seconds, 6),
                    "episode": round(end.seconds, 6)},
        "ended_at": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
    }
    record = _redact(record, sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True))
    for call in record["tool_calls"]:
        call["result"], call["cut"] = _cut_result(call["result"], max_result_chars)
    record["prompt"] = _turns(record["prompt"], max_result_chars)
    record["completion"] = _turns(record["completion"], max_result_chars)
    return record  # type: ignore[no-any-return]


class Sink:
    """One JSONL file, appended to in whole lines by one thread; a line a killed process left cut is removed first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def write(self, lines: list[str]) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._repair(self._fd)
        data = "".join(line + "\n" for line in lines).encode()
        before = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:  # a full disk takes part of a write: the whole lines before it stay, nothing of the rest
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, before)
            raise

    def _repair(self, fd: int) -> None:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size == 0:
            return
        at, tail = size, b""
        while at > 0 and b"\n" not in tail:
            at = max(0, at - 65536)
            tail = os.pread(fd, size - at, at)
        keep = at + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        if keep != size:
            log.warning("orsgen: %s ended in a cut line (a process killed mid-write): removed it", self.path)
            os.ftruncate(fd, keep)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Recorder:
    """Records every episode this process runs as a line of `directory`/trajectories-rank{R}.jsonl (R: this
    process's rank; a process other than the one that made the recorder adds its pid, so processes never share a
    file). `attach` tells it the run, step and rank of a trainer; `upload` also sends each record to the OpenReward
    runs page (upload.py). Listens on the hooks until `close()`."""

    def __init__(self, directory: str | os.PathLike[str], *, max_result_chars: int | None = MAX_RESULT_CHARS,
                 upload: bool = False, run: str | None = None, max_queued: int = MAX_QUEUED,
                 owner: int | None = None) -> None:
        if max_result_chars is not None and max_result_chars < 200:
            raise ValueError(f"Trajectories(max_result_chars={max_result_chars!r}): at least 200, or None for no cap")
        self.directory = Path(directory).resolve()
        self.max_result_chars, self.upload, self.run = max_result_chars, upload, run
        self._owner = os.getpid() if owner is None else owner
        self._rank: Callable[[], int] = _env_rank
        self._step: Callable[[], int | None] = lambda: None
        self._run_info: dict[str, Any] = {}
        self._open: dict[Any, tuple[hooks.EpisodeStart[Any] | None, list[hooks.ToolCall[Any]], int | None]] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue(max_queued)
        self._thread: threading.Thread | None = None
        self._sink: Sink | None = None
        self.uploader: Any = None  # upload.Uploader once the first record is sent: its sent, failed, dropped
        self._specs: dict[tuple[str, str, int], Any] = {}
        self.written = self.dropped = 0
        self.stopped: str | None = None  # why the writer's thread stopped before close(), if it did
        self._holding = 0  # records of the batch being written
        self.closed = False
        me = weakref.ref(self)  # the hooks must not keep a finished run's recorder alive

        def listen(event: hooks.Event) -> None:
            def listener(record: Any) -> None:
                recorder = me()
                if recorder is None or recorder.closed:
                    hooks.remove(event, listener)
                else:
                    recorder._seen(event, record)

            hooks.add(event, listener)

        for event in ("episode_start", "tool_call", "episode_end"):
            listen(event)
        # At exit: written while the runtime's loop still runs (a record's task spec may need a request), then closed.
        client.before_exit(functools.partial(_flush_at_exit, me, close=False))
        atexit.register(_flush_at_exit, me)

    @property
    def path(self) -> Path:
        """The file this process writes."""
        rank = self._rank()
        mine = os.getpid() == self._owner
        return self.directory / (f"trajectories-rank{rank}.jsonl" if mine else
                                 f"trajectories-rank{rank}-pid{os.getpid()}.jsonl")

    def attach(self, *, run: str | None, step: Callable[[], int | None], rank: Callable[[], int],
               run_info: dict[str, Any]) -> None:
        """A trainer's run name, step, rank and (for the upload) RunInfo fields."""
        self.run = self.run or run
        self._step, self._rank, self._run_info = step, rank, run_info

    # -- the hooks (the thread that did the work: quick) ---------------------------------------------------------

    def _seen(self, event: str, record: Any) -> None:
        key = record.episode if record.episode is not None else record.adapter
        worker = trl.worker() if event == "episode_start" else None  # AsyncGRPOTrainer's: the policy's version
        with self._lock:
            if event == "episode_start":
                self._open[key] = (record, [], None if worker is None else worker.policy_version())
            elif event == "tool_call":
                self._open.setdefault(key, (None, [], None))[1].append(record)
            else:
                start, calls, version = self._open.pop(key, (None, [], None))
        if event != "episode_end":
            return
        from orsgen.runtime.adapter import secrets_of

        session = getattr(getattr(record.episode, "session", None), "sid", None)  # still open at its end
        self._put((start, calls, record, self._step(), session, secrets_of(record.adapter),
                   datetime.datetime.now(datetime.UTC).timestamp(), version))

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
            self.dropped += 1
            client.once("trajectories-full", logging.WARNING, "orsgen: trajectory records come faster than %s takes "
                        "them: dropping (counted in Recorder.dropped)", self.directory)

    def _lost(self, count: int) -> None:
        """Records the stopped writer will never take: counted, and said once."""
        self.dropped += count
        client.once(f"trajectories-stopped-{id(self)}", logging.WARNING, "orsgen: the trajectory writer of %s stopped "
                    "(%s): later records are dropped (counted in Recorder.dropped); training goes on", self.directory,
                    self.stopped)

    # -- the writer's thread -------------------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while self._batch():
                pass
        except BaseException as exc:  # noqa: BLE001 - whatever stops the writer is seen: flush() is False, what it
            if self.stopped is None:  # held and what waits are counted (a daemon thread has nobody to raise to)
                self._stopping(exc)
        finally:
            if self._sink is not None:
                self._sink.close()

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
            try:
                self._write(records)
            except Exception as exc:  # noqa: BLE001 - not the disk's (those are OSError): never lost unseen either
                self.dropped += self._holding
                client.once(f"trajectories-failed-{id(self)}", logging.WARNING, "orsgen: trajectory records could "
                            "not be written to %s (%s): dropped, counted in Recorder.dropped; training goes on",
                            self.path, client.describe(exc))
            self._holding = 0
        except BaseException as exc:
            self._stopping(exc)
            raise  # to _work, which ends the thread
        finally:
            for done in flushed:  # after `stopped` is set: a flush waiting on one sees it
                done.set()
        return None not in items

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
        start, calls, end, step, session, secrets, ended_at, version = item
        try:
            adapter = end.adapter
            pinned = getattr(adapter, "pinned", None)
            environment = None if pinned is None else (pinned.env or pinned.deployment)
            return build(start, calls, end, run=self.run, step=step, rank=self._rank(), environment=environment,
                         task_spec=self._spec(adapter, end), session=session, secrets=secrets,
                         max_result_chars=self.max_result_chars, ended_at=ended_at,
                         model=self._run_info.get("model_name"), policy_version=version)
        except Exception:
            self.dropped += 1
            log.warning("orsgen: a trajectory record could not be built (dropped)", exc_info=True)
            return None

    def _spec(self, adapter: Any, end: hooks.EpisodeEnd[Any]) -> Any:
        if end.task_index is None:
            return None
        key = (type(adapter).__module__, end.split, end.task_index)
        if key not in self._specs:
            from orsgen.runtime.adapter import task_spec

            if adapter.pinned.pinned_spec(end.split, end.task_index) is None and client.running() is None:
                return None  # the runtime's loop has stopped (exit): no request can be made

            try:
                self._specs[key] = task_spec(adapter, end.split, end.task_index)
            except Exception:  # noqa: BLE001 - the task's spec is not essential to its record
                self._specs[key] = None
        return self._specs[key]

    def _write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        lines = []
        for record in records:
            try:
                lines.append(jsontext.dumps(record, default=_plain))
            except (ValueError, TypeError, RecursionError) as exc:  # a cycle, a key JSON cannot hold
                self.dropped += 1
                client.once(f"trajectories-json-{id(self)}", logging.WARNING, "orsgen: a trajectory record cannot be "
                            "written as JSON (%s): dropped, counted in Recorder.dropped", client.describe(exc))
        try:
            if lines:
                if self._sink is None:
                    self._sink = Sink(self.path)
                self._sink.write(lines)
                self.written += len(lines)
        except OSError as exc:
            self.dropped += len(lines)
            client.once(f"trajectories-write-{self.directory}", logging.WARNING,
                        "orsgen: trajectory records are not being written to %s: %s (dropped, counted in "
                        "Recorder.dropped; training goes on)", self.path, exc.strerror or exc)
        self._holding = 0  # each counted, written or dropped
        if self.upload:
            self._send(records)

    def _send(self, records: list[dict[str, Any]]) -> None:
        if self.uploader is None:
            from orsgen.runtime.upload import Uploader

            self.uploader = Uploader(run_name=self.run or "orsgen", run_info=self._run_info)
        for record in records:
            self.uploader.put(record)

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
        up = self.uploader
        sent = up is None or up.flush(timeout) and up.failed + up.dropped == 0
        return self.stopped is None and self.dropped == 0 and sent

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, stop listening, close the file (and the upload, waiting at most `timeout`); one
        line when a record was not written or not uploaded."""
        if self.closed:
            return
        self.flush(timeout)
        self.closed = True
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)
        elif self._sink is not None:
            self._sink.close()
        if self.uploader is not None:
            self.uploader.close(timeout=timeout)
        self._say_lost()

    def _say_lost(self) -> None:
        """The run's end: how many records were not written (or not uploaded), in one line, when any was not."""
        up = self.uploader
        unsent = 0 if up is None else up.failed + up.dropped
        if not self.dropped and not unsent:
            return
        parts = [f"{self.dropped} of {self.written + self.dropped} not written to {self.path}"]
        if up is not None:
            parts.append(f"{unsent} of {up.sent + unsent} not uploaded to the OpenReward runs page ({up.failed} "
                         f"failed, {up.dropped} dropped)")
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


_from_environment: Recorder | None = None


def from_environment() -> Recorder | None:
    """The recorder `ORSGEN_TRAJECTORIES` asks for in this process (made once; None when it is unset)."""
    global _from_environment
    value = os.environ.get(VARIABLE, "").strip()
    if not value or _from_environment is not None:
        return _from_environment
    try:
        given: dict[str, Any] = json.loads(value) if value.startswith("{") else {"dir": value}
        _from_environment = Recorder(given["dir"], max_result_chars=given.get("max_result_chars", MAX_RESULT_CHARS),
                                     upload=bool(given.get("upload")), run=given.get("run"), owner=given.get("owner"))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{VARIABLE}={value!r}: a directory to write trajectory records to ({exc})") from None
    return _from_environment
