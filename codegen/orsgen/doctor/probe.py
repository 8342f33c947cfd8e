"""The doctor's sessions and calls, through the runtime's own path (runtime.sessions opens them as training does,
on the runtime's event loop, through the openreward SDK): every request bounded by `timeout`, every session counted
and closed, each check held to its bound of time and sessions (`bounded`), the times and output sizes kept for the
latency check.

A call's `Outcome` says what the environment did, in the SDK's terms: answered (`ok`), refused the call in words
(`refused`: the ORS `ok: false`, with its reason), raised (`raised`: the tool failed past its arguments, the SDK's
ToolFailed), answered an HTTP error (`http`), gave no answer in time (`timeout`), or ended the session (`ended`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from orsgen.doctor.target import Live
from orsgen.runtime import client, settings
from orsgen.runtime.content import content
from orsgen.runtime.pinned import Pinned
from orsgen.runtime.sessions import Connection, end
from orsgen.runtime.toolerrors import short, tool_error

TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+", re.MULTILINE)


class Bound(Exception):
    """A check reached its bound (of time or of sessions): it stops there."""


@dataclass
class Outcome:
    tool: str
    arguments: dict[str, Any]
    kind: str  # ok, refused, raised, http, timeout, ended, failed
    text: str  # the result's text (images as "[image]"), or what the error said
    reward: float | None = None
    finished: bool = False
    reason: str | None = None  # why a call was refused (input_validation, episode_finished, ...)
    status: int | None = None  # the HTTP status of an `http` outcome
    seconds: float = 0.0
    raw: str = ""  # an error's text as the server sent it (`text` is the line the model is shown)

    @property
    def traceback(self) -> bool:
        """The server's text holds a Python traceback (a stack trace handed to the model)."""
        return TRACEBACK.search(self.raw or self.text) is not None

    def said(self, limit: int = 120) -> str:
        text = " ".join(self.text.split())
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def shown(self) -> str:
        """What happened, in a few words: `answered 'abc' (reward 1.0, finished)`, `raised KeyError: ...`."""
        if self.kind == "ok":
            extra = [f"reward {self.reward:g}"] if self.reward is not None else []
            extra += ["finished"] if self.finished else []
            return f"answered {self.said(60)!r}" + (f" ({', '.join(extra)})" if extra else "")
        return {"refused": f"refused ({self.reason}): {self.said()}", "raised": f"raised: {self.said()}",
                "http": f"answered HTTP {self.status}: {self.said()}", "timeout": f"gave no answer: {self.said()}",
                "ended": f"found its session ended: {self.said()}"}.get(self.kind, f"failed: {self.said()}")

    def same(self) -> tuple[Any, ...]:
        """What two calls must share to be the same call's outcome."""
        return self.kind, self.text, self.reward, self.finished, self.reason


@dataclass(eq=False)
class Opened:
    """One session the doctor opened on a task."""

    session: Any
    split: str
    index: int
    prompt: str
    seconds: float

    @property
    def sid(self) -> str | None:
        return getattr(self.session, "sid", None)


@dataclass
class Spent:
    """What the checks used: sessions opened and closed, closes that failed, times, the largest output per tool."""

    opened: int = 0
    closed: int = 0
    close_failures: list[str] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=lambda: {"start": [], "call": [], "end": []})
    largest: dict[str, int] = field(default_factory=dict)


class Probe:
    """Sessions of one live environment, opened, called and closed by the checks."""

    def __init__(self, live: Live, timeout: float) -> None:
        self.live, self.timeout = live, timeout
        self.pinned = Pinned(module="orsgen doctor", target=live.target, url=live.url, deployment=live.deployment,
                             env=live.env, split="train", snapshot=live.snapshot)
        self.connection = Connection(live.url, os.environ.get("OPENREWARD_API_KEY") or None, None)
        self.settings = replace(settings.resolve(None), check_drift=False, start_retries=0, reset_timeout=timeout,
                                close_timeout=timeout)
        self.spent = Spent()
        self.hung: set[str] = set()  # tools that gave no answer: not called again (each holds a server thread)
        self._open: set[Opened] = set()
        self._deadline: float | None = None
        self._left: int | None = None
        self._env: Any = None

    # -- bounds ---------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def bounded(self, seconds: float, sessions: int) -> Iterator[None]:
        """Within it, at most `sessions` sessions open and nothing starts after `seconds`; every session it opened
        is closed on the way out."""
        self._deadline, self._left = time.monotonic() + seconds, sessions
        try:
            yield
        finally:
            self._deadline = self._left = None
            self.close_all()

    def _spend(self, sessions: int = 0) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise Bound("its time bound")
        if self._left is not None and sessions:
            if self._left < sessions:
                raise Bound("its session bound")
            self._left -= sessions

    # -- sessions -------------------------------------------------------------------------------------------------

    def open(self, split: str, index: int) -> Opened:
        """A session on a task, its prompt read; StartFailed (one line) when it does not start."""
        found = self.open_many(split, index, 1)[0]
        if isinstance(found, str):
            raise StartFailed(found)
        return found

    def open_many(self, split: str, index: int, count: int) -> list[Opened | str]:
        """`count` sessions on one task opened at once: each an `Opened`, or why it did not start."""
        self._spend(sessions=count)
        loop = client.loop()
        if self._env is None:
            self._env = self.pinned.sessions.environment(self.connection)

        async def one() -> Opened | str:
            began = time.perf_counter()
            try:
                session, prompt = await self.pinned.sessions.open(self._env, self.connection, split, index,
                                                                  self.settings, retries=0)
            except Exception as exc:  # noqa: BLE001 - why it did not start, in one line
                return f"task {index} of split {split!r} did not start: {client.describe(exc)}"
            seconds = time.perf_counter() - began
            return Opened(session, split, index, _text(prompt), seconds)

        async def all_of() -> list[Opened | str]:
            return list(await asyncio.gather(*(one() for _ in range(count))))

        found = loop.submit(all_of()).result(timeout=self.timeout * 2 + 10)
        for item in found:
            if isinstance(item, Opened):
                self._open.add(item)
                self.spent.opened += 1
                self.spent.times["start"].append(item.seconds)
        return found

    def close(self, opened: Opened) -> None:
        self.close_many([opened])

    def close_many(self, sessions: list[Opened]) -> None:
        mine = [s for s in sessions if s in self._open]
        self._open.difference_update(mine)

        async def one(opened: Opened) -> str | None:
            began = time.perf_counter()
            try:
                await end(opened.session, None, self.timeout)
            except Exception as exc:  # noqa: BLE001 - counted and said by the lifecycle check
                return f"closing a session of task {opened.index} failed: {_why(exc, self.timeout)}"
            self.spent.times["end"].append(time.perf_counter() - began)
            return None

        async def all_of() -> list[str | None]:
            return list(await asyncio.gather(*(one(s) for s in mine)))

        if not mine:
            return
        failures = client.loop().submit(all_of()).result(timeout=self.timeout * 2 + 10)
        self.spent.closed += sum(1 for f in failures if f is None)
        self.spent.close_failures += [f for f in failures if f is not None]

    def close_all(self) -> None:
        self.close_many(list(self._open))

    # -- calls ----------------------------------------------------------------------------------------------------

    def call(self, opened: Opened, name: str, arguments: dict[str, Any]) -> Outcome:
        return self.call_many([(opened, name, arguments)])[0]

    def call_many(self, calls: list[tuple[Opened, str, dict[str, Any]]]) -> list[Outcome]:
        """Calls made at once (each on its own session), in the order given; a tool that hung is not called again."""
        self._spend()

        async def one(opened: Opened, name: str, arguments: dict[str, Any]) -> Outcome:
            if name in self.hung:
                return Outcome(name, arguments, "timeout", f"not called again: {name} gave no answer before")
            return await self._call(opened, name, arguments)

        async def all_of() -> list[Outcome]:
            return list(await asyncio.gather(*(one(*c) for c in calls)))

        found = client.loop().submit(all_of()).result(timeout=self.timeout * 2 + 10)
        for outcome in found:
            if outcome.kind == "timeout":
                self.hung.add(outcome.tool)
            elif outcome.kind == "ok":
                self.spent.largest[outcome.tool] = max(self.spent.largest.get(outcome.tool, 0), len(outcome.text))
            if outcome.seconds:
                self.spent.times["call"].append(outcome.seconds)
        return found

    async def _call(self, opened: Opened, name: str, arguments: dict[str, Any]) -> Outcome:
        from openreward.api.errors import SessionTerminatedError, ToolCallError, ToolFailed

        began = time.perf_counter()
        try:
            output = await asyncio.wait_for(opened.session.call_tool(name, arguments), self.timeout)
        except TimeoutError:
            return Outcome(name, arguments, "timeout", f"no answer within {self.timeout:g} s")
        except ToolCallError as exc:  # what the model is shown: the runtime's line for it
            return Outcome(name, arguments, "refused", str(tool_error(name, exc)), reason=exc.reason,
                           seconds=_since(began), raw=exc.detail)
        except (ToolFailed, SessionTerminatedError) as exc:
            kind = "raised" if isinstance(exc, ToolFailed) else "ended"
            return Outcome(name, arguments, kind, short(str(exc)), seconds=_since(began), raw=str(exc))
        except Exception as exc:  # noqa: BLE001 - an HTTP status, or the transport
            status = client.status(exc)
            kind = "http" if status is not None else "failed"
            return Outcome(name, arguments, kind, client.describe(exc), status=status, seconds=_since(began))
        return Outcome(name, arguments, "ok", _text(content(output.blocks)), output.reward, bool(output.finished),
                       seconds=_since(began))

    def episode(self, split: str, index: int, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
        """A fresh session on a task, the calls made in order on it, closed: their outcomes."""
        opened = self.open(split, index)
        try:
            return [self.call(opened, name, arguments) for name, arguments in calls]
        finally:
            self.close(opened)


class StartFailed(Exception):
    """A session that did not start: its message is the line to show."""


def episode_reward(outcomes: list[Outcome]) -> float | None:
    """What `get_reward()` gives an episode: the last reward a tool gave."""
    rewards = [o.reward for o in outcomes if o.kind == "ok" and o.reward is not None]
    return rewards[-1] if rewards else None


def _text(found: Any) -> str:
    if isinstance(found, list):  # content parts
        return "\n".join(p.get("text", "") if p.get("type") == "text" else "[image]" for p in found
                         if isinstance(p, dict))
    return str(found)


def _since(began: float) -> float:
    return time.perf_counter() - began


def _why(exc: BaseException, limit: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {limit:g} s"
    return client.describe(exc)
