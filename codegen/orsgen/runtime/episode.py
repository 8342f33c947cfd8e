"""An episode as a value: what one reset began (task, split, stream, its session), what its tool calls returned,
whether it can be scored, and its one end. It emits the hooks (hooks.py) of its start, calls and end.

Why an episode is unscored is one `Unscored` member: `EpisodeMetrics` counts each member (`unscored/<reason>`), so a
new reason is counted by construction. The adapter owns one episode at a time; the siblings read it through
`adapter.episode_of`, never through the adapter's privates.
"""

from __future__ import annotations

import concurrent.futures
import enum
import time
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from orsgen.runtime import client, hooks, trl
from orsgen.runtime.budgets import NOTHING, Budgets, Cut
from orsgen.runtime.content import content
from orsgen.runtime.errors import StartTimeout, TimedOut, ToolError
from orsgen.runtime.settings import DEFAULTS, Settings

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncSession

A = TypeVar("A")


class Unscored(enum.StrEnum):
    """Why an episode gives no reward of its own (`hooks.EpisodeEnd.reason`)."""

    NOT_STARTED = "not_started"  # its session could not start
    STALE_PROMPT = "stale_prompt"  # the live prompt differed from the dataset's (open_in_background)
    NO_TOOL_SCORED = "no_tool_scored"  # it ran, but no tool returned a reward
    TIMED_OUT = "timed_out"  # a tool was called after its episode_timeout (ORSGEN_EPISODE_TIMEOUT, episode-timeout)
    TOO_MANY_CALLS = "too_many_calls"  # a tool call past its max_tool_calls (ORSGEN_MAX_TOOL_CALLS, max-tool-calls)


class Episode(Generic[A]):
    """One episode of one adapter (`adapter`), from its reset to its end."""

    def __init__(self, adapter: A, split: str, task_index: int | None = None, stream: str | None = None,
                 settings: Settings = DEFAULTS, began: float | None = None, budgets: Budgets | None = None,
                 group: int | None = None) -> None:
        self._adapter = weakref.ref(adapter)  # the adapter holds its episode: no cycle, so `del adapter` closes it
        self.split, self.task_index, self.stream, self.settings = split, task_index, stream, settings
        self.group = group  # its GRPO group in a trainer batch: the run-wide number in its stream (None: no batch)
        self.turns: tuple[Any, Any] | None = None  # (prompt, completion) as TRL holds them, where known at the end
        self.budgets = Budgets(None, settings) if budgets is None else budgets  # caps, timeouts, episode limits
        self.began = time.perf_counter() if began is None else began  # the reset's start
        # When the episode was ready (its session started, its prompt read): what episode_timeout counts from, never
        # the reset's own waits (the SDK's import and the drift check in a process's first, the session's start).
        self.ready: float | None = None
        self.session: AsyncSession | None = None
        # A session still opening, owned before it was requested (ahead.Planned): an interrupted reset leaves it here
        # for close_all(), exit or collection to close.
        self.opening: concurrent.futures.Future[Any] | None = None
        self.expected: str | None = None  # the prompt returned while the session opens in the background
        self.reward: float | None = None
        self.rewards: list[float | None] = []
        self.metadata: dict[str, Any] | None = None
        self.finished = False
        self.last_output: Any = None
        self.prompt_mismatch: str | None = None  # the live prompt, when it differed from the dataset's
        self.void: Unscored | None = None  # why it cannot be scored at all (get_reward() is None)
        self.why: str | None = None  # that, in words
        self.gone: str | None = None  # the environment ended its session: the failed call that did
        self.closed: str | None = None  # why its session closed before the next reset
        self.calls = self.failures = 0
        self.asked = 0  # tool calls the model made (max_tool_calls), those refused included
        self.claimed = False  # a reward function counted it: get_reward() gives None
        self.ended = task_index is None  # the episode_end hook ran (an adapter's first "episode" never began)

    @property
    def adapter(self) -> A:
        """The adapter whose episode this is (None once it is collected)."""
        return self._adapter()  # type: ignore[return-value]

    # -- what happened -------------------------------------------------------------------------------------------

    def refuse(self, reason: Unscored, why: str) -> None:
        """Void the episode: every later call fails with `why`, its reward is None."""
        self.void, self.why = reason, why

    def record(self, name: str, output: Any) -> tuple[Any, Cut]:
        """Tool `name`'s output: its reward, metadata and finished flag; what the model is shown (within the tool's
        budget) and what the budget cut."""
        self.last_output = output
        self.rewards.append(output.reward)
        if output.reward is not None:
            self.reward = output.reward
        if output.metadata is not None:
            self.metadata = output.metadata
        self.finished = self.finished or bool(output.finished)
        return self.budgets.cap(name, content(output.blocks))

    def usable(self, name: str) -> AsyncSession:
        """The session a call of tool `name` goes to, or the ToolError (one line) the model is shown instead."""
        self.asked += 1
        limit = self.budgets.episode_timeout
        ready = self.began if self.ready is None else self.ready
        if self.why is None and limit is not None and time.perf_counter() - ready > limit:
            self.refuse(Unscored.TIMED_OUT, f"it ran past its {limit:g}s from reset ({self.budgets.timeout_from})")
        most = self.budgets.max_tool_calls
        if self.why is None and most is not None and self.asked > most:
            self.refuse(Unscored.TOO_MANY_CALLS, f"the model called tools more than its {most:,} times "
                                                 f"({self.budgets.calls_from})")
        if self.why is not None:
            raise ToolError(f"{name}: this episode is not scored: {self.why}")
        if self.closed is not None:
            raise ToolError(f"{name}: this episode is over: {self.closed}")
        if self.session is None:
            raise ToolError(f"{name}: no episode is open (reset() was not called)")
        if self.gone is not None:  # the SDK would refuse it without asking the server
            raise ToolError(f"{name}: the environment ended this episode's session ({self.gone}): the episode is over")
        return self.session

    def ended_by_environment(self, error: str) -> None:
        self.gone, self.finished = error, True

    def unscored(self) -> Unscored | None:
        if self.void is not None:
            return self.void
        return Unscored.NO_TOOL_SCORED if self.reward is None else None

    # -- its reward, read once -----------------------------------------------------------------------------------

    def reward_read(self) -> float | None:
        """What get_reward() gives: the last reward, else `unscored_reward`; None when void or already claimed."""
        if self.claimed or self.void is not None:
            value = None
        else:
            value = self.reward if self.reward is not None else self.settings.unscored_reward
        self.end(value)
        return value

    def claim(self, value: float | None) -> float | None:
        """A reward function's score of the episode (None when void): get_reward() then gives None."""
        self.claimed = True
        value = None if self.void is not None else value
        self.end(value)
        return value

    def or_unscored(self, value: float | None) -> float | None:
        """`value`, or the adapter's `unscored_reward` for an episode no tool scored."""
        return self.settings.unscored_reward if value is None else value

    # -- hooks: records built only when someone listens ----------------------------------------------------------

    def opened(self, _: Any = None) -> None:
        """Its session opened in the background (the future's callback): the episode is ready from now."""
        if self.ready is None:
            self.ready = time.perf_counter()

    def started(self, prompt: Any) -> None:
        """The episode is ready (or could not start): its start settled, its prompt read."""
        self.opened()
        if hooks.wanted("episode_start"):
            error = self.why if self.prompt_mismatch is None else None
            hooks.emit("episode_start", hooks.EpisodeStart(self.adapter, self.split, self.task_index or 0,
                                                           self.stream, prompt, error,
                                                           time.perf_counter() - self.began, self))

    def called(self, name: str, arguments: dict[str, Any], began: float, result: Any,
               exc: BaseException | None, cut: Cut = NOTHING) -> None:
        self.calls += 1
        self.failures += exc is not None
        if hooks.wanted("tool_call"):
            reward = None if exc is not None or self.last_output is None else self.last_output.reward
            hooks.emit("tool_call", hooks.ToolCall(self.adapter, name, arguments, result,
                                                   None if exc is None else str(exc), time.perf_counter() - began,
                                                   reward, self.stream, self.finished, self, cut.count, cut.unit,
                                                   cut.images, isinstance(exc, TimedOut)))

    def end(self, value: float | None) -> None:
        """The episode's end, once: at its first reward read, else when it is closed."""
        if self.ended:
            return
        self.ended = True
        if hooks.wanted("episode_end"):
            reason = self.unscored()
            prompt, completion = self.turns or trl.rollout_turns(self.adapter) or (None, None)
            hooks.emit("episode_end", hooks.EpisodeEnd(
                self.adapter, self.split, self.task_index, self.stream, reason is None, value, self.finished,
                reason, self.calls, self.failures, prompt, completion, time.perf_counter() - self.began, self))


def session_opened(adapter: Any, split: str, index: int, stream: str | None) -> Any:
    """The `session_open` reporter of one adapter's starts of a task: called per attempt with its number, start
    time and error (None: it opened), on the runtime's loop."""

    def report(attempt: int, began: float, exc: BaseException | None, waited: float = 0.0) -> None:
        if hooks.wanted("session_open"):
            error, status = (None, None) if exc is None else (client.describe(exc), client.status(exc))
            hooks.emit("session_open", hooks.SessionOpen(adapter, split, index, attempt, error, status,
                                                         time.perf_counter() - began, stream,
                                                         isinstance(exc, StartTimeout), waited))

    return report
