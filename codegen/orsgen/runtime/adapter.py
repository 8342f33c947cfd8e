"""The adapter base class: one environment's episodes, one at a time. A generated class adds one typed method per tool.

Only ``reset`` and ``get_reward`` are public functions: TRL offers every other public function of an environment
class to the model as a tool, so everything else here starts with ``_``. The adapter keeps runtime API 1's names and
hands its work to its `Runner` (runner.py: the episode, its session, its tool calls), which asks its trainer batch
(batch.py) for what is the batch's; `episode_of` hands the `Episode` (episode.py) to reward functions and group
scoring; settings come from `settings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from orsgen.runtime import calls, recorder, worker_metrics
from orsgen.runtime.episode import Episode
from orsgen.runtime.runner import Runner, runner_of

if TYPE_CHECKING:
    from orsgen.runtime.pinned import Pinned


class _Unset:
    """Default of optional tool arguments: an argument the model leaves out is not sent, so the server's default
    (or default_factory) applies."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def episode_of(env: Any) -> Episode[Adapter] | None:
    """The episode an orsgen adapter is in, a session still opening in the background settled first (what reward
    functions and group scoring read); None for an environment of another kind (TRL's multi-environment mode)."""
    runner = runner_of(env) if isinstance(env, Adapter) else None
    if runner is None:
        return None
    runner.settle_unused()
    return runner.episode


def call_tool(env: Adapter, name: str, arguments: dict[str, Any]) -> Any:
    """Call one of the environment's tools as the model would (a terminal tool, from a reward function): its
    result, or ToolError."""
    return env._call(name, arguments)


def close_episode(env: Adapter, wait: bool = True) -> None:
    """End an adapter's episode (unread, when nothing read its reward) and close its session, waiting (bounded) for
    the server when `wait`: what `orsgen eval` does once it has an episode's reward (without waiting: its sessions
    budget makes the next start wait for the place instead)."""
    env._close(wait=wait)


def secrets_of(env: Adapter) -> list[str]:
    """The values an adapter must never let out of the process (trajectory records, uploads): its API key and the
    secrets it sends, as strings."""
    return env._run.secrets()


def task_spec(env: Adapter, split: str, index: int) -> Any:
    """A task's spec: the pinned one when the module pinned its tasks, else the server's (one request; not on the
    trainer's thread: trajectory records read it on their writer's)."""
    return env._run.task_spec(split, index)


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

    def __init__(self, *, url: str | None = None, split: str | None = None, api_key: str | None = None,
                 secrets: Mapping[str, Any] | None = None, check_drift: bool | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        given = {**(settings or {}), **({} if check_drift is None else {"check_drift": check_drift})}
        self._run = Runner(self, url, split, api_key, secrets, given, own_calls=_own_calls)
        recorder.from_environment()  # ORSGEN_TRAJECTORIES: this process records (AsyncGRPOTrainer's worker, by hand)
        worker_metrics.from_environment()  # ORSGEN_EPISODE_METRICS: it counts its episodes for a trainer (the worker)

    # -- the episode's state, for reward functions and shaping (API 1's attribute names) -------------------------

    @property
    def _episode_now(self) -> Episode[Adapter]:
        return self._run.episode

    @property
    def _env(self) -> Any:
        """The SDK's environment handle, once a reset needed it (None before: construction sends no request)."""
        return self._run.env

    reward = property(lambda self: self._episode_now.reward, doc="The last reward a tool returned (None: none yet).")
    rewards = property(lambda self: self._episode_now.rewards, doc="Every tool call's reward, in order.")
    metadata = property(lambda self: self._episode_now.metadata, doc="The last metadata a tool returned.")
    finished = property(lambda self: self._episode_now.finished,
                        doc="A tool said the episode is finished (or the environment ended its session).")
    last_output = property(lambda self: self._episode_now.last_output, doc="The last tool output, as the SDK gave it.")
    task_index = property(lambda self: self._episode_now.task_index, doc="The episode's task.")
    prompt_mismatch = property(lambda self: self._episode_now.prompt_mismatch,
                               doc="The live prompt, when it differed from the dataset's (the episode is then void).")

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
        return self._run.reset(row)

    def get_reward(self) -> float | None:
        """The last reward a tool returned in this episode. An episode no tool scored gives ``unscored_reward``
        (None: GRPO leaves it out of its group's baseline); one that could not start, or that one of this module's
        reward functions already counted, gives None: a reward is never counted twice."""
        return self._run.reward()

    # -- tool calls (the generated methods' one call; typed `str`, as they are: what TRL reads) -------------------

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if calls.capturing():  # read by the turn's first call (calls.py): what this call sends, not sent
            return calls.Captured(name, _payload(arguments))  # type: ignore[return-value]
        return self._run.call(name, _payload(arguments))  # type: ignore[no-any-return]

    async def _acall(self, name: str, arguments: dict[str, Any]) -> str:
        """`_call` for `async def` tools: awaits on the caller's loop (never blocking it)."""
        return await self._run.acall(name, _payload(arguments))  # type: ignore[no-any-return]

    async def _call_ahead(self, name: str, arguments: dict[str, Any]) -> Any:
        """A call started ahead of TRL's (calls.py), on the runtime's loop."""
        return await self._run.call_ahead(name, arguments)

    def _settle(self, opening: Any) -> None:
        self._run.settle(opening)

    def _close(self, wait: bool = False, rewards_read: bool = False) -> Any:
        """End the open session, if any (runner.py: when, and how)."""
        return self._run.close(wait, rewards_read)

    def __del__(self) -> None:
        try:
            self._close()
        except BaseException:  # noqa: BLE001, S110 - interpreter exit: module globals may already be gone
            pass


def _own_calls(cls: type) -> bool:
    """A class with a `_call` of its own makes its calls itself: none of them is read ahead."""
    return issubclass(cls, Adapter) and cls._call is not Adapter._call


def _payload(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not UNSET}
