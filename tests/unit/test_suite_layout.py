"""The suite's own rules, read from its files: tests share helpers through tests/harness and never import another
test module (in a script they run either); the tiers' markers are registered; every test runs under a timeout."""

import ast
import re
import tomllib

from orsgen.model.typeddicts import parsed  # ast.parse, again after CPython 3.11's thread race (gh-106905)

from tests.harness import ROOT

TESTS = ROOT / "tests"


def module_files() -> list:
    return sorted(p for p in TESTS.rglob("test_*.py") if "harness" not in p.parts)


def imported(tree: ast.AST) -> set[str]:
    """Every module an import statement names (`from a import b` names a and a.b: b may be a module)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")


def test_no_test_module_imports_another_in_its_code_or_in_the_scripts_it_runs():
    found = []
    for path in module_files() + sorted((TESTS / "harness").glob("*.py")) + [TESTS / "conftest.py"]:
        tree = parsed(path.read_text(encoding="utf-8"))
        names = imported(tree)
        for node in ast.walk(tree):  # a script in a string (python -c): its imports too
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
                names |= set(re.findall(r"(?:from|import)\s+(tests(?:\.\w+)+)", node.value))
        found += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(names) if is_test_module(name)]
    assert found == [], "tests share helpers through tests/harness:\n" + "\n".join(found)


def test_the_checker_sees_an_import_of_a_test_module():
    source = "import tests." + "test_a\nfrom tests." + "test_b import helper\nfrom tests.harness import servers\n"
    tree = parsed(source)
    assert sorted(n for n in imported(tree) if is_test_module(n)) == ["tests.test_a", "tests.test_b"]


def test_every_test_runs_under_a_timeout_and_the_tiers_are_registered_markers():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert float(config["timeout"]) > 0
    assert "--strict-markers" in config["addopts"]
    markers = {line.split(":")[0] for line in config["markers"]}
    assert {"trainer", "install", "slow"} <= markers
