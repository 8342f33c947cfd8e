"""A pyproject.toml that is not UTF-8 (issue 41, item 10): every command that reads it says so in one line naming
the file, the byte and where it is, exit 2; before, the generator called it an internal error and `orsgen eval` a
traceback. Each command runs as a user runs it (a subprocess)."""

import pytest

from tests.harness import evaluation
from tests.harness.generation import orsgen

LATIN_1 = ('[tool.orsgen.targets.echo]\ntarget = "http://127.0.0.1:9/echo"\noutput = "gen/echo.py"\n'
           '# café, saved by an editor in Latin-1\n').encode("latin-1")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_bytes(LATIN_1)
    return tmp_path


def said(result, project):
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    offset = LATIN_1.index(b"\xe9")
    assert lines[0].startswith("orsgen: error: ") and lines[0].endswith(
        f"pyproject.toml: not UTF-8 (a TOML file is): byte 0xe9 at offset {offset} (line 4)"), lines[0]


@pytest.mark.parametrize("args", [(), ("--check",), ("--check", "--offline"), ("--report",)])
def test_the_generator_names_the_byte(project, args):
    said(orsgen(*args, cwd=project), project)
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml"]  # nothing written


def test_eval_names_the_byte(project):
    said(evaluation.orsgen_eval("echo", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", cwd=project), project)
    assert sorted(p.name for p in project.iterdir()) == ["pyproject.toml"]
