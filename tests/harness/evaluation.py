"""`orsgen eval` as a user runs it (a subprocess, the current folder its own), and what a run's folder holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.harness import ROOT


def environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)]), **(extra or {})}


def orsgen_eval(*args: str, cwd: Path, env: dict[str, str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orsgen", "eval", *args], check=False, capture_output=True,
                          text=True, cwd=cwd, env=environ(env), timeout=timeout)


def popen(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orsgen", "eval", *args], cwd=cwd, env=environ(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]
