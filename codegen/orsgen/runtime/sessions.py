"""The sessions of one pinned environment, in one owner (`Sessions`, one per `Pinned`): opening with retries, the
drift and build checks, the start-failure contract, closing in the background, and the sessions held open.

An opener takes a `Connection` (server, API key, secrets) and `Settings`, never an adapter: the adapter, the
open-ahead planner (ahead.py) and `dataset(prompts=True)` (rows.py) all open through it. `held()` counts the
sessions of every opener that are open on a server right now; `close_all()` (adapter.py) ends what they hold.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from orsgen.runtime import bounds, client, messages
from orsgen.runtime.errors import DriftError, StartError, StartTimeout, WrongServer
from orsgen.runtime.process import STATE
from orsgen.runtime.settings import Settings
from orsgen.runtime.sids import Sids
from orsgen.runtime.slots import Slots

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncEnvironment, AsyncSession

log = logging.getLogger("orsgen")
# per attempt: (number, start time, error or None, seconds it waited for a place in the sessions budget)
Report = Callable[[int, float, "BaseException | None", float], None]


class Held:
    """The sessions of this process (held by process.STATE): those open on a server (entered, not yet exited) and
    the opener that opened them, changed on the runtime's loop; the closes in flight that free a place (`freeing`);
    the sessions whose close waits (`hold`); the session ids asked for ahead, per opener, environment and connection
    (sids.py)."""

    def __init__(self) -> None:
        self.open: dict[Any, Sessions] = {}
        self.freeing: set[concurrent.futures.Future[None]] = set()
        self.holds: dict[Any, concurrent.futures.Future[None]] = {}
        self.sids: dict[tuple[Sessions, Any, Hashable], Sids] = {}


def _held() -> Held:
    return STATE.part("sessions", Held)


class Planned(concurrent.futures.Future[Any]):
    """An opening, owned (by an episode, the look-ahead store) before its session is requested. Whoever opens it
    marks it running (`fill`); one cancelled before that is never opened. It resolves to (session, prompt), or to
    None: a look-ahead attempt that failed ("open it in line"). `owner`: the token of the trainer whose batch it is
    for (ahead.release)."""

    def __init__(self, owner: Hashable | None = None) -> None:
        super().__init__()
        self.owner = owner


async def fill(opening: Planned, start: Coroutine[Any, Any, Any]) -> None:
    """Resolve an opening with what `start` opens, unless it was given up before it began (cancelled): then
    nothing is requested."""
    if not opening.set_running_or_notify_cancel():
        start.close()
        return
    try:
        opening.set_result(await start)
    except BaseException as exc:  # handed to whoever takes the opening (a cancelled loop: re-raised too)
        opening.set_exception(exc)
        if not isinstance(exc, Exception):
            raise


@dataclass(frozen=True, eq=False)
class Connection:
    """Where and as whom sessions open: one adapter's `url=`, `api_key=` and `secrets=`."""

    url: str | None = None
    api_key: str | None = None
    secrets: Mapping[str, Any] | None = None

    def key(self) -> Hashable:
        """Equal for connections that open the same sessions (secrets by value: each adapter has its own dict)."""
        secrets = tuple(sorted((str(k), repr(v)) for k, v in (self.secrets or {}).items()))
        return self.url, self.api_key, secrets


class InARow:
    """Start failures of one environment since its last start that worked. "The environment is down" is a judgement
    over time: no start has worked for a while (`down_after` seconds since the first failure, after its retries) and
    at least a floor of tasks failed. A count alone says nothing: 32 rollouts in flight fail at one moment of downtime.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.last: tuple[str, int] | None = None
        self.since: float | None = None  # when the first failure since the last start that worked was counted

    def started(self) -> None:
        with self.lock:
            self.count, self.last, self.since = 0, None, None

    def failed(self, task: tuple[str, int], in_batch: bool) -> tuple[int, float]:
        """Count a task that could not start: (failures in a row so far, seconds since the first of them). In a
        trainer, the rollouts of a GRPO group reset one after the other on the same task: a task that fails for all
        of them counts once, so one broken task does not look like an environment that is down."""
        with self.lock:
            now = time.monotonic()
            if self.since is None:
                self.since = now
            if self.last != task or not in_batch:
                self.count += 1
            self.last = task
            return self.count, now - self.since


def transient(exc: BaseException) -> bool:
    """Worth another attempt: transport errors, timeouts, 5xx, 408 and 429; not a 4xx the request itself caused."""
    code = client.status(exc)
    return code is None or code >= 500 or code in (408, 429)


class Pin(Protocol):
    """What an opener reads of its pinned environment (`Pinned`), when it uses it: a test may repoint `url`."""

    module: str  # the generated module's __name__ (for messages)
    target: str
    deployment: str
    env: str | None
    url: str | None  # the pinned session server; None: OPENREWARD_SESSION_URL or the platform's
    snapshot: dict[str, Any]
    build: str | None
    conversations: set[tuple[str, int]]  # tasks served as turns (messages.py): their sessions read /messages

    def pinned_spec(self, split: str, index: int) -> Any | None: ...


@dataclass(eq=False)
class Sessions:
    """Opens, checks and closes the sessions of one pinned environment (`pin`)."""

    pin: Pin
    failures: InARow = field(default_factory=InARow)
    slots: Slots = field(default_factory=Slots)  # the sessions budget (max_sessions)
    _drift_checked: set[str] = field(default_factory=set)
    _builds_seen: set[str] = field(default_factory=set)
    _serves_env: set[str] = field(default_factory=set)  # servers known to serve the environment
    _drift_lock: asyncio.Lock | None = None  # made on the runtime's loop

    def server(self, url: str | None) -> str | None:
        """The session server: the adapter's, else OPENREWARD_SESSION_URL, else the pinned one (None: the SDK's)."""
        return url or os.environ.get("OPENREWARD_SESSION_URL") or self.pin.url

    def environment(self, connection: Connection) -> AsyncEnvironment:
        pin = self.pin
        return client.loop().environment(pin.deployment, pin.env, self.server(connection.url), connection.api_key)

    # -- opening -------------------------------------------------------------------------------------------------

    async def open(self, env: AsyncEnvironment, connection: Connection, split: str, index: int, settings: Settings,
                   *, retries: int | None = None, first: int = 0, whole: bool = False,
                   report: Report | None = None) -> tuple[AsyncSession, Any]:
        """Open a session on a task and read its prompt (`whole`: every turn of /messages), retrying transient
        failures with bounded backoff; `first` numbers the first attempt (1: after a failed look-ahead one, a
        retry). Each attempt is reported. DriftError is raised at once."""
        limit = settings.reset_timeout
        retries = settings.start_retries if retries is None else retries
        asked = _held().sids.get((self, env, connection.key()))
        for attempt in range(first, first + retries + 1):
            waited = await self.slots.take(settings.max_sessions)  # a place in the budget, before any request
            began, session = time.perf_counter(), None
            try:
                try:
                    session = self._session(env, connection, split, index)  # may refuse before any request: reported
                finally:
                    if session is None:
                        self.slots.give()
                    else:
                        self.slots.own(session)  # given back once the server has it closed (`end`)
                if settings.check_drift:  # once per process and server
                    await self.check_drift(env, connection.url, limit)
                sid = asked.take() if asked is not None and attempt == first else None  # a retry asks anew
                await self.enter(session, limit, sid)
                _held().open[session] = self
                await self.check_build(session, connection.url, limit)
                conversation = (split, index) in self.pin.conversations
                opened = session, await messages.prompt(session, whole, conversation, limit)
            except DriftError:
                raise
            except Exception as exc:
                if session is not None and not isinstance(exc, StartTimeout):  # one the server half-opened too (a
                    with contextlib.suppress(Exception):  # start given up is closed once it ends: `enter`
                        await end(session, None, settings.close_timeout)
                    self.slots.release(session)
                if isinstance(exc, asyncio.TimeoutError):
                    exc = StartTimeout(f"no answer within {limit:g}s (ORSGEN_RESET_TIMEOUT)")
                if report is not None:
                    report(attempt, began, exc, waited)
                if attempt == first + retries or not transient(exc):
                    raise exc from None
                wait = client.retry_after(exc) or min(2.0 ** (attempt - first), 10.0)
                await asyncio.sleep(min(wait, 60.0))
            else:
                if report is not None:
                    report(attempt, began, None, waited)
                return opened
        raise AssertionError("unreachable")

    async def enter(self, session: AsyncSession, limit: float,
                    sid: concurrent.futures.Future[str] | None = None) -> None:
        """Start `session` (under `sid`, an id asked for ahead, if it came), waiting at most `limit` seconds
        (StartTimeout). A start given up, at the limit or cancelled, is still owned: the server may finish it later
        (a slow environment constructor), so the session is closed as soon as its start ends, a close tracked as
        every other (close_all() and the exit wait for it)."""
        entering, began = asyncio.ensure_future(_start(session, sid)), time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.shield(entering), limit)
        except BaseException as exc:
            if entering.done():
                raise
            running = client.running()
            if running is not None:
                running.track(self._end_when_started(session, entering, limit, began))
            if isinstance(exc, TimeoutError):
                raise StartTimeout(f"no answer within {limit:g}s") from None
            raise

    async def _end_when_started(self, session: AsyncSession, entering: asyncio.Future[Any], limit: float,
                                began: float) -> None:
        try:
            await entering
        except BaseException:  # noqa: BLE001, S110 - it never opened: the SDK's exit still cleans up after it
            pass
        else:
            client.once(f"late-start-{self.pin.module}", logging.WARNING, "orsgen: %s: a session start given up after "
                        "%gs (ORSGEN_RESET_TIMEOUT) was answered after %.0fs: that session is closed at once (counted "
                        "in orsgen/starts_given_up); raise ORSGEN_RESET_TIMEOUT if the environment starts this slowly",
                        self.pin.target, limit, time.perf_counter() - began)
        try:
            await end(session, None)
        finally:
            self.slots.release(session)

    def _session(self, env: AsyncEnvironment, connection: Connection, split: str, index: int) -> AsyncSession:
        """A session on the pinned task spec when the module pinned its tasks, else on split and index."""
        spec = self.pin.pinned_spec(split, index)
        if spec is None:
            session = env.session(split=split, index=index, secrets=connection.secrets)
        else:
            from openreward.api.environments.types import Task

            task = Task(server_name=env.name, environment_name=self.pin.env or env.name, task_spec=spec,
                        namespace=env.namespace)
            session = env.session(task=task, secrets=connection.secrets)
        client.delete_once(session)
        client.first_ping_later(session)
        return session

    def started(self) -> None:
        self.failures.started()

    def sids(self, env: AsyncEnvironment, connection: Connection) -> Sids | None:
        """The session ids asked for ahead for `connection`'s starts (None: this SDK cannot start under one)."""
        key = (self, env, connection.key())
        found = _held().sids.get(key)
        if found is None:
            template = env.session(split="", index=0, secrets=connection.secrets)  # its headers: each start's
            if not client.can_start_with(template):
                return None
            found = _held().sids.setdefault(key, Sids(functools.partial(client.ask_sid, template),
                                                      functools.partial(client.give_back, template), _tracked))
        return found

    def failed_start(self, connection: Connection, split: str, index: int, exc: BaseException, settings: Settings,
                     in_batch: bool, who: str) -> str:
        """Why a task could not start, in one line; raised as StartError when the settings say so (start_failures =
        "raise", at capacity, the environment looks down) and as WrongServer for a server without the environment."""
        self.check_server(connection.url, exc)
        reason = client.describe(exc)
        in_a_row, down_for = self.failures.failed((split, index), in_batch)
        where = f"{who}: task {index} of split {split!r}"
        if client.status(exc) == 429:
            raise StartError(f"{where}: the environment is at capacity after {settings.start_retries + 1} attempts "
                             f"({reason}): run fewer rollouts at once (per_device_train_batch_size, "
                             "max_inflight_tasks) or raise the environment's capacity") from None
        if settings.start_failures == "raise":
            raise StartError(f"{where} could not start: {reason}") from None
        if in_a_row >= settings.max_start_failures and down_for >= settings.down_after:
            raise StartError(f"{in_a_row} episodes in a row could not start and none has started for {down_for:.0f}s "
                             f"(down_after = {settings.down_after:g}): the environment looks down; last, {where}: "
                             f"{reason}") from None
        log.warning("orsgen: %s could not start, the episode is unscored: %s", where, reason)
        return reason

    def read_prompts(self, connection: Connection, split: str, indices: list[int],
                     settings: Settings) -> list[list[dict[str, Any]]]:
        """Each task's turns (`GET /messages`), read in short sessions, 8 at a time (dataset(prompts=True))."""
        from concurrent.futures import ThreadPoolExecutor

        env = self.environment(connection)
        quiet = replace(settings, check_drift=False, start_failures="raise")

        def read(index: int) -> list[dict[str, Any]]:
            future = client.loop().submit(self.open(env, connection, split, index, quiet, whole=True))
            try:
                session, turns = future.result()
            except DriftError:
                raise
            except Exception as exc:  # noqa: BLE001 - one line, as a reset that raises gives
                self.failed_start(connection, split, index, exc, quiet, False, "dataset()")
                raise AssertionError("unreachable: start_failures is 'raise'") from None
            self.started()
            closing = close(session)
            if closing is not None:
                with contextlib.suppress(Exception):  # the server reaps what it was not told
                    closing.result(timeout=settings.close_timeout)
            return list(turns)

        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(read, indices))

    # -- checks --------------------------------------------------------------------------------------------------

    async def check_drift(self, env: AsyncEnvironment, url: str | None, limit: float) -> None:
        """Compare the live tool list with the snapshot, once per process and server (on the runtime's loop)."""
        where = self.server(url) or self.pin.deployment
        if self._drift_lock is None:
            self._drift_lock = asyncio.Lock()
        async with self._drift_lock:
            if where in self._drift_checked:
                return
            tools = await asyncio.wait_for(env.list_tools(), limit)
            live = {t.name: bounds.canonical(bounds.tool({"description": t.description or "",
                                                          "input_schema": t.input_schema, "name": t.name}))
                    for t in tools}
            changes = bounds.changes(self.pin.snapshot["tools"], list(live.values()))  # as `orsgen --check` says them
            if changes:
                raise DriftError(
                    f"the tools at {where} differ from those pinned in {self.pin.module} ({self.pin.target}): "
                    f"{'; '.join(changes)}. Regenerate the module (`orsgen --check` shows the same), or set "
                    "ORSGEN_DRIFT_CHECK=0 to train anyway."
                )
            self._drift_checked.add(where)

    async def check_build(self, session: AsyncSession, url: str | None, limit: float) -> None:
        """Warn once per server when its build is not the one the module was generated against."""
        where = self.server(url) or self.pin.deployment
        if self.pin.build is None or where in self._builds_seen:
            return
        self._builds_seen.add(where)
        live = (await asyncio.wait_for(session.version(), limit)).get("build_sha")
        if live != self.pin.build:
            log.warning("orsgen: %s was generated against build %s of %s, the server now runs %s: the tools are "
                        "checked, but tasks, prompts or rewards may have changed", self.pin.module, self.pin.build,
                        self.pin.target, live)

    def check_server(self, url: str | None, exc: BaseException) -> None:
        """Raise WrongServer, one line, when a 404 came from a session server that does not serve the environment
        this module pins (`url=` or OPENREWARD_SESSION_URL pointing elsewhere)."""
        server = self.server(url)
        if client.status(exc) != 404 or server is None or self.pin.env is None or server in self._serves_env:
            return
        served = client.served(server)
        if served is None or self.pin.env.lower() in {name.lower() for name in served}:
            self._serves_env.add(server)  # asked once per server: its other 404s are the tasks' own
            return
        raise WrongServer(
            f"{server} serves {', '.join(served) or 'no environment'}, not {self.pin.env!r}, which {self.pin.module} "
            f"pins (target {self.pin.target}): point url= or OPENREWARD_SESSION_URL at the server of "
            f"{self.pin.env!r}, or regenerate the module for this server"
        ) from None


async def _start(session: AsyncSession, sid: concurrent.futures.Future[str] | None) -> Any:
    """The SDK's start, or the same under an id asked for ahead (one that did not come: the SDK's own start)."""
    given = None
    if sid is not None:
        with contextlib.suppress(Exception):
            given = await asyncio.wrap_future(sid)
    return await (client.start_with(session, given) if given is not None else session.__aenter__())


def _tracked(coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    """Run `coroutine` on the runtime's loop, tracked: close_all() and the exit wait for it."""
    return client.loop().track(coroutine)


def give_back_sids() -> list[concurrent.futures.Future[None]]:
    """Give back every session id asked for ahead and not taken (close_all, the exit)."""
    return [future for asked in list(_held().sids.values()) for future in asked.drain()]


async def end(session: AsyncSession | None, opening: concurrent.futures.Future[Any] | None,
              limit: float | None = None) -> None:
    """Close a session; one still opening is closed once it has opened, one whose opening never began (a planned
    one, cancelled here) never opens, one that failed or was left by the look-ahead (None) has nothing to close."""
    if opening is not None:
        if isinstance(opening, Planned) and opening.cancel():  # not begun: nothing was requested
            return
        try:
            opened = await asyncio.wrap_future(opening)
        except BaseException:  # noqa: BLE001 - it never opened (or closed itself on failure)
            return
        if opened is None:  # left by the look-ahead: never opened
            return
        session = opened[0]
    if session is not None:  # closing, so no longer held: close_all() and the exit wait for the close itself
        waiting = _held().holds.get(session)
        if waiting is not None:  # its group is still to be scored on it (bounded: then the score is given up)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(waiting)), client.timeout("tool"))
            release(session)
        owner = _held().open.pop(session, None)
        try:
            await asyncio.wait_for(session.__aexit__(None, None, None), limit or client.timeout("close"))
        finally:  # closed, or given up on (the server reaps it): its place in the budget is free
            if owner is not None:
                owner.slots.release(session)


def close(session: AsyncSession | None = None,
          opening: concurrent.futures.Future[Any] | None = None) -> concurrent.futures.Future[None] | None:
    """Close a session (or one still opening) on the runtime's loop, tracked so close_all() and exit wait for it;
    the close's future, or None when there is nothing to close or the loop is gone (the server reaps it)."""
    if session is None and opening is None:
        return None
    running = client.running()
    if running is None:
        return None  # the loop is gone (interpreter exit): the server reaps the session
    future = running.track(end(session, opening))
    if session is not None or opening is not None and opening.done():  # frees a place
        freeing = _held().freeing
        freeing.add(future)
        future.add_done_callback(freeing.discard)
    return future


def freeing() -> list[concurrent.futures.Future[None]]:
    """The closes in flight of sessions that were open: what frees places on servers (a batch waits for them)."""
    return list(_held().freeing)


def held(opener: Sessions | None = None) -> int:
    """Sessions open on a server right now (opened, and no close sent yet): `opener`'s, or every environment's."""
    return sum(1 for owner in list(_held().open.values()) if opener is None or owner is opener)


def hold(session: AsyncSession) -> None:
    """Keep `session` open for a later request of its own (a group's score, AsyncGRPOTrainer's worker): its close
    waits until `release(session)`, at most ORSGEN_TOOL_TIMEOUT seconds (the bound of a group's scoring)."""
    _held().holds.setdefault(session, concurrent.futures.Future())


def release(session: AsyncSession | None) -> None:
    """Let `session` close: what `hold` kept."""
    waiting = _held().holds.pop(session, None) if session is not None else None
    if waiting is not None and not waiting.done():
        waiting.set_result(None)


def release_all() -> None:
    for session in list(_held().holds):
        release(session)


def close_held() -> list[concurrent.futures.Future[None]]:
    """Close every session an opener still holds (close_all, once the adapters and the look-ahead let theirs go)."""
    return [f for f in (close(session) for session in list(_held().open)) if f is not None]


def wait_closing() -> None:
    """Wait (bounded, ORSGEN_CLOSE_TIMEOUT) for every close sent in the background."""
    running = client.running()
    if running is not None:
        concurrent.futures.wait(list(running.closing), timeout=client.timeout("close"))
