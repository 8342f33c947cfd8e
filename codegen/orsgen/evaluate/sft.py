"""Passing episodes as a chat dataset TRL's `SFTTrainer` trains on (`messages` and `tools` columns): the warm-up on
a stronger model's solutions, in the tool-call format the environment's module offers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orsgen.evaluate.figures import latest, passed
from orsgen.runtime import jsontext
from orsgen.write import atomic

NAME = "passing.jsonl"
COLUMNS = ("messages", "tools", "environment", "split", "task_index", "reward")  # a row's keys, in order


def rows(records: list[dict[str, Any]], bar: float, tools: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per passing episode (a pass as the figures count it): its prompt and completion turns, and the tools
    its adapter class offered."""
    found = []
    for record in latest(records):
        if not passed(record, bar):
            continue
        messages = [*(record.get("prompt") or []), *(record.get("completion") or [])]
        found.append({"messages": messages, "tools": tools.get(record.get("adapter") or "", []),
                      "environment": record.get("environment"), "split": record.get("split"),
                      "task_index": record.get("task_index"), "reward": record["reward"]})
    return found


def write(folder: Path, found: list[dict[str, Any]]) -> Path:
    path = folder / NAME
    atomic(path, "".join(jsontext.dumps(row) + "\n" for row in found))
    return path


def ours(folder: Path) -> bool:
    """Whether `folder` may take a set: it holds no passing.jsonl, or one orsgen eval wrote (empty, or rows of
    these columns); anything else is the user's, never replaced."""
    path = folder / NAME
    if not path.exists():
        return True
    try:
        with path.open("rb") as f:
            first = f.readline(1 << 26)  # a longer first row is no episode of ours
        return not first.strip() or tuple(json.loads(first)) == COLUMNS
    except (OSError, ValueError, TypeError):
        return False
