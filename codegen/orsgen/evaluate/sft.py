"""Passing episodes as a chat dataset TRL's `SFTTrainer` trains on (`messages` and `tools` columns): the warm-up on
a stronger model's solutions, in the tool-call format the environment's module offers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orsgen.evaluate.figures import latest
from orsgen.write import atomic


def rows(records: list[dict[str, Any]], bar: float, tools: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per passing episode: its prompt and completion turns, and the tools its adapter class offered."""
    found = []
    for record in latest(records):
        reward = record.get("reward")
        if record.get("error") or not isinstance(reward, int | float) or reward < bar:
            continue
        messages = [*(record.get("prompt") or []), *(record.get("completion") or [])]
        found.append({"messages": messages, "tools": tools.get(record.get("adapter") or "", []),
                      "environment": record.get("environment"), "split": record.get("split"),
                      "task_index": record.get("task_index"), "reward": reward})
    return found


def write(folder: Path, found: list[dict[str, Any]]) -> Path:
    path = folder / "passing.jsonl"
    atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in found))
    return path
