import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from examples import serve

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYTHONPATH", str(ROOT))  # the server subprocesses import tests.envs
os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
_count = itertools.count()


@pytest.fixture(scope="session")
def echo_server():
    with serve.running("examples.echo:Echo") as server:
        yield server


@pytest.fixture(scope="session")
def multi_server():
    """Two environments on one server: echo (the default, first) and quiz."""
    with serve.running("examples.echo:Echo", "tests.envs.quiz:Quiz") as server:
        yield server


def orsgen(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI the way a user does."""
    return subprocess.run(
        [sys.executable, "-m", "orsgen", *args],
        check=False, capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def load(path: Path) -> ModuleType:
    """Import a generated module from its file under a fresh name."""
    name = f"{path.stem}_{next(_count)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def settle(timeout: float = 10.0) -> None:
    """Wait until the sessions the runtime is closing in the background are closed."""
    import concurrent.futures

    from orsgen.runtime import client

    if client._loop is not None:
        concurrent.futures.wait(list(client._loop.closing), timeout=timeout)


@pytest.fixture
def generate(tmp_path):
    """generate(target, *options) -> the imported module; fails the test on a non-zero exit."""

    def run(target: str, *options: str, name: str = "adapter", env: dict[str, str] | None = None) -> ModuleType:
        out = tmp_path / f"{name}.py"
        result = orsgen(target, "-o", str(out), *options, env=env)
        assert result.returncode == 0, result.stderr
        return load(out)

    return run

