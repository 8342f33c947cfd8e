"""Conversation-shaped tasks (`GET /{env}/messages`): a task's turns as TRL's chat turns.

A task whose messages are more than one user turn is a conversation: `dataset(prompts=True)` puts its turns in the
row's `prompt` (the last user turn left empty, as for every row) and `reset()` returns that last turn's content,
which TRL appends; nothing is said twice. Such tasks are remembered per environment (`Pinned.conversations`) from
the rows the trainer resets, so their sessions read `/messages`; every other task reads `/prompt`, as before.
(`score_group` transcripts, the other way, are `transcripts`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orsgen.runtime.content import content

if TYPE_CHECKING:
    from openreward.api.environments.client import AsyncSession


def note(conversations: set[tuple[str, int]], split: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Remember the rows' tasks whose `prompt` holds a conversation (in an environment's `conversations`): their
    sessions read `/messages`."""
    for row in rows:
        turns = row.get("prompt")
        if row.get("task_index") is not None and isinstance(turns, list) and len(turns) > 1:
            conversations.add((row.get("split") or split, int(row["task_index"])))


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
