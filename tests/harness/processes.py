"""Processes the tests start, and waiting on events instead of sleeping.

Each process starts in a session of its own (its own process group): when the test ends early (a failed assert, its
pytest-timeout, Ctrl-C) or the process outlives its bound, the whole group is killed, so what it started (torchrun's
workers, a server it spawned, a pip subprocess) goes with it and never holds a pipe or a port open after the test. (A
command that ends by itself may leave a daemon it started on purpose, as a CI step's `orsgen serve &` does: that is
its test's to stop.)

- `run(argv, ...)`: `subprocess.run`'s arguments and result; `timeout` is a hang guard only (the test's own
  pytest-timeout bounds it anyway), never a statement of how fast the command is.
- `popen(argv, ...)`: a `subprocess.Popen` in its own group; `stop(process)` SIGTERMs then SIGKILLs the group, and
  `started(argv, ...)` is both as a context manager.
- `wait_until(predicate, timeout, ...)`: the predicate's first true value, polled; AssertionError with what it waited
  for when the deadline passes. The deadline is a hang guard too: set it far above what the event takes.

Nothing here imports pytest: the harness's worker scripts run in plain interpreters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# A command's hang guard when the caller gives none: far above any command the suite runs. Where it is below the
# test's own timeout (the slower tiers'), a hung command fails with what it printed.
HANG = 600.0


def killpg(process: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """`sig` to the process's group (its own: started with start_new_session); nothing if it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Children start with SIGINT as in a terminal. A shell that starts the tests in the background (`make ... &`,
    nohup, CI runners) ignores SIGINT, and a child inherits that: a Ctrl-C test's command would run on. A handler is
    not inherited (the child gets the default), so one stands in while the child starts."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def run(argv: Sequence[str] | str, *, timeout: float | None = HANG, check: bool = False,
        **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(argv, timeout=timeout, check=check, **kwargs)` in a process group of its own, killed whole
    if the call does not return normally (its timeout, the test's, an interrupt)."""
    if "input" not in kwargs:  # in a session of its own it has no terminal to read from
        kwargs.setdefault("stdin", subprocess.DEVNULL)
    with _interruptible():
        process = subprocess.Popen(argv, start_new_session=True, **_pipes(kwargs))
    with process:
        try:
            stdout, stderr = process.communicate(kwargs.get("input"), timeout=timeout)
        except subprocess.TimeoutExpired as late:
            killpg(process)
            late.output, late.stderr = process.communicate()  # what it printed before it hung
            raise
        except BaseException:
            killpg(process)
            process.wait()
            raise
        code = process.poll()
        assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, stdout, stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)


def _pipes(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Popen's arguments from run's (capture_output, input)."""
    popen = {k: v for k, v in kwargs.items() if k not in ("capture_output", "input")}
    if kwargs.get("capture_output"):
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    if "input" in kwargs:
        popen["stdin"] = subprocess.PIPE
    return popen


def popen(argv: Sequence[str] | str, **kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in a process group of its own; stop it with `stop` (or use `started`)."""
    with _interruptible():
        return subprocess.Popen(argv, start_new_session=True, **kwargs)


def stop(process: subprocess.Popen[Any], grace: float = 10.0) -> int:
    """SIGTERM to the process's group, then SIGKILL after `grace` seconds; its exit code. Its pipes are closed."""
    if process.poll() is None:
        killpg(process, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    killpg(process)
    code = process.wait()
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    return code


@contextlib.contextmanager
def started(argv: Sequence[str] | str, grace: float = 10.0, **kwargs: Any) -> Iterator[subprocess.Popen[Any]]:
    """`popen(argv, **kwargs)`, stopped (its whole group) on the way out however the block ends."""
    process = popen(argv, **kwargs)
    try:
        yield process
    finally:
        stop(process, grace)


def wait_until(predicate: Callable[[], T], timeout: float = 60.0, *, interval: float = 0.05,
               waiting_for: str | Callable[[], str] = "the condition") -> T:
    """Poll `predicate` until it returns something true and return that; AssertionError after `timeout` seconds (a
    hang guard: the test's point is the event, not its time) saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = waiting_for() if callable(waiting_for) else waiting_for
            raise AssertionError(f"still waiting for {said} after {timeout:g}s")
        time.sleep(interval)
