"""The model: any OpenAI-compatible chat endpoint (vLLM, SGLang, TGI, `transformers serve`, a hosted API), through
the `openai` client the openreward SDK brings. A 429 slows the whole run down (`busy`) and the request is asked
again; every other failure is one line (`EndpointError`), and so is a reply orsgen cannot read. A request the
endpoint refused because the conversation holds the model's own tool call it could not parse is the model's failure
(`ModelError`). Each request is bounded by `timeout` from sending it to the last byte of its answer: requests run on
the endpoint's own event loop, where a request past its time is cancelled and its connection closed."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from orsgen.errors import OrsgenError
from orsgen.evaluate.options import public

BUSY_ATTEMPTS = 10  # 429s in a row before a request fails
SERVER_ERROR_RETRIES = 2  # a 5xx is asked again this many times (1 s, then 2 s later)
PROBE = "orsgen eval checks that this endpoint takes tools: answer OK."
MODEL_REFUSALS = (400, 422, 500)  # what servers answer a conversation they cannot render (vLLM 400, transformers 500)


class EndpointError(Exception):
    """A request the endpoint failed, in one line."""


class ModelError(Exception):
    """The endpoint refused a request because the conversation holds a tool call of the model's own that is not JSON
    (vLLM answers 400, `transformers serve` 500): the model's failure, in one line."""


@dataclass
class Reply:
    """One assistant turn: TRL's form of it (`turn`, tool-call arguments as dicts), the calls as the endpoint sent
    them (`calls`: id, name, the arguments' JSON text), the tokens it reported, and how long it took."""

    turn: dict[str, Any]
    calls: list[tuple[str, str, str]]
    usage: dict[str, int] | None
    seconds: float


@dataclass
class Endpoint:
    url: str | None  # None: OPENAI_BASE_URL, else the openai client's default (api.openai.com)
    model: str
    sampling: dict[str, Any]
    timeout: float
    busy: Callable[[float | None], None] = lambda seconds: None  # told of each 429 (its Retry-After)
    strip_return: bool = False  # the endpoint refused get_json_schema's "return" key: tools go without it
    _client: Any = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _asking: set[asyncio.Task[Any]] = field(default_factory=set, repr=False)  # requests in flight, on the loop

    @property
    def where(self) -> str:
        url = public(self.url or os.environ.get("OPENAI_BASE_URL"))[0]  # never its user:password@ or query string
        return url or "https://api.openai.com/v1 (the openai default)"

    def secrets(self) -> list[str]:
        """What no record may hold: the endpoint's API key, and a password in its URL."""
        found = [os.environ.get("OPENAI_API_KEY")]
        for url in (self.url, os.environ.get("OPENAI_BASE_URL")):
            found.append(urlsplit(url).password if url else None)
        return [s for s in found if s]

    def close(self) -> None:
        """Cancel the requests still running (their connections closed), then close the client."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return

        async def closing() -> None:
            tasks = list(self._asking)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client, self._client = self._client, None
            if client is not None:
                await client.close()

        try:
            asyncio.run_coroutine_threadsafe(closing(), loop).result(timeout=5)
        except Exception:  # noqa: BLE001, S110 - the loop's thread is a daemon: the process ends it
            pass

    # -- before any episode --------------------------------------------------------------------------------------

    def check_served(self) -> None:
        """OrsgenError, one line, for an endpoint out of reach, refusing the key, or not serving the model."""
        import openai

        async def listed(client: Any) -> list[str]:
            return [m.id for m in (await client.models.list()).data]

        try:
            served = self._run(listed)
        except (openai.NotFoundError, openai.InternalServerError):
            served = None  # no /models here (or a broken one): the probe finds a wrong name
        except openai.APIError as exc:
            raise OrsgenError(self._said(exc)) from None
        except TimeoutError:
            raise OrsgenError(self._late()) from None
        if served is not None and self.model not in served:
            raise OrsgenError(f"the endpoint at {self.where} does not serve {self.model!r}: it serves "
                              f"{', '.join(map(repr, served)) or 'no model'} (--model)")

    def check_tools(self, tools: list[dict[str, Any]]) -> None:
        """OrsgenError, one line, for an endpoint without tool calling (or any other refusal of a request)."""
        try:  # what is refused shows in the status (400, 401, 404): one token of reply is enough
            self._ask([{"role": "user", "content": PROBE}], tools, {"max_tokens": 1}, probe=True)
        except (EndpointError, ModelError) as exc:
            raise OrsgenError(str(exc)) from None

    # -- a turn --------------------------------------------------------------------------------------------------

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], seed: int | None) -> Reply:
        began = time.perf_counter()
        extra = {} if seed is None else {"seed": seed}
        try:
            turn, calls, usage = _read(self._ask(messages, tools, {**self.sampling, **extra}))
        except _Malformed as exc:
            raise EndpointError(f"the endpoint at {self.where} sent a reply orsgen cannot read: {exc}") from None
        return Reply(turn, calls, usage, time.perf_counter() - began)

    def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: dict[str, Any],
             probe: bool = False) -> Any:
        """The reply's JSON body (anything the endpoint sent with a 200: `_read` checks it)."""
        import openai

        sent = [_without_return(t) for t in tools] if self.strip_return else tools
        error: openai.APIError | None

        async def create(client: Any) -> Any:
            raw = await client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, **({"tools": sent} if sent else {}), **sampling)
            return raw.http_response.content

        failed, error = 0, None  # the last 5xx or dropped connection
        for attempt in range(BUSY_ATTEMPTS + SERVER_ERROR_RETRIES):
            try:
                content = self._run(create)
            except openai.RateLimitError as exc:
                wait = _retry_after(exc)
                self.busy(wait)
                time.sleep(min(wait if wait is not None else 2.0 ** attempt, 30.0))
                continue
            except openai.APIStatusError as exc:
                unparsed = _unparsed_call(messages) if exc.status_code in MODEL_REFUSALS else None
                if unparsed is not None:
                    raise ModelError(f"the endpoint at {self.where} refused the conversation ({exc.status_code}: "
                                     f"{_reason(exc) or 'no reason given'}): the model's own call {unparsed}") from None
                if isinstance(exc, openai.BadRequestError):
                    if probe and tools and not self.strip_return and "return" in _reason(exc):
                        self.strip_return = True  # get_json_schema's "return" (what chat templates render) refused
                        return self._ask(messages, tools, sampling, probe)
                    raise EndpointError(self._said(exc, tools_sent=bool(tools))) from None
                if not isinstance(exc, openai.InternalServerError):
                    raise EndpointError(self._said(exc)) from None
                if probe:  # it took the request (a model cut at max_tokens mid tool call may make a server fail)
                    return None
                failed, error = failed + 1, exc
            except (TimeoutError, openai.APITimeoutError):  # waited --timeout already
                raise EndpointError(self._late()) from None
            except openai.APIConnectionError as exc:  # a connection the server dropped: asked again, twice
                failed, error = failed + 1, exc
            except openai.APIError as exc:
                raise EndpointError(self._said(exc)) from None
            else:
                return None if probe else _body(content)
            if failed > SERVER_ERROR_RETRIES:
                raise EndpointError(self._said(error))
            time.sleep(float(failed))
        raise EndpointError(f"the endpoint at {self.where} answered 429 (busy) {BUSY_ATTEMPTS} times in a row")

    def _run(self, request: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
        """`request(client)` on the runtime's loop, within `timeout` (TimeoutError after it, the request cancelled:
        the openai client's own timeout is per read, and a trickled answer never trips it)."""
        future = asyncio.run_coroutine_threadsafe(self._first(request), self._running())
        try:
            return future.result(timeout=self.timeout + 30)  # the loop cancels it at `timeout`: a backstop
        except TimeoutError:
            future.cancel()
            raise

    async def _first(self, request: Callable[[Any], Coroutine[Any, Any, Any]]) -> Any:
        if self._client is None:
            import openai

            key = os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers take any key; a hosted API says 401
            self._client = openai.AsyncOpenAI(base_url=self.url, api_key=key, max_retries=0, timeout=self.timeout)
        task = asyncio.current_task()
        assert task is not None
        self._asking.add(task)
        try:
            return await asyncio.wait_for(request(self._client), self.timeout)
        finally:
            self._asking.discard(task)

    def _running(self) -> asyncio.AbstractEventLoop:
        """The runtime's event loop (one I/O thread for the environment and the endpoint, as a plain asyncio client
        has: not a thread more to wake for each request)."""
        from orsgen.runtime import client

        with self._lock:
            if self._loop is None:
                self._loop = client.loop().loop
            return self._loop

    def _late(self) -> str:
        return f"the endpoint at {self.where} did not answer within {self.timeout:g}s (--timeout)"

    def _said(self, exc: Any, tools_sent: bool = False) -> str:
        """An endpoint's failure in one line: where, what it said, and what to check."""
        import openai

        where = f"the endpoint at {self.where}"
        message = _reason(exc)
        if isinstance(exc, openai.APITimeoutError):
            return self._late()
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = " ".join(str(cause).split())[:200] if cause else message
            return (f"cannot reach {where}: {why}: is it running, and is --base-url (or OPENAI_BASE_URL) its /v1 "
                    "address?")
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return f"{where} refused the API key ({status}): set OPENAI_API_KEY"
        if status == 404:
            served = _ors_environments(self.url or os.environ.get("OPENAI_BASE_URL"))
            if served is not None:  # the environment's server, given where the model's goes
                return (f"{where} answered 404: it is an ORS environment server (it serves {', '.join(served)}), not "
                        "a model's endpoint: --base-url is the /v1 address of the model's server (transformers serve, "
                        "vLLM, ...), on a port of its own")
            return f"{where} answered 404 for model {self.model!r}: {message} (--model, --base-url ending in /v1?)"
        if status == 400 and tools_sent and "tool" in message.lower():
            return (f"{where} does not take tool calls: {message} (vLLM: --enable-auto-tool-choice --tool-call-parser "
                    "NAME; SGLang: --tool-call-parser NAME)")
        return f"{where} answered {status or 'an error'}{f': {message}' if message else ''}"


def _ors_environments(url: str | None) -> list[str] | None:
    """The environments an ORS server at `url` (or at it without its /v1) lists, or None when it answers as no ORS
    server does: one request each, a second at most."""
    import urllib.request

    if not url:
        return None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for base in dict.fromkeys([url.rstrip("/").removesuffix("/v1"), url.rstrip("/")]):
        try:
            with opener.open(f"{base}/list_environments", timeout=1.0) as answer:
                found = json.loads(answer.read(65536))
        except (OSError, ValueError):
            continue
        if isinstance(found, list) and found and all(isinstance(name, str) for name in found):
            return [_line(name, 40) for name in found[:5]]
    return None


class _Malformed(Exception):
    """What is wrong with a reply, in words."""


def _body(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        raise _Malformed(f"its body is not JSON: {_line(content.decode('utf-8', 'replace'), 100)!r}") from None


def _read(body: Any) -> tuple[dict[str, Any], list[tuple[str, str, str]], dict[str, int] | None]:
    """The reply's first choice as TRL's turn and the calls as sent, and its usage; _Malformed when it is not a
    chat completion."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        raise _Malformed("it has no choices" if isinstance(body, dict) else "its body is not a JSON object")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise _Malformed("its first choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _Malformed(f"its content is a JSON {_kind(content)}, not text")
    listed = message.get("tool_calls") or []
    if not isinstance(listed, list):
        raise _Malformed(f"its tool_calls are a JSON {_kind(listed)}, not a list")
    calls = []
    for i, call in enumerate(listed):
        function = call.get("function") if isinstance(call, dict) else None
        if function is None:
            continue  # not a function call: TRL makes none either
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise _Malformed(f"its tool call {i} has no function name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise _Malformed(f"the arguments of its tool call {i} ({_line(name, 60)}) are a JSON {_kind(arguments)}, "
                             "not the JSON text of one")
        call_id = call.get("id")
        calls.append((call_id if isinstance(call_id, str) and call_id else f"call_{i}", name, arguments or "{}"))
    turn: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        turn["tool_calls"] = [{"type": "function", "function": {"name": name, "arguments": _arguments(text)}}
                              for _, name, text in calls]
    usage, tokens = None, body.get("usage")
    if isinstance(tokens, dict):
        counts = [tokens.get("prompt_tokens") or 0, tokens.get("completion_tokens") or 0]
        if all(isinstance(n, int) and not isinstance(n, bool) for n in counts):  # else left out: it is no figure
            usage = {"prompt_tokens": counts[0], "completion_tokens": counts[1]}
    return turn, calls, usage


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__)


def _line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def _reason(exc: Any) -> str:
    """What the endpoint said of its failure, on one line: its error body's message (OpenAI's `error.message`,
    FastAPI's `detail`), else the body's text."""
    body = getattr(exc, "body", None)  # the openai client's: an OpenAI error body's `error`, else the whole body
    if isinstance(body, dict):
        said = next((v for k in ("message", "detail", "error") if isinstance(v := body.get(k), str) and v), None)
        text = said if said is not None else json.dumps(body, default=str)
    elif body is not None:
        text = body if isinstance(body, str) else json.dumps(body, default=str)
    else:
        text = re.sub(r"^Error code: \d+( - )?", "", str(getattr(exc, "message", None) or exc))
    return _line(text, 300)


def _unparsed_call(messages: list[dict[str, Any]]) -> str | None:
    """The model's first tool call in `messages` whose arguments are not a JSON object, described; None if none."""
    for message in messages:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            function = call.get("function") or {}
            text = function.get("arguments")
            if isinstance(text, str) and not isinstance(_arguments(text), dict):
                return f"{_line(str(function.get('name')), 60)}({_line(text, 100)}) is not a JSON object"
    return None


def _arguments(text: str) -> Any:
    """A call's arguments as TRL passes them (a dict), or the text itself when it is not a JSON object."""
    try:
        found = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return found if isinstance(found, dict) else text


def _retry_after(exc: Any) -> float | None:
    """The Retry-After of a 429 in seconds; None when absent or not a number of seconds >= 0."""
    try:
        wait = float(exc.response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None
    return wait if math.isfinite(wait) and wait >= 0 else None


def _without_return(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: v for k, v in tool.get("function", {}).items() if k != "return"}
    return {**tool, "function": function}
