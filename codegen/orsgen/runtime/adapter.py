"""The adapter base class: sessions and episode state. A generated class adds one typed method per tool.

Only ``reset`` and ``get_reward`` are public functions: TRL offers every other public function of an environment
class to the model as a tool, so everything else here starts with ``_``.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from orsgen.runtime import ahead, client, hooks, messages, trl
from orsgen.runtime.content import content
from orsgen.runtime.errors import DriftError, StartError, ToolError

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


def close_all() -> None:
    """Close every open session of every adapter and wait (bounded) until the server has them closed.
    GRPOTrainer never closes its environments: this also runs at exit, and garbage collection closes too."""
    for adapter in list(_live):
        adapter._close()
    for left in ahead.drain_all():
        _end_in_background(None, left)
    running = client._loop
    if running is not None and not running.stopped:
        concurrent.futures.wait(list(running.closing), timeout=client.timeout("close"))


def _exit_closers() -> list[Coroutine[Any, Any, None]]:
    closers = [_end(None, left) for left in ahead.drain_all()]
    for adapter in list(_live):
        session, opening = adapter._session, adapter._opening
        adapter._session = adapter._opening = None
        if session is not None or opening is not None:
            closers.append(_end(session, opening))
    return closers


client.on_exit(_exit_closers)


async def _end(session: AsyncSession | None, opening: concurrent.futures.Future[Any] | None) -> None:
    """Close a session; one still opening is closed once it has opened, one whose opening never began never opens."""
    if opening is not None:
        if isinstance(opening, ahead.Planned) and opening.cancel():  # not begun: nothing was requested
            return
        try:
            opened = await asyncio.wrap_future(opening)
        except BaseException:  # noqa: BLE001 - it never opened (or closed itself on failure)
            return
        if opened is None:  # left by the look-ahead: never opened
            return
        session = opened[0]
    if session is not None:
        await asyncio.wait_for(session.__aexit__(None, None, None), client.timeout("close"))


async def _fill(opening: ahead.Planned, start: Coroutine[Any, Any, Any]) -> None:
    """Resolve an opening someone already owns (an adapter, the look-ahead store) with what `start` opens, unless
    it was given up before it began (cancelled): then nothing is requested."""
    if not opening.set_running_or_notify_cancel():
        start.close()
        return
    try:
        opening.set_result(await start)
    except BaseException as exc:  # handed to whoever takes the opening (a cancelled loop: re-raised too)
        opening.set_exception(exc)
        if not isinstance(exc, Exception):
            raise


async def _look_ahead(plan: list[tuple[Adapter, AsyncEnvironment, str, int, ahead.Planned]],
                      after: list[ahead.Opening], tag: ahead.Tag) -> None:
    """Once `after` are done, open the planned sessions (for the batch `tag`) at once, without retries: one that
    fails, or is refused for capacity (429), resolves to None and its reset opens it in line, with the whole
    start-failure contract. The failed attempt is owed a retry from then on, whoever starts the task next."""
    stream = tag[0]
    await asyncio.gather(*(asyncio.wrap_future(opening) for opening in after), return_exceptions=True)

    async def one(adapter: Adapter, env: AsyncEnvironment, split: str, index: int, opening: ahead.Planned) -> None:
        if not opening.set_running_or_notify_cancel():  # drained before it began (close_all, exit): never opened
            return
        try:
            opening.set_result(await adapter._open(env, split, index, retries=0, stream=stream))
        except Exception as exc:  # noqa: BLE001 - left to the reset
            adapter.pinned.ahead.owe(tag, adapter._key(split, index))  # before anyone can see the None
            opening.set_result(None)
            if client.status(exc) == 429:
                client.once("look-ahead-429", logging.INFO, "orsgen: the environment is at capacity (429): what the "
                         "look-ahead could not open, the resets open in line")

    await asyncio.gather(*(one(*planned) for planned in plan))


# The trainers what is opened ahead was opened for (weakly), and the token their openings carry (ahead.release).
_owners: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_owners_lock = threading.Lock()
_tokens = itertools.count(1)


def _owner(trainer: Any | None) -> int | None:
    """The token of `trainer` for what is opened ahead for its batches. At its first sight, its collection and
    the end of its training (trl.on_training_end) are tied to closing what it still has waiting."""
    if trainer is None:
        return None
    with _owners_lock:
        token = _owners.get(trainer)
        if token is None:
            token = _owners[trainer] = next(_tokens)
            weakref.finalize(trainer, _release, token).atexit = False  # at exit, the exit hook closes them
            trl.on_training_end(trainer, functools.partial(_release, token))
    return token


def _release(token: int) -> None:
    for left in ahead.release(token):
        _end_in_background(None, left)


_AHEAD_WORDS: dict[str, bool | str] = {"0": False, "false": False, "no": False, "off": False, "1": True, "true": True,
                                       "yes": True, "on": True, "next-step": "next-step"}


def _transient(exc: BaseException) -> bool:
    """Worth another attempt: transport errors, timeouts, 5xx, 408 and 429; not a 4xx the request itself caused."""
    code = client.status(exc)
    return code is None or code >= 500 or code in (408, 429)


class Adapter:
    """Session handling and episode state for one environment (``pinned``), shared by its generated classes."""

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
    _whole_conversation: ClassVar[bool] = False  # the prompt is every turn of /messages (dataset(prompts=True))
    # Episode state, for reward functions and shaping.
    reward: float | None
    rewards: list[float | None]
    metadata: dict[str, Any] | None
    finished: bool
    last_output: Any
    task_index: int | None
    prompt_mismatch: str | None

    def __init__(
        self,
        *,
        url: str | None = None,
        split: str | None = None,
        api_key: str | None = None,
        secrets: Mapping[str, Any] | None = None,
        check_drift: bool | None = None,
    ) -> None:
        self._url = url
        self._split = self._episode_split = split or self.pinned.split
        if split is not None:  # refused here, not as every episode going unscored
            self.pinned.refuse_split(split, f"{type(self).__name__}(split={split!r})")
        refused = client.refused_secret(secrets)
        if refused is not None:
            raise ValueError(f"{type(self).__name__}(secrets=...): {refused}")
        self._api_key = api_key
        self._secrets = secrets
        for name in client.replaced_secrets(secrets):
            client.once(f"secret-{name}", logging.WARNING, "orsgen: the secret %r is replaced by the openreward SDK "
                        "with the API key (OPENREWARD_API_KEY or api_key=), so the environment never gets the value "
                        "given: pass it as api_key= instead", name)
        drift = os.environ.get("ORSGEN_DRIFT_CHECK", "1") != "0"
        self._check_drift = drift if check_drift is None else check_drift
        self._env: AsyncEnvironment | None = None
        self._session: AsyncSession | None = None
        self._opening: concurrent.futures.Future[tuple[AsyncSession, Any]] | None = None  # open_in_background
        self._expected: str | None = None  # the prompt returned while the session opens in the background
        self._void: str | None = None  # why this episode cannot be scored (it did not start, its prompt was stale)
        self._gone: tuple[AsyncSession, str] | None = None  # a session the environment ended, and why
        self._reward_claimed = False
        self._in_batch = False  # the last reset was placed in a trainer's batch
        self._stream: str | None = None  # "train"/"eval": the trainer batch of this episode (hooks, metrics)
        self._calls = self._failed_calls = 0
        self._ended = True  # the episode_end hook ran (or no episode began)
        self._began = 0.0  # when the reset began (open_in_background: its start is reported at the first call)
        self.reward: float | None = None
        self.rewards: list[float | None] = []
        self.metadata: dict[str, Any] | None = None
        self.finished = False
        self.last_output: Any = None
        self.task_index: int | None = None
        self.prompt_mismatch: str | None = None  # the live prompt, when it differed from the dataset's
        _live.add(self)

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
        self._emit_end(None)  # an episode closed before its reward was read
        previous, self._session, self._opening = (self._session, self._opening), None, None
        began = time.perf_counter()
        self.reward, self.rewards, self.metadata, self.finished, self.last_output = None, [], None, False, None
        self._reward_claimed, self.prompt_mismatch, self._void, self._expected = False, None, None, None
        self._calls = self._failed_calls = 0
        split = self._episode_split = row.get("split") or self._split
        try:
            if row.get("split"):  # a row of a split the module did not pin: every episode would go unscored
                self.pinned.refuse_split(split, f"{type(self).__name__}.reset(split={split!r})")
            self._check_settings()  # refused here, in one line, not as every episode failing to start
            env = self._environment()
            where = trl.place(self, row)
            self._in_batch = where.batch is not None
            messages.note(self.pinned, self._split, where.batch.rows if where.batch else [row])  # before any opens
            self._stream = where.batch.stream if where.batch is not None else None
            index = self._task(env, split, row, where)
            self.task_index, self._ended = index, False
            batch = where.batch if self._opens_ahead() else None
            first = batch is not None and not any(isinstance(a, Adapter) for a in batch.adapters[:batch.index])
            if batch is not None and first:  # what the last batch holds is closed before this one opens anything
                held, previous = previous, (None, None)
                self._close_batch(batch, held)
            # Owned before anything is requested: a reset interrupted from here on (Ctrl-C while the session
            # starts) leaves the session to this adapter, and close_all(), exit or collection close it.
            opening = self._opening = ahead.Planned()
            taken = self.pinned.ahead.take(batch.tag, self._key(split, index)) if batch is not None else None
            if taken is None and not first:
                self._notice(where)
            if batch is None or taken is None:  # after a failed look-ahead attempt for this task: its retry
                retry = batch is not None and self.pinned.ahead.repay(batch.tag, self._key(split, index))
                start = self._open(env, split, index, stream=self._stream, first=int(retry))
            else:
                start = self._take(taken, batch.tag, env, split, index)
            client.loop().submit(_fill(opening, start))
            if batch is not None and first:
                self._open_ahead(batch, opening)
        finally:  # but at a batch's first reset, the previous session is closed once this one's start is on its way
            if previous != (None, None):
                _end_in_background(*previous)
        if self.open_in_background and isinstance(row.get("task_prompt"), str):
            self._expected, self._began = row["task_prompt"], began
            return row["task_prompt"]
        try:
            session, prompt = opening.result()
        except DriftError:
            self._opening = None
            raise
        except Exception as exc:  # noqa: BLE001 - whatever stopped the task from starting
            self._opening = None
            prompt = self._start_failed(split, index, exc)
        else:
            self._session, self._opening = session, None
            self._started()
        self._emit_start(prompt, began)
        return prompt

    def get_reward(self) -> float | None:
        """The last reward a tool returned in this episode. An episode no tool scored gives ``unscored_reward``
        (None: GRPO leaves it out of its group's baseline); one that could not start, or that one of this module's
        reward functions already counted, gives None: a reward is never counted twice."""
        self._settle_unused()
        if self._reward_claimed or self._void is not None:
            value = None
        else:
            value = self.reward if self.reward is not None else self.unscored_reward
        self._emit_end(value)
        return value

    def _check_settings(self) -> None:
        """ValueError (TypeError), one line, for a setting no episode could start with: a bad ORSGEN_*_TIMEOUT, open-ahead mode,
        `start_retries`, `start_failures` or `task_seed` (values of another type: a tool of that name shadows it)."""
        client.check_timeouts()
        self._ahead_mode()
        name = type(self).__name__
        retries, failures = self.start_retries, self.start_failures
        if isinstance(retries, int) and retries < 0:
            raise ValueError(f"{name}.start_retries = {retries}: 0 or more further attempts at a failed start")
        if isinstance(failures, str) and failures not in ("skip", "raise"):
            raise ValueError(f"{name}.start_failures = {failures!r}: 'skip' or 'raise'")
        if isinstance(self.task_seed, (str, bytes)):  # read from a config or the environment, unconverted
            raise TypeError(f"{name}.task_seed = {self.task_seed!r}: an int (the seed of the task order)")

    def _environment(self) -> AsyncEnvironment:
        if self._env is None:
            self._env = self.pinned.environment(self._url, self._api_key)
        return self._env

    def _task(self, env: AsyncEnvironment, split: str, row: Mapping[str, Any], where: trl.Place,
              position: int | None = None, rounds_ahead: int = 0) -> int:
        """The row's task_index; without one, the task of the rollout's slot in the trainer's batch."""
        if row.get("task_index") is not None:
            return int(row["task_index"])
        batch = where.batch
        if batch is None:
            if where.inside is not None or threading.current_thread() is not threading.main_thread():
                raise RuntimeError(where.refusal())
            at = trl.Slot("train", 0)  # a look at a prompt outside training: shifts nothing
        else:
            at = batch.slot(batch.index if position is None else position, rounds_ahead)
        size = self.pinned.num_tasks(env, split, self._url)
        return self.pinned.order.task(split, size, self.task_seed, at)

    # -- sessions opened ahead (ahead.py) ------------------------------------------------------------------------

    def _ahead_mode(self) -> bool | str:
        """`open_ahead`, or ORSGEN_OPEN_AHEAD (0/false/no/off, 1/true/yes/on, next-step) when set; any other value
        is refused in one line ("false" or "off" must not turn it on, nor "next_step" engage it halfway)."""
        value = os.environ.get("ORSGEN_OPEN_AHEAD")
        if value is None:
            mode = self.open_ahead
            if isinstance(mode, bool) or mode == "next-step":
                return mode
            if not isinstance(mode, str):  # a tool of that name shadows it (a module generated before the setting)
                return Adapter.open_ahead
            raise ValueError(f"{type(self).__name__}.open_ahead = {mode!r}: one of True, False, 'next-step'")
        word = value.strip().lower()
        if word in _AHEAD_WORDS:
            return _AHEAD_WORDS[word]
        raise ValueError(f"ORSGEN_OPEN_AHEAD={value!r}: one of 0 (off), 1 (on), next-step")

    def _opens_ahead(self) -> bool:
        return self._ahead_mode() is not False

    def _looks_ahead(self) -> bool:
        return self._ahead_mode() == "next-step"

    def _key(self, split: str, index: int) -> tuple[Any, ...]:
        return self._url, self._api_key, id(self._secrets), split, index

    def _close_batch(self, batch: trl.Batch, held: tuple[AsyncSession | None, ahead.Opening | None]) -> None:
        """At a batch's first reset: close what the last batch left and wait for it (bounded, ORSGEN_CLOSE_TIMEOUT)
        before this batch opens anything, so a pool the size of one batch holds it: this adapter's session
        (`held`), those of the batch's other orsgen adapters (its reward functions and group scoring read them
        before this batch began) and what earlier batches of this stream left opened ahead."""
        closing = [_end_in_background(*held)] if held != (None, None) else []
        closing += [other._close() for other in batch.adapters if isinstance(other, Adapter) and other is not self]
        closing += [_end_in_background(None, left) for left in ahead.drain_all(keep=batch.tag)]
        concurrent.futures.wait([f for f in closing if f is not None], timeout=client.timeout("close"))

    def _open_ahead(self, batch: trl.Batch, mine: ahead.Opening) -> None:
        """The batch's first reset, its own start sent: open the others' sessions and (open_ahead = "next-step")
        the next step's, once this batch's are open, all tied to the trainer that will take them."""
        owner = _owner(trl.placed_trainer())
        self._open_batch(batch, owner)
        if batch.more and self._looks_ahead():  # once this batch's sessions are open: they never compete
            self._open_next(batch, [mine, *ahead.openings(batch.tag)], owner)

    def _others(self, batch: trl.Batch, positions: range) -> list[tuple[Adapter, str, Mapping[str, Any], int]]:
        """The batch's other orsgen adapters at `positions` that open ahead: (adapter, split, row, position)."""
        found = []
        for position in positions:
            other, row = batch.adapters[position], batch.rows[position]
            if isinstance(other, Adapter) and other._opens_ahead():
                found.append((other, row.get("split") or other._split, row, position))
        return found

    def _open_batch(self, batch: trl.Batch, owner: int | None) -> None:
        """Open every session of the batch after this reset, each for its own adapter, at once: all but those the
        look-ahead already opened. Each is in the store before it is requested."""
        loop, here = client.loop(), trl.Place(batch)
        wanted: dict[tuple[int, tuple[Any, ...]], int] = {}
        for other, split, row, position in self._others(batch, range(batch.index + 1, len(batch.adapters))):
            env = other._environment()
            index = other._task(env, split, row, here, position)
            key = other._key(split, index)
            wanted[id(other.pinned), key] = wanted.get((id(other.pinned), key), 0) + 1
            if wanted[id(other.pinned), key] > other.pinned.ahead.count(batch.tag, key):
                opening = ahead.Planned(owner)
                other.pinned.ahead.put(batch.tag, key, opening)
                retry = other.pinned.ahead.repay(batch.tag, key)  # in place of a failed look-ahead attempt
                loop.submit(_fill(opening, other._open(env, split, index, stream=batch.stream, first=int(retry))))

    def _open_next(self, batch: trl.Batch, after: list[ahead.Opening], owner: int | None) -> None:
        """Environment-owned data: open the next step's sessions while this step resets, generates and trains,
        starting when this batch's openings (`after`) are done."""
        if any(row.get("task_index") is not None for row in batch.rows):
            return  # a dataset's next rows are the sampler's: unknown here
        plan, here = [], trl.Place(batch)
        tag = (batch.stream, batch.first + batch.width)
        for other, split, row, position in self._others(batch, range(len(batch.adapters))):
            env = other._environment()
            index = other._task(env, split, row, here, position, rounds_ahead=1)
            opening = ahead.Planned(owner)
            other.pinned.ahead.put(tag, other._key(split, index), opening)
            plan.append((other, env, split, index, opening))
        running = client.loop()
        future = running.submit(_look_ahead(plan, after, tag))
        running.closing.add(future)  # close_all() and the exit wait for it: what it opens as they drain, it closes
        future.add_done_callback(running.closing.discard)

    async def _take(self, taken: ahead.Opening, tag: ahead.Tag, env: AsyncEnvironment, split: str,
                    index: int) -> tuple[AsyncSession, Any]:
        """The session opened ahead. One the look-ahead could not open (None) is replaced by another opened for the
        same task, which a later rollout would have taken (at capacity, the later rollouts' sessions are what holds
        the places), else opened now. Each failed attempt is owed a retry: the next in-line start of the task."""
        opened, key = await asyncio.wrap_future(taken), self._key(split, index)
        while opened is None:  # a failed attempt, owed a retry when it failed (_look_ahead)
            other = self.pinned.ahead.take(tag, key)
            if other is None:
                return await self._open(env, split, index, stream=tag[0], first=int(self.pinned.ahead.repay(tag, key)))
            opened = await asyncio.wrap_future(other)
        return opened

    def _notice(self, where: trl.Place) -> None:
        """Say once when open-ahead cannot engage inside a trainer, instead of turning off unseen."""
        if where.inside is not None:
            client.once("ahead-off", logging.INFO, "orsgen: open-ahead is off inside %s: %s", where.inside, where.why)
        elif where.batch is None and threading.current_thread() is not threading.main_thread():
            client.once("ahead-thread", logging.INFO, "orsgen: open-ahead does not engage in thread %r, outside "
                     "GRPOTrainer's batch (AsyncGRPOTrainer overlaps its rollouts itself)",
                     threading.current_thread().name)

    async def _open(self, env: AsyncEnvironment, split: str, index: int, retries: int | None = None,
                    stream: str | None = None, first: int = 0) -> tuple[AsyncSession, Any]:
        """Open a session on a task (for a `stream` batch) and read its prompt, retrying transient failures with
        bounded backoff; `first` numbers the first attempt (1: after the look-ahead's failed one, a retry)."""
        limit = client.timeout("reset")
        retries = self.start_retries if retries is None else retries
        for attempt in range(first, first + retries + 1):
            began, session = time.perf_counter(), None
            try:
                session = self._session_for(env, split, index)  # may refuse before any request: reported too
                if self._check_drift:  # once per process and server
                    await self.pinned.check_drift(env, self._url)
                await asyncio.wait_for(session.__aenter__(), limit)
                await self.pinned.check_build(session, self._url)
                conversation = (split, index) in self.pinned.conversations
                opened = session, await messages.prompt(session, self._whole_conversation, conversation, limit)
            except DriftError:
                raise
            except Exception as exc:
                with contextlib.suppress(Exception):  # a session the server half-opened is closed too
                    if session is not None:
                        await asyncio.wait_for(session.__aexit__(None, None, None), client.timeout("close"))
                if isinstance(exc, asyncio.TimeoutError):
                    exc = TimeoutError(f"no answer within {limit:g}s (ORSGEN_RESET_TIMEOUT)")
                self._emit_open(split, index, attempt, began, exc, stream)
                if attempt == first + retries or not _transient(exc):
                    raise exc from None
                wait = client.retry_after(exc) or min(2.0 ** (attempt - first), 10.0)
                await asyncio.sleep(min(wait, 60.0))
            else:
                self._emit_open(split, index, attempt, began, None, stream)
                return opened
        raise AssertionError("unreachable")

    def _session_for(self, env: AsyncEnvironment, split: str, index: int) -> AsyncSession:
        """A session on the pinned task spec when the module pinned its tasks, else on split and index."""
        spec = self.pinned.pinned_spec(split, index)
        if spec is None:
            return env.session(split=split, index=index, secrets=self._secrets)
        from openreward.api.environments.types import Task

        task = Task(server_name=env.name, environment_name=self.pinned.env or env.name, task_spec=spec,
                    namespace=env.namespace)
        return env.session(task=task, secrets=self._secrets)

    def _started(self) -> None:
        self.pinned.failures.started()

    def _start_failed(self, split: str, index: int, exc: BaseException) -> str:
        """Void the episode (or raise, as configured); the prompt the trainer gets for a task that did not start."""
        self.pinned.check_server(self._url, exc)  # a 404 from a server without the environment: WrongServer
        reason = client.describe(exc)
        in_a_row, down_for = self.pinned.failures.failed((split, index), self._in_batch)
        where = f"{type(self).__name__}: task {index} of split {split!r}"
        if client.status(exc) == 429:
            raise StartError(f"{where}: the environment is at capacity after {self.start_retries + 1} attempts "
                             f"({reason}): run fewer rollouts at once (per_device_train_batch_size, "
                             "max_inflight_tasks) or raise the environment's capacity") from None
        if self.start_failures == "raise":
            raise StartError(f"{where} could not start: {reason}") from None
        down_after = self._down_after()
        if in_a_row >= self.max_start_failures and down_for >= down_after:
            raise StartError(f"{in_a_row} episodes in a row could not start and none has started for {down_for:.0f}s "
                             f"(down_after = {down_after:g}): the environment looks down; last, {where}: {reason}"
                             ) from None
        log.warning("orsgen: %s could not start, the episode is unscored: %s", where, reason)
        self._void = f"task {index} could not start ({reason})"
        return f"(task {index} could not start: this episode is not scored)"

    def _down_after(self) -> float:
        """`down_after`, or its default where a tool of that name shadows it (a module generated before the setting
        existed: newer ones rename such a tool)."""
        value = self.down_after
        return float(value) if isinstance(value, (int, float)) else Adapter.down_after

    # -- tool calls ----------------------------------------------------------------------------------------------

    # Typed `str`, as the generated methods are (what TRL reads); a result holding images is a list of content
    # parts, which TRL takes too.
    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        session = self._session if self._opening is None else self._settle(self._opening)
        with self._reporting(name, arguments) as result:
            session = self._usable(name, session)
            try:
                result.append(self._record(client.loop().run(session.call_tool(name, _payload(arguments)), "tool")))
            except _failures_types() as exc:
                raise self._failed(name, session, exc) from None
        return result[0]

    async def _acall(self, name: str, arguments: dict[str, Any]) -> str:
        """`_call` for `async def` tools: awaits on the caller's loop (never blocking it) while the runtime's loop
        does the request."""
        session = self._session
        if self._opening is not None:
            opening = self._opening
            with contextlib.suppress(Exception):  # settled below, with the one message for it
                await asyncio.wait_for(asyncio.wrap_future(opening), client.timeout("reset"))
            session = self._settle(opening)
        with self._reporting(name, arguments) as result:
            session = self._usable(name, session)
            limit = client.timeout("tool")
            future = client.loop().submit(asyncio.wait_for(session.call_tool(name, _payload(arguments)), limit))
            try:
                result.append(self._record(await asyncio.wrap_future(future)))
            except TimeoutError:
                raise ToolError(f"{name} failed: no answer within {limit:g}s (ORSGEN_TOOL_TIMEOUT)") from None
            except _failures_types() as exc:
                raise self._failed(name, session, exc) from None
        return result[0]

    @contextlib.contextmanager
    def _reporting(self, name: str, arguments: dict[str, Any]) -> Iterator[list[Any]]:
        """Times a tool call and reports it (tool_call hook) with the result put in the list, or its ToolError."""
        began, result = time.perf_counter(), list[Any]()
        try:
            yield result
        except ToolError as exc:
            self._emit_call(name, arguments, began, None, exc)
            raise
        self._emit_call(name, arguments, began, result[0], None)

    def _settle(self, opening: concurrent.futures.Future[Any]) -> AsyncSession | None:
        """The session opened in the background (the first call waits, bounded); a failure or a stale prompt voids
        the episode; tools that drifted from the module's raise DriftError, as an in-line start does."""
        if self._opening is not opening:  # settled by a concurrent call
            return self._session
        self._opening = None
        try:
            session, live = opening.result(timeout=client.timeout("reset"))
        except Exception as exc:
            if isinstance(exc, DriftError):  # as loud as in line: kept, so the reward read raises it too (TRL
                self._opening = opening      # shows a tool's exception to the model, but not get_reward's)
                raise
            if isinstance(exc, concurrent.futures.TimeoutError):
                _end_in_background(None, opening)  # closed once it does open
            self._emit_start(self._start_failed(self._episode_split, self.task_index or 0, exc), self._began)
            return None
        self._session = session
        self._started()
        if live != self._expected:
            self.prompt_mismatch = str(live)
            self._void = "the task's live prompt differs from the one in the dataset (prompt_mismatch holds it)"
        self._emit_start(live, self._began)
        return session

    def _settle_unused(self) -> None:
        """A session opened in the background that no tool call settled is settled before its reward is read: one
        that did not start, or whose live prompt differed, gives None, never `unscored_reward`."""
        if self._opening is not None and self._expected is not None:
            self._settle(self._opening)

    def _usable(self, name: str, session: AsyncSession | None) -> AsyncSession:
        if self._void is not None:
            raise ToolError(f"{name}: this episode is not scored: {self._void}")
        if session is None:
            raise ToolError(f"{name}: no episode is open (reset() was not called)")
        if self._gone is not None and self._gone[0] is session:  # the SDK would refuse it without asking the server
            raise ToolError(f"{name}: the environment ended this episode's session ({self._gone[1]}): the episode is "
                            "over")
        return session

    def _failed(self, name: str, session: AsyncSession, exc: BaseException) -> ToolError:
        """The ToolError of a failed call. A tool that raised, or a session the server dropped, ends the session
        (the SDK closes it and refuses every later call); so does a 404, a server that no longer has the session
        (it restarted, or reaped it): the episode is then finished, and says so."""
        from openreward.api.errors import SessionTerminatedError, ToolFailed

        error = _tool_error(name, exc)
        if isinstance(exc, (ToolFailed, SessionTerminatedError)):
            why = "the environment ended the session"
        elif client.status(exc) == 404:
            why = "the environment no longer has the session (it restarted, or ended it)"
        else:
            return error
        self._gone, self.finished = (session, str(error)), True
        return ToolError(_short(f"{error}; {why}: the episode is over"))

    def _record(self, output: Any) -> Any:
        self.last_output = output
        self.rewards.append(output.reward)
        if output.reward is not None:
            self.reward = output.reward
        if output.metadata is not None:
            self.metadata = output.metadata
        self.finished = self.finished or bool(output.finished)
        return content(output.blocks)

    def _claim(self, value: float | None) -> float | None:
        self._settle_unused()
        self._reward_claimed = True
        value = None if self._void is not None else value
        self._emit_end(value)
        return value

    # -- hooks (hooks.py): built only when someone listens -------------------------------------------------------

    def _emit_start(self, prompt: Any, began: float) -> None:
        if hooks.wanted("episode_start"):
            error = self._void if self.prompt_mismatch is None else None
            hooks.emit("episode_start", hooks.EpisodeStart(self, self._episode_split, self.task_index or 0,
                                                           self._stream, prompt, error, time.perf_counter() - began))

    def _emit_open(self, split: str, index: int, attempt: int, began: float, exc: BaseException | None,
                   stream: str | None) -> None:
        if hooks.wanted("session_open"):
            error, status = (None, None) if exc is None else (client.describe(exc), client.status(exc))
            hooks.emit("session_open", hooks.SessionOpen(self, split, index, attempt, error, status,
                                                         time.perf_counter() - began, stream))

    def _emit_call(self, name: str, arguments: dict[str, Any], began: float, result: Any,
                   exc: BaseException | None) -> None:
        self._calls += 1
        self._failed_calls += exc is not None
        if hooks.wanted("tool_call"):
            reward = None if exc is not None or self.last_output is None else self.last_output.reward
            hooks.emit("tool_call", hooks.ToolCall(self, name, _payload(arguments), result,
                                                   None if exc is None else str(exc), time.perf_counter() - began,
                                                   reward))

    def _emit_end(self, value: float | None) -> None:
        """The episode's end, once: at its first reward read, else when it is closed."""
        if self._ended:
            return
        self._ended = True
        if hooks.wanted("episode_end"):
            reason = None
            if self._void is not None:
                reason = "stale_prompt" if self.prompt_mismatch is not None else "not_started"
            elif self.reward is None:
                reason = "no_tool_scored"
            hooks.emit("episode_end", hooks.EpisodeEnd(
                self, self._episode_split, self.task_index, self._stream, reason is None, value, self.finished,
                reason, self._calls, self._failed_calls))

    # -- closing -------------------------------------------------------------------------------------------------

    def _close(self, wait: bool = False) -> concurrent.futures.Future[None] | None:
        """End the open session, if any: at the next reset (a batch's first reset: every adapter's of the batch),
        on close_all(), at exit and on garbage collection. The server is told in the background, so the next
        rollout does not wait for it; `wait=True` waits (bounded). The close's future, if one was sent."""
        self._emit_end(None)  # an episode closed before its reward was read
        session, self._session = self._session, None
        opening, self._opening = self._opening, None
        if session is None and opening is None:
            return None
        future = _end_in_background(session, opening)
        if wait and future is not None:
            with contextlib.suppress(Exception):  # the server reaps what it was not told
                future.result(timeout=client.timeout("close"))
        return future

    def __del__(self) -> None:
        try:
            self._close()
        except BaseException:  # noqa: BLE001, S110 - interpreter exit: module globals may already be gone
            pass


def _end_in_background(
    session: AsyncSession | None, opening: concurrent.futures.Future[Any] | None
) -> concurrent.futures.Future[None] | None:
    """Close a session (or one still opening) on the runtime's loop, tracked so close_all() and exit wait for it."""
    running = client._loop
    if running is None or running.stopped:
        return None  # the loop is gone (interpreter exit): the server reaps the session
    future = running.submit(_end(session, opening))
    running.closing.add(future)
    future.add_done_callback(running.closing.discard)
    return future


def _payload(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not UNSET}


# One pydantic error in a validation error list's repr: its location and message, whatever follows (a `ctx` holding
# `ValueError(...)`, a URL) and whatever the list around it holds, which `ast.literal_eval` cannot always read.
_FIELD = re.compile(r"""'loc':\s*\((?P<loc>[^()]*)\),\s*'msg':\s*(?P<msg>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# The same in pydantic's ValidationError text: "field\n  message [type=..., input_value=...]".
_TEXT_FIELD = re.compile(r"^(?P<loc>[^\s\[][^\n]*)\n[ \t]+(?P<msg>[^\n\[]+?)\s*\[type=", re.MULTILINE)
# The SDK's session context in its errors' text: "(environment session sid=...)", "session terminated (sid='...')".
_SID = re.compile(r"\s*\((?:(?:environment|sandbox) session )?sid=[^()]*\)")
_URL = re.compile(r"\s*(?:for further information visit\s*)?\(?(?:https?://|www\.)\S+", re.IGNORECASE)
MAX_FIELDS, MAX_FIELD, MAX_ERROR = 6, 160, 400  # what a model is shown of a failed call, at most


def _validation_errors(detail: str) -> list[str]:
    """`field: message` per error of a pydantic validation error in a tool's error text ([] if there is none)."""
    found = [(_loc(m["loc"]), _literal(m["msg"])) for m in _FIELD.finditer(detail)]
    found = found or [(m["loc"].strip(), m["msg"]) for m in _TEXT_FIELD.finditer(detail)]
    lines = [_short(f"{loc or 'input'}: {msg}", MAX_FIELD) for loc, msg in found]
    if len(lines) > MAX_FIELDS:
        lines = [*lines[:MAX_FIELDS], f"and {len(lines) - MAX_FIELDS} more"]
    return lines


def _loc(text: str) -> str:
    """A location tuple's repr (`'items', 0, 'name',`) as a dotted path: items.0.name."""
    try:
        parts = ast.literal_eval(f"({text},)" if text.strip() and not text.strip().endswith(",") else f"({text})")
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        parts = [_literal(p.strip()) for p in text.split(",") if p.strip()]
    return ".".join(str(p) for p in parts)


def _literal(text: str) -> str:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text.strip("'\"")
    return str(value)


def _short(text: str, limit: int = MAX_ERROR) -> str:
    """One line without URLs or the SDK's session ids, at most `limit` characters."""
    line = " ".join(text[: limit * 50].split())  # spaces first: the patterns stay linear
    line = " ".join(_SID.sub("", _URL.sub("", line)).split())
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


def _failures_types() -> tuple[type[BaseException], ...]:
    """What a tool call can fail with: the tool's own error, the SDK's and the transport's, a timeout."""
    from aiohttp import ClientError
    from openreward.api.errors import OpenRewardError

    return (OpenRewardError, ClientError, OSError, TimeoutError, asyncio.TimeoutError)


def _tool_error(name: str, exc: BaseException) -> ToolError:
    from openreward.api.errors import ToolCallError

    if isinstance(exc, ToolCallError):
        fields = _validation_errors(exc.detail)
        if fields:  # what the model can act on: one short sentence per field, no pydantic dicts or URLs
            return ToolError(f"{name}: invalid arguments: {'; '.join(fields)}")
        if exc.reason == "input_validation" or "[{" in exc.detail:  # a list it could not read: no repr for the model
            head = _short(exc.detail.split("[{", 1)[0]).rstrip(" :.") or "the server rejected them"
            return ToolError(_short(f"{name}: invalid arguments: {head}"))
        return ToolError(_short(f"{name} failed ({exc.reason}): {exc.detail}"))
    return ToolError(_short(f"{name} failed: {client.describe(exc)}"))

