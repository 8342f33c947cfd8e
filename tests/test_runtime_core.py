"""The runtime core's shape: no import cycle among its modules, start failures counted per environment, nothing
process-wide that grows with every module or trainer a process has seen."""

import ast
import concurrent.futures
import gc
import threading
import weakref
from pathlib import Path

import pytest
from orsgen.model.typeddicts import parsed  # ast.parse, again after CPython 3.11's thread race (gh-106905)

from tests.envs.flaky import BROKEN, NORMAL
from tests.harness import servers
from tests.harness.generation import load, orsgen
from tests.harness.servers import settle

RUNTIME = Path(__file__).resolve().parent.parent / "codegen" / "orsgen" / "runtime"


def imports_of(path: Path) -> set[str]:
    """The runtime modules a runtime module imports, anywhere in it (in functions too), but not for type checking."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orsgen.runtime"):
            if node.module == "orsgen.runtime":
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[2])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(parsed(path.read_text(encoding="utf-8")))
    return found


def test_the_runtime_modules_import_each_other_without_a_cycle():
    graph = {p.stem: imports_of(p) for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    graph = {name: {dep for dep in deps if dep in graph} for name, deps in graph.items()}
    assert graph["pinned"] and graph["rows"], graph  # the scan sees imports at all
    done: set[str] = set()

    def walk(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dep in sorted(graph[name]):
            walk(dep, (*path, name))
        done.add(name)

    for name in sorted(graph):
        walk(name, ())


@pytest.fixture(scope="module")
def two_environments(tmp_path_factory, echo_server):
    """(flaky module, echo module, flaky's server): two environments in one process."""
    with servers.running("tests.envs.flaky:Flaky", env={"ORSGEN_COUNT_REQUESTS": "1"}) as flaky_server:
        modules = []
        for target, stem in ((flaky_server.url, "flaky_core"), (echo_server.url, "echo_core")):
            out = tmp_path_factory.mktemp(stem) / f"{stem}.py"
            made = orsgen(target, "-o", str(out))
            assert made.returncode == 0, made.stderr
            modules.append(load(out))
        yield (*modules, flaky_server)
        modules[0].close_all()


def test_start_failures_in_a_row_are_counted_per_environment(two_environments):
    flaky, echo, _ = two_environments

    class Twice(flaky.Flaky):
        max_start_failures, start_retries, down_after = 2, 0, 0

    env, other = Twice(), echo.Echo()
    env.reset(task_index=NORMAL)
    env.reset(task_index=BROKEN)  # one failure of this environment
    assert flaky.PINNED.failures.count == 1
    other.reset(task_index=0)  # another environment starting fine does not end this one's run of failures
    assert echo.PINNED.failures.count == 0
    with pytest.raises(flaky.runtime.StartError, match="^2 episodes in a row could not start"):
        env.reset(task_index=BROKEN)
    assert echo.PINNED.failures.count == 0  # and this one's failures are not the other's
    other.reset(task_index=1)
    flaky.close_all()


def test_sessions_opened_ahead_are_held_only_while_something_waits():
    from orsgen.runtime import ahead

    holder = ahead.Ahead()
    opening: concurrent.futures.Future = concurrent.futures.Future()
    holder.put(("train", 0), "key", opening)
    assert holder in ahead._holding  # held while it holds an opening: exit and close_all must find it
    assert holder.take(("train", 0), "key") is opening
    assert holder not in ahead._holding
    holder.put(("train", 0), "key", opening)
    assert holder.drain() == [opening] and holder not in ahead._holding
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None  # nothing process-wide keeps an Ahead that holds nothing


def test_a_refused_reset_still_closes_the_previous_episode(two_environments):
    flaky, _, server = two_environments
    env = flaky.Flaky()
    env.reset(task_index=NORMAL)
    assert len(server.open_sessions()) == 1
    refused: list[BaseException] = []

    def outside_any_trainer() -> None:
        try:
            env.reset()  # no task_index on a thread outside any trainer: refused
        except RuntimeError as exc:
            refused.append(exc)

    thread = threading.Thread(target=outside_any_trainer)
    thread.start()
    thread.join()
    assert len(refused) == 1 and "\n" not in str(refused[0])
    settle()
    assert server.open_sessions() == []  # the refusal did not keep the episode before it open
