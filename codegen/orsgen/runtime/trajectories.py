"""Trajectory records: one JSON object per ended episode (the schema below, `SCHEMA`). `build` is the one place a record
is made, from an episode's hook records, which `Traces` sorts into one `Trace` per episode as they come; the recorder
(recorder.py) hands each record to its sinks (sinks.py: a JSONL file per process, the OpenReward upload) off the
trainer's thread. The training callback (`Trajectories`, recording.py) and the evaluation command record alike.

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
"""

from __future__ import annotations

import datetime
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from orsgen.runtime import hooks, trl

SCHEMA = "orsgen.trajectory/1"
MAX_RESULT_CHARS = 20_000
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


def describe(value: Any) -> Any:
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
    return _redact(describe(value), secrets)


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




@dataclass
class Trace:
    """One episode's hook records as they came, and what its end said of it: what its record is built from."""

    start: hooks.EpisodeStart[Any] | None = None
    calls: list[hooks.ToolCall[Any]] = field(default_factory=list)
    end: hooks.EpisodeEnd[Any] | None = None
    session: str | None = None  # the ORS session id, read at the end (its session is still open then)
    policy_version: int | None = None  # AsyncGRPOTrainer's worker's, when the episode started
    ended_at: float | None = None  # a POSIX time

    def record(self, **given: Any) -> dict[str, Any]:
        """The episode's record (`build`'s keywords: what the recorder or `orsgen eval` knows besides)."""
        assert self.end is not None, "an episode's record is built once it has ended"
        return build(self.start, self.calls, self.end, session=self.session, policy_version=self.policy_version,
                     ended_at=self.ended_at, **given)


class Traces:
    """The hook records of every episode, sorted into one `Trace` per episode (the record's `episode`, else its
    adapter) as they come, on the thread that did the work. `ended(trace)` (a bound method, held weakly: once its
    owner is gone, this stops listening) runs at each episode's end, on that thread; without it, ended traces are kept
    until taken (`take`). Listens until `close()` or until it is collected."""

    EVENTS: tuple[hooks.Event, ...] = ("episode_start", "tool_call", "episode_end")

    def __init__(self, ended: Callable[[Trace], None] | None = None) -> None:
        self._ended = None if ended is None else weakref.WeakMethod(ended)  # type: ignore[arg-type]
        self._kept: dict[Hashable, Trace] = {}
        self._open: dict[Hashable, Trace] = {}
        self._lock = threading.Lock()
        self._listeners: list[tuple[hooks.Event, Callable[[Any], None]]] = []
        me = weakref.ref(self)

        def listen(event: hooks.Event) -> None:
            def listener(record: Any) -> None:
                traces = me()
                if traces is None or traces._ended is not None and traces._ended() is None:
                    hooks.remove(event, listener)
                else:
                    traces._seen(event, record)

            self._listeners.append((event, listener))
            hooks.add(event, listener)

        for event in self.EVENTS:
            listen(event)

    def close(self) -> None:
        """Stop listening, and let go of every trace (an open one holds its episode, and so its adapter)."""
        for event, listener in self._listeners:
            hooks.remove(event, listener)
        with self._lock:
            self._open.clear()
            self._kept.clear()

    def _seen(self, event: str, record: Any) -> None:
        key = record.episode if record.episode is not None else record.adapter
        if event == "episode_start":
            worker = trl.worker()  # AsyncGRPOTrainer's: the policy's version
            with self._lock:
                self._open[key] = Trace(record, policy_version=None if worker is None else worker.policy_version())
            return
        with self._lock:
            if event == "tool_call":
                self._open.setdefault(key, Trace()).calls.append(record)
                return
            trace = self._open.pop(key, Trace())
        trace.end = record
        trace.session = getattr(getattr(record.episode, "session", None), "sid", None)  # still open at its end
        trace.ended_at = datetime.datetime.now(datetime.UTC).timestamp()
        if self._ended is None:
            with self._lock:
                self._kept[record.episode] = trace
            return
        ended = self._ended()
        if ended is not None:
            ended(trace)

    def take(self, episode: Any) -> Trace | None:
        """The trace of `episode` once it has ended (kept: no `ended`), given once."""
        with self._lock:
            return self._kept.pop(episode, None)
