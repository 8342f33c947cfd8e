"""A scripted stand-in for an OpenAI-compatible `/v1/chat/completions` endpoint, on 127.0.0.1 only, for `orsgen eval`.

`serving(script)` answers `GET /v1/models` and non-streaming `POST /v1/chat/completions`: `script(payload)` says what
the "model" replies to the conversation so far, a `Reply` (text and/or tool calls) or an `Error` (an HTTP status with
an OpenAI-style error body), or a `Raw` answer (any status, body and headers, or a 200 that trickles a space a second
and never ends). Keyword options add what real servers do before any script runs: an unknown model (404, vLLM's
message), tools refused (400, vLLM without `--enable-auto-tool-choice`), a delay per reply, 429s while busy, no
answer at all (`hang`), a required API key (401). Every request is recorded with its arrival and answer time
(`time.monotonic()`), so tests and the benchmark can see what the client sent, when, and how many at once.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"
CHAT = "/v1/chat/completions"
MODELS = "/v1/models"
TOOLS_REFUSED = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'

# The error "type" of each status, as vLLM names them (and as the openai client names its exceptions).
ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
}


@dataclass(frozen=True)
class Reply:
    """What the "model" answers. `tool_calls`: (name, arguments) pairs; a dict of arguments is sent as its JSON text,
    a str verbatim (to script malformed arguments). `usage` is sent when either token count is given (the other then
    counts 0). `finish_reason`: by default "tool_calls" when there are tool calls, else "stop"."""

    content: str | None = None
    tool_calls: Sequence[tuple[str, dict[str, Any] | str]] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error answer: `{"error": {"message", "type", "code": status}}` with these extra headers; `type` defaults
    to vLLM's name for the status (ERROR_TYPES)."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    type: str | None = None


@dataclass(frozen=True)
class Raw:
    """An answer sent as given, for what no well-behaved server sends: `status`, `body` (bytes as they are, anything
    else as its JSON text), `headers`, `content_type`. With `trickle` (seconds), the status and headers, then one
    space every `trickle` seconds and never the body, until the client hangs up (`Request.hung_up`) or the stand-in
    stops: what some gateways do while a slow non-streaming request runs."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    trickle: float | None = None


Script = Callable[[dict[str, Any]], Reply | Error | Raw | str]  # a str is short for Reply(content=str)


@dataclass
class Request:
    """One request as it arrived (header names lower-cased, `payload` the JSON body, {} if none) and how it was
    answered: `answered`, `status` and `body` (the JSON sent) stay None while unanswered, and for good if the
    request hung until the stand-in stopped."""

    method: str
    path: str
    payload: dict[str, Any]
    headers: dict[str, str]
    received: float
    answered: float | None = None
    status: int | None = None
    body: Any = None  # the JSON sent (a `Raw` body: as given)
    hung_up: float | None = None  # a trickled answer: when the client closed the connection
    ended: threading.Event = field(default_factory=threading.Event)  # answered, or the client hung up


@dataclass
class Standin:
    """The running stand-in. The options may be changed while it runs (each request reads them as it arrives);
    `busy` counts down: it is how many more chat requests get a 429."""

    url: str  # ends in /v1: `openai.OpenAI(base_url=standin.url)`
    script: Script
    models: tuple[str, ...] = ("scripted",)
    delay: float = 0.0
    busy: int = 0
    retry_after: str = "0"
    tools_refused: bool = False
    hang: bool = False
    api_key: str | None = None
    requests: list[Request] = field(default_factory=list)  # every request, in arrival order
    stopped: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def chats(self) -> list[Request]:
        """The `POST /v1/chat/completions` requests so far, in arrival order (a copy)."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path == CHAT]

    def payloads(self) -> list[dict[str, Any]]:
        """The payloads of `chats()`."""
        return [r.payload for r in self.chats()]

    def peak_concurrency(self) -> int:
        """The most chat requests in flight at once (received and not yet answered; unanswered ones count as in
        flight to the end)."""
        edges = sorted(e for r in self.chats()
                       for e in ((r.received, 1), (r.answered if r.answered is not None else float("inf"), -1)))
        # at equal times -1 sorts before +1: a request answered as another arrives does not overlap it
        peak = current = 0
        for _, step in edges:
            current += step
            peak = max(peak, current)
        return peak

    def stop(self) -> None:
        """Close the socket and every open connection; requests that hang or wait out `delay` end unanswered. Does
        not wait for handler threads (daemons). Idempotent; `serving` calls it on exit."""
        self.stopped.set()
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def text_of(content: Any) -> str:
    """A message's content as text: a str as is, a list of parts as its text parts joined, None as ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def first_user_text(payload: dict[str, Any]) -> str:
    """The text of the first user message (in an episode: the task's prompt), "" if there is none."""
    users = [m for m in payload.get("messages", []) if m.get("role") == "user"]
    return text_of(users[0].get("content")) if users else ""


def last_user_text(payload: dict[str, Any]) -> str:
    """The text of the last user message, "" if there is none."""
    users = [m for m in payload.get("messages", []) if m.get("role") == "user"]
    return text_of(users[-1].get("content")) if users else ""


def tool_results(payload: dict[str, Any]) -> list[str]:
    """The contents of the `tool` messages, in order (as text)."""
    return [text_of(m.get("content")) for m in payload.get("messages", []) if m.get("role") == "tool"]


def error_body(status: int, message: str, type: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body, vLLM's way: `code` is the HTTP status."""
    if type is None:
        type = ERROR_TYPES.get(status) or HTTPStatus(status).phrase.replace(" ", "") + "Error"
    return {"error": {"message": message, "type": type, "code": status}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stopping never waits for handlers (a hanging one would block it)
    request_queue_size = 128  # 16+ clients connecting at once are not left waiting for a SYN retry


@contextmanager
def serving(script: Script, *, models: Sequence[str] = ("scripted",), delay: float = 0.0, busy: int = 0,
            retry_after: float | str = 0, tools_refused: bool = False, hang: bool = False,
            api_key: str | None = None) -> Iterator[Standin]:
    """Serve `/v1/models` and `/v1/chat/completions` on a free port of 127.0.0.1; `script(payload)` answers each chat
    request that the built-in behaviours let through.

    The checks, in order: `api_key` (no `Authorization: Bearer <api_key>`: 401, also for /v1/models), `stream: true`
    (400), a model not in `models` (404, vLLM's message), `tools_refused` and a payload with `tools` (400, vLLM's
    message), `busy` (the next `busy` chat requests: 429 with `Retry-After: retry_after`), `hang` (no answer until
    the stand-in stops), then `delay` seconds (in the handler thread: concurrent requests wait together) and the
    script. A script that raises answers 500 with the exception in the message.
    """
    numbers, call_numbers = itertools.count(), itertools.count()  # chatcmpl-<n>, call_<n>: unique while it runs
    connections: set[socket.socket] = set()
    state: Standin

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the openai client's connection pool reuses connections

        def setup(self) -> None:
            super().setup()
            with state._lock:
                connections.add(self.connection)

        def finish(self) -> None:
            with state._lock:
                connections.discard(self.connection)
            super().finish()

        def log_message(self, *args: Any) -> None:  # quiet: the record is `requests`
            pass

        def _arrive(self) -> Request:
            received = time.monotonic()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError:
                payload = {"_unparsed": raw.decode("utf-8", "replace")}
            request = Request(self.command, self.path.split("?")[0], payload if isinstance(payload, dict) else {},
                              {k.lower(): v for k, v in self.headers.items()}, received)
            with state._lock:
                state.requests.append(request)
            return request

        def _reply(self, request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None = None,
                   ) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            request.status, request.body = status, body
            request.answered = time.monotonic()
            self.wfile.write(data)
            request.ended.set()

        def _raw(self, request: Request, answer: Raw) -> None:
            data = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if answer.trickle is None:
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                request.status, request.body, request.answered = answer.status, answer.body, time.monotonic()
                self.wfile.write(data)
                request.ended.set()
                return
            self.send_header("Connection", "close")  # no length: the body runs until the connection closes
            self.end_headers()
            self.close_connection = True
            request.status = answer.status
            try:
                while not state.stopped.wait(answer.trickle):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:  # the client hung up
                request.hung_up = time.monotonic()
            request.ended.set()

        def _error(self, request: Request, status: int, message: str, headers: dict[str, str] | None = None,
                   type: str | None = None) -> None:
            self._reply(request, status, error_body(status, message, type), headers)

        def _refused(self, request: Request) -> bool:
            if state.api_key is not None and request.headers.get("authorization") != f"Bearer {state.api_key}":
                self._error(request, 401, "Unauthorized: the stand-in wants `Authorization: Bearer <api_key>`")
                return True
            return False

        def do_GET(self) -> None:
            request = self._arrive()
            if self._refused(request):
                return
            if request.path != MODELS:
                return self._error(request, 404, f"Not Found: GET {request.path}")
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "standin"} for name in state.models]
            self._reply(request, 200, {"object": "list", "data": data})

        def do_POST(self) -> None:
            request = self._arrive()
            if self._refused(request):
                return
            if request.path != CHAT:
                return self._error(request, 404, f"Not Found: POST {request.path}")
            payload = request.payload
            if "_unparsed" in payload:
                return self._error(request, 400, "the body is not a JSON object")
            if payload.get("stream"):
                return self._error(request, 400, "the stand-in does not stream: send stream=false")
            model = payload.get("model")
            if model not in state.models:
                return self._error(request, 404, f"The model `{model}` does not exist.")
            if state.tools_refused and payload.get("tools"):
                return self._error(request, 400, TOOLS_REFUSED)
            with state._lock:
                busy = state.busy > 0
                if busy:
                    state.busy -= 1
            if busy:
                return self._error(request, 429, "Rate limit reached: the stand-in is busy, try again",
                                   {"Retry-After": state.retry_after})
            if state.hang:
                state.stopped.wait()
            elif state.delay > 0:
                state.stopped.wait(state.delay)
            if state.stopped.is_set():  # stopped while hanging or waiting: no answer
                self.close_connection = True
                return
            try:
                answer = state.script(payload)
            except Exception as exc:  # noqa: BLE001 - shown to the client (500) and in the recorded body
                return self._error(request, 500, f"script failed: {exc!r}")
            if isinstance(answer, str):
                answer = Reply(content=answer)
            if isinstance(answer, Error):
                return self._error(request, answer.status, answer.message, answer.headers, answer.type)
            if isinstance(answer, Raw):
                return self._raw(request, answer)
            self._reply(request, 200, completion(answer, model, next(numbers), call_numbers))

    server = _Server((HOST, 0), Handler)
    state = Standin(url=f"http://{HOST}:{server.server_address[1]}/v1", script=script, models=tuple(models),
                    delay=delay, busy=busy, retry_after=str(retry_after), tools_refused=tools_refused, hang=hang,
                    api_key=api_key)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="chat-standin", daemon=True)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        with state._lock:
            open_now = list(connections)
        for conn in open_now:  # idle keep-alive connections: their handlers see EOF and end
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        thread.join(timeout=5)

    state._stop = stop
    thread.start()
    try:
        yield state
    finally:
        state.stop()


def completion(reply: Reply, model: Any, number: int, call_numbers: Iterator[int]) -> dict[str, Any]:
    """The `chat.completion` body (`chatcmpl-<number>`) of `reply`; its tool calls are `call_<n>` for the next n of
    `call_numbers`."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{next(call_numbers)}", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for name, args in reply.tool_calls]
    body: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
        }],
    }
    if reply.prompt_tokens is not None or reply.completion_tokens is not None:
        prompt, done = reply.prompt_tokens or 0, reply.completion_tokens or 0
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
    return body
