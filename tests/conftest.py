"""Shared fixtures. The helpers themselves live in tests/harness/ (servers, generation, trainers); `orsgen`, `load`,
`settle` and `ROOT` stay importable from here for tests written against the older layout."""

import os

# One torch thread per test process and per subprocess it starts (set before anything here imports torch): the tiers run
# two or three workers, each with servers, ranks and model servers beside it, on 2 cores, where torch's default (a
# thread per core, each spinning while it waits) made the same trainer steps several times slower. Measured:
# tests/test_close_at_rewards.py on two workers, 119 s of CPU in 673 s without, 54 s in 110 s with. torchrun sets it
# for its ranks the same way.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from tests.harness import ROOT, servers, trainers
from tests.harness.generation import in_process, load, orsgen
from tests.harness.servers import settle

__all__ = ["ROOT", "load", "orsgen", "settle"]

os.environ.setdefault("PYTHONPATH", str(ROOT))  # the server subprocesses import tests.envs and tests.harness
os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
# The CLI waits between attempts as the SDK does (a refused server: 1 s, then 2 s); tests of unreachable servers wait
# a twentieth of that. tests/test_wire_semantics.py sets it back to 1 where the waits themselves are under test.
os.environ.setdefault("ORSGEN_WIRE_BACKOFF_SCALE", "0.05")


# The per-test timeout of the longer tiers (pytest-timeout; the fast tier's is pyproject's `timeout`). A test's own
# @pytest.mark.timeout(N) wins. Hang guards: a hang fails its test with every thread's stack and the run goes on.
TIER_TIMEOUT = {"slow": 600, "trainer": 1200, "install": 1200}


def pytest_collection_modifyitems(config, items):
    long = set()
    for item in items:
        tier = max([TIER_TIMEOUT[m.name] for m in item.iter_markers() if m.name in TIER_TIMEOUT],
                   default=float(config.getini("timeout")))
        own = item.get_closest_marker("timeout")
        if own is None:
            item.add_marker(pytest.mark.timeout(tier))
        elif (own.args[0] if own.args else own.kwargs.get("timeout", 0)) > tier:
            long.add(item.nodeid)
    # A test given longer than its tier is a long one (the own-project path: 2.5 minutes): those start first, the rest
    # keep pytest-randomly's order (it shuffles before this hook), so none begins last and holds a worker alone at the
    # end of the run.
    items.sort(key=lambda item: item.nodeid not in long)


@pytest.fixture(scope="session")
def run_tmp(tmp_path_factory):
    """A folder every worker of this test run shares (pytest-xdist gives each its own basetemp inside it), for what
    is built once a run: the tiny model behind `transformers serve` (tests/harness/tiny_serve.py)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def echo_server():
    with servers.running("examples.echo:Echo") as server:
        yield server


@pytest.fixture(scope="session")
def multi_server():
    """Two environments on one server: echo (the default, first) and quiz."""
    with servers.running("examples.echo:Echo", "tests.envs.quiz:Quiz") as server:
        yield server


@pytest.fixture
def generate(tmp_path):
    """generate(target, *options) -> the imported module; fails the test on a non-zero exit. Generation runs in this
    process (tests of the command itself use `orsgen`, a subprocess)."""

    def run(target: str, *options: str, name: str = "adapter", env: dict[str, str] | None = None):
        out = tmp_path / f"{name}.py"
        result = in_process(target, "-o", str(out), *options, env=env)
        assert result.returncode == 0, result.stderr
        return load(out)

    return run


@pytest.fixture(autouse=True)
def _tier(request, monkeypatch):
    """A test without the `trainer` marker is in the fast tier (`make test-fast`): the harness builds it no trainer."""
    if request.node.get_closest_marker("trainer") is None:
        monkeypatch.setattr(trainers, "FAST_TIER", True)
