"""What GRPOTrainer does with a rollout (TRL 1.13 to 1.16, trl-contract §2.3-2.5), for whoever runs one as it does:
`orsgen eval` rolls a model behind an endpoint out with it, and the runtime reads TRL's texts back (a tool turn that
holds an error, in `score_group` transcripts). Each is read under the package's version check (`rollout_release`).

- The prompt: the row's `prompt` turns with what `reset()` returned appended to the last turn (text to its text,
  anything else as content parts).
- A tool call: the environment's method called with the model's arguments; its result is the tool turn's content (a
  list of content parts as it is, anything else as its text), and an exception is `{'error': ...}` as text, a tool
  the environment lacks "Tool NAME not found." (counted a failure).
- A turn: the model's calls are made in order; after `max_turns` rounds of them, the last round's calls are not made.
- The reward: each reward function over the batch (here one rollout) with TRL's keywords, `get_reward()` last when
  the environment defines it, summed with weight 1 over those that gave a value; None when none did.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from orsgen.runtime import trl as release

ERROR = "{'error': "  # how a tool turn holding an exception begins: str({"error": str(exc)})


def rollout_release() -> None:
    """The version check training makes at a batch's first reset, made by a rollout outside a trainer too: a TRL
    installed outside the range read here is named once (no TRL installed: nothing to compare with)."""
    release.check_version()


def prompt(turns: list[dict[str, Any]], observation: Any) -> list[dict[str, Any]]:
    """The row's prompt with what reset() returned appended to its last turn, as GRPOTrainer does."""
    prompt = copy.deepcopy(turns)
    if observation is None:
        return prompt
    last = prompt[-1]
    if isinstance(observation, str) and isinstance(last.get("content"), str):
        last["content"] += observation
    else:
        parts = last.get("content")
        parts = [{"type": "text", "text": parts}] if isinstance(parts, str) else list(parts or [])
        last["content"] = parts + (observation if isinstance(observation, list) else [{"type": "text",
                                                                                        "text": str(observation)}])
    return prompt


def call(methods: Mapping[str, Callable[..., Any]], name: str, arguments: Any) -> Any:
    """A tool call as GRPOTrainer makes it: its result as the tool turn's content, an exception as
    `{'error': ...}` (counted a failure)."""
    try:
        if name not in methods:
            raise ValueError(f"Tool {name} not found.")
        if not isinstance(arguments, dict):
            raise TypeError(f"the arguments of {name} are not a JSON object: {str(arguments)[:200]}")
        result = methods[name](**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
    except Exception as exc:  # noqa: BLE001 - what TRL's loop catches, the model sees
        result = {"error": str(exc)}
    return result if isinstance(result, list) else str(result)


def is_error(text: str) -> bool:
    """A tool turn's text that holds the exception its call raised."""
    return text.startswith(ERROR)


def last_round(rounds: int, max_turns: int) -> bool:
    """Whether, after `rounds` rounds of calls, the model's next calls are left unmade (TRL's turn limit)."""
    return rounds >= max_turns


def reward(row: Mapping[str, Any], env: Any, prompt: Any, completion: Any,
           functions: tuple[Callable[..., Any], ...]) -> float | None:
    """TRL's reward of one rollout: each reward function's value (None: no value) with the keywords GRPOTrainer
    passes, then get_reward()'s, summed with weight 1; None when none gave one."""
    columns = {k: [v] for k, v in row.items() if k not in ("prompt", "completion", "completion_ids")}
    values: list[float | None] = []
    for func in functions:
        found = func(prompts=[prompt], completions=[completion], completion_ids=[[]], trainer_state=None,
                     log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, environments=[env], **columns)
        if inspect.isawaitable(found):
            found = asyncio.run(_awaited(found))
        values.append(found[0])
    values.append(env.get_reward())
    scored = [float(v) for v in values if v is not None]
    return sum(scored) if scored else None


async def _awaited(result: Any) -> Any:
    return await result
