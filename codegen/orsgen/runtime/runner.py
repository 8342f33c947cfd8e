"""One adapter's episodes, one at a time: what `Adapter` hands its work to (adapter.py keeps runtime API 1's names and
delegates). A `Runner` resets (the task, the session opened in line, ahead or in the background, the start-failure
contract), calls tools through the one call path (toolcall.py), reads the reward once and closes. What is the batch's
(the slots and tasks, open-ahead, a turn's calls, closing once rewards are read) it asks of its `Batch` (batch.py),
to which it is a `Member`; AsyncGRPOTrainer's worker's groups are scoring.py's.
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
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from orsgen.runtime import ahead, calls, client, messages, scoring, sessions, toolcall, trl
from orsgen.runtime.batch import Batch, closed_at_rewards, place, task, turn
from orsgen.runtime.budgets import Budgets
from orsgen.runtime.episode import Episode, Unscored, session_opened
from orsgen.runtime.errors import DriftError
from orsgen.runtime.process import STATE
from orsgen.runtime.sessions import Connection, Planned
from orsgen.runtime.settings import BY_NAME, Settings, resolve
from orsgen.runtime.sids import Sids
from orsgen.runtime.tasks import Order

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncEnvironment, AsyncSession

    from orsgen.runtime.pinned import Pinned

log = logging.getLogger("orsgen")


class Runner:
    """The episodes of one adapter (held weakly: the adapter holds its runner), of the class `cls` pinning `pinned`."""

    def __init__(self, adapter: Any, url: str | None, split: str | None, api_key: str | None,
                 secrets: Mapping[str, Any] | None, given: Mapping[str, Any],
                 own_calls: Callable[[type], bool]) -> None:
        """The runner of a new adapter (its constructor's arguments, refused here in one line), counted live."""
        self._adapter = weakref.ref(adapter)
        self._cls: type = type(adapter)
        self._own_calls = own_calls  # whether a class makes its calls itself (its own `_call`: adapter.py's to say)
        name = self.cls.__name__
        if split is not None:  # refused here, not as every episode going unscored
            self.pinned.refuse_split(split, f"{name}(split={split!r})")
        if secrets is None:
            secrets = self.pinned.generated_secrets(name)
        refused = client.refused_secret(secrets)
        if refused is not None:
            raise ValueError(f"{name}(secrets=...): {refused}")
        for secret in client.replaced_secrets(secrets):
            client.once(f"secret-{secret}", logging.WARNING, "orsgen: the secret %r is replaced by the openreward SDK "
                        "with the API key (OPENREWARD_API_KEY or api_key=), so the environment never gets the value "
                        "given: pass it as api_key= instead", secret)
        unknown = sorted(set(given) - set(BY_NAME))
        if unknown:  # a misspelt key would otherwise be a setting silently not applied
            raise ValueError(f"{name}(settings=...): no setting {unknown[0]!r}: one of {', '.join(BY_NAME)}")
        self.connection, self.given, self.split = Connection(url, api_key, secrets), given, split or self.pinned.split
        self.env: AsyncEnvironment | None = None  # the SDK's handle, made at the first reset
        self.episode: Episode[Any] = Episode(adapter, self.split)  # none began yet
        # The trainer batch the last reset was placed in, held weakly: its trainer holds it (batch.py), and it holds
        # the batch's adapters, each holding its runner; the runner does not hold them back.
        self._batch: weakref.ref[Batch] | None = None
        self.in_batch = False
        register(self)

    @property
    def adapter(self) -> Any:
        return self._adapter()

    @property
    def cls(self) -> type:
        """The adapter's class, as it is now (a class may be swapped under an instance: a subclass timing it)."""
        adapter = self.adapter
        return type(adapter) if adapter is not None else self._cls

    @property
    def pinned(self) -> Pinned:
        return self.cls.pinned  # type: ignore[attr-defined, no-any-return]

    @property
    def order(self) -> Order:
        return self.pinned.order

    @property
    def batch(self) -> Batch | None:
        return self._batch() if self._batch is not None else None

    def settings(self) -> Settings:
        return resolve(self.cls, self.given)

    def split_of(self, row: Mapping[str, Any]) -> str:
        return row.get("split") or self.split

    def environment(self) -> AsyncEnvironment:
        if self.env is None:
            self.env = self.pinned.sessions.environment(self.connection)
        return self.env

    def size(self, env: AsyncEnvironment, split: str) -> int:
        return self.pinned.num_tasks(env, split, self.connection.url)

    def secrets(self) -> list[str]:
        """Its API key and the secret values it sends, as strings (adapter.secrets_of)."""
        given = [value[0] if isinstance(value, tuple | list) and value else value  # (value, allowed domains)
                 for value in (self.connection.secrets or {}).values()]
        values = [self.connection.api_key, os.environ.get("OPENREWARD_API_KEY"), *given]
        return [str(value) for value in values if value is not None and str(value)]

    def task_spec(self, split: str, index: int) -> Any:
        """A task's spec: the pinned one, else the server's (one request)."""
        spec = self.pinned.pinned_spec(split, index)
        if spec is None:
            spec = client.loop().run(self.environment().get_task(split, index), "reset").task_spec
        return spec

    def follow(self, trainer: Any) -> None:
        from orsgen.runtime import curriculum

        curriculum.follow(trainer, self.pinned)

    # -- a reset -------------------------------------------------------------------------------------------------

    def reset(self, row: Mapping[str, Any]) -> Any:
        """Adapter.reset: close the previous episode, begin the next on the row's task and return its prompt."""
        adapter = self.adapter
        self.episode.end(None)  # an episode closed before its reward was read
        calls.drop(adapter)  # what was started ahead for the last episode and TRL never called
        previous = self.detach()
        began = time.perf_counter()
        split = self.split_of(row)
        self.episode = Episode(adapter, split)  # what the last episode held is gone, whatever happens below
        try:
            if row.get("split"):  # a row of a split the module did not pin: every episode would go unscored
                self.pinned.refuse_split(split, f"{self.cls.__name__}.reset(split={split!r})")
            config = self.settings()  # refused before any request
            budgets = Budgets(self.pinned.budgets, config, module=self.pinned.module, snapshot=self.pinned.snapshot)
            env = self.environment()
            where, batch, first = place(adapter, row, runner_of)
            self._batch, self.in_batch = (None if batch is None else weakref.ref(batch)), batch is not None
            facts = where.batch
            if first and facts is not None and config.max_sessions is not None:
                _within_budget(self.pinned, facts.adapters, config.max_sessions)
            messages.note(self.pinned.conversations, self.split, facts.rows if facts is not None else [row])
            stream = facts.stream if facts is not None else None
            index = task(self, env, split, row, config, where, batch, facts.index if facts is not None else 0)
            group = facts.slot(facts.index).position if facts is not None else None
            if facts is None and (rollout := trl.worker_rollout(adapter, ended=False)) is not None:
                stream, group = "train", rollout.group  # AsyncGRPOTrainer's worker: TRL's group of the rollout
            episode = self.episode = Episode(adapter, split, index, stream, config, began, budgets, group)
            ahead_of = batch if config.open_ahead is not False else None
            first = first and ahead_of is not None
            if ahead_of is not None and first:  # what the last batch holds is closed before this one opens anything
                held, previous = previous, (None, None)
                ahead_of.begin(self, held)
            # Owned before anything is requested: a reset interrupted from here on (Ctrl-C while the session
            # starts) leaves the session to this adapter, and close_all(), exit or collection close it.
            opening = episode.opening = Planned()
            seat = self.seat(env, split, index, stream, config)
            start, taken = ahead_of.start(seat) if ahead_of is not None else (seat.start(first=0), False)
            if not taken and not first:
                _notice(where)
            client.loop().submit(sessions.fill(opening, start))
            if ahead_of is not None and first:
                ahead_of.open_ahead(self, facts.index, opening)  # type: ignore[union-attr]
        finally:  # but at a batch's first reset, the previous session is closed once this one's start is on its way
            sessions.close(*previous)
        if config.open_in_background and isinstance(row.get("task_prompt"), str):
            episode.expected = row["task_prompt"]
            opening.add_done_callback(episode.opened)  # its limit counts from the session's start, not the reset's
            return row["task_prompt"]
        try:
            session, prompt = opening.result()
        except DriftError:
            episode.opening = None
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stopped the task from starting
            episode.opening = None
            prompt = self.start_failed(episode, exc)
        else:
            episode.session, episode.opening = session, None
            self.pinned.sessions.started()
        episode.started(prompt)
        return prompt

    def seat(self, env: AsyncEnvironment, split: str, index: int, stream: str | None,
             config: Settings) -> ahead.Seat:
        """What opens this adapter's session on a task (for a `stream` batch), in line or ahead."""
        start = functools.partial(self.pinned.sessions.open, env, self.connection, split, index, config,
                                  report=session_opened(self.adapter, split, index, stream))
        return ahead.Seat(self.pinned.ahead, (self.connection.key(), split, index), start)

    def sids(self) -> Sids | None:
        return self.pinned.sessions.sids(self.environment(), self.connection)

    def start_failed(self, episode: Episode[Any], exc: BaseException) -> str:
        """Void the episode (or raise, as configured); the prompt the trainer gets for a task that did not start."""
        index = episode.task_index or 0
        reason = self.pinned.sessions.failed_start(self.connection, episode.split, index, exc, episode.settings,
                                                   self.in_batch, self.cls.__name__)
        episode.refuse(Unscored.NOT_STARTED, f"task {index} could not start ({reason})")
        return f"(task {index} could not start: this episode is not scored)"

    def settle(self, opening: concurrent.futures.Future[Any]) -> None:
        """The session opened in the background (the first call waits, bounded); a failure or a stale prompt voids
        the episode; tools that drifted from the module's raise DriftError, as an in-line start does."""
        episode = self.episode
        if episode.opening is not opening:  # settled by a concurrent call
            return
        episode.opening = None
        try:
            session, live = opening.result(timeout=episode.settings.reset_timeout)
        except Exception as exc:
            if isinstance(exc, DriftError):  # as loud as in line: kept, so the reward read raises it too (TRL
                episode.opening = opening    # shows a tool's exception to the model, but not get_reward's)
                raise
            if isinstance(exc, concurrent.futures.TimeoutError):
                sessions.close(None, opening)  # closed once it does open
            episode.started(self.start_failed(episode, exc))
            return
        episode.session = session
        self.pinned.sessions.started()
        if live != episode.expected:
            episode.prompt_mismatch = str(live)
            episode.refuse(Unscored.STALE_PROMPT,
                           "the task's live prompt differs from the one in the dataset (prompt_mismatch holds it)")
        episode.started(live)

    def settle_unused(self) -> None:
        """A session opened in the background that no tool call settled is settled before its reward is read: one
        that did not start, or whose live prompt differed, gives None, never `unscored_reward`."""
        if self.episode.opening is not None and self.episode.expected is not None:
            self.settle(self.episode.opening)

    # -- the reward, read once ----------------------------------------------------------------------------------

    def reward(self) -> float | None:
        """Adapter.get_reward: the episode's reward, read once (its end); once TRL has read the batch's last reward,
        the batch's sessions close."""
        adapter = self.adapter
        rollout = trl.worker_rollout(adapter, ended=True)  # AsyncGRPOTrainer's worker: its group, its turns
        if rollout is not None:
            self.episode.turns = (rollout.prompt, rollout.completion)
        self.settle_unused()
        reward = self.episode.reward_read()
        if rollout is not None and scoring.wanted(rollout):
            scoring.ended(self.episode, rollout)
        environments = trl.rewards_read(adapter)
        if environments is not None:  # TRL is done with the batch: its sessions close while the trainer trains on it
            if (batch := self.batch) is not None:
                batch.rewards_read(environments)
            else:
                closed_at_rewards(environments, runner_of)
        return reward

    # -- tool calls: the one path (toolcall.py) -----------------------------------------------------------------

    def call(self, name: str, payload: dict[str, Any]) -> Any:
        """A tool call in line: the outcome of the one started ahead for it, or the call itself."""
        started = calls.take(self.adapter, name, payload)
        if started is not None:  # run ahead by the turn's first call, reported when it ran
            with contextlib.suppress(concurrent.futures.CancelledError):  # dropped by close_all: run it here
                return started.result()
        episode = self.episode
        if episode.opening is not None:
            self.settle(episode.opening)
        batch = self.batch  # (outside a placed batch, TRL's loop may still be read, or say why not)
        # This call's request first, then the turn's later calls: the runtime's loop sends them in that order.
        return toolcall.run(toolcall.steps(episode, name, payload),
                            then=functools.partial(batch.turn, self) if batch is not None else
                            functools.partial(turn, self, runner_of))

    async def acall(self, name: str, payload: dict[str, Any]) -> Any:
        """An async tool's call: awaited on the caller's loop (never blocking it) while the runtime's loop does the
        request."""
        episode = self.episode
        if episode.settings.batch_calls and trl.async_tool_thread():
            client.once("batch-calls-async", logging.INFO, "orsgen: async tools run as GRPOTrainer gathers them, one "
                        "rollout at a time: a turn's calls run at once across the batch with sync tools")
        if episode.opening is not None:
            opening = episode.opening
            with contextlib.suppress(Exception):  # settled below, with the one message for it
                await asyncio.wait_for(asyncio.wrap_future(opening), episode.settings.reset_timeout)
            self.settle(opening)
        return await toolcall.arun(toolcall.steps(episode, name, payload))

    async def call_ahead(self, name: str, arguments: dict[str, Any]) -> Any:
        """A call started ahead of TRL's (calls.py), on the runtime's loop: what `call` sends and records, with the
        outcome TRL's own call would have had, reported once (its hooks run on the runtime's loop thread)."""
        return await toolcall.arun(toolcall.steps(self.episode, name, arguments), here=True)

    def capture(self, call: trl.Call) -> calls.Captured | None:
        """What a later call of the turn sends, read without sending it: only a plain tool method of an orsgen module
        (not a subclass's own, not async) on an adapter whose episode has started in line."""
        func = getattr(call.method, "__func__", None)
        if self._own_calls(self.cls) or self.episode.opening is not None:
            return None
        defining = next((c for c in self.cls.__mro__ if any(v is func for v in vars(c).values())), None)
        if defining is None or defining.__module__ != self.pinned.module:
            return None  # a method of the user's own subclass may do more than send: it runs as TRL calls it
        if asyncio.iscoroutinefunction(func):
            return None
        if not self.episode.settings.batch_calls:
            return None
        try:
            with calls.capture():
                captured = call.method(**call.arguments)
        except Exception:  # noqa: BLE001 - not a call that can be read: TRL's own call says what is wrong with it
            return None
        return captured if isinstance(captured, calls.Captured) else None

    # -- closing ------------------------------------------------------------------------------------------------

    def detach(self) -> tuple[AsyncSession | None, concurrent.futures.Future[Any] | None]:
        """The episode's session (or its opening), handed to whoever closes it."""
        episode = self.episode
        held = episode.session, episode.opening
        episode.session = episode.opening = None
        return held

    def close(self, wait: bool = False, rewards_read: bool = False) -> concurrent.futures.Future[None] | None:
        """End the open session, if any: once GRPOTrainer has read its batch's rewards (`rewards_read`), else at the
        next reset (a batch's first reset: every adapter's of the batch), on close_all(), at exit and on garbage
        collection. The server is told in the background, so the next rollout does not wait for it; `wait=True`
        waits (bounded). The close's future, if one was sent."""
        self.episode.end(None)  # an episode closed before its reward was read
        if rewards_read:
            self.episode.closed = "its session closed once the trainer had read the batch's rewards"
        future = sessions.close(*self.detach())
        if wait and future is not None:
            with contextlib.suppress(Exception):  # the server reaps what it was not told
                future.result(timeout=client.timeout("close"))
        return future


def _notice(where: trl.Place) -> None:
    """Say once when open-ahead cannot engage inside a trainer, instead of turning off unseen."""
    if where.inside is not None:
        client.once("ahead-off", logging.INFO, "orsgen: open-ahead is off inside %s: %s", where.inside, where.why)
    elif where.batch is None and trl.rollout_thread():
        client.once("ahead-thread", logging.INFO, "orsgen: open-ahead does not engage in thread %r, outside "
                    "GRPOTrainer's batch (AsyncGRPOTrainer overlaps its rollouts itself)",
                    threading.current_thread().name)


def _live() -> weakref.WeakKeyDictionary[Any, Runner]:
    """Each live adapter's runner (weakly, by adapter: the adapter holds its runner), held by process.STATE."""
    return STATE.part("runners", weakref.WeakKeyDictionary)


def register(runner: Runner) -> None:
    """A new adapter's runner: counted among the live ones, with what the process needs from then on (once each):
    what closes the sessions still open at exit and, in AsyncGRPOTrainer's worker, the release of its stop event."""
    client.on_exit(_exit_closers)
    _guard_stop()
    _live()[runner.adapter] = runner


def runner_of(adapter: Any) -> Runner | None:
    """The runner of an orsgen adapter; None for an environment of another kind (TRL's multi-environment mode)."""
    try:
        return _live().get(adapter)
    except TypeError:  # an environment that cannot be weakly referenced: not an orsgen adapter
        return None


def runners() -> list[Runner]:
    return list(_live().values())


def _guard_stop() -> None:
    """In AsyncGRPOTrainer's worker, its stop event is set at this process's exit (trl.stop_event), once: whatever
    the worker dies of, the trainer's stop() returns."""
    event = trl.stop_event()
    guarded: list[Any] = STATE.part("stop events", list)
    with STATE.lock:
        if event is None or any(e is event for e in guarded):
            return
        guarded.append(event)
    STATE.at_exit("release worker", functools.partial(trl.release_stop_watcher, event))


def close_all() -> None:
    """Close every open session of every adapter and wait (bounded) until the server has them closed.
    GRPOTrainer never closes its environments: this also runs at exit, and garbage collection closes too."""
    calls.cancel_all()
    sessions.release_all()  # groups still to be scored are not: their sessions close now
    for runner in runners():
        runner.close()
    for left in ahead.drain_all():
        sessions.close(None, left)
    sessions.give_back_sids()
    sessions.wait_closing()
    sessions.close_held()  # what no adapter or store held any more (a reader's, a late look-ahead's)
    sessions.wait_closing()


def open_sessions() -> int:
    """Sessions this process holds open on environment servers right now (every adapter's, and those opened
    ahead): 0 after close_all()."""
    return sessions.held()


def _exit_closers() -> list[Any]:
    """At exit: the close coroutines of what every runner and the look-ahead still hold."""
    calls.cancel_all()
    sessions.release_all()
    closers = [sessions.end(None, left) for left in ahead.drain_all()]
    sessions.give_back_sids()  # tracked: the exit waits for them
    for runner in runners():
        held = runner.detach()
        if held != (None, None):
            closers.append(sessions.end(*held))
    return closers


def _within_budget(pinned: Pinned, adapters: list[Any], budget: int) -> None:
    """A trainer's batch holds its sessions from its resets until its rewards are read: past the sessions budget,
    a reset would wait for ever. Refused, one line."""
    rollouts = sum(1 for env in adapters if (member := runner_of(env)) is not None and member.pinned is pinned)
    if rollouts > budget:
        raise ValueError(f"max_sessions = {budget} (ORSGEN_MAX_SESSIONS) is below the {rollouts} rollouts of "
                         f"{pinned.target} in this process's batch, which hold their sessions until the batch's rewards "
                         f"are read: raise it to at least {rollouts}, or lower per_device_train_batch_size")
