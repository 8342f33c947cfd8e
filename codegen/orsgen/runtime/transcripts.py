"""Rollouts as the SDK's `Message` blocks, for `score_group` (groups.py): the prompt TRL rendered, the model's turns
with their tool calls, and the tool results matched to the calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from orsgen.runtime.trl.rollout import is_error

RICH = ("tool_call", "tool_result")  # block types an environment may not accept in score_group candidates


def transcript(prompt: Any, completion: Any, accepted: Sequence[str]) -> list[Any]:
    """A rollout as the SDK's messages: the prompt TRL rendered, then the model's turns with their tool calls and
    the tool results (user turns of `tool_result` blocks, matched to the calls). Block types the environment does
    not accept (`accepted`, from its /tools reply) are sent as text."""
    from openreward.api.environments.types import Message, TextBlock, ToolCallBlock, ToolResultBlock

    rich = all(kind in accepted for kind in RICH)
    turns = ([{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)) + (
        [{"role": "assistant", "content": completion}] if isinstance(completion, str) else list(completion))
    out: list[Any] = []
    pending: list[tuple[str, str]] = []  # (call id, tool name) of the last assistant turn, not yet answered
    results: list[Any] = []
    for turn in turns:
        role = turn.get("role")
        if role == "tool":
            name = turn.get("name")
            at = next((i for i, (_, n) in enumerate(pending) if n == name), 0 if pending else None)
            call_id = pending.pop(at)[0] if at is not None else f"call_{len(out)}_{len(results)}"
            text = _text(turn.get("content"))
            if rich:
                results.append(ToolResultBlock(tool_call_id=call_id, blocks=[TextBlock(text=text)],
                                               is_error=is_error(text)))
            else:
                results.append(TextBlock(text=f"[{name} returned] {text}"))
            continue
        if results:
            out.append(Message(role="user", blocks=results))
            results = []
        blocks: list[Any] = []
        text = _text(turn.get("content"))
        if text or not turn.get("tool_calls"):
            blocks.append(TextBlock(text=text))
        pending = []
        for n, call in enumerate(turn.get("tool_calls") or []):
            function = call.get("function", call)
            name, arguments = str(function.get("name")), _arguments(function.get("arguments"))
            call_id = str(call.get("id") or f"call_{len(out)}_{n}")
            pending.append((call_id, name))
            blocks.append(ToolCallBlock(id=call_id, name=name, input=arguments) if rich else
                          TextBlock(text=f"[calls {name}] {json.dumps(arguments, sort_keys=True)}"))
        out.append(Message(role=role if role in ("system", "user", "assistant") else "user", blocks=blocks))
    if results:
        out.append(Message(role="user", blocks=results))
    return out


def _text(value: Any) -> str:
    if isinstance(value, list):  # content parts: their text (images are not sent)
        return "\n".join(str(p.get("text", "")) for p in value if isinstance(p, dict) and p.get("type") == "text")
    return "" if value is None else str(value)


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {"arguments": value}
    return dict(value) if isinstance(value, Mapping) else {"arguments": value}
