"""TypedDicts for type checkers, and the fidelity report, on the rich test environment's tool list."""

import json
import sys

import pytest

from tests.envs.rich import Rich
from tests.harness import processes
from tests.harness.generation import in_process, load


@pytest.fixture(scope="module")
def rich_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("rich") / "rich.json"
    tools = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in Rich.list_tools().tools]
    path.write_text(json.dumps({"tools": tools}))
    return path


def test_report_shows_no_differences_for_the_rich_env(rich_json):
    result = in_process(str(rich_json), "--env", "rich", "--report")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "11 tools, 42 arguments: 0 differences" in out
    assert "DIFFERS" not in out
    assert "LOST additionalProperties: false" in out  # extra="forbid" cannot be said by a signature
    assert 'in its text: default: "AB-1"; minLength: 4; pattern: "^[A-Z]{2}-\\\\d+$"' in out
    assert "from (as from_): optional" in out and "type checkers see: CreateItem" in out


def test_report_flags_a_difference(tmp_path):
    # A float enum cannot be a Literal: the model sees a number with the choices in text, and the report says so.
    spec = {"tools": [{"name": "t", "description": "d", "input_schema": {
        "type": "object", "properties": {"x": {"type": "number", "enum": [0.5, 1.5]}}, "required": ["x"]}}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(spec))
    result = in_process(str(path), "--env", "t", "--report")
    assert result.returncode == 0, result.stderr
    assert "DIFFERS x: enum [0.5, 1.5] -> None" in result.stdout and "1 differences" in result.stdout


def test_typed_dicts_reach_type_checkers_not_the_model(rich_json, tmp_path):
    out = tmp_path / "rich_adapter.py"
    assert in_process(str(rich_json), "--env", "rich", "-o", str(out)).returncode == 0
    mod = load(out)
    from transformers.utils import get_json_schema

    seen = get_json_schema(mod.Rich().create)["function"]["parameters"]["properties"]
    assert seen["item"]["type"] == "object" and seen["extra_items"]["items"]["type"] == "object"
    user = tmp_path / "user_code.py"
    user.write_text(
        "from rich_adapter import Rich\n"
        "a = Rich()\n"
        "a.create(item={'name': 'x', 'price': 1.0}, class_='c', self_='s')\n"
        "a.create(item={'name': 'x', 'price': 'free'}, class_='c', self_='s')\n"  # wrong field type
        "a.create(item={'name': 'x'}, class_='c', self_='s')\n"  # missing required field
    )
    run = processes.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental", str(user)],
                        cwd=tmp_path, capture_output=True, text=True)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["4", "5"], run.stdout
    assert '"price"' in errors[0] and '"price"' in errors[1]
