"""The runtime's one connection to the openreward SDK: its own event loop thread, one SDK client per API key, bounded
waits, and the clean-up at exit. Only the SDK's public async API is used, except the SSE parser fix (checked),
`delete_once`, `first_ping_later` and a start under an id asked for ahead (`ask_sid`, `start_with`: where the SDK has
their hooks)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, TypeVar

from orsgen.runtime import settings
from orsgen.runtime.process import STATE

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncEnvironment

T = TypeVar("T")
TESTED_SDK = "0.1.167"  # the openreward release this runtime is tested against (pyproject pins it)

# Bounds on every wait for the server, in seconds (the SDK itself waits for ever on some requests): the settings rows
# `reset_timeout`, `tool_timeout` and `close_timeout` (settings.py), read when used, so a training script may set them
# after importing a module.


def timeout(kind: str) -> float:
    """The `kind` bound from its variable, else the default; a value that is not a finite number of seconds above
    0 is refused in one line (0, a negative or 'nan' would time every request out at once, 'inf' overflows)."""
    return float(settings.variable(f"{kind}_timeout"))


def _last(exc: BaseException) -> BaseException:
    """A retry chain's last attempt (MaxRetriesError holds the attempts' errors, usually the same one several
    times); any other error itself."""
    errors = getattr(exc, "errors", None)
    return errors[-1] if errors else exc


def describe(exc: BaseException) -> str:
    """One readable line for an error, however the SDK formats it: the innermost cause of a retry chain, once."""
    exc = _last(exc)
    text = str(exc) or type(exc).__name__
    if isinstance(getattr(exc, "status", None), int) and isinstance(getattr(exc, "message", None), str):
        text = f"HTTP {exc.status}: {exc.message}"  # type: ignore[attr-defined]  # aiohttp's: without the URL
    detail = getattr(exc, "detail", None)
    if isinstance(detail, str) and getattr(exc, "reason", None):
        text = f"{exc.reason}: {detail}"  # type: ignore[attr-defined]
    line = " ".join(f"{type(exc).__name__}: {text}".split())
    return line if len(line) <= 300 else line[:297] + "..."


def status(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error, if any (a retry chain: its last attempt)."""
    exc = _last(exc)
    code = getattr(exc, "status", None)
    return code if isinstance(code, int) else None


def retry_after(exc: BaseException) -> float | None:
    exc = _last(exc)
    value = getattr(exc, "retry_after", None)
    return float(value) if isinstance(value, (int, float)) else None


def served(server: str) -> list[str] | None:
    """The environments a session server serves (`GET /list_environments`); None when it does not say."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{server.rstrip('/')}/list_environments", timeout=5) as response:
            found = json.loads(response.read())
    except (OSError, ValueError):
        return None
    return [str(e) for e in found] if isinstance(found, list) else None


def replaced_secrets(secrets: Any) -> list[str]:
    """Secret names the SDK overwrites with the client's API key (`augment_secrets_with_api_key`): the environment
    gets the API key there, not the value given."""
    return [n for n in ("api_key", "OPENREWARD_API_KEY") if secrets and n in secrets]


def refused_secret(secrets: Any) -> str | None:
    """Why the SDK would refuse these secrets at every session it opens (one line), or None. A string value is sent
    only to the domains the SDK lists for its name (WELL_KNOWN_SECRETS); any other name needs domains of its own."""
    if not secrets:
        return None
    from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS

    fix = "pass secrets={%r: (value, ['api.example.com'])}, naming the domains the environment may send it to"
    for name, value in secrets.items():
        if name in replaced_secrets(secrets):
            continue  # the SDK puts the API key there, whatever was given (warned about)
        if isinstance(value, str):
            if name not in WELL_KNOWN_SECRETS:
                return (f"{name!r} is not one of the openreward SDK's well-known secret names, so it has no "
                        f"allowed domains and no session could open: {fix % name}")
        elif not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
                  and isinstance(value[1], list) and all(isinstance(d, str) for d in value[1])):
            return f"{name!r} is a {type(value).__name__}, not a string or (value, allowed_domains): {fix % name}"
    return None


class Part:
    """The client's share of the process's state (held by process.STATE): the runtime's loop, the lines said once,
    the threads the SSE fix applies on, and what gives the close coroutines of what is open at exit."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: Loop | None = None
        self.said: set[str] = set()
        self.sse_threads: set[threading.Thread] = set()
        self.closers: list[Callable[[], list[Coroutine[Any, Any, None]]]] = []


def _part() -> Part:
    return STATE.part("client", Part)


def __getattr__(name: str) -> Any:
    if name == "_loop":  # (the running loop, as the tests' harness reads it)
        return _part().loop
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def once(key: str, level: int, message: str, *args: Any) -> None:
    """Log a line on the `orsgen` logger once per process (notices a training run would otherwise repeat)."""
    part = _part()
    with part.lock:
        if key in part.said:
            return
        part.said.add(key)
    logging.getLogger("orsgen").log(level, message, *args)


def delete_once(session: Any) -> None:
    """One `POST /delete` per session. The SDK tears a session the environment ended (a tool that raised) down at
    once, and again when it is closed: its delete hook now sends the request once, whoever asks first, and a later
    ask waits for that one. An SDK without the hook is left as it is (at worst a second, harmless, request)."""
    send = getattr(session, "_pre_delete", None)
    if send is None:
        return
    sent: list[asyncio.Future[Any]] = []

    async def once() -> None:
        if not sent:
            sent.append(asyncio.ensure_future(send()))
        await asyncio.shield(sent[0])

    session._pre_delete = once


def first_ping_later(session: Any) -> None:
    """The SDK's keep-alive pings a session as it opens, then every 10 s; the server keeps a session 120 s without
    one. The first ping now waits its interval too: a batch's starts are the server's busiest moment (its resets
    wait on them), and a session closed within the interval, as a short episode's is, never pings. An SDK without
    the hook is left as it is."""
    run = getattr(session, "_run_ping", None)
    if run is None:
        return

    async def later(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(kwargs.get("sleep_time", 10))
        return await run(*args, **kwargs)

    session._run_ping = later


def can_start_with(session: Any) -> bool:
    """Whether `session` can start under an id asked for ahead: an SDK session with the hooks `start_with` uses, on
    its environment's client."""
    return all(hasattr(session, n) for n in ("_post_create", "_run_ping", "_creation_endpoint", "_creation_headers",
                                              "_external_client")) and session._external_client is not None


async def ask_sid(session: Any) -> str:
    """A session id for later: what the SDK's `__aenter__` sends first (`POST /create_session` with the session's
    headers, payload and retries), sent alone."""
    from openreward.api._session.http import resumable_sse

    ids: list[str] = []
    found = await resumable_sse(session.client, session._creation_endpoint, token=session.api_key,
                                json=session._creation_payload, deployment=session.deployment, max_retries=3,
                                timeout=session.creation_timeout, extra_headers=session._creation_headers,
                                on_event=lambda event, data: ids.append(data.strip()) if event == "task_id" else None)
    sid = found.get("sid") if isinstance(found, dict) else None
    if not (sid or ids):
        raise RuntimeError("no session id from /create_session")
    return str(sid or ids[0])


async def start_with(session: Any, sid: str) -> Any:
    """The rest of the SDK's `__aenter__` for a session under `sid` (`ask_sid`'s): `POST /create`, then its
    keep-alive, as the SDK starts them."""
    session.sid = sid
    try:
        await session._post_create()
    except Exception as exc:  # noqa: BLE001 - re-raised, with the session's sid, as the SDK's start does
        raise session._annotate_error(exc) from exc.__cause__
    session._ping_task = asyncio.create_task(session._run_ping(url=f"{session.base_url}/ping", sid=sid,
                                                               api_key=session.api_key, sleep_time=10,
                                                               deployment=session.deployment))
    return session


async def give_back(session: Any, sid: str) -> None:
    """An id asked for ahead and never used: the `POST /delete_session` the SDK sends for its own unused id."""
    from openreward.api._session.http import request_retryable

    await request_retryable(session.client, "POST", "/delete_session", expect_json=False, token=session.api_key,
                            sid=sid)


class Loop:
    """A daemon thread running the event loop every SDK call of this process goes through. The SDK's aiohttp clients
    live on it, so sessions survive between the trainer's synchronous calls and async tools never block it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(_Executor(thread_name_prefix="orsgen-io"))
        self.thread = threading.Thread(target=self.loop.run_forever, name="orsgen-runtime", daemon=True)
        self.thread.start()
        self.apis: dict[str, Any] = {}  # API key -> the SDK's AsyncEnvironmentsAPI
        self.environments: dict[tuple[str, str, str | None, str | None], AsyncEnvironment] = {}
        self.lock = threading.Lock()
        self.closing: set[concurrent.futures.Future[Any]] = set()  # sessions being closed in the background
        self.stopped = False

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.stopped:
            coroutine.close()
            raise RuntimeError("the orsgen runtime has shut down (interpreter exit)")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def track(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """`submit`, tracked in `closing`: close_all() and the exit wait for it."""
        future = self.submit(coroutine)
        self.closing.add(future)
        future.add_done_callback(self.closing.discard)
        return future

    def run(self, coroutine: Coroutine[Any, Any, T], kind: str, limit: float | None = None) -> T:
        """Run a coroutine on the loop and wait at most `limit`, by default the `kind` timeout, for it."""
        limit = timeout(kind) if limit is None else limit
        future = self.submit(asyncio.wait_for(coroutine, limit))
        try:
            return future.result(timeout=limit + 1)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            raise TimeoutError(f"no answer within {limit:g}s ({settings.BY_NAME[f'{kind}_timeout'].variable})") from None

    def environment(self, deployment: str, variant: str | None, url: str | None, api_key: str | None) -> AsyncEnvironment:
        """The SDK handle of an environment; one SDK client per API key and process, made on first use."""
        key = api_key if api_key is not None else os.environ.get("OPENREWARD_API_KEY", "")
        where = (key, deployment, variant, url)
        with self.lock:
            handle = self.environments.get(where)
            if handle is None:
                api = self.apis.get(key)
                if api is None:
                    from openreward import AsyncOpenReward

                    api = self.apis[key] = AsyncOpenReward(api_key=key).environments

                async def get() -> AsyncEnvironment:  # the SDK makes its aiohttp client on the running loop
                    return api.get(deployment, variant=variant, base_url=url)

                handle = self.environments[where] = self.submit(get()).result(timeout=30)
        return handle

    def shutdown(self, close_sessions: Callable[[], list[Coroutine[Any, Any, None]]]) -> None:
        """At exit: close every open session (bounded), then the SDK's clients, then the loop. Prints nothing."""
        if self.stopped:
            return

        async def finish() -> None:
            pending: list[asyncio.Future[Any]] = [asyncio.ensure_future(c) for c in close_sessions()]
            pending += [asyncio.wrap_future(f) for f in list(self.closing)]
            if pending:
                await asyncio.wait(pending, timeout=timeout("close"))
            for api in self.apis.values():
                with contextlib.suppress(Exception):  # exiting: nothing to report to
                    await asyncio.wait_for(api.aclose(), 2)

        with contextlib.suppress(Exception):
            self.submit(finish()).result(timeout=timeout("close") + 5)
        self.stopped = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=2)


def loop() -> Loop:
    """The process's runtime loop, started (with the SDK check and its exit step) on first use, never at import."""
    part = _part()
    with part.lock:
        if part.loop is None or part.loop.stopped:
            check_sdk()
            STATE.after_sdk()  # the runtime's exit runs before the SDK's own hook
            part.loop = Loop()
            STATE.at_exit("close sessions", functools.partial(_at_exit, part.loop))
            sse.install(part.loop.thread)
    return part.loop


def running() -> Loop | None:
    """The process's runtime loop if it is running (never started, or stopped at exit: None); starts nothing."""
    found = _part().loop
    return found if found is not None and not found.stopped else None


def on_exit(hook: Callable[[], list[Coroutine[Any, Any, None]]]) -> None:
    """`hook()` gives the close coroutines of what is still open when the interpreter exits (added once)."""
    part = _part()
    with part.lock:
        if hook not in part.closers:
            part.closers.append(hook)


def _at_exit(running: Loop) -> None:
    part = _part()
    running.shutdown(lambda: [c for hook in list(part.closers) for c in hook()])


def sdk_version() -> str:
    try:
        return version("openreward")
    except PackageNotFoundError:
        return "not installed"


def check_sdk() -> None:
    """The SDK surface this runtime relies on, checked once: one line naming the installed and tested versions."""
    try:
        from openreward import AsyncOpenReward  # noqa: F401
        from openreward.api._session import http
        from openreward.api.environments.client import AsyncSession
    except ImportError as exc:
        raise RuntimeError(_mismatch(f"cannot import {exc.name or exc}")) from None
    missing = [n for n in ("__aenter__", "__aexit__", "get_prompt", "call_tool") if not hasattr(AsyncSession, n)]
    if not callable(getattr(http, "_parse_sse_events", None)):
        missing.append("http._parse_sse_events")
    if missing:
        raise RuntimeError(_mismatch(f"it lacks {', '.join(missing)}"))


def _mismatch(what: str) -> str:
    return (f"orsgen runtime: the installed openreward {sdk_version()} does not fit ({what}); this runtime is tested "
            f"with openreward=={TESTED_SDK}: install that version")


class sse:
    """The SDK strips every leading space of an SSE data line; the SSE spec strips one, so results cut into chunks
    lose the spaces at a cut. The fix applies on the runtime's own thread only: other SDK users keep the SDK's
    parser. ORSGEN_SSE_FIX=0 turns it off."""

    @staticmethod
    def install(thread: threading.Thread) -> None:
        from openreward.api._session import http

        _part().sse_threads.add(thread)
        if os.environ.get("ORSGEN_SSE_FIX", "1") == "0" or getattr(http._parse_sse_events, "orsgen", False):
            return
        original = http._parse_sse_events

        def parse(response: Any) -> Any:
            return sse.parse(response) if threading.current_thread() in _part().sse_threads else original(response)

        parse.orsgen = True  # type: ignore[attr-defined]
        http._parse_sse_events = parse

    @staticmethod
    async def parse(response: Any) -> Any:
        event: str | None = None
        data: list[str] = []
        async for raw in response.content:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if not line:
                if event:
                    yield event, "\n".join(data)
                event, data = None, []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)


class _Executor(concurrent.futures.ThreadPoolExecutor):
    """The runtime loop's default executor. aiohttp needs one for every request (the netrc lookup of a trust_env
    client), and concurrent.futures refuses new work once its own exit hook has run, before atexit's: a session
    closing then (the exit hook's, or one garbage collection started just before) would fail silently. From then
    on each call runs on a daemon thread of its own."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
            pass
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                    future.set_exception(exc)

        threading.Thread(target=run, name="orsgen-exit", daemon=True).start()
        return future
