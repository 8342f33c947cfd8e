"""Generation for tests: the CLI as a user runs it (a subprocess), or the same command in this process, and the import
of what it wrote.

`orsgen()` is for tests of the command itself (exit codes, its lines on stdout and stderr, the hash seed, what it
imports, Ctrl-C). `in_process()` runs the same argv through the CLI's in-process entry and returns the same result:
a test that only needs the module saves the interpreter start and the generator's imports (1-3 s a call on 2 busy
cores). The CLI's entry is named here once, so a refactor of the generator changes one line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from tests.harness import processes

_count = itertools.count()


class Outcome(NamedTuple):
    """What a run of the CLI gave: the attributes of a CompletedProcess, and `code, out, err = outcome`."""

    returncode: int
    stdout: str
    stderr: str


def orsgen(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI the way a user does (in a process group of its own, killed if the test ends first)."""
    return processes.run([sys.executable, "-m", "orsgen", *args], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, cwd=cwd)


def in_process(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Outcome:
    """`orsgen(*args)` in this process: the same exit code, stdout and stderr, with `env` set and `cwd` entered for
    the call only."""
    from orsgen.cli import main  # the CLI's in-process entry: argv in, exit code out

    out, err = io.StringIO(), io.StringIO()
    with _environment(env or {}), _folder(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse: --help, --version and usage errors exit
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if isinstance(exit_.code, str):
                print(exit_.code, file=sys.stderr)
    return Outcome(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _folder(cwd: Path | None) -> Iterator[None]:
    if cwd is None:
        yield
        return
    before = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


def load(path: Path) -> ModuleType:
    """Import a generated module from its file under a fresh name (a test may load the same file twice)."""
    name = f"{path.stem}_{next(_count)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def served(spec: str, folder: Path, name: str, *options: str,
           env: dict[str, str] | None = None) -> Iterator[tuple[object, ModuleType]]:
    """(server, module): `spec` served with request counting (and `env` in the server's environment), its module
    generated in this process into `folder/name.py` and imported; the server stops at the end."""
    from tests.harness import servers

    with servers.running(spec, env={"ORSGEN_COUNT_REQUESTS": "1", **(env or {})}) as server:
        out = folder / f"{name}.py"
        result = in_process(server.url, "-o", str(out), *options)
        assert result.returncode == 0, result.stderr
        yield server, load(out)
