"""Episodes to the OpenReward runs page, through the openreward SDK's public rollout API (`RolloutAPI`, `Rollout`,
`RunInfo`), in the background.

`Uploader.put(record)` takes an `orsgen.trajectory/1` record from any thread and only queues it (bounded: a full
queue drops and counts). Sender threads of the uploader's own do all SDK work: the import (4-5 s), one
`RolloutAPI`, and per episode `create(...)` (which blocks: it fetches the environment's id and sends the start,
without a timeout) and one `log(...)` per message, the reward and `is_finished` on the last. The SDK batches the
messages itself and sends them from its own thread.

A failing server never reaches the trainer. A start that fails (refused, unreachable, a 5xx after the SDK's
retries) is counted in `failed` and logged once on the `orsgen` logger; the next episodes wait in the queue for a
pause (15 s, doubling to 5 min) and one episode then tries again, so a dead server costs one try per pause, not one
per episode. `close(timeout)` tries once more at once and sends what is queued, at most `timeout` seconds (a failed
try: what waits is counted failed), then counts what is left as dropped; `flush(timeout)` waits the same way and
leaves the uploader open. `sent` counts the starts the server took: the SDK sends the messages later and reports no
failure of theirs.

Close the uploader before the interpreter exits. At exit the SDK's own hook stops its loop (a start sent after it
would wait for ever) and aiohttp can no longer resolve a host name; the uploader's exit step (process.py: "close
uploads", the runtime's exit running before the SDK's) sends what is queued (at most 5 s) and closes, so a `close()`
after it returns at once.
The API key, should some record's text hold it, is sent as "[secret]".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import math
import threading
import time
from collections import deque
from typing import Any

from orsgen.runtime import client, jsontext
from orsgen.runtime.process import STATE

SENDERS = 4  # episodes started at once: each start is one or two blocking round trips to the runs page
PAUSE = 15.0  # seconds to wait after a failed start before the next try; doubles up to PAUSE_MAX
PAUSE_MAX = 300.0
MAX_QUEUED = 1000
EXIT_TIMEOUT = 5.0  # close() at interpreter exit, if nobody closed the uploader before
DEFAULTS = {"framework": "trl", "rl_algorithm": "grpo"}



class Uploader:
    """Sends each ended episode's record to the OpenReward runs page as one rollout of the run `run_name`.

    `run_info`: fields of the SDK's `RunInfo` (`model_name`, `framework_version`, `run_type`, ...); `framework`
    is "trl" and `rl_algorithm` "grpo" unless given. The SDK reads `OPENREWARD_API_KEY` and `OPENREWARD_API_URL`
    when the first episode is sent. `sent`, `dropped` and `failed` count episodes."""

    def __init__(self, run_name: str, run_info: dict[str, Any] | None = None, *, max_queued: int = MAX_QUEUED) -> None:
        self.run_name = str(run_name)
        self.run_info = {**DEFAULTS, **(run_info or {})}
        self.max_queued = max_queued
        self.sent = 0  # the server took the episode's start; its messages went to the SDK's send loop
        self.dropped = 0  # never tried: the queue was full, put after close(), or close() ran out of time
        self.failed = 0  # its start refused or unreachable (or waiting when close() found the server failing), or
        # the record could not be read
        self.where: str | None = None  # the API's URL, once the SDK has read it
        self._key = f"upload {next(STATE.part('uploads', itertools.count))}"  # client.once: one warning per uploader
        self._cond = threading.Condition()
        self._queue: deque[dict[str, Any]] = deque()
        self._threads: list[threading.Thread] = []
        self._api: Any = None  # the SDK's RolloutAPI, made by the first sender
        self._connecting = threading.Lock()
        self._broken: str | None = None  # why no RolloutAPI could be made
        self._api_key = ""
        self._healthy = False  # a start went through since the last failure: every sender may send
        self._probing = False  # while not healthy, one episode at a time tries
        self._paused_until = 0.0
        self._pause = PAUSE
        self._busy = 0  # episodes being sent now
        self._closed = False  # no more puts
        self._deadline = math.inf
        self._stopped = False  # counts are final: close() finished or gave up
        self._finished = threading.Event()
        self.stopped: str | None = None  # why a sender thread stopped, if one did (flush() is then False)

    # -- the caller's side: never blocks on the network, never raises ------------------------------------------------

    def put(self, record: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):  # an upload must never stop training
            with self._cond:
                if self._closed or len(self._queue) >= self.max_queued:
                    self.dropped += 1
                    full = not self._closed
                else:
                    self._queue.append(record)
                    full = False
                    if not self._threads:
                        self._start()
                    self._cond.notify()
            if full:
                self._warn("orsgen: the upload queue is full (%d episodes waiting for the OpenReward runs page): "
                           "dropping episodes; training goes on", self.max_queued)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait at most `timeout` seconds until every episode put so far is sent or counted (the SDK sends their
        messages within a second); whether they all were. The uploader stays open. While a failed start's pause
        lasts, False at once: what waits goes after the pause; once a sender thread stopped, False."""

        def settled() -> bool:
            paused = time.monotonic() < self._paused_until
            return self._stopped or self._broken is not None or self._busy == 0 and (not self._queue or paused)

        with contextlib.suppress(Exception), self._cond:
            return self._cond.wait_for(settled, timeout) and not self._queue and self.stopped is None
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, waiting at most `timeout` seconds; then count what is left as dropped."""
        with contextlib.suppress(Exception):
            with self._cond:
                if self._stopped:
                    return
                self._closed = True
                self._deadline = time.monotonic() + timeout
                if not self._threads:
                    self._stopped = True
                    return
                self._paused_until = 0.0  # one last try now; if it fails, what waits is counted failed
                self._cond.notify_all()
            if self._finished.wait(timeout):
                return
            with self._cond:
                if self._stopped:
                    return
                self._stopped = True
                left = len(self._queue) + self._busy
                self._queue.clear()
                self.dropped += left
                if self._api is not None:
                    self._api.shutdown_timeout = 1.0  # the SDK's exit hook then waits 1 s, not 10
            self._warn("orsgen: the upload to the OpenReward runs page (%s) gave up after %gs: %d episodes not sent",
                       self.where or "not reached", timeout, left)

    # -- the senders ---------------------------------------------------------------------------------------------------

    def _start(self) -> None:
        for n in range(SENDERS):
            thread = threading.Thread(target=self._sender, name=f"orsgen-upload-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _sender(self) -> None:
        holding = False
        try:
            while True:
                with self._cond:
                    record, probe = self._next()
                    if record is None:
                        if probe:
                            break  # this thread finishes the uploader
                        return
                    self._busy += 1
                    holding = True
                    if probe:
                        self._probing = True
                ok = self._send(record)
                with self._cond:
                    self._busy -= 1
                    holding = False
                    if probe:
                        self._probing = False
                    if not self._stopped:
                        self._count(ok)
                    self._cond.notify_all()
            self._finish()
        except BaseException as exc:  # noqa: BLE001 - a daemon thread has nobody to raise to: counted and said
            self._sender_stopped(exc, holding)

    def _sender_stopped(self, exc: BaseException, holding: bool) -> None:
        """A sender thread stopped on `exc`: the episode it held is counted failed; once none is left, so is what
        waits, and the uploader stops (later puts are dropped), so nothing waits for a thread that is gone."""
        with self._cond:
            self.stopped = self.stopped or client.describe(exc)
            self._threads = [t for t in self._threads if t is not threading.current_thread()]
            if holding:
                self._busy -= 1
                self._probing = False
                self.failed += not self._stopped
            last = not self._threads and not self._stopped
            if last:
                self.failed += len(self._queue)
                self._queue.clear()
                self._stopped = self._closed = True
                self._deadline = min(self._deadline, time.monotonic() + EXIT_TIMEOUT)
            self._warn("orsgen: an upload thread stopped (%s): its episode is counted as failed%s; training goes on",
                       client.describe(exc), ", and so is every later one" if last else "")  # before flush() returns
            self._cond.notify_all()
        if last:
            self._finish()

    def _next(self) -> tuple[dict[str, Any] | None, bool]:
        """Under the lock: the next record to send and whether it is a probe (the only one in flight until a start
        goes through); (None, True) for the one thread that is to finish the uploader, (None, False) to stop."""
        while True:
            if self._stopped:
                return None, False
            now = time.monotonic()
            if self._queue and self._broken is not None:
                self.failed += len(self._queue)
                self._queue.clear()
            if self._queue and now >= self._paused_until and (self._healthy or not self._probing):
                return self._queue.popleft(), not self._healthy
            if self._closed and not self._queue and self._busy == 0:
                self._stopped = True
                return None, True
            wait = self._paused_until - now if self._queue and now < self._paused_until else None
            self._cond.wait(wait)

    def _count(self, ok: bool | None) -> None:
        """Under the lock: ok True is sent, False a failed start (pause, then one try), None a record that could not
        be sent whatever the server (failed, no pause)."""
        if ok:
            self.sent += 1
            self._healthy = True
            self._pause = PAUSE
            return
        self.failed += 1
        if ok is None:
            return
        self._healthy = False
        self._paused_until = time.monotonic() + self._pause
        self._pause = min(self._pause * 2, PAUSE_MAX)
        then = ("the episodes still waiting are counted as failed" if self._closed else
                f"later episodes wait {self._paused_until - time.monotonic():.0f}s for the next try")
        self._warn("orsgen: an episode's upload to the OpenReward runs page (%s) failed (the openreward SDK's own "
                   "warning says why): %s; training goes on, failures are counted", self.where, then)
        if self._closed:
            self._fail_queue_if_paused()

    def _fail_queue_if_paused(self) -> None:
        """Under the lock, closing: while the server is failing, what waits is counted failed at once, not waited for."""
        if self._queue and time.monotonic() < self._paused_until:
            self.failed += len(self._queue)
            self._queue.clear()

    def _finish(self) -> None:
        try:
            if self._api is not None:
                self._api.shutdown_timeout = max(0.5, self._deadline - time.monotonic())
                self._api.close()  # the SDK sends the messages it still holds
        finally:
            self._finished.set()

    def _warn(self, message: str, *args: Any) -> None:
        client.once(self._key, logging.WARNING, message, *args)

    # -- one episode ---------------------------------------------------------------------------------------------------

    def _send(self, record: dict[str, Any]) -> bool | None:
        """One episode: True once the server took its start, False if the start failed, None if the record could
        not be sent at all."""
        with self._connecting:
            if self._api is None and (self._broken is not None or not self._connect()):
                return None
        try:
            from openreward import AssistantMessage, RolloutInfo, SystemMessage, ToolCall, ToolResult, UserMessage

            kinds = {"user_message": UserMessage, "assistant_message": AssistantMessage,
                     "system_message": SystemMessage, "tool_call": ToolCall, "tool_result": ToolResult}
            turns = plain(messages(record), self._api_key)
            start = plain(rollout_fields(record), self._api_key)
            info = plain(rollout_info(record), self._api_key)
            reward, finished = record_reward(record), bool(record.get("finished"))
            rollout = self._api.create(self.run_name, **start)  # blocks: the start is sent here
            for n, turn in enumerate(turns):
                last = n == len(turns) - 1
                message = kinds[turn["type"]](**{k: v for k, v in turn.items() if k not in ("type", "metadata")})
                rollout.log(message, reward=reward if last else None, is_finished=finished if last else False,
                            metadata=turn.get("metadata"), rollout_info=RolloutInfo(**info) if last and info else None)
        except Exception as exc:  # noqa: BLE001 - a malformed record: counted, never raised
            client.once(f"{self._key} record", logging.WARNING, "orsgen: an episode record could not be uploaded "
                        "(%s); it is counted as failed", client.describe(exc))
            return None
        return bool(rollout.logged_messages)  # the SDK logs nothing of a rollout whose start failed

    def _connect(self) -> bool:
        """The SDK's rollout API, made on a sender thread (the first episode's). False: it cannot be (logged)."""
        try:
            from openreward import OpenReward, RunInfo

            known = {f.name for f in dataclasses.fields(RunInfo)}
            unknown = sorted(set(self.run_info) - known)
            if unknown:
                client.once(f"{self._key} run info", logging.WARNING, "orsgen: the upload leaves out %s: not fields "
                            "of the openreward SDK's RunInfo (%s)", ", ".join(unknown), ", ".join(sorted(known)))
            fields = {k: v for k, v in self.run_info.items() if k in known}
            fields["model_name"] = str(fields.get("model_name") or "unknown")
            sdk = OpenReward(run_info=RunInfo(**fields))  # reads OPENREWARD_API_KEY, OPENREWARD_API_URL
            self._api_key = sdk.api_key or ""
            self.where = sdk.base_url
            self._api = sdk.rollout
            # Run before the SDK's own exit hook (which stops its loop: a start sent then would wait for ever): the
            # runtime's exit is registered again after it. Exiting, aiohttp can no longer resolve a host name: close
            # the uploader before exit.
            STATE.after_sdk()
            STATE.at_exit("close uploads", functools.partial(self.close, EXIT_TIMEOUT))
            return True
        except Exception as exc:  # noqa: BLE001
            self._broken = client.describe(exc)
            self._warn("orsgen: the upload to the OpenReward runs page cannot start (%s): its episodes are counted as "
                       "failed; training goes on", self._broken)
            return False


class UploadSink:
    """The records' sink (sinks.py) to the OpenReward runs page: each record put on an `Uploader`, made at the first
    record (when the trainer's run name and RunInfo are known)."""

    def __init__(self, recorder: Any) -> None:
        self._recorder = recorder
        self.uploader: Uploader | None = None

    @classmethod
    def made(cls, recorder: Any) -> UploadSink | None:
        return cls(recorder) if recorder.upload else None

    def write(self, records: list[dict[str, Any]]) -> None:
        if self.uploader is None:
            self.uploader = Uploader(run_name=self._recorder.run or "orsgen", run_info=self._recorder.run_info)
        for record in records:
            self.uploader.put(record)

    def flush(self, timeout: float) -> bool:
        up = self.uploader
        return up is None or up.flush(timeout) and up.failed + up.dropped == 0

    def close(self, timeout: float) -> None:
        if self.uploader is not None:
            self.uploader.close(timeout=timeout)

    def unsent(self) -> int:
        return 0 if self.uploader is None else self.uploader.failed + self.uploader.dropped

    def said(self) -> str | None:
        up, unsent = self.uploader, self.unsent()
        return None if up is None else (f"{unsent} of {up.sent + unsent} not uploaded to the OpenReward runs page "
                                        f"({up.failed} failed, {up.dropped} dropped)")


# -- records to the SDK's messages: plain data, no SDK ------------------------------------------------------------------


def record_reward(record: dict[str, Any]) -> float | None:
    reward = record.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return None
    return float(reward)


def rollout_fields(record: dict[str, Any]) -> dict[str, Any]:
    """`RolloutAPI.create`'s keywords for a record (the run name aside)."""
    meta = {k: record.get(k) for k in ("task_index", "stream", "step", "rank", "scored", "unscored_reason",
                                       "start_error", "adapter", "seconds", "ended_at")}
    return {"environment": record.get("environment"), "split": record.get("split"),
            "task_spec": record.get("task_spec"), "metadata": meta}


def rollout_info(record: dict[str, Any]) -> dict[str, Any] | None:
    """`RolloutInfo`'s fields (it needs a task index), sent with the last message."""
    index = record.get("task_index")
    if not isinstance(index, int):
        return None
    seconds = (record.get("seconds") or {}).get("episode")
    duration = int(seconds * 1000) if isinstance(seconds, (int, float)) and math.isfinite(seconds) else None
    step = record.get("step")
    return {"task_index": index, "current_step": step if isinstance(step, int) else None, "duration_ms": duration}


def text(content: Any) -> str:
    """A message's content as text: a list of parts (OpenAI's multimodal form) joined, a part that is not text named."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(f"[{part.get('type', 'part') if isinstance(part, dict) else type(part).__name__}]")
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def arguments(value: Any) -> str:
    if isinstance(value, str):
        return value or "{}"
    return json.dumps(value if value is not None else {}, ensure_ascii=False, default=str)


def messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The episode as the SDK's message kinds, in order: the prompt turns, then the model's turns and the tool
    results (from TRL's completion, or from the record's tool calls when TRL's text was not seen). Empty text turns
    are left out, as the SDK's own OpenAI reader does; an episode with none gets one line saying so."""
    out: list[dict[str, Any]] = []
    prompt = record.get("prompt")
    out += _turns([{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt or [], out)
    completion = record.get("completion")
    if isinstance(completion, str):
        out += _turns([{"role": "assistant", "content": completion}], out)
    elif isinstance(completion, list):
        out += _turns(completion, out)
    else:
        for n, call in enumerate(record.get("tool_calls") or []):
            call_id = f"call_{n}"
            out.append({"type": "tool_call", "name": str(call.get("name") or "unnamed"),
                        "content": arguments(call.get("arguments")), "call_id": call_id})
            error = call.get("error")
            result = text(call.get("result")) if call.get("result") is not None else str(error or "")
            out.append({"type": "tool_result", "content": result, "call_id": call_id,
                        "metadata": {"error": error, "seconds": call.get("seconds"), "reward": call.get("reward"),
                                     "finished": call.get("finished")}})
    if not out:
        why = record.get("start_error")
        out.append({"type": "system_message", "content": f"orsgen: the episode did not start: {why}" if why
                    else "orsgen: no turns of this episode were recorded"})
    return out


def _turns(turns: list[Any], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: deque[str] = deque()  # ids of the tool calls whose results have not come yet, in order
    made = sum(1 for m in before if m["type"] == "tool_call")  # TRL's calls carry no ids: call_0, call_1, ...
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        role = turn.get("role")
        body = text(turn.get("content"))
        if role == "tool":
            if not pending:  # a result with no call before it: its own id
                pending.append(f"call_{made}")
                made += 1
            out.append({"type": "tool_result", "content": body, "call_id": pending.popleft()})
            continue
        kind = {"user": "user_message", "assistant": "assistant_message", "system": "system_message"}.get(str(role))
        if kind is None:
            kind, body = "system_message", f"[{role}] {body}"
        if body.strip():
            out.append({"type": kind, "content": body})
        if role != "assistant":
            continue
        for call in turn.get("tool_calls") or []:
            call = call if isinstance(call, dict) else {}
            function = call.get("function") or {}
            call_id = str(call.get("id") or f"call_{made}")
            made += 1
            pending.append(call_id)
            out.append({"type": "tool_call", "name": str(function.get("name") or "unnamed"),
                        "content": arguments(function.get("arguments")), "call_id": call_id})
    return out


def plain(value: Any, secret: str = "") -> Any:
    """JSON-plain data the SDK's send loop can always encode (an object it could not would stop its thread): dicts
    with string keys, lists, strings (a lone surrogate, which its strict UTF-8 cannot take, as its `\\uXXXX` text),
    finite numbers, booleans, None; anything else as its text. The API key, if some text holds it, is replaced."""
    if isinstance(value, str):
        value = jsontext.escaped(value)
        return value.replace(secret, "[secret]") if len(secret) >= 8 and secret in value else value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {plain(str(k), secret): plain(v, secret) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, secret) for v in value]
    return plain(str(value), secret)
