"""One tool call, the one path every call takes: in line on the trainer's thread (`run`), awaited on the caller's own
loop (`arun`: async tools), or started ahead on the runtime's loop (`arun(..., here=True)`: calls.py). The steps
are one generator (`steps`): whether the episode may still call (its usability and limits), the call's bound, the
request (yielded: each caller waits for it its own way), the failure's text, the result within its budget, and the
`tool_call` report; the three callers differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from orsgen.runtime import client
from orsgen.runtime.budgets import no_answer
from orsgen.runtime.episode import Episode
from orsgen.runtime.errors import TimedOut, ToolError
from orsgen.runtime.toolerrors import failures, short, tool_error

Request = tuple[Coroutine[Any, Any, Any], float]  # the request, and the bound on its answer
Steps = Generator[Request, Any, Any]


def steps(episode: Episode[Any], name: str, arguments: dict[str, Any]) -> Steps:
    """The call `name(arguments)` of `episode`: yields the request once, is sent its output (or thrown what the wait
    raised), returns what the model reads; a ToolError (one line) is what the model is shown instead. Reported
    either way."""
    began = time.perf_counter()
    try:
        session = episode.usable(name)
        limit, own = episode.budgets.timeout(name)
        try:
            output = yield session.call_tool(name, arguments), limit
        except TimeoutError:  # the same text wherever the call waited
            raise TimedOut(no_answer(name, limit) if own else str(tool_error(
                name, TimeoutError(f"no answer within {limit:g}s (ORSGEN_TOOL_TIMEOUT)")))) from None
        except failures() as exc:
            raise failed(episode, name, exc) from None
        result, cut = episode.record(name, output)
    except ToolError as exc:
        episode.called(name, arguments, began, None, exc)
        raise
    episode.called(name, arguments, began, result, None, cut)
    return result


def failed(episode: Episode[Any], name: str, exc: BaseException) -> ToolError:
    """The ToolError of a failed call. A tool that raised, or a session the server dropped, ends the session (the SDK
    closes it and refuses every later call); so does a 404, a server that no longer has the session (it restarted, or
    reaped it): the episode is then finished, and says so. A timeout does not end it: the tool may still run."""
    from openreward.api.errors import SessionTerminatedError, ToolFailed

    error = tool_error(name, exc)
    if isinstance(exc, (ToolFailed, SessionTerminatedError)):
        why = "the environment ended the session"
    elif client.status(exc) == 404:
        why = "the environment no longer has the session (it restarted, or ended it)"
    else:
        return error
    episode.ended_by_environment(str(error))
    return ToolError(short(f"{error}; {why}: the episode is over"))


def run(call: Steps, then: Callable[[], Any] | None = None) -> Any:
    """The call in line: the request runs on the runtime's loop while this thread waits (bounded). `then` runs once
    the request is on its way, or refused: what may go meanwhile (the turn's later calls, started ahead)."""
    try:
        request, limit = next(call)
    except BaseException:
        if then is not None:
            then()
        raise
    future = client.loop().submit(asyncio.wait_for(request, limit))
    if then is not None:
        then()
    try:
        output = future.result(timeout=limit + 1)
    except BaseException as exc:  # noqa: BLE001 - the steps say what it means (a timeout: in their words)
        if isinstance(exc, concurrent.futures.TimeoutError):
            future.cancel()
        return _finish(call.throw, exc)
    return _finish(call.send, output)


async def arun(call: Steps, here: bool = False) -> Any:
    """The call awaited: on the caller's own loop, the request on the runtime's (never blocking the caller); `here`:
    on the runtime's loop itself (a call started ahead)."""
    request, limit = next(call)
    try:
        bounded = asyncio.wait_for(request, limit)
        output = await (bounded if here else asyncio.wrap_future(client.loop().submit(bounded)))
    except BaseException as exc:  # noqa: BLE001 - the steps say what it means
        return _finish(call.throw, exc)
    return _finish(call.send, output)


def _finish(step: Callable[[Any], Any], value: Any) -> Any:
    try:
        step(value)
    except StopIteration as done:
        return done.value
    raise AssertionError("a call's steps yield one request")
