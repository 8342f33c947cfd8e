"""A turn of GRPOTrainer's tool loop (`tool_turn`): the call being made and the calls TRL will make after it in the
same turn (see the package's docstring for what is assumed)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import trl as release
from orsgen.runtime.trl.stack import frames, from_trl, in_trl


@dataclass(frozen=True)
class Call:
    """A call TRL's tool loop makes later in this turn: `method` (a bound sync tool of `adapter`) with `arguments`."""

    position: int  # the rollout's index in the batch (trainer.environments)
    adapter: Any
    method: Callable[..., Any]
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """The turn of GRPOTrainer's tool loop a call is made in, and the calls of the later rollouts of that turn."""

    key: tuple[int, int]  # the turn's `tool_calls` list (held in `calls`) and number
    calls: Any  # TRL's list: held, so its id names this turn only
    later: list[list[Call]]  # each later rollout's calls, in TRL's order; a prefix: up to one that cannot be known


def tool_turn(adapter: Any) -> Turn | str | None:
    """The turn of GRPOTrainer's tool loop this call of `adapter`'s is made in (see the docstring); None outside
    that loop (a call by hand, async tools, AsyncGRPOTrainer), the reason when the loop is there but cannot be read
    for certain (a subclass's own loop, another release, a call dict TRL would fail on)."""
    grpo = sys.modules.get("trl.trainer.grpo_trainer")
    loop = getattr(getattr(grpo, "GRPOTrainer", None), "_tool_call_loop", None)
    code = getattr(loop, "__code__", None)
    if code is None:
        return None
    seen = 0
    for seen, frame in enumerate(frames(sys._getframe(1), 8), 1):  # the tool method, the adapter's: TRL's is above
        if frame.f_code is code:
            break
        if frame.f_code.co_name == "_tool_call_loop" and from_trl(type(frame.f_locals.get("self"))):
            return f"{type(frame.f_locals['self']).__name__} has a tool loop of its own"
    else:
        if seen < 8:  # the stack ended first
            return None
        if threading.current_thread().name.startswith("grpo-tool") or in_trl(sys._getframe(1)):
            return "AsyncGRPOTrainer (or TRL code other than GRPOTrainer's tool loop) makes this call"
        return None
    local = frame.f_locals
    trainer = local.get("self")
    if type(trainer)._tool_call_loop is not loop:
        return f"{type(trainer).__name__} overrides GRPOTrainer's tool loop"
    if not release.check_version():
        return f"{release.installed()} is outside the releases whose tool loop was read ({release.SUPPORTED})"
    try:
        idx, rollouts, calls, current = local["idx"], local["idxs_with_tool"], local["tool_calls"], local["tool_call"]
        environments, tools, number = trainer.environments, trainer._sync_tool_dicts, int(local["iteration_num"])
        if environments[rollouts[idx]] is not adapter or not any(c is current for c in calls[idx]):
            return "the call running is not the one TRL's loop is at"
    except (KeyError, IndexError, AttributeError, TypeError):
        return "TRL's tool loop does not hold what it held in the releases read"
    if not all(_well_formed(call) for rollout in calls[idx:] for call in rollout):
        return "a call of this turn is one TRL's loop fails on"
    later = []
    for k in range(idx + 1, len(rollouts)):
        position = rollouts[k]
        env, found = environments[position], []
        for call in calls[k]:
            function = call["function"] if call["type"] == "function" else {}
            method, arguments = tools[position].get(function.get("name")), function.get("arguments")
            if method is None or getattr(method, "__self__", None) is not env or type(arguments) is not dict:
                break  # TRL's own call fails, or runs something else: nothing after it is started ahead
            if not _binds(method, arguments):
                break
            found.append(Call(position, env, method, arguments))
        later.append(found)
    return Turn((id(calls), number), calls, later)



def _well_formed(call: Any) -> bool:
    if not isinstance(call, Mapping) or "type" not in call:
        return False
    function = call.get("function")
    return call["type"] != "function" or (isinstance(function, Mapping) and isinstance(function.get("name"), str))


def _binds(method: Any, arguments: dict[str, Any]) -> bool:
    import inspect

    try:
        inspect.signature(method).bind(**arguments)
    except TypeError:
        return False
    return True
