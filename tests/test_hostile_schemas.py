"""Tool lists are input from outside (issue 19.9): deep nesting, huge texts and broken tools never give a traceback
or exit 1; what orsgen cuts is warned about in one line naming the tool and counted lost by --report."""

import json
from pathlib import Path
from typing import Any

import pytest
from orsgen.runtime import bounds
from transformers.utils import get_json_schema

from tests.envs.quirks import nested
from tests.harness import servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle
from tests.harness.trainers import tools_by_name

OK = {"name": "ok", "description": "Fine.", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}


def arrays(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        node = {"type": "array", "items": node}
    return node


def ref_chain(depth: int) -> dict[str, Any]:
    """`depth` definitions, each an array of the next: shallow JSON, deep types."""
    defs: dict[str, Any] = {f"N{i}": {"type": "array", "items": {"$ref": f"#/$defs/N{i + 1}"}} for i in range(depth)}
    defs[f"N{depth}"] = {"type": "integer"}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/N0"}}, "required": ["x"]}


def write(path: Path, tool: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"env": "h", "tools": [OK, tool]}))
    return path


def methods(module: Any) -> dict[str, Any]:
    return tools_by_name(module.H())


CUT = f"the schema nests deeper than {bounds.MAX_DEPTH} levels: below that, any value (its structure is lost, see --report)"
TYPES = "types nested deeper than 16 levels are any value there"


@pytest.mark.parametrize(("schema", "warnings"), [
    ({"type": "object", "properties": {"deep": nested(150)}}, [CUT]),
    ({"type": "object", "properties": {"deep": nested(400)}}, [CUT]),
    ({"type": "object", "properties": {"deep": arrays(300)}}, [TYPES, CUT]),
    (ref_chain(300), [TYPES]),
], ids=["150-objects", "400-objects", "300-arrays", "300-refs"])
def test_deep_schemas_are_cut_and_said_so(tmp_path, schema, warnings):
    source = write(tmp_path / "tools.json", {"name": "deep", "description": "Deep.", "input_schema": schema})
    code, _, err = in_process(str(source), "-o", str(tmp_path / "deep.py"))
    assert code == 0, err
    assert err.splitlines() == [f"orsgen: warning: tool 'deep': {w}" for w in warnings]
    module = load(tmp_path / "deep.py")
    found = methods(module)
    assert sorted(found) == ["deep", "ok"]
    parameters = get_json_schema(found["deep"])["function"]["parameters"]["properties"]
    assert list(parameters) in (["deep"], ["x"])
    code, report, _ = in_process(str(source), "--report")
    assert code == 0 and "LOST cut: " in report and "tied to an argument, 0 to a whole tool" in report


def test_json_hundreds_of_thousands_of_levels_deep_is_read(tmp_path):
    depth = 150_000  # 300000 JSON levels: far past what Python's parser reads on the main thread's stack
    inner = '{"type":"object","properties":{"f":' * depth + '{"type":"string"}' + "}}" * depth
    source = tmp_path / "abyss.json"
    source.write_text('{"env":"h","tools":[' + json.dumps(OK) + ',{"name":"deep","input_schema":{"type":"object",'
                      '"properties":{"d":' + inner + "}}}]}")
    code, _, err = in_process(str(source), "-o", str(tmp_path / "abyss.py"))
    assert code == 0 and "tool 'deep': the schema nests deeper" in err, err
    assert sorted(methods(load(tmp_path / "abyss.py"))) == ["deep", "ok"]


def test_json_too_deep_to_read_is_one_line(tmp_path):
    source = tmp_path / "bottomless.json"
    source.write_text('{"env":"h","tools":' + "[" * 600_000 + "]" * 600_000 + "}")
    out = tmp_path / "bottomless.py"
    code, _, err = in_process(str(source), "-o", str(out))
    assert (code, err) == (2, f"orsgen: error: {source}: nests deeper than 500000 levels: not read\n")
    assert not out.exists()


def test_huge_descriptions_are_cut_with_a_warning(tmp_path):
    tool = {"name": "wordy", "description": "Talk. " + "blah " * 1_000_000,
            "input_schema": {"type": "object", "properties": {"q": {"type": "string", "description": "q" * 100_000}}}}
    source = write(tmp_path / "tools.json", tool)
    out = tmp_path / "wordy.py"
    code, _, err = in_process(str(source), "-o", str(out))
    assert code == 0
    assert err.splitlines() == [
        f"orsgen: warning: tool 'wordy': description cut to {bounds.MAX_DESCRIPTION} characters (5000006 in all)",
        f"orsgen: warning: tool 'wordy': argument 'q': texts in its schema cut to {bounds.MAX_TEXT} characters"]
    assert out.stat().st_size < 200_000  # not 5 MB in the module (its snapshot holds the cut text too)
    seen = get_json_schema(methods(load(out))["wordy"])["function"]
    assert len(seen["description"]) < bounds.MAX_DESCRIPTION + 100
    assert len(seen["parameters"]["properties"]["q"]["description"]) < bounds.MAX_TEXT + 100


def test_a_tool_that_cannot_be_generated_is_exit_2_and_the_rest_is_written(tmp_path):
    source = write(tmp_path / "tools.json", {"name": "broken", "input_schema": {"type": "object", "properties": ["x"]}})
    out = tmp_path / "broken.py"
    code, stdout, err = in_process(str(source), "-o", str(out))
    assert code == 2
    assert err.splitlines()[-1] == (f"orsgen: error: {out}: 1 tool(s) could not be generated ('broken': see the "
                                    "warnings); the others were written")
    assert "tool 'broken' skipped: schema cannot be read (TypeError: properties is not an object)" in err
    assert sorted(methods(load(out))) == ["ok"] and "class H, 1 tool (ok)" in stdout


def test_a_live_tool_past_the_bounds_is_pinned_cut_and_the_drift_check_agrees(tmp_path):
    with servers.running("tests.envs.quirks:Abyss") as server:
        out = tmp_path / "abyss_adapter.py"
        code, _, err = in_process(server.url, "-o", str(out))
        assert code == 0
        assert "tool 'dive': description cut to" in err and "tool 'dive': the schema nests deeper" in err, err
        module = load(out)
        env = module.Abyss()
        assert env.reset(task_index=0) == "dive"  # the drift check cuts the live tools the same way: no DriftError
        assert env.surface() == "up"
        module.close_all()
        settle()
