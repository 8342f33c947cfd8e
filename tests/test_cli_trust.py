"""What a user must be able to trust: pinned tasks run as pinned, headers regenerate their module, builds are
reported, bad input is one line, project mode checks every target, and the model gets short tool errors. Bad input
and --help run the command as a user does (a subprocess); the rest generates in this process."""

import json
import logging
import os
import shlex
import shutil
import sys

import pytest

from tests.harness import ROOT, servers
from tests.harness.generation import in_process, load, orsgen
from tests.harness.servers import settle

OLD = "# the previous adapter\n"
CORPUS = ROOT / "tests" / "corpora" / "openreward-toolsets" / "claude_code.json"


def restarted(spec, port, env):
    return servers.start(spec, port=port, env=env)


def port_of(server):
    return int(server.url.rsplit(":", 1)[1])


# 1 ------------------------------------------------------------------------------------------------------------------


def test_pinned_tasks_are_checked_and_are_what_runs(tmp_path):
    out = tmp_path / "shifting.py"
    server = servers.start("tests.envs.shifting:Shifting", env={"SHIFTING_VARIANT": "a"})
    port = port_of(server)
    try:
        result = in_process(server.url, "--pin-tasks", "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert "3 train tasks" in result.stdout
    finally:
        server.stop()
    pinned = (tmp_path / "shifting.tasks.json").read_text()
    server = restarted("tests.envs.shifting:Shifting", port, {"SHIFTING_VARIANT": "b"})
    try:
        check = in_process("--check", "--pin-tasks", server.url, "-o", str(out))
        assert check.returncode == 1, check.stdout + check.stderr
        assert f"{out}: up to date" in check.stdout  # the tools did not change: only the tasks did
        assert "split 'train': task 1 differs" in check.stdout, check.stdout
        assert (tmp_path / "shifting.tasks.json").read_text() == pinned  # --check writes nothing
        mod = load(out)
        row = mod.dataset()[1]
        assert (row["task_index"], row["id"], row["word"]) == (1, "t1", "bravo")  # the pinned task 1, not "zulu"
        env = mod.Shifting()
        assert env.reset(**row) == "Say bravo"  # the session opened on the pinned spec: metadata and episode agree
        assert env.say(text="bravo") == "bravo" and env.get_reward() == 1.0
        mod.close_all()
        settle()
    finally:
        server.stop()


# 2 ------------------------------------------------------------------------------------------------------------------


def test_header_command_reproduces_the_module(echo_server, tmp_path):
    templates = tmp_path / "tpl"
    templates.mkdir()
    builtin = (ROOT / "templates" / "module.py.jinja").read_text()
    (templates / "module.py.jinja").write_text(builtin + "# house template\n")
    made = in_process(echo_server.url, "--class-name", "Parrot", "--templates", "tpl", "-o", "out.py", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out.py"
    first = out.read_bytes()
    assert first.endswith(b"# house template\n")  # the --templates folder made it
    header = first.decode().splitlines()[1]
    assert header.startswith("#   orsgen ")
    words = shlex.split(header.removeprefix("#   "))
    assert words[0] == "orsgen" and "--templates" in words and "--class-name" in words
    out.unlink()
    again = in_process(*words[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert out.read_bytes() == first
    # regenerated elsewhere from the embedded snapshot: the header names the new output
    other = in_process("out.py", "-o", "other.py", cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    text = (tmp_path / "other.py").read_text()
    assert shlex.split(text.splitlines()[1].removeprefix("#   "))[-2:] == ["-o", "other.py"]
    assert "class Parrot(runtime.Adapter)" in text
    # what its header says made it is what made it: its header command reproduces it too
    assert "--templates tpl" not in text.splitlines()[1] or text.endswith("# house template\n"), (
        f"{text.splitlines()[1]!r} names --templates tpl, but other.py was rendered with the built-in templates")


# 3 ------------------------------------------------------------------------------------------------------------------


def test_build_change_is_reported_by_check_and_at_run_time(tmp_path, caplog):
    out = tmp_path / "built.py"
    server = servers.start("examples.echo:Echo", env={"OPENREWARD_BUILD_SHA": "abc"})
    port = port_of(server)
    try:
        result = in_process(server.url, "-o", str(out))
        assert result.returncode == 0, result.stderr
    finally:
        server.stop()
    assert 'BUILD_SHA: str | None = "abc"' in out.read_text()
    server = restarted("examples.echo:Echo", port, {"OPENREWARD_BUILD_SHA": "def"})
    try:
        check = in_process("--check", server.url, "-o", str(out))
        assert check.returncode == 0, check.stdout + check.stderr
        assert "build changed" in check.stdout and "abc" in check.stdout and "def" in check.stdout, check.stdout
        mod = load(out)
        caplog.set_level(logging.WARNING, logger="orsgen")
        env = mod.Echo()
        assert env.reset(task_index=0) == "Echo the word apple"
        warnings = [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno == logging.WARNING]
        assert any("abc" in w and "def" in w for w in warnings), warnings
        mod.close_all()
        settle()
    finally:
        server.stop()


# 4 ------------------------------------------------------------------------------------------------------------------


def _templates(tmp_path, name, text):
    folder = tmp_path / "tpl"
    folder.mkdir()
    (folder / name).write_text(text)
    return str(folder)


def _tools_json(tmp_path, env=True):
    path = tmp_path / "tools.json"
    data = {"tools": [{"name": "ping", "description": "Ping.", "input_schema": {"type": "object", "properties": {}}}]}
    if env:
        data["env"] = "pinger"
    path.write_text(json.dumps(data))
    return str(path)


# (case, output file name, argv builder(tmp_path, url, output), what the one stderr line must say)
BAD_INPUT = [
    ("jinja-syntax", "adapter.py",
     lambda t, u, o: [_tools_json(t), "--templates", _templates(t, "module.py.jinja", "# one\n# two\n{% if %}\n"),
                      "-o", o], ["module.py.jinja", "line 3"]),
    ("invalid-python", "adapter.py",
     lambda t, u, o: [_tools_json(t), "--templates", _templates(t, "module.py.jinja", "def (:\n"), "-o", o],
     ["invalid Python"]),
    ("templates-missing", "adapter.py", lambda t, u, o: [_tools_json(t), "--templates", "/nope", "-o", o],
     ["/nope", "no such directory"]),
    ("templates-typo", "adapter.py",
     lambda t, u, o: [_tools_json(t), "--templates", _templates(t, "modul.py.jinja", "x"), "-o", o],
     ["modul.py.jinja"]),
    ("bad-module-name", "my-env.py", lambda t, u, o: [_tools_json(t), "-o", o], ["my_env.py"]),
    ("json-without-env", "adapter.py", lambda t, u, o: [_tools_json(t, env=False), "-o", o], ["--env"]),
    ("no-task-tools", "adapter.py", lambda t, u, o: [u, "--task-tools-from", "all", "-o", o], ["--task-tools-from"]),
    ("env-twice", "out/echo.py", lambda t, u, o: [u, "--env", "echo", "--env", "echo", "-o", str(t / "out")],
     ["echo", "twice"]),
    ("abbreviated-flag", "adapter.py", lambda t, u, o: [u, "--pin-task", "-o", o], ["--pin-task"]),
    ("class-name-takes-target", "adapter.py", lambda t, u, o: ["--class-name", u, "-o", o], ["TARGET"]),
]


@pytest.mark.parametrize("argv, message", [c[2:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(echo_server, tmp_path, argv, message, request):
    name = next(c[1] for c in BAD_INPUT if c[0] == request.node.callspec.id)
    existing = tmp_path / name
    existing.parent.mkdir(parents=True, exist_ok=True)
    existing.write_text(OLD)
    result = orsgen(*argv(tmp_path, echo_server.url, str(existing)), cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("orsgen: error: ") and all(m in lines[0] for m in message), lines[0]
    assert existing.read_text() == OLD
    assert sorted(p.name for p in existing.parent.iterdir() if p.suffix == ".py") == [existing.name]


# 5 and 6 ------------------------------------------------------------------------------------------------------------


def test_project_check_goes_on_past_an_unreachable_target(echo_server, tmp_path):
    down = f"http://127.0.0.1:{servers.free_port()}"
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.orsgen.targets.down]\ntarget = "{down}"\noutput = "gen/down.py"\n\n'
        f'[tool.orsgen.targets.echo]\ntarget = "{echo_server.url}"\noutput = "gen/echo.py"\n'
    )
    made = in_process(echo_server.url, "-o", "gen/echo.py", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    result = in_process("--check", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "gen/echo.py: up to date" in result.stdout, result.stdout + result.stderr
    assert "gen/down.py" in result.stderr and "cannot reach" in result.stderr, result.stderr


def test_check_from_a_subfolder_uses_the_parent_pyproject(echo_server, tmp_path):
    shutil.copy(CORPUS, tmp_path / "claude.json")
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.orsgen.targets.echo]\ntarget = "{echo_server.url}"\noutput = "gen/echo.py"\n\n'
        '[tool.orsgen.targets.claude]\ntarget = "claude.json"\noutput = "gen/claude.py"\nenv = "claude"\n'
    )
    made = in_process(cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "orsgen claude.json --env claude -o gen/claude.py" in (tmp_path / "gen" / "claude.py").read_text()
    sub = tmp_path / "notebooks" / "deep"
    sub.mkdir(parents=True)
    result = in_process("--check", cwd=sub)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("up to date") == 2, result.stdout


# 7 ------------------------------------------------------------------------------------------------------------------


def test_unchanged_module_is_not_rewritten(echo_server, tmp_path):
    out = tmp_path / "echo.py"
    assert in_process(echo_server.url, "--pin-tasks", "-o", str(out)).returncode == 0
    tasks = tmp_path / "echo.tasks.json"
    for path in (out, tasks):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    again = in_process(echo_server.url, "--pin-tasks", "-o", str(out))
    assert again.returncode == 0, again.stderr
    assert f"{out}: unchanged" in again.stdout and f"{tasks}: unchanged" in again.stdout, again.stdout
    assert out.stat().st_mtime_ns == tasks.stat().st_mtime_ns == 1_000_000_000


# 8 ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quest_and_echo():
    with servers.running("tests.envs.quest:Quest", "examples.echo:Echo") as server:
        yield server


def test_task_tools_summary_and_usage(quest_and_echo, tmp_path):
    out = tmp_path / "quest.py"
    result = in_process(quest_and_echo.url, "--env", "quest", "--task-tools-from", "all", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "class QuestWithHint adds hint for tasks 1, 3, 5" in result.stdout, result.stdout
    assert "class QuestWithPeek adds peek for tasks 4" in result.stdout
    assert "terminal tool final" in result.stdout
    usage = load(out).__doc__
    assert "environment_factory=ENVIRONMENTS" in usage and "environment_factory=Quest" not in usage, usage


def test_bundle_routes_task_tool_classes(quest_and_echo, tmp_path):
    folder = tmp_path / "trustbundle"
    result = in_process(quest_and_echo.url, "--env", "quest", "--env", "echo", "--task-tools-from", "all",
                    "-o", str(folder))
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        from trustbundle import bundle

        assert set(bundle.ENVIRONMENTS) == {"quest", "quest.QuestWithHint", "quest.QuestWithPeek", "echo"}
        assert bundle.ENVIRONMENTS["quest.QuestWithHint"].__name__ == "QuestWithHint"
        ds = bundle.dataset()
        routes = {(row["environment"], row["task_index"]) for row in ds.to_list()}
        quest = {(name, i) for name, i in routes if name.startswith("quest")}
        assert quest == {("quest", 0), ("quest.QuestWithHint", 1), ("quest", 2), ("quest.QuestWithHint", 3),
                         ("quest.QuestWithPeek", 4), ("quest.QuestWithHint", 5)}
        assert {i for name, i in routes if name == "echo"} == set(range(8))
        env = bundle.ENVIRONMENTS["quest.QuestWithHint"]()
        assert env.reset(task_index=3) == "Guess the word (5 letters)" and env.hint(level=2) == "co"
        bundle.close_all()
        settle()
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "trustbundle" or m.startswith("trustbundle.")]:
            del sys.modules[name]


# 9 and 10 -----------------------------------------------------------------------------------------------------------


def test_tool_validation_error_is_one_short_sentence(tmp_path):
    out = tmp_path / "faulty.py"
    with servers.running("tests.envs.faulty:Faulty") as server:
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        env = mod.Faulty()
        assert env.reset(task_index=0) == "faulty task 0"
        with pytest.raises(mod.ToolError) as caught:
            env.slow(seconds="abc")
        text = str(caught.value)
        mod.close_all()
        settle()
    assert len(text.splitlines()) == 1 and "seconds" in text, text
    assert "pydantic.dev" not in text and "{'type':" not in text and len(text) < 200, text


def test_help_fits_on_a_screen():
    result = orsgen("--help", env={"COLUMNS": "200"})
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) <= 40, result.stdout
    assert max(len(line) for line in lines) <= 110, result.stdout
