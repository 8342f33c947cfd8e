"""Conversation-shaped tasks (`GET /{env}/messages`) and transcripts in the SDK's `Message` blocks.

A task whose messages are more than one user turn is a conversation: `dataset(prompts=True)` puts its turns in the
row's `prompt` (the last user turn left empty, as for every row) and `reset()` returns that last turn's content,
which TRL appends; nothing is said twice. Such tasks are remembered per environment (`Pinned.conversations`) from
the rows the trainer resets, so their sessions read `/messages`; every other task reads `/prompt`, as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orsgen.runtime.content import content

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncSession

    from orsgen.runtime.pinned import Pinned

RICH = ("tool_call", "tool_result")  # block types an environment may not accept in score_group candidates


def note(pinned: Pinned, split: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Remember the rows' tasks whose `prompt` holds a conversation: their sessions read `/messages`."""
    for row in rows:
        turns = row.get("prompt")
        if row.get("task_index") is not None and isinstance(turns, list) and len(turns) > 1:
            pinned.conversations.add((row.get("split") or split, int(row["task_index"])))


async def prompt(session: AsyncSession, whole: bool, conversation: bool, limit: float) -> Any:
    """What a session reads as the task's prompt: `whole`, every turn (for dataset()); for a conversation, the
    content of its last user turn (what reset() returns); else `/prompt`'s content."""
    if not (whole or conversation):
        return content(await asyncio.wait_for(session.get_prompt(), limit))
    turns = chat(await asyncio.wait_for(session.get_messages(), limit))
    return turns if whole else split(turns)[1]


def chat(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK messages as TRL's chat turns: text (or content parts), tool calls, tool results as `tool` turns."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        plain = [b for b in message.blocks if b.type in ("text", "image")]
        calls = [{"type": "function", "function": {"name": b.name, "arguments": dict(b.input)}}
                 for b in message.blocks if b.type == "tool_call"]
        results = [b for b in message.blocks if b.type == "tool_result"]
        if plain or not (calls or results):
            turn: dict[str, Any] = {"role": message.role, "content": content(plain)}
            if calls:
                turn["tool_calls"] = calls
            turns.append(turn)
        elif calls:
            turns.append({"role": message.role, "content": "", "tool_calls": calls})
        turns += [{"role": "tool", "content": content(r.blocks)} for r in results]
    return turns


def split(turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """(the row's prompt, what reset() returns): the last user turn's content moves to reset()."""
    if turns and turns[-1]["role"] == "user":
        return [*turns[:-1], {"role": "user", "content": ""}], turns[-1]["content"]
    return turns, None


def columns(read: list[list[dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """The `prompt` and `task_prompt` columns of dataset(prompts=True) from each task's turns. A task of one user
    turn gives what it always gave: an empty user message and the prompt's text."""
    prompts, texts = [], []
    for turns in read:
        row, last = split(turns)
        prompts.append(row)
        texts.append(None if last is None else str(last))
    return prompts, texts


# -- transcripts for score_group -------------------------------------------------------------------------------


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
                                               is_error=text.startswith("{'error': ")))
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
