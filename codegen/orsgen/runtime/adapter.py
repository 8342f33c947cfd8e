"""The adapter base class: one environment's episodes, one at a time. A generated class adds one typed method per tool.

Only ``reset`` and ``get_reward`` are public functions: TRL offers every other public function of an environment
class to the model as a tool, so everything else here starts with ``_``, and no other module reads it: the episode is
an `Episode` (episode.py) that `episode_of` hands to reward functions and group scoring; sessions open through the
environment's opener (`pinned.sessions`), ahead of their resets through `ahead`; settings come from `settings`.
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
from collections.abc import Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from orsgen.runtime import ahead, calls, client, messages, scoring, sessions, settings, trl
from orsgen.runtime.budgets import Budgets, no_answer
from orsgen.runtime.episode import Episode, Unscored, session_opened
from orsgen.runtime.errors import DriftError, TimedOut, ToolError
from orsgen.runtime.sessions import Connection, Planned
from orsgen.runtime.toolerrors import failures, short, tool_error

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncEnvironment, AsyncSession

    from orsgen.runtime.pinned import Pinned

log = logging.getLogger("orsgen")


class _Unset:
    """Default of optional tool arguments: an argument the model leaves out is not sent, so the server's default
    (or default_factory) applies."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
_live: weakref.WeakSet[Adapter] = weakref.WeakSet()
_SETTINGS = settings.BY_NAME  # (`settings` is also __init__'s argument)


def close_all() -> None:
    """Close every open session of every adapter and wait (bounded) until the server has them closed.
    GRPOTrainer never closes its environments: this also runs at exit, and garbage collection closes too."""
    calls.cancel_all()
    sessions.release_all()  # groups still to be scored are not: their sessions close now
    for adapter in list(_live):
        adapter._close()
    for left in ahead.drain_all():
        sessions.close(None, left)
    sessions.wait_closing()
    sessions.close_held()  # what no adapter or store held any more (a reader's, a late look-ahead's)
    sessions.wait_closing()


def _exit_closers() -> list[Coroutine[Any, Any, None]]:
    calls.cancel_all()
    sessions.release_all()
    closers = [sessions.end(None, left) for left in ahead.drain_all()]
    for adapter in list(_live):
        held = adapter._detach()
        if held != (None, None):
            closers.append(sessions.end(*held))
    return closers


client.on_exit(_exit_closers)


def episode_of(env: Any) -> Episode[Adapter] | None:
    """The episode an orsgen adapter is in, a session still opening in the background settled first (what reward
    functions and group scoring read); None for an environment of another kind (TRL's multi-environment mode)."""
    if not isinstance(env, Adapter):
        return None
    env._settle_unused()
    return env._episode_now


def call_tool(env: Adapter, name: str, arguments: dict[str, Any]) -> Any:
    """Call one of the environment's tools as the model would (a terminal tool, from a reward function): its
    result, or ToolError."""
    return env._call(name, arguments)


def close_episode(env: Adapter, wait: bool = True) -> None:
    """End an adapter's episode (unread, when nothing read its reward) and close its session, waiting (bounded) for
    the server when `wait`: what `orsgen eval` does once it has an episode's reward."""
    env._close(wait=wait)


def secrets_of(env: Adapter) -> list[str]:
    """The values an adapter must never let out of the process (trajectory records, uploads): its API key and the
    secrets it sends, as strings."""
    connection = env._connection
    given = [value[0] if isinstance(value, tuple | list) and value else value  # (value, allowed domains)
             for value in (connection.secrets or {}).values()]
    values = [connection.api_key, os.environ.get("OPENREWARD_API_KEY"), *given]
    return [str(value) for value in values if value is not None and str(value)]


def task_spec(env: Adapter, split: str, index: int) -> Any:
    """A task's spec: the pinned one when the module pinned its tasks, else the server's (one request; not on the
    trainer's thread: trajectory records read it on their writer's)."""
    spec = env.pinned.pinned_spec(split, index)
    if spec is None:
        spec = client.loop().run(env._environment().get_task(split, index), "reset").task_spec
    return spec


def open_sessions() -> int:
    """Sessions this process holds open on environment servers right now (every adapter's, and those opened
    ahead): 0 after close_all()."""
    return sessions.held()


class Adapter:
    """Session handling and episode state for one environment (``pinned``), shared by its generated classes.

    The class settings below are read at every reset with the rest of `settings.SETTINGS` (environment variables,
    ``settings={...}``): a value no episode could start with is refused there, in one line.
    """

    pinned: ClassVar[Pinned]
    open_in_background: ClassVar[bool] = False  # with rows from dataset(prompts=True): reset() returns at once
    task_seed: ClassVar[int] = 0  # seed of the task order of resets without task_index
    unscored_reward: ClassVar[float | None] = None  # what get_reward() gives an episode no tool scored
    start_failures: ClassVar[str] = "skip"  # "skip": an episode that cannot start is unscored; "raise": reset raises
    start_retries: ClassVar[int] = 2  # further attempts at a start that failed for a transient reason
    # The run stops when no start has worked for `down_after` seconds (from the first failure, after its retries)
    # and at least `max_start_failures` tasks failed in a row: a server restart shorter than that ends nothing.
    down_after: ClassVar[float] = 300.0
    max_start_failures: ClassVar[int] = 8
    # True: a batch's first reset opens the rest of the batch's sessions (ahead.py); "next-step": with environment-
    # owned data, it also opens the next step's, once the batch's are open; False: every reset opens its own.
    open_ahead: ClassVar[bool | str] = True

    def __init__(
        self,
        *,
        url: str | None = None,
        split: str | None = None,
        api_key: str | None = None,
        secrets: Mapping[str, Any] | None = None,
        check_drift: bool | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        trl.guard_stop()  # in AsyncGRPOTrainer's worker: whatever it dies of, the trainer's stop() returns
        name = type(self).__name__
        self._split = split or self.pinned.split
        if split is not None:  # refused here, not as every episode going unscored
            self.pinned.refuse_split(split, f"{name}(split={split!r})")
        if secrets is None:
            secrets = _generated_secrets(self.pinned, name)
        refused = client.refused_secret(secrets)
        if refused is not None:
            raise ValueError(f"{name}(secrets=...): {refused}")
        for secret in client.replaced_secrets(secrets):
            client.once(f"secret-{secret}", logging.WARNING, "orsgen: the secret %r is replaced by the openreward SDK "
                        "with the API key (OPENREWARD_API_KEY or api_key=), so the environment never gets the value "
                        "given: pass it as api_key= instead", secret)
        self._connection = Connection(url, api_key, secrets)
        self._given = {**(settings or {}), **({} if check_drift is None else {"check_drift": check_drift})}
        unknown = sorted(set(self._given) - set(_SETTINGS))
        if unknown:  # a misspelt key would otherwise be a setting silently not applied
            raise ValueError(f"{name}(settings=...): no setting {unknown[0]!r}: one of {', '.join(_SETTINGS)}")
        self._env: AsyncEnvironment | None = None
        self._episode_now: Episode[Adapter] = Episode(self, self._split)  # none began yet
        self._in_batch = False  # the last reset was placed in a trainer's batch
        _live.add(self)

    # -- the episode's state, for reward functions and shaping (API 1's attribute names) -------------------------

    @property
    def reward(self) -> float | None:
        """The last reward a tool returned (None: none yet)."""
        return self._episode_now.reward

    @property
    def rewards(self) -> list[float | None]:
        """Every tool call's reward, in order."""
        return self._episode_now.rewards

    @property
    def metadata(self) -> dict[str, Any] | None:
        """The last metadata a tool returned."""
        return self._episode_now.metadata

    @property
    def finished(self) -> bool:
        """A tool said the episode is finished (or the environment ended its session)."""
        return self._episode_now.finished

    @property
    def last_output(self) -> Any:
        """The last tool output, as the SDK gave it."""
        return self._episode_now.last_output

    @property
    def task_index(self) -> int | None:
        """The episode's task."""
        return self._episode_now.task_index

    @property
    def prompt_mismatch(self) -> str | None:
        """The live prompt, when it differed from the dataset's (the episode is then void)."""
        return self._episode_now.prompt_mismatch

    # -- episodes ------------------------------------------------------------------------------------------------

    def reset(self, **row: Any) -> Any:
        """Close the previous episode, open a session on ``row["task_index"]`` and return the task's prompt.

        Without a ``task_index`` (``GRPOTrainer`` with no ``train_dataset``: the environment owns the data), the task
        follows from the rollout's place in the trainer's batch (step, rank, position), so the rollouts of a GRPO
        group share a task on every rank; outside a trainer it is the first task of that order.

        A task that cannot start (after ``start_retries`` more attempts at a transient failure) gives an unscored
        episode: a warning, every tool call fails, ``get_reward()`` is None. ``start_failures = "raise"`` raises
        instead; ``max_start_failures`` failures in a row stop the run.

        Inside a GRPOTrainer batch, the batch's first reset opens the sessions of its following resets at once
        (``open_ahead``); they take them, so a batch pays about one start. With ``open_ahead = "next-step"`` and
        environment-owned data, it also opens the next step's sessions once this batch's are open.

        With ``open_in_background = True`` and a row holding ``task_prompt`` (``dataset(prompts=True)``), the pinned
        prompt is returned at once and the session opens in the background; the first tool call waits for it. A live
        prompt that differs voids the episode (``prompt_mismatch`` then holds it).
        """
        self._episode_now.end(None)  # an episode closed before its reward was read
        calls.drop(self)  # what was started ahead for the last episode and TRL never called
        previous = self._detach()
        began = time.perf_counter()
        split = row.get("split") or self._split
        self._episode_now = Episode(self, split)  # what the last episode held is gone, whatever happens below
        try:
            if row.get("split"):  # a row of a split the module did not pin: every episode would go unscored
                self.pinned.refuse_split(split, f"{type(self).__name__}.reset(split={split!r})")
            config = settings.resolve(type(self), self._given)  # refused before any request
            budgets = Budgets(self.pinned.budgets, config, module=self.pinned.module, snapshot=self.pinned.snapshot)
            env = self._environment()
            where = trl.place(self, row)
            self._in_batch = where.batch is not None
            if where.batch is not None and config.max_sessions is not None:
                _within_budget(self.pinned, where.batch.adapters, config.max_sessions)
            messages.note(self.pinned.conversations, self._split, where.batch.rows if where.batch else [row])
            stream = where.batch.stream if where.batch is not None else None
            index = self._task(env, split, row, where, config)
            group = where.batch.slot(where.batch.index).position if where.batch is not None else None
            if where.batch is None and (rollout := trl.worker_rollout(self, ended=False)) is not None:
                stream, group = "train", rollout.group  # AsyncGRPOTrainer's worker: TRL's group of the rollout
            episode = self._episode_now = Episode(self, split, index, stream, config, began, budgets, group)
            batch = where.batch if config.open_ahead is not False else None
            first = batch is not None and not any(isinstance(a, Adapter) for a in batch.adapters[:batch.index])
            if batch is not None and first:  # what the last batch holds is closed before this one opens anything
                held, previous = previous, (None, None)
                self._close_batch(batch, held)
            # Owned before anything is requested: a reset interrupted from here on (Ctrl-C while the session
            # starts) leaves the session to this adapter, and close_all(), exit or collection close it.
            opening = episode.opening = Planned()
            seat = self._seat(env, split, index, stream, config)
            taken = self.pinned.ahead.take(batch.tag, seat.key) if batch is not None else None
            if taken is None and not first:
                self._notice(where)
            if batch is None or taken is None:  # after a failed look-ahead attempt for this task: its retry
                retry = batch is not None and self.pinned.ahead.repay(batch.tag, seat.key)
                start = seat.start(first=int(retry))
            else:
                start = ahead.take(taken, seat, batch.tag)
            client.loop().submit(sessions.fill(opening, start))
            if batch is not None and first:
                self._open_ahead(batch, opening)
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
            prompt = self._start_failed(episode, exc)
        else:
            episode.session, episode.opening = session, None
            self.pinned.sessions.started()
        episode.started(prompt)
        return prompt

    def get_reward(self) -> float | None:
        """The last reward a tool returned in this episode. An episode no tool scored gives ``unscored_reward``
        (None: GRPO leaves it out of its group's baseline); one that could not start, or that one of this module's
        reward functions already counted, gives None: a reward is never counted twice."""
        rollout = trl.worker_rollout(self, ended=True)  # AsyncGRPOTrainer's worker: its group, its turns
        if rollout is not None:
            self._episode_now.turns = (rollout.prompt, rollout.completion)
        self._settle_unused()
        reward = self._episode_now.reward_read()
        if rollout is not None and scoring.wanted(rollout):
            scoring.ended(self._episode_now, rollout)
        batch = trl.rewards_read(self)
        if batch is not None:  # TRL is done with the batch: its sessions close while the trainer trains on it
            for env in batch:
                if isinstance(env, Adapter):
                    env._close(rewards_read=True)
        return reward

    def _environment(self) -> AsyncEnvironment:
        if self._env is None:
            self._env = self.pinned.sessions.environment(self._connection)
        return self._env

    def _task(self, env: AsyncEnvironment, split: str, row: Mapping[str, Any], where: trl.Place,
              config: settings.Settings, position: int | None = None, rounds_ahead: int = 0) -> int:
        """The row's task_index; without one, the task of the rollout's slot in the trainer's batch (by
        `task_order`: the seeded shuffle, or by difficulty in training's batches)."""
        if row.get("task_index") is not None:
            if config.task_order != "shuffle" and (where.batch.stream == "train" if where.batch is not None
                                                   else trl.worker() is not None):
                # A WARNING, once, as TRL says of an option that has no effect: the run is right (the sampler's
                # order), only not what was asked. Not a refusal: evaluation and a job-wide ORSGEN_TASK_ORDER read
                # the same rows, and an evaluation batch (or `orsgen eval`) naming its tasks is no mistake.
                client.once("task-order-rows", logging.WARNING, "orsgen: task_order=%r has no effect here: the "
                            "training rows name their tasks (task_index), so the trainer's sampler orders them; it "
                            "orders environment-owned data (no train_dataset, or rows without task_index). With a "
                            "dataset, dataset(pass_rates=..., weight=True) weights its tasks", config.task_order)
            return int(row["task_index"])
        batch = where.batch
        if not where.placeable():
            raise RuntimeError(where.refusal())
        size = self.pinned.num_tasks(env, split, self._connection.url)
        if batch is None:  # a look at a prompt outside training: the first task of the order, shifting nothing
            return self.pinned.order.task(split, size, config.task_seed, trl.Slot("train", 0))
        at = batch.slot(batch.index if position is None else position, rounds_ahead)
        if config.task_order == "difficulty" and at.stream == "train":
            from orsgen.runtime import curriculum

            curriculum.follow(trl.placed_trainer(), self.pinned)  # before any draw: a resume restores the order
        return self.pinned.order.task(split, size, config.task_seed, at, config.task_order, config.task_pools)

    def _seat(self, env: AsyncEnvironment, split: str, index: int, stream: str | None,
              config: settings.Settings) -> ahead.Seat:
        """What opens this adapter's session on a task (for a `stream` batch), in line or ahead."""
        start = functools.partial(self.pinned.sessions.open, env, self._connection, split, index, config,
                                  report=session_opened(self, split, index, stream))
        return ahead.Seat(self.pinned.ahead, (self._connection.key(), split, index), start)

    def _start_failed(self, episode: Episode[Adapter], exc: BaseException) -> str:
        """Void the episode (or raise, as configured); the prompt the trainer gets for a task that did not start."""
        index = episode.task_index or 0
        reason = self.pinned.sessions.failed_start(self._connection, episode.split, index, exc, episode.settings,
                                                   self._in_batch, type(self).__name__)
        episode.refuse(Unscored.NOT_STARTED, f"task {index} could not start ({reason})")
        return f"(task {index} could not start: this episode is not scored)"

    # -- sessions opened ahead (ahead.py) ------------------------------------------------------------------------

    def _close_batch(self, batch: trl.Batch, held: tuple[AsyncSession | None, ahead.Opening | None]) -> None:
        """At a batch's first reset: close what the last batch left and wait for it (bounded, ORSGEN_CLOSE_TIMEOUT)
        before this batch opens anything, so a pool the size of one batch holds it: this adapter's session
        (`held`), those of the batch's other orsgen adapters (its reward functions and group scoring read them
        before this batch began) and what earlier batches of this stream left opened ahead."""
        closing = [sessions.close(*held)]
        closing += [other._close() for other in batch.adapters if isinstance(other, Adapter) and other is not self]
        closing += [sessions.close(None, left) for left in ahead.drain_all(keep=batch.tag)]
        closing += sessions.freeing()  # those closed once TRL read the batch's rewards: done by now, as a rule
        concurrent.futures.wait([f for f in closing if f is not None], timeout=client.timeout("close"))

    def _open_ahead(self, batch: trl.Batch, mine: ahead.Opening) -> None:
        """The batch's first reset, its own start sent: open the others' sessions and (open_ahead = "next-step")
        the next step's, once this batch's are open, all tied to the trainer that will take them."""
        owner = ahead.owner(trl.placed_trainer())
        ahead.open_batch(self._seats(batch, range(batch.index + 1, len(batch.adapters))), batch.tag, owner)
        if batch.more and self._episode_now.settings.open_ahead == "next-step":  # once this batch's are open: never competing
            if any(row.get("task_index") is not None for row in batch.rows):
                return  # a dataset's next rows are the sampler's: unknown here
            tag = (batch.stream, batch.first + batch.width)
            seats = self._seats(batch, range(len(batch.adapters)), rounds_ahead=1)
            ahead.open_next(seats, [mine, *ahead.openings(batch.tag)], tag, owner)

    def _seats(self, batch: trl.Batch, positions: range, rounds_ahead: int = 0) -> list[ahead.Seat]:
        """The seats of the batch's orsgen adapters at `positions` that open ahead (`rounds_ahead`: in the batch
        that many rounds later), each with its own adapter's settings, connection and task."""
        here, seats = trl.Place(batch), []
        for position in positions:
            other, row = batch.adapters[position], batch.rows[position]
            if not isinstance(other, Adapter):
                continue
            config = settings.resolve(type(other), other._given)
            if config.open_ahead is False:
                continue
            split, env = row.get("split") or other._split, other._environment()
            index = other._task(env, split, row, here, config, position, rounds_ahead)
            seats.append(other._seat(env, split, index, batch.stream, config))
        return seats

    def _notice(self, where: trl.Place) -> None:
        """Say once when open-ahead cannot engage inside a trainer, instead of turning off unseen."""
        if where.inside is not None:
            client.once("ahead-off", logging.INFO, "orsgen: open-ahead is off inside %s: %s", where.inside, where.why)
        elif where.batch is None and trl.rollout_thread():
            client.once("ahead-thread", logging.INFO, "orsgen: open-ahead does not engage in thread %r, outside "
                        "GRPOTrainer's batch (AsyncGRPOTrainer overlaps its rollouts itself)",
                        threading.current_thread().name)

    # -- tool calls ----------------------------------------------------------------------------------------------

    # Typed `str`, as the generated methods are (what TRL reads); a result holding images is a list of content
    # parts, which TRL takes too.
    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if calls.capturing():  # read by the turn's first call (calls.py): what this call sends, not sent
            return calls.Captured(name, _payload(arguments))  # type: ignore[return-value]
        started = calls.take(self, name, _payload(arguments))
        if started is not None:  # run ahead by the turn's first call, reported when it ran
            with contextlib.suppress(concurrent.futures.CancelledError):  # dropped by close_all: run it here
                return started.result()  # type: ignore[no-any-return]
        self._batch_turn()
        episode = self._episode_now
        if episode.opening is not None:
            self._settle(episode.opening)
        with self._reporting(episode, name, arguments) as result:
            session = episode.usable(name)
            limit, own = episode.budgets.timeout(name)
            try:
                output = client.loop().run(session.call_tool(name, _payload(arguments)), "tool", limit)
            except TimeoutError as exc:
                raise self._timed_out(episode, name, limit, own, exc) from None
            except failures() as exc:
                raise self._failed(episode, name, exc) from None
            result.extend(episode.record(name, output))
        return result[0]

    async def _acall(self, name: str, arguments: dict[str, Any]) -> str:
        """`_call` for `async def` tools: awaits on the caller's loop (never blocking it) while the runtime's loop
        does the request."""
        episode = self._episode_now
        if episode.settings.batch_calls and trl.async_tool_thread():
            client.once("batch-calls-async", logging.INFO, "orsgen: async tools run as GRPOTrainer gathers them, one "
                        "rollout at a time: a turn's calls run at once across the batch with sync tools")
        if episode.opening is not None:
            opening = episode.opening
            with contextlib.suppress(Exception):  # settled below, with the one message for it
                await asyncio.wait_for(asyncio.wrap_future(opening), episode.settings.reset_timeout)
            self._settle(opening)
        with self._reporting(episode, name, arguments) as result:
            session = episode.usable(name)
            limit, own = episode.budgets.timeout(name)
            future = client.loop().submit(asyncio.wait_for(session.call_tool(name, _payload(arguments)), limit))
            try:
                output = await asyncio.wrap_future(future)
            except TimeoutError:
                raise TimedOut(no_answer(name, limit) if own else
                               f"{name} failed: no answer within {limit:g}s (ORSGEN_TOOL_TIMEOUT)") from None
            except failures() as exc:
                raise self._failed(episode, name, exc) from None
            result.extend(episode.record(name, output))
        return result[0]

    def _batch_turn(self) -> None:
        """At the first call of a turn of GRPOTrainer's tool loop, start the turn's calls of its later rollouts
        (calls.py): those TRL will make for certain (trl.tool_turn), of the modules' own tool methods."""
        if calls.off() or not self._episode_now.settings.batch_calls:
            return
        turn = trl.tool_turn(self)
        if isinstance(turn, str):
            client.once("batch-calls-off", logging.INFO, "orsgen: a turn's tool calls run one by one, as TRL makes "
                        "them: %s", turn)
        if not isinstance(turn, trl.Turn) or not calls.first_of(turn.key, turn.calls):
            return
        for rollout in turn.later:
            chain = []
            for call in rollout:
                captured = _captured(call)
                if captured is None:
                    break  # this one runs as TRL makes it, and so does every later call of the rollout
                chain.append(captured)
            if chain:
                env = rollout[0].adapter
                calls.start(env, chain, env._call_ahead)

    async def _call_ahead(self, name: str, arguments: dict[str, Any]) -> Any:
        """A call started ahead of TRL's (calls.py), on the runtime's loop: what `_call` sends and records, with the
        outcome TRL's own call would have had, reported once (its hooks run on the runtime's loop thread)."""
        episode, began = self._episode_now, time.perf_counter()
        try:
            session = episode.usable(name)
            limit, own = episode.budgets.timeout(name)
            try:
                output = await asyncio.wait_for(session.call_tool(name, arguments), limit)
            except TimeoutError:  # the text client.Loop.run gives an in-line call
                raise self._timed_out(episode, name, limit, own,
                                      TimeoutError(f"no answer within {limit:g}s (ORSGEN_TOOL_TIMEOUT)")) from None
            except failures() as exc:
                raise self._failed(episode, name, exc) from None
            result, cut = episode.record(name, output)
        except ToolError as exc:
            episode.called(name, arguments, began, None, exc)
            raise
        episode.called(name, arguments, began, result, None, cut)
        return result

    @contextlib.contextmanager
    def _reporting(self, episode: Episode[Adapter], name: str, arguments: dict[str, Any]) -> Iterator[list[Any]]:
        """Times a tool call and reports it (tool_call hook) with the result and its budget's cut put in the list,
        or its ToolError."""
        began, result = time.perf_counter(), list[Any]()
        try:
            yield result
        except ToolError as exc:
            episode.called(name, _payload(arguments), began, None, exc)
            raise
        episode.called(name, _payload(arguments), began, result[0], None, result[1])

    def _settle(self, opening: concurrent.futures.Future[Any]) -> None:
        """The session opened in the background (the first call waits, bounded); a failure or a stale prompt voids
        the episode; tools that drifted from the module's raise DriftError, as an in-line start does."""
        episode = self._episode_now
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
            episode.started(self._start_failed(episode, exc))
            return
        episode.session = session
        self.pinned.sessions.started()
        if live != episode.expected:
            episode.prompt_mismatch = str(live)
            episode.refuse(Unscored.STALE_PROMPT,
                           "the task's live prompt differs from the one in the dataset (prompt_mismatch holds it)")
        episode.started(live)

    def _settle_unused(self) -> None:
        """A session opened in the background that no tool call settled is settled before its reward is read: one
        that did not start, or whose live prompt differed, gives None, never `unscored_reward`."""
        if self._episode_now.opening is not None and self._episode_now.expected is not None:
            self._settle(self._episode_now.opening)

    def _timed_out(self, episode: Episode[Adapter], name: str, limit: float, own: bool,
                   exc: BaseException) -> TimedOut:
        """The ToolError of a call with no answer within its bound: its tool's own timeout, or tool_timeout's (the
        text a failed call has). The session is not ended: the server may still be running the tool."""
        return TimedOut(no_answer(name, limit) if own else str(self._failed(episode, name, exc)))

    def _failed(self, episode: Episode[Adapter], name: str, exc: BaseException) -> ToolError:
        """The ToolError of a failed call. A tool that raised, or a session the server dropped, ends the session
        (the SDK closes it and refuses every later call); so does a 404, a server that no longer has the session
        (it restarted, or reaped it): the episode is then finished, and says so."""
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

    # -- closing -------------------------------------------------------------------------------------------------

    def _detach(self) -> tuple[AsyncSession | None, concurrent.futures.Future[Any] | None]:
        """The episode's session (or its opening), handed to whoever closes it."""
        episode = self._episode_now
        held = episode.session, episode.opening
        episode.session = episode.opening = None
        return held

    def _close(self, wait: bool = False, rewards_read: bool = False) -> concurrent.futures.Future[None] | None:
        """End the open session, if any: once GRPOTrainer has read its batch's rewards (`rewards_read`), else at the
        next reset (a batch's first reset: every adapter's of the batch), on close_all(), at exit and on garbage
        collection. The server is told in the background, so the next rollout does not wait for it; `wait=True`
        waits (bounded). The close's future, if one was sent."""
        self._episode_now.end(None)  # an episode closed before its reward was read
        if rewards_read:
            self._episode_now.closed = "its session closed once the trainer had read the batch's rewards"
        future = sessions.close(*self._detach())
        if wait and future is not None:
            with contextlib.suppress(Exception):  # the server reaps what it was not told
                future.result(timeout=client.timeout("close"))
        return future

    def __del__(self) -> None:
        try:
            self._close()
        except BaseException:  # noqa: BLE001, S110 - interpreter exit: module globals may already be gone
            pass


def _within_budget(pinned: Pinned, batch: list[Any], budget: int) -> None:
    """A trainer's batch holds its sessions from its resets until its rewards are read: past the sessions budget,
    a reset would wait for ever. Refused, one line."""
    rollouts = sum(1 for env in batch if isinstance(env, Adapter) and env.pinned is pinned)
    if rollouts > budget:
        raise ValueError(f"max_sessions = {budget} (ORSGEN_MAX_SESSIONS) is below the {rollouts} rollouts of "
                         f"{pinned.target} in this process's batch, which hold their sessions until the batch's rewards "
                         f"are read: raise it to at least {rollouts}, or lower per_device_train_batch_size")


def _captured(call: trl.Call) -> calls.Captured | None:
    """What a later call of the turn sends, read without sending it: only a plain tool method of an orsgen module
    (not a subclass's own, not async) on an adapter whose episode has started in line."""
    env, func = call.adapter, getattr(call.method, "__func__", None)
    if not isinstance(env, Adapter) or type(env)._call is not Adapter._call or env._episode_now.opening is not None:
        return None
    defining = next((c for c in type(env).__mro__ if any(v is func for v in vars(c).values())), None)
    if defining is None or defining.__module__ != env.pinned.module:
        return None  # a method of the user's own subclass may do more than send: it runs as TRL calls it
    if asyncio.iscoroutinefunction(func):
        return None
    if not env._episode_now.settings.batch_calls:
        return None
    try:
        with calls.capture():
            captured = call.method(**call.arguments)
    except Exception:  # noqa: BLE001 - not a call that can be read: TRL's own call says what is wrong with it
        return None
    return captured if isinstance(captured, calls.Captured) else None


def _generated_secrets(pinned: Pinned, who: str) -> dict[str, Any] | None:
    """The secrets a module was generated with (`--secret NAME`), read from the same environment variables; a
    well-known name as the SDK takes it, any other allowed no domain, as generation sent it."""
    names = pinned.secret_names()
    if not names:
        return None
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise ValueError(f"{who}: {pinned.module} was generated with --secret {missing[0]}: set the environment "
                         f"variable {missing[0]} (its value is sent as the secret of that name when a session opens), "
                         "or pass secrets=")
    from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS

    return {name: os.environ[name] if name in WELL_KNOWN_SECRETS else (os.environ[name], []) for name in names}


def _payload(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not UNSET}
