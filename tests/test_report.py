"""`orsgen --report`: every class (base, task-specific variants), every tool and argument, the terminal tool; lost
schema keys tied to their argument and counted; a markdown table per class; values printed whole."""

import json
import re
from pathlib import Path

import pytest

from tests.harness.generation import in_process

QUEST = Path(__file__).parent / "golden" / "quest_variants" / "tools.json"
CLASSES = ["Quest", "QuestWithHint", "QuestWithHintPeek", "QuestWithPeek"]
ARGUMENTS = {"guess": ["answer"], "letters": ["order", "reverse"], "hint": ["level"],
             "peek": ["position", "letter", "count"]}
ANY_OF = 'anyOf: [{"required":["position"]},{"required":["letter"]}]'
DEPENDENT = 'dependentRequired: {"count":["letter"]}'


@pytest.fixture(scope="module")
def text_report():
    result = in_process(str(QUEST), "--env", "quest", "--report")
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def markdown_report():
    result = in_process(str(QUEST), "--env", "quest", "--report", "--format", "markdown")
    assert result.returncode == 0, result.stderr
    return result.stdout


def blocks(report: str) -> dict[tuple[str, str], list[str]]:
    """(tool, argument) -> the report lines under that argument (argument "" : the tool's own lines)."""
    found: dict[tuple[str, str], list[str]] = {}
    tool, arg = "", ""
    for line in report.splitlines():
        if re.match(r"^  \S", line):
            tool, arg = line.split()[0].rstrip(":"), ""
        elif m := re.match(r"^    (\S+)(?: \(as \S+\))?: (?:required|optional),", line):
            arg = m.group(1)
        elif re.match(r"^    (LOST|DIFFERS) ", line):
            arg = ""
        elif not line.startswith(" "):
            tool, arg = "", ""
        found.setdefault((tool, arg), []).append(line.strip())
    return found


def table_rows(markdown: str, class_name: str) -> list[list[str]]:
    """The rows (cells) of the table under `### `class_name``."""
    section = markdown.split(f"### `{class_name}`\n", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0] == "| tool | argument | wire -> python | model sees | in text | lost |"
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[1:]]


def test_report_lists_every_class_variant_tool_and_the_terminal_tool(text_report):
    out = text_report
    headers = [line.split(":")[0] for line in out.splitlines() if line.startswith("class ")]
    assert headers == ["class Quest", "class QuestWithHint(Quest)", "class QuestWithHintPeek(Quest)",
                       "class QuestWithPeek(Quest)"]
    assert "class QuestWithHint(Quest): tasks 1, 3 (split train); the shared tools plus hint" in out
    found = blocks(out)
    for tool, args in ARGUMENTS.items():
        assert (tool, "") in found, tool
        for arg in args:
            assert (tool, arg) in found, (tool, arg)
    # a variant tool, in full: its description, its argument's schema and text as the model sees them
    assert "model sees: Reveal the start of the word." in found[("hint", "")]
    assert found[("hint", "level")][:3] == ['level: optional, model sees {"type":"integer"}',
                                            "described as: How much to reveal", "in its text: default: 1; minimum: 1"]
    assert "peek: as shown in class QuestWithHintPeek above" in out  # a tool two classes share is shown once
    assert ("terminal tool final: not offered to the model, which never calls it; terminal_reward sends the model's "
            "final plain message to it as argument 'answer'") in out
    assert "  description: The model's final message is its answer." in out
    summary = out.splitlines()[-1]
    assert summary.startswith("4 classes, 4 tools, 7 arguments: 0 differences")
    assert summary.endswith("; terminal tool final (not offered to the model)")


def test_lost_items_are_named_with_their_argument_and_counted(text_report):
    found = blocks(text_report)
    assert f"LOST {ANY_OF}  (together with letter)" in found[("peek", "position")]
    assert f"LOST {ANY_OF}  (together with position)" in found[("peek", "letter")]
    assert f"LOST {DEPENDENT}  (together with count)" in found[("peek", "letter")]
    assert f"LOST {DEPENDENT}  (together with letter)" in found[("peek", "count")]
    assert not [line for line in found[("peek", "")] if line.startswith("LOST")]  # no item left unattributed
    assert "LOST additionalProperties: false  (the whole tool, no single argument)" in found[("hint", "")]
    assert not [line for line in found[("hint", "level")] if line.startswith("LOST")]
    # counted once each, though shown under every argument they name: 2 on peek, 1 on hint, 1 on letters
    assert ("0 differences in type, enum, nullability, item type, required flag or order; 4 lost (schema keys "
            "neither the signature nor the text carries: 2 tied to an argument, 2 to a whole tool)") in text_report


def test_markdown_gives_a_table_per_class_with_a_row_per_argument(markdown_report):
    md = markdown_report
    assert md.count("| tool | argument | wire -> python | model sees | in text | lost |\n|---|---|---|---|---|---|\n") == 4
    rows = {name: table_rows(md, name) for name in CLASSES}
    assert all(len(row) == 6 for table in rows.values() for row in table)
    arguments = [row[1] for table in rows.values() for row in table if row[1]]
    assert sorted(arguments) == sorted(f"`{a}` ({'required' if a == 'answer' else 'optional'})"
                                       for args in ARGUMENTS.values() for a in args)
    assert [row[1] for row in rows["Quest"]] == ["`answer` (required)", "`order` (optional)", "`reverse` (optional)"]
    assert rows["Quest"][1][0] == "`letters`<br>List the letters guessed so far, in one of two orders."
    assert rows["Quest"][1][2] == "`order` -> `order`"
    assert rows["Quest"][1][3] == '`{"type":"string","enum":["alphabet","guessed"]}`<br>Order'
    assert rows["Quest"][1][4] == '`default: "alphabet"`'
    assert rows["Quest"][1][5] == "whole tool: `additionalProperties: false`"
    hint = rows["QuestWithHint"][0]
    assert hint[:5] == ["`hint`<br>Reveal the start of the word.", "`level` (optional)", "`level` -> `level`",
                        '`{"type":"integer"}`<br>How much to reveal', "`default: 1`<br>`minimum: 1`"]
    letter = next(row for row in rows["QuestWithHintPeek"] if row[1] == "`letter` (optional)")
    assert letter[5] == f"`{ANY_OF}` (with position)<br>`{DEPENDENT}` (with count)"
    assert rows["QuestWithPeek"] == [["`peek`", "", "", "as in `QuestWithHintPeek` above", "", ""]]
    assert "### Terminal tool `final`\n\nNot offered to the model, which never calls it;" in md
    assert md.rstrip().endswith("terminal tool final (not offered to the model)")


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_long_json_is_printed_whole(tmp_path, fmt):
    words = [f"choice number {i} of the long list" for i in range(12)]
    default = " ".join(f"word{i}" for i in range(60))
    example = {"pick": words[3], "note": default}
    spec = {"env": "long", "tools": [{"name": "pick", "description": "Pick one.", "input_schema": {
        "type": "object", "examples": [example],
        "properties": {"pick": {"type": "string", "enum": words}, "note": {"type": "string", "default": default}}}}]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(spec))
    result = in_process(str(path), "--env", "long", "--report", "--format", fmt)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    seen = json.dumps({"type": "string", "enum": words}, separators=(",", ":"))
    assert seen in out and len(seen) > 300  # what the model sees, whole
    assert f"default: {json.dumps(default)}" in out  # what went into the text, whole
    lost = "examples: " + json.dumps([example], separators=(",", ":"), sort_keys=True)  # the snapshot sorts keys
    assert "…" not in out
    if fmt == "text":  # what was lost, whole: examples of a whole call belong to the tool, not to one argument
        assert f"LOST {lost}  (the whole tool, no single argument)" in out
    else:
        assert f"whole tool: `{lost}`" in out


def test_report_compares_the_schema_as_the_model_read_it(tmp_path):
    """The facts come from the model's type nodes (the normalized schema): a dialect type (`int`) is the standard
    type it means, not a difference; item types given as a list are compared, not a crash."""
    spec = {"tools": [{"name": "t", "description": "d", "input_schema": {"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "int"}},
        "names": {"type": "array", "items": {"type": ["string", "null"]}},
        "ratio": {"type": "number", "enum": [0.5, 1.5]},
    }, "required": ["ids", "names", "ratio"]}}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(spec))
    result = in_process(str(path), "--env", "t", "--report")
    assert result.returncode == 0, result.stderr
    differs = [line.strip() for line in result.stdout.splitlines() if "DIFFERS" in line]
    assert differs == ["DIFFERS ratio: enum [0.5, 1.5] -> None"]  # a float enum the signature cannot hold
    assert "3 arguments: 1 differences" in result.stdout
