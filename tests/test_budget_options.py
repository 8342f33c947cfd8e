"""Tool budgets (issue 32), the generator's side: `[tool.orsgen.targets.NAME]` keys and their flags (per tool:
`[...NAME.tools.TOOL]`, `--tool-budget TOOL:KEY=VALUE`) make the same module, which pins them in BUDGETS (passed to
`runtime.Pinned`) and ORSGEN_OPTIONS; they survive regeneration from the module itself, `--check` names a changed
one, `--report` shows each tool's effective budget, and every bad one is refused in one line before anything is
written. A module without budgets is what it was before them (tests/test_golden.py, tests/test_committed.py)."""

import ast
import re
import textwrap
from pathlib import Path

import black
import pytest
from orsgen.blackfast import MODE
from orsgen.model.typeddicts import parsed  # ast.parse, again after CPython 3.11's thread race (gh-106905)
from transformers.utils import get_json_schema

from tests.harness import ROOT
from tests.harness.generation import in_process, load, orsgen
from tests.harness.trainers import tool_methods

GOLDEN = Path(__file__).parent / "golden" / "budgets"
QUEST = Path(__file__).parent / "golden" / "quest_variants" / "tools.json"  # task-specific tools, a terminal tool

# Every key, in an order unlike the module's: tools, and each tool's keys, come out in one fixed order.
FLAGS = ["--tool-budget", "hint:timeout=2.5", "--max-tool-calls", "20", "--tool-budget", "echo:timeout=30",
         "--tool-budget", "echo:max-images=0", "--tool-budget", "echo:truncate=head", "--tool-budget",
         "echo:max-output-tokens=200", "--tool-budget", "echo:max-output-chars=800", "--episode-timeout", "600",
         "--max-images", "2", "--truncate", "tail", "--tokenizer", "Qwen/Qwen3-4B", "--max-output-tokens", "1000",
         "--max-output-chars", "4000"]
TABLE = """
    max-tool-calls = 20
    episode-timeout = 600
    max-images = 2
    truncate = "tail"
    tokenizer = "Qwen/Qwen3-4B"
    max-output-tokens = 1000
    max-output-chars = 4000

    [tool.orsgen.targets.echo.tools.hint]
    timeout = 2.5

    [tool.orsgen.targets.echo.tools.echo]
    timeout = 30
    max-images = 0
    truncate = "head"
    max-output-tokens = 200
    max-output-chars = 800
    """
EVERY = {"max-output-chars": 4000, "max-output-tokens": 1000, "tokenizer": "Qwen/Qwen3-4B", "truncate": "tail",
         "max-images": 2, "episode-timeout": 600.0, "max-tool-calls": 20,
         "tools": {"echo": {"max-output-chars": 800, "max-output-tokens": 200, "truncate": "head", "max-images": 0,
                            "timeout": 30.0},
                   "hint": {"timeout": 2.5}}}
SOME = ["--max-output-chars", "4000", "--truncate", "tail", "--tool-budget", "echo:timeout=30", "--tool-budget",
        "echo:max-output-chars=800"]
SOME_BUDGETS = {"max-output-chars": 4000, "truncate": "tail", "tools": {"echo": {"max-output-chars": 800,
                                                                                  "timeout": 30.0}}}


def project(folder: Path, url: str, table: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(textwrap.dedent(f"""
        [tool.orsgen.targets.echo]
        target = "{url}"
        output = "gen/echo.py"
        """) + textwrap.dedent(table))
    return folder


def literal(text: str, name: str) -> object:
    """A top-level constant of a module's text, read without importing it."""
    for node in parsed(text).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            assert node.value is not None
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name}")


def one_error_line(result, *words: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("orsgen: error: "), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def every(echo_server, tmp_path_factory):
    """The module made with every key, from pyproject.toml: (its project folder, its text)."""
    folder = project(tmp_path_factory.mktemp("every") / "proj", echo_server.url, TABLE)
    result = in_process(cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder, (folder / "gen" / "echo.py").read_text()


def test_every_key_from_pyproject_or_flags_makes_the_same_module(echo_server, every, tmp_path):
    _, text = every
    result = in_process(echo_server.url, *FLAGS, "-o", "gen/echo.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "gen" / "echo.py").read_text() == text
    assert literal(text, "BUDGETS") == EVERY
    budgets = ast.literal_eval(text.split("BUDGETS: dict[str, Any] = ", 1)[1].split("\n}\n", 1)[0] + "}")
    assert list(budgets) == list(EVERY) and list(budgets["tools"]) == ["echo", "hint"]  # the order too
    assert list(budgets["tools"]["echo"]) == ["max-output-chars", "max-output-tokens", "truncate", "max-images",
                                              "timeout"]
    assert literal(text, "ORSGEN_OPTIONS") == {"target": echo_server.url, **EVERY}
    assert text.splitlines()[1] == (
        f"#   orsgen {echo_server.url} --max-output-chars 4000 --max-output-tokens 1000 --tokenizer Qwen/Qwen3-4B "
        "--truncate tail --max-images 2 --episode-timeout 600.0 --max-tool-calls 20 "
        "--tool-budget echo:max-output-chars=800 --tool-budget echo:max-output-tokens=200 --tool-budget "
        "echo:truncate=head --tool-budget echo:max-images=0 --tool-budget echo:timeout=30.0 --tool-budget "
        "hint:timeout=2.5 -o gen/echo.py")


def test_the_module_writes_budgets_before_pinned_and_passes_them(every):
    _, text = every
    lines = text.splitlines()
    at = lines.index("BUDGETS: dict[str, Any] = {")
    assert lines[at - 2:at] == [
        ('# Tool budgets ([tool.orsgen] max-output-chars, ...; per tool under "tools"): the runtime caps each result '
         "and bounds"),
        ("# each call and episode with them. Override at run time with the adapter's settings (docs/reference.md, "
         '"Tool budgets").')]
    pinned = lines.index("PINNED = runtime.Pinned(")
    assert at < pinned and lines[lines.index(")", pinned) - 1] == "    budgets=BUDGETS,"
    assert black.format_str(text, mode=MODE) == text


def test_regenerating_the_module_from_itself_keeps_it_byte_for_byte(every):
    folder, text = every
    result = in_process("gen/echo.py", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "gen/echo.py: unchanged\n"
    assert (folder / "gen" / "echo.py").read_text() == text
    assert in_process("--check", "--offline", cwd=folder).returncode == 0


def test_flags_beside_a_module_replace_what_it_recorded_key_by_key(echo_server, tmp_path):
    out = tmp_path / "echo.py"
    assert in_process(echo_server.url, *SOME, "-o", str(out)).returncode == 0
    result = in_process(str(out), "--max-output-chars", "9000", "--tool-budget", "echo:timeout=5", "--tool-budget",
                        "hint:max-images=1")
    assert result.returncode == 0, result.stderr
    assert literal(out.read_text(), "BUDGETS") == {
        "max-output-chars": 9000, "truncate": "tail",
        "tools": {"echo": {"max-output-chars": 800, "timeout": 5.0}, "hint": {"max-images": 1}}}


def test_check_names_a_budget_pyproject_changed(echo_server, tmp_path):
    table = "max-output-chars = 4000\n[tool.orsgen.targets.echo.tools.echo]\ntimeout = 30\n"
    folder = project(tmp_path, echo_server.url, table)
    assert in_process(cwd=folder).returncode == 0
    before = (folder / "gen" / "echo.py").read_text()
    project(folder, echo_server.url, table.replace("4000", "8000").replace("30", "60"))
    for offline in ([], ["--offline"]):
        result = in_process("--check", *offline, cwd=folder)
        assert result.returncode == 1, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert lines[:3] == ["gen/echo.py: stale", "  ~ option max-output-chars: 4000 -> 8000",
                             "  ~ option tools.echo.timeout: 30.0 -> 60.0"], result.stdout
        assert "--max-output-chars 8000 --tool-budget echo:timeout=60.0 -o gen/echo.py" in lines[3]
    assert (folder / "gen" / "echo.py").read_text() == before


def test_a_module_with_budgets_imports_and_pins_them(echo_server, tmp_path):
    out = tmp_path / "echo.py"
    assert in_process(echo_server.url, *SOME, "-o", str(out)).returncode == 0
    module = load(out)
    assert module.BUDGETS == SOME_BUDGETS
    assert module.PINNED.budgets == module.BUDGETS
    assert module.ORSGEN_OPTIONS == {"target": echo_server.url, **SOME_BUDGETS}


def test_budgets_change_nothing_the_model_sees(echo_server, tmp_path):
    plain, budgeted = tmp_path / "plain.py", tmp_path / "budgeted.py"
    assert in_process(echo_server.url, "-o", str(plain)).returncode == 0
    assert in_process(echo_server.url, *SOME, "-o", str(budgeted)).returncode == 0
    without, with_ = (tool_methods(load(path).Echo()) for path in (plain, budgeted))
    assert [get_json_schema(m) for m in with_] == [get_json_schema(m) for m in without] and len(with_) == 2
    assert "BUDGETS" not in plain.read_text() and "budgets=" not in plain.read_text()


def test_the_golden_case_pins_a_target_cap_and_a_tool_timeout_and_cap():
    module = load(GOLDEN / "expected.py")
    assert module.PINNED.budgets == module.BUDGETS == {
        "max-output-chars": 4000, "truncate": "tail", "episode-timeout": 600.0, "max-tool-calls": 20,
        "tools": {"bash": {"max-output-chars": 8000, "timeout": 30.0}}}


def test_a_terminal_tool_may_have_its_own_budget(tmp_path):
    """The runtime knows it as a tool of the environment too (its call is bounded like the others)."""
    out = tmp_path / "quest.py"
    result = in_process(str(QUEST), "--env", "quest", "--tool-budget", "final:timeout=5", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert literal(out.read_text(), "BUDGETS") == {"tools": {"final": {"timeout": 5.0}}}
    refused = in_process(str(QUEST), "--env", "quest", "--tool-budget", "submit:timeout=5", "-o", str(out))
    one_error_line(refused, "(its tools: guess, letters, hint, peek, final)")  # each once, the variants' too


def test_the_report_shows_each_tools_effective_budget(echo_server):
    text = in_process(echo_server.url, *SOME, "--report")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = lines.index("tool budgets: max-output-chars 4000, truncate tail; per tool (a tool without its own takes "
                     "the environment's):")
    assert lines[at + 1:at + 3] == [
        "  echo: cap 800 characters (its own); keeps the tail; images all; timeout 30.0 s (its own)",
        "  hint: cap 4000 characters; keeps the tail; images all; timeout none"]
    markdown = in_process(echo_server.url, *SOME, "--report", "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    section = markdown.stdout.split("### Tool budgets\n", 1)[1]
    assert section.splitlines()[1:6] == [
        "The environment's: max-output-chars 4000, truncate tail. A tool without its own takes the environment's.",
        "", "| tool | cap | truncate | images | timeout |", "|---|---|---|---|---|",
        "| `echo` | 800 characters (its own) | keeps the tail | all | 30.0 s (its own) |"]
    assert "| `hint` | 4000 characters | keeps the tail | all | none |" in section
    plain = in_process(echo_server.url, "--report")
    assert "tool budgets" not in plain.stdout


# Refused: one line, exit 2, nothing written ------------------------------------------------------------------------


@pytest.mark.parametrize("flags, words", [
    (["--max-output-chars", "99"], ["--max-output-chars must be a whole number of at least 100, not 99"]),
    (["--max-output-chars", "4000.0"], ["--max-output-chars must be a whole number", "'4000.0'"]),
    (["--max-output-tokens", "9", "--tokenizer", "gpt2"], ["--max-output-tokens", "at least 10, not 9"]),
    (["--max-output-tokens", "100"], ["max-output-tokens needs --tokenizer NAME"]),
    (["--tool-budget", "echo:max-output-tokens=100"], ["max-output-tokens needs --tokenizer NAME"]),
    (["--truncate", "left"], ["--truncate must be one of head, tail, middle, not 'left'"]),
    (["--max-images", "-1"], ["--max-images must be a whole number of at least 0, not -1"]),
    (["--episode-timeout", "0"], ["--episode-timeout must be a number of seconds above 0, not 0"]),
    (["--episode-timeout", "inf"], ["--episode-timeout must be a number of seconds above 0, not inf"]),
    (["--max-tool-calls", "0"], ["--max-tool-calls must be a whole number of at least 1, not 0"]),
    (["--tool-budget", "echo:retries=3"], ["--tool-budget echo:retries: unknown key 'retries'", "timeout"]),
    (["--tool-budget", "echo:timeout=0"], ["--tool-budget echo:timeout must be a number of seconds above 0"]),
    (["--tool-budget", "echo=30"], ["--tool-budget echo=30: give TOOL:KEY=VALUE"]),
    (["--tool-budget", "shout:timeout=30"], ["a tool budget names 'shout', a tool echo does not have",
                                             "(its tools: echo, hint)"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v[0].startswith("--") else None)
def test_a_bad_flag_is_refused_before_anything_is_written(echo_server, tmp_path, flags, words):
    out = tmp_path / "gen" / "echo.py"
    one_error_line(in_process(echo_server.url, *flags, "-o", str(out)), *words)
    assert not (tmp_path / "gen").exists()


@pytest.mark.parametrize("table, words", [
    ("max-output-chars = 99", ["[tool.orsgen.targets.echo]: max-output-chars must be a whole number of at least 100"]),
    ('max-output-chars = "4000"', ["max-output-chars must be a whole number", "'4000'"]),
    ("max-images = true", ["max-images must be a whole number"]),
    ("max-output-tokens = 100", ['[tool.orsgen.targets.echo]: max-output-tokens needs tokenizer = "NAME"']),
    ('tokenizer = ""', ["tokenizer must be a non-empty string"]),
    ('truncate = "both"', ["truncate must be one of head, tail, middle"]),
    ("episode-timeout = -5", ["episode-timeout must be a number of seconds above 0, not -5"]),
    ("max-tool-calls = 0", ["max-tool-calls must be a whole number of at least 1"]),
    ("max-output-cap = 4000", ["unknown keys ['max-output-cap']"]),
    ("tools = 3", ["tools must hold one table per tool"]),
    ("[tool.orsgen.targets.echo.tools.echo]\nretries = 3", ["tools.echo.retries: unknown key 'retries'"]),
    ("[tool.orsgen.targets.echo.tools.echo]\ntimeout = 0", ["tools.echo.timeout must be a number of seconds above 0"]),
    ("[tool.orsgen.targets.echo.tools.echo]\nmax-output-tokens = 100", ["max-output-tokens needs tokenizer"]),
    ("[tool.orsgen.targets.echo.tools.shout]\ntimeout = 30", ["a tool budget names 'shout', a tool echo does not",
                                                              "have (its tools: echo, hint)"]),
])
def test_a_bad_pyproject_budget_is_refused_before_anything_is_written(echo_server, tmp_path, table, words):
    folder = project(tmp_path, echo_server.url, table)
    one_error_line(in_process(cwd=folder), *words)
    assert not (folder / "gen").exists()


def test_a_refused_budget_leaves_the_module_as_it_was(echo_server, tmp_path):
    """As a user runs it (a subprocess): the one line is all of stderr, after the environment was fetched."""
    out = tmp_path / "echo.py"
    assert in_process(echo_server.url, *SOME, "-o", str(out)).returncode == 0
    before = out.read_text()
    result = orsgen(echo_server.url, "--tool-budget", "bash:timeout=30", "-o", str(out))
    one_error_line(result, "a tool budget names 'bash', a tool echo does not have (its tools: echo, hint)")
    assert out.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["echo.py"]


def test_templates_that_drop_the_budgets_are_refused(echo_server, tmp_path):
    """A --templates copy of module.py.jinja from before budgets would write a module without them, silently."""
    older = re.sub(r"{% if budgets %}\n.*?{% endif %}\n", "", (ROOT / "templates" / "module.py.jinja").read_text(),
                   flags=re.DOTALL)
    assert "budgets" not in older.lower()
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "module.py.jinja").write_text(older)
    result = in_process(echo_server.url, *SOME, "--templates", str(tmp_path / "tpl"), "-o", str(tmp_path / "echo.py"))
    one_error_line(result, "drop the tool budgets: keep the built-in template's BUDGETS and its budgets=BUDGETS")
    assert not (tmp_path / "echo.py").exists()


def test_budget_flags_without_a_target_are_refused(echo_server, tmp_path):
    folder = project(tmp_path, echo_server.url)
    one_error_line(in_process("--max-output-chars", "4000", cwd=folder),
                   "--max-output-chars goes with a TARGET; for pyproject targets set max-output-chars in their table")
    one_error_line(in_process("--tool-budget", "echo:timeout=3", cwd=folder), "tools.TOOL.KEY")
    assert not (folder / "gen").exists()
