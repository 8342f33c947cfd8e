"""`orsgen eval` as a user runs it (a subprocess, the current folder its own), what a run's folder holds, and the
scripted model of the graded environment (tests/envs/graded.py) whose figures are known exactly: right on tasks 0
and 1 (on 1 after a call its method refuses), wrong on 2 and 3, right on 4 by a coin flipped with each episode's seed;
task 5 never starts."""

from __future__ import annotations

import contextlib
import io
import json
import locale
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.harness import ROOT, processes, servers
from tests.harness.chat_standin import Reply, first_user_text, tool_results


def environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)]), **(extra or {})}


def orsgen_eval(*args: str, cwd: Path, env: dict[str, str] | None = None,
                timeout: float = processes.HANG) -> subprocess.CompletedProcess[str]:
    """`orsgen eval ARGS` run to its end: `orsgen_command("eval", *args, ...)`."""
    return orsgen_command("eval", *args, cwd=cwd, env=env, timeout=timeout)


def orsgen_command(*args: str, cwd: Path, env: dict[str, str] | None = None,
                   timeout: float = processes.HANG) -> subprocess.CompletedProcess[str]:
    """`orsgen ARGS` (eval, replay, doctor) run to its end (`timeout`: a hang guard) in a process group of its own: a
    process forked by the servers' zygote, which imported the openreward SDK once (servers.command), and is otherwise
    the command as a fresh interpreter runs it. Its output is read as `subprocess.run(text=True)` reads a pipe."""
    argv = ["orsgen", *args]
    with tempfile.TemporaryDirectory(prefix="orsgen-eval-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        child = servers.command(argv, str(cwd), environ(env), str(out), str(err))
        try:
            code = child.wait(timeout)
        except BaseException as exc:  # its hang guard, the test's timeout, an interrupt: the whole group goes
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                exc.output, exc.stderr = _text(out), _text(err)  # what it printed before it hung
            raise
        return subprocess.CompletedProcess([sys.executable, "-m", *argv], code, _text(out), _text(err))


def _text(path: Path) -> str:
    """A file read as `subprocess.run(text=True)` reads a pipe: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(path.read_bytes()), encoding=locale.getpreferredencoding(False)).read()


def popen(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Started:
    """`orsgen eval ARGS` started in a process group of its own, forked by the zygote as `orsgen_eval` is: stop it
    with `processes.stop`."""
    folder = Path(tempfile.mkdtemp(prefix="orsgen-eval-"))
    out, err = folder / "stdout", folder / "stderr"
    return Started(servers.command(["orsgen", "eval", *args], str(cwd), environ(env), str(out), str(err)), folder)


class Started:
    """A started `orsgen eval`, as far as the tests use a Popen of it: poll, wait, send_signal, communicate (its
    output read once it has ended), returncode, and no pipes (`processes.stop` stops its group)."""

    stdin = stdout = stderr = None

    def __init__(self, child: servers.Forked, folder: Path) -> None:
        self.child, self.pid, self.folder = child, child.pid, folder

    @property
    def returncode(self) -> int | None:
        return self.child.returncode

    def poll(self) -> int | None:
        return self.child.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.child.wait(timeout)

    def send_signal(self, sig: int) -> None:
        self.child.send_signal(sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.child.wait(timeout)
        found = _text(self.folder / "stdout"), _text(self.folder / "stderr")
        shutil.rmtree(self.folder, ignore_errors=True)
        return found


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
