"""The runtime as objects (issue 27): no module but the adapter's names an adapter private, the import graph runs
down the layers CONTRIBUTING shows, one settings table (docs/reference.md's), the secrets a module was generated with
reach its sessions, a public count of open sessions, and every reason an episode goes unscored is counted."""

import ast
import base64
import json
import re
from pathlib import Path

import pytest
from orsgen.model.typeddicts import parsed  # ast.parse, again after CPython 3.11's thread race (gh-106905)
from orsgen.runtime import Adapter, Unscored, close_all, episode_of, open_sessions, settings

from tests.harness import servers
from tests.harness.generation import in_process, load

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "codegen" / "orsgen" / "runtime"
# The runtime's modules, and its packages (`trl`) as one node each: their own modules are `sources(path)`.
MODULES = {p.stem: p for p in RUNTIME.glob("*.py")} | {p.name: p for p in RUNTIME.iterdir() if (p / "__init__.py").is_file()}


def sources(path: Path) -> list[Path]:
    """A module's file, or every module of a package."""
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def trees(path: Path) -> list[ast.Module]:
    return [parsed(source.read_text(encoding="utf-8")) for source in sources(path)]
CANARY = "canary-27-not-for-files"


# -- who may touch what -----------------------------------------------------------------------------------------------


def adapter_privates() -> set[str]:
    """The private names of `Adapter`: its methods and attributes (`self._x = ...` in adapter.py)."""
    tree = parsed(MODULES["adapter"].read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Adapter")
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              for t in ast.walk(t) if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
              and t.value.id == "self"}
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_runtime_module_but_the_adapters_names_an_adapter_private():
    privates = adapter_privates()
    assert {"_episode_now", "_settle", "_close", "_call"} <= privates  # the walk sees them at all
    named = []
    for stem, path in MODULES.items():
        if stem == "adapter":
            continue
        for tree in trees(path):
            named += [f"{stem}:{n.lineno}: .{n.attr}" for n in ast.walk(tree)
                      if isinstance(n, ast.Attribute) and n.attr in privates]
            named += [f"{stem}:{n.lineno}: class {n.name}(Adapter)" for n in ast.walk(tree)
                      if isinstance(n, ast.ClassDef) and any(ast.unparse(b).endswith("Adapter") for b in n.bases)]
    assert named == []


def test_no_runtime_module_reads_another_modules_private_names():
    """`client._loop`, `ahead._holding` and the like stay their module's: the others use public functions."""
    read = []
    for stem, path in MODULES.items():
        for tree in trees(path):
            modules = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                       and n.module == "orsgen.runtime" for a in n.names if a.name in MODULES}
            read += [f"{stem}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                     if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules
                     and n.attr.startswith("_") and not n.attr.startswith("__")]
    assert read == []


def runtime_imports(path: Path) -> set[str]:
    """The runtime modules a runtime module (or package) imports: anywhere, in functions and under TYPE_CHECKING too;
    a name imported from the package itself is an edge to `__init__` unless it is a module."""
    found: set[str] = set()
    for node in (node for tree in trees(path) for node in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("orsgen.runtime"):
            if node.module == "orsgen.runtime":
                found |= {a.name if a.name in MODULES else "__init__" for a in node.names}
            else:
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("orsgen.runtime.")}
    return found - {path.stem, path.name}


def test_the_trl_package_is_a_boundary_that_imports_no_other_runtime_module():
    """`trl` (everything assumed about TRL) is a package of small modules; they import one another and nothing else
    of the runtime, so TRL's knowledge stays in one place."""
    assert MODULES["trl"].is_dir() and len(sources(MODULES["trl"])) > 5
    assert runtime_imports(MODULES["trl"]) == set()


def layers() -> dict[str, int]:
    """The runtime's layers as CONTRIBUTING's table draws them: `| N | `module`, `module` | ... |` rows."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    found = {}
    for line in text.split("<!-- runtime layers -->", 2)[1].splitlines():
        match = re.match(r"^\| (\d+) \| ([^|]+) \|", line)
        if match:
            found.update({name: int(match[1]) for name in re.findall(r"`([a-z_]+)`", match[2])})
    return found


def test_the_runtime_import_graph_runs_down_the_layers_without_a_cycle():
    layer = layers()
    assert set(layer) == set(MODULES), f"CONTRIBUTING's layers and the modules differ: {set(layer) ^ set(MODULES)}"
    graph = {stem: runtime_imports(path) for stem, path in MODULES.items()}
    assert graph["adapter"] and "pinned" in graph["adapter"]  # TYPE_CHECKING imports are seen
    upward = [f"{a} (layer {layer[a]}) imports {b} (layer {layer[b]})" for a, deps in graph.items() for b in deps
              if layer[b] > layer[a]]
    assert upward == []
    done: set[str] = set()

    def walk(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"import cycle: {' -> '.join((*path, name))}"
        if name not in done:
            for dep in sorted(graph[name]):
                walk(dep, (*path, name))
            done.add(name)

    for name in sorted(graph):
        walk(name, ())


# -- one set of settings ----------------------------------------------------------------------------------------------


def test_the_readme_documents_the_settings_table_as_it_is():
    assert settings.table() in (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")


def test_a_setting_comes_from_the_constructor_then_the_variable_then_the_class(monkeypatch):
    class Odd(Adapter):
        open_ahead = False
        start_retries = 5

    assert settings.resolve(Odd).open_ahead is False and settings.resolve(Odd).start_retries == 5
    monkeypatch.setenv("ORSGEN_OPEN_AHEAD", "next-step")
    assert settings.resolve(Odd).open_ahead == "next-step"
    assert settings.resolve(Odd, {"open_ahead": True}).open_ahead is True
    monkeypatch.setenv("ORSGEN_DRIFT_CHECK", "off")
    assert settings.resolve(Odd).check_drift is False
    assert settings.resolve(Odd, {"check_drift": True}).check_drift is True
    with pytest.raises(ValueError, match=r"^Odd\(settings=\.\.\.\): no setting 'retries': one of open_in_background"):
        settings.resolve(Odd, {"retries": 1})
    monkeypatch.setenv("ORSGEN_DRIFT_CHECK", "maybe")
    with pytest.raises(ValueError, match=r"^ORSGEN_DRIFT_CHECK='maybe': one of 0 \(off\), 1 \(on\)$"):
        settings.resolve(Odd)


def test_an_adapter_takes_its_settings_at_construction_and_refuses_a_bad_one_at_reset(echo_server, generate):
    mod = generate(echo_server.url)
    env = mod.Echo(settings={"unscored_reward": 0.5, "start_retries": 0})
    env.reset(task_index=0)
    assert env.get_reward() == 0.5  # no tool scored: the constructor's unscored_reward
    with pytest.raises(ValueError, match=r"^Echo\(settings=\{'start_retries': -1\}\): 0 or more"):
        mod.Echo(settings={"start_retries": -1}).reset(task_index=0)
    with pytest.raises(ValueError, match=r"^Echo\(settings=\.\.\.\): no setting 'retries'"):
        mod.Echo(settings={"retries": 0})  # a misspelt key, refused when the adapter is built
    close_all()


# -- the episode, counted -----------------------------------------------------------------------------------------


def test_every_unscored_reason_has_its_figure():
    from orsgen.runtime.counts import Counts, figures

    counts = Counts(episodes=len(Unscored))
    for reason in Unscored:
        counts.unscored[reason] += 1
    shown = figures(counts)
    assert {f"orsgen/unscored/{reason}": 1.0 for reason in Unscored}.items() <= shown.items()


def test_open_sessions_counts_what_the_server_holds(generate):
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as echo_server:
        sessions_counted(echo_server, generate(echo_server.url))


def sessions_counted(echo_server, mod):
    close_all()
    before = open_sessions()
    envs = [mod.Echo() for _ in range(3)]
    for env in envs:
        env.reset(task_index=0)
    assert open_sessions() - before == 3
    sids = {episode_of(env).session.sid for env in envs}
    assert sids <= set(echo_server.open_sessions())
    close_all()
    assert open_sessions() == 0 and not sids & set(echo_server.open_sessions())


# -- secrets named at generation ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """(server, module generated with --secret GRADER_KEY, its path)."""
    with servers.running("tests.envs.quirks:Guarded", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("guarded") / "guarded.py"
        result = in_process(server.url, "--task-tools-from", "0", "--task-tools-for-all", "--secret", "GRADER_KEY",
                            "-o", str(out), env={"GRADER_KEY": CANARY})
        assert result.returncode == 0, result.stderr
        yield server, load(out), out


def test_a_secret_named_at_generation_is_read_from_its_variable_at_run_time(guarded, monkeypatch):
    server, mod, out = guarded
    monkeypatch.setenv("GRADER_KEY", CANARY)
    before = len(server.headers())
    env = mod.Guarded()  # no secrets= by hand
    prompt = env.reset(task_index=0)
    assert "could not start" not in str(prompt) and episode_of(env).session is not None
    sent = [json.loads(base64.b64decode(r["headers"]["x-secrets"])) for r in server.headers()[before:]
            if "x-secrets" in r["headers"]]
    assert sent and all(s["GRADER_KEY"]["value"] == CANARY for s in sent)
    close_all()
    assert CANARY not in out.read_text(encoding="utf-8")


def test_a_missing_secret_variable_is_one_line_naming_it_before_any_request(guarded, monkeypatch):
    server, mod, _ = guarded
    monkeypatch.delenv("GRADER_KEY", raising=False)
    server.requests()
    with pytest.raises(ValueError) as refused:
        mod.Guarded()
    line = str(refused.value)
    assert "\n" not in line and "GRADER_KEY" in line and line.startswith("Guarded: ")
    assert server.requests() == {}  # nothing was asked
    env = mod.Guarded(secrets={"GRADER_KEY": (CANARY, [])})  # given by hand, the variable is not needed
    env.reset(task_index=0)
    assert episode_of(env).session is not None
    close_all()


# -- process-wide state in one holder (issue 43) -----------------------------------------------------------------------

CONTAINERS = {"dict", "list", "set", "deque", "defaultdict", "OrderedDict", "Counter", "WeakSet", "WeakKeyDictionary",
              "WeakValueDictionary", "local", "count", "iter"}
ALWAYS = {"WeakSet", "WeakKeyDictionary", "WeakValueDictionary", "local", "count", "iter"}  # stateful by nature
MUTATORS = {"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "discard", "remove", "insert"}


def stores(tree: ast.Module) -> set[str]:
    """The mutable module-level stores of a module: a name rebound through `global`; a container bound at module
    level (a literal, or a dict/list/set/weak/thread-local/counter made there) that the module changes (item set or
    deleted, a mutating method), or one stateful by nature; a function memoised with functools.cache/lru_cache; an
    instance of a class of the module whose __init__ sets attributes (a holder)."""
    found = {name for node in ast.walk(tree) if isinstance(node, ast.Global) for name in node.names}
    inits = {node.name for node in tree.body if isinstance(node, ast.ClassDef) and any(
        isinstance(f, ast.FunctionDef) and f.name == "__init__" for f in node.body)}
    changed = {target.value.id for node in ast.walk(tree) for target in (
        node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target] if isinstance(node, ast.AugAssign)
        else []) if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)}
    changed |= {node.func.value.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(
        node.func, ast.Attribute) and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d).split(".")[-1].split("(")[0] in ("cache", "lru_cache")
                                                     for d in node.decorator_list):
            found.add(node.name)
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]
        value = node.value
        made = ast.unparse(value.func).split(".")[-1] if isinstance(value, ast.Call) else None
        literal = isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp)
        for name in names:
            if made in ALWAYS or made in inits or (literal or made in CONTAINERS) and name in changed:
                found.add(name)
    return found


def test_the_store_count_sees_each_kind_of_store():
    sample = parsed("import functools, weakref\nA = {}\nB = []\nC = {'x': 1}\nD = weakref.WeakSet()\nE = None\n"
                    "class H:\n    def __init__(self):\n        self.x = 1\nF = H()\n"
                    "def put(k):\n    global E\n    E = k\n    A[k] = 1\n    B.append(k)\n"
                    "@functools.cache\ndef g():\n    return C['x']\n")
    assert stores(sample) == {"A", "B", "D", "E", "F", "g"}  # C is a table nobody changes


def test_the_runtime_keeps_at_most_three_mutable_module_level_stores():
    found = sorted(f"{stem}.{name}" for stem, path in MODULES.items() for tree in trees(path) for name in stores(tree))
    assert len(found) <= 3, found
    assert "process.STATE" in found  # the one holder


IMPORTS = """
import atexit, os, sys, threading
import asyncio, concurrent.futures, json, logging, queue, tempfile, weakref  # the standard library's own exit hooks
before, threads = atexit._ncallbacks(), threading.active_count()
import orsgen.runtime
from orsgen.runtime import hooks, process
parts = sorted(process.STATE.parts())
print(atexit._ncallbacks() - before, threading.active_count() - threads, parts,
      [e for e in hooks.EVENTS if hooks.wanted(e)], os.path.exists(os.environ["ORSGEN_TRAJECTORIES"]))
"""


def test_importing_the_runtime_registers_nothing(tmp_path):
    """With ORSGEN_TRAJECTORIES and ORSGEN_EPISODE_METRICS set (AsyncGRPOTrainer's worker has them), importing the
    runtime makes no recorder, registers no exit hook and no listener and starts no thread: the recorder starts when
    an adapter (or a trainer's callback) first needs it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "ORSGEN_TRAJECTORIES": str(tmp_path / "records"), "ORSGEN_EPISODE_METRICS": "1"}
    run = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "0", "[]", "[]", "False"], run.stdout
