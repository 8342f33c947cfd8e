"""`orsgen eval` as a user runs it (a subprocess, the current folder its own), what a run's folder holds, and the
scripted model of the graded environment (tests/envs/graded.py) whose figures are known exactly: right on tasks 0
and 1 (on 1 after a call its method refuses), wrong on 2 and 3, right on 4 by a coin flipped with each episode's seed;
task 5 never starts."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.harness import ROOT, processes
from tests.harness.chat_standin import Reply, first_user_text, tool_results


def environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)]), **(extra or {})}


def orsgen_eval(*args: str, cwd: Path, env: dict[str, str] | None = None,
                timeout: float = processes.HANG) -> subprocess.CompletedProcess[str]:
    """`orsgen eval ARGS` run to its end (`timeout`: a hang guard) in a process group of its own."""
    return processes.run([sys.executable, "-m", "orsgen", "eval", *args], capture_output=True, text=True, cwd=cwd,
                         env=environ(env), timeout=timeout)


def popen(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`orsgen eval ARGS` started in a process group of its own: stop it with `processes.stop`."""
    return processes.popen([sys.executable, "-m", "orsgen", "eval", *args], cwd=cwd, env=environ(env),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line] if path.exists() else []


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


COIN = 4  # the graded task whose episodes pass by a coin flip


def coin(seed: int) -> bool:
    return random.Random(seed).random() < 0.5


def task_of(payload: dict[str, Any]) -> int:
    """The graded task a request is about (-1: the probe)."""
    text = first_user_text(payload)
    return int(text.split(":")[0].split()[-1]) if text.startswith("Task ") else -1


def script(payload: dict[str, Any]) -> Reply:
    """The graded environment's scripted model (above); task 1 first calls `answer` with a wrong keyword, so its
    episodes take three replies, the others two."""
    task, results = task_of(payload), tool_results(payload)
    if task < 0:
        return Reply(content="OK")  # the probe
    if results and not results[-1].startswith("{'error'"):
        return Reply(content="done", prompt_tokens=30, completion_tokens=2)
    if task == 1 and not results:
        return Reply(tool_calls=[("answer", {"txt": "w1"})], prompt_tokens=20, completion_tokens=5)
    right = task in (0, 1) or (task == COIN and coin(payload["seed"]))
    return Reply(tool_calls=[("answer", {"text": f"w{task}" if right else "nope"})], prompt_tokens=20,
                 completion_tokens=5)


@contextlib.contextmanager
def graded(folder: Path) -> Iterator[tuple[Any, Path]]:
    """The graded environment served (requests logged) and its module generated into `folder`: (server, path)."""
    from tests.harness.generation import served

    with served("tests.envs.graded:Graded", folder, "graded") as (server, module):
        yield server, Path(module.__file__)
