"""Hooks: functions the runtime calls at an episode's start, each tool call, each session-open attempt and an
episode's end, to record trajectories or count things. They are a registry here, not methods of the adapter class:
TRL offers every public method of an environment class to the model as a tool.

    from orsgen.runtime import hooks

    def show(call: hooks.ToolCall) -> None:
        print(call.name, call.arguments, call.result or call.error, f"{call.seconds:.3f}s")

    hooks.add("tool_call", show)            # every adapter
    hooks.add("tool_call", show, Echo)      # only Echo adapters (and subclasses)
    hooks.remove("tool_call", show, Echo)

A listener runs on the thread that did the work (the trainer's, or the runtime's loop thread for `session_open`),
so it must be quick and thread-safe; what it raises is logged and dropped, never reaches the trainer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from orsgen.runtime.process import STATE

log = logging.getLogger("orsgen")
A = TypeVar("A")  # the adapter class a record is about: `hooks.ToolCall[Echo]` types `record.adapter` as Echo

Event = Literal["episode_start", "tool_call", "session_open", "episode_end"]
EVENTS: tuple[Event, ...] = ("episode_start", "tool_call", "session_open", "episode_end")


@dataclass(frozen=True)
class EpisodeStart(Generic[A]):
    """`reset()` returned. `error` says why the task could not start (the episode is then unscored); with
    `open_in_background` the start is settled at the first tool call and reported there."""

    adapter: A
    split: str
    task_index: int
    stream: str | None  # "train" or "eval" inside a GRPOTrainer batch, else None
    prompt: Any
    error: str | None
    seconds: float  # from reset() to the session's prompt (or to the failure)
    episode: Any = None  # the `Episode` (one object per reset): what ties an episode's records together


@dataclass(frozen=True)
class ToolCall(Generic[A]):
    """One tool call the model made: its result (as the model read it, within the tool's budget), or the error the
    model was shown instead."""

    adapter: A
    name: str
    arguments: dict[str, Any]
    result: Any
    error: str | None
    seconds: float
    reward: float | None  # what the tool returned as reward (None: none, or the call failed)
    stream: str | None = None  # "train" or "eval" inside a GRPOTrainer batch, else None
    finished: bool = False  # the episode was finished after this call (a tool said so, or the session ended)
    episode: Any = None
    # What the tool's budget cut from the result before the model read it (budgets.py): `truncated` characters or
    # tokens (`truncated_unit`: "characters", "tokens"; None: nothing cut), `images_left_out` images.
    truncated: int = 0
    truncated_unit: str | None = None
    images_left_out: int = 0
    timed_out: bool = False  # no answer within the call's bound (its tool's timeout, or ORSGEN_TOOL_TIMEOUT)


@dataclass(frozen=True)
class SessionOpen(Generic[A]):
    """One attempt at opening a session (a reset's, or one opened ahead): several per episode when starts are
    retried. `status` is the HTTP status of a failed attempt when there was one (429: the environment is full)."""

    adapter: A
    split: str
    task_index: int
    attempt: int  # 0 for the first, 1.. for retries
    error: str | None
    status: int | None
    seconds: float
    stream: str | None = None  # the trainer batch it was opened for ("train"/"eval"; opened ahead: the batch ahead)
    given_up: bool = False  # no answer within ORSGEN_RESET_TIMEOUT: a session the server opens later is closed at once
    waited: float = 0.0  # seconds it waited for a place in the sessions budget (max_sessions) before it began


@dataclass(frozen=True)
class EpisodeEnd(Generic[A]):
    """The episode's reward was read (`get_reward()` or one of the runtime's reward functions), or the episode was
    closed unread. `reason` says why it is unscored: one of `episode.Unscored` (a str: "not_started", ...)."""

    adapter: A
    split: str
    task_index: int | None
    stream: str | None
    scored: bool
    reward: float | None  # what the trainer got
    finished: bool
    reason: str | None
    calls: int
    failures: int
    # The rollout's turns as GRPOTrainer passed them to its reward functions (`prompts[i]`, `completions[i]`), when
    # the reward was read there; else None (closed unread, or read outside TRL's reward computation).
    prompt: Any = None
    completion: Any = None
    seconds: float = 0.0  # from reset() to this end
    episode: Any = None


Listener = Callable[[Any], None]


class Registry:
    """Every listener of this process, by event (held by the process holder)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.listeners: dict[Event, list[tuple[type | None, Listener]]] = {event: [] for event in EVENTS}


def _registry() -> Registry:
    return STATE.part("hooks", Registry)


def add(event: Event, listener: Listener, env: type | None = None) -> None:
    """Call `listener(record)` at `event`, for every adapter or only instances of the adapter class `env`."""
    registry = _registry()
    if event not in registry.listeners:
        raise ValueError(f"unknown hook {event!r}: one of {', '.join(EVENTS)}")
    if not callable(listener):
        raise TypeError(f"hooks.add({event!r}, ...): the listener {listener!r} is not callable")
    if env is not None and not isinstance(env, type):  # checked at every event, outside the listener's guard
        raise TypeError(f"hooks.add({event!r}, ..., env={env!r}): an adapter class (or None for every adapter)")
    with registry.lock:
        registry.listeners[event] = [*registry.listeners[event], (env, listener)]  # copied: emit() reads without the lock


def remove(event: Event, listener: Listener, env: type | None = None) -> None:
    """Undo `add` (the same event, listener and env); nothing happens when it was not added."""
    registry = _registry()
    with registry.lock:
        registry.listeners[event] = [pair for pair in registry.listeners.get(event, []) if pair != (env, listener)]


def wanted(event: Event) -> bool:
    """Whether anyone listens: the runtime builds a record only then."""
    return bool(_registry().listeners[event])


def emit(event: Event, record: Any) -> None:
    for env, listener in _registry().listeners[event]:
        if env is not None and not isinstance(record.adapter, env):
            continue
        try:
            listener(record)
        except Exception:  # a broken listener must not break training
            log.exception("orsgen: the %s hook %r failed", event, listener)
