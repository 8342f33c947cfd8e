"""A newcomer's first half hour: --check whatever the spelling of the module's path, the offline pre-commit hook
with the server down, Ctrl-C, the error lines that say what to do, and the editable install seen by mypy."""

import os
import re
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.harness import ROOT, processes, servers
from tests.harness.generation import in_process
from tests.harness.processes import wait_until

ECHO_TOOLS = ROOT / "tests" / "golden" / "echo" / "tools.json"


def project(folder: Path, orsgen_table: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "mine"\n' + orsgen_table)
    return folder


def test_check_does_not_follow_the_spelling_of_the_path(echo_server, tmp_path, monkeypatch):
    root = project(tmp_path / "proj")
    (root / "sub").mkdir()
    monkeypatch.chdir(root)
    assert in_process(echo_server.url, "-o", str(root / "gen" / "echo.py")).returncode == 0  # absolute
    text = (root / "gen" / "echo.py").read_text()
    assert text.splitlines()[1] == f"#   orsgen {echo_server.url} -o gen/echo.py"  # relative to the project root
    assert "    from gen.echo import Echo, EpisodeMetrics, Trajectories, close_all, dataset\n" in text
    for spelling in ("gen/echo.py", "./gen/../gen/echo.py", str(root / "gen" / "echo.py")):
        result = in_process("--check", echo_server.url, "-o", spelling)
        assert result.returncode == 0, result
        result = in_process("--check", spelling)
        assert result.returncode == 0, result  # the module alone: its own snapshot
    monkeypatch.chdir(root / "sub")
    assert in_process("--check", echo_server.url, "-o", "../gen/echo.py").returncode == 0
    result = in_process("../gen/echo.py")
    assert result.returncode == 0 and "unchanged" in result.stdout  # regenerates itself
    (root / "gen" / "echo.py").write_text(text.replace('"""Echo text back.', '"""Edited by hand.'))
    code, out, _ = in_process("--check", "../gen/echo.py")
    assert code == 1
    assert "fix: orsgen ../gen/echo.py   (from its own snapshot, no request;" in out  # a hand edit: offline
    code, out, _ = in_process("--check", "--async-tools", "../gen/echo.py")  # an option too: the header's command
    assert code == 1
    assert f"fix: orsgen {echo_server.url} --async-tools -o gen/echo.py   (in {root.resolve().as_posix()};" in out


def test_check_without_a_project_is_relative_to_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert in_process(str(ECHO_TOOLS), "--env", "echo", "-o", "gen/echo.py").returncode == 0
    checked = in_process("--check", str(ECHO_TOOLS), "--env", "echo", "-o", str(tmp_path / "gen" / "echo.py"))
    assert checked.returncode == 0
    assert "    from gen.echo import Echo, EpisodeMetrics, Trajectories, close_all, dataset\n" in (tmp_path / "gen" / "echo.py").read_text()


def test_offline_hook_passes_with_the_server_down(tmp_path, monkeypatch):
    server = servers.start("examples.echo:Echo")
    root = project(tmp_path / "proj", f'[tool.orsgen.targets.echo]\ntarget = "{server.url}"\noutput = "gen/echo.py"\n'
                                      "pin-tasks = true\n")  # offline, the pinned tasks are not compared
    monkeypatch.chdir(root)
    try:
        assert in_process().returncode == 0 and (root / "gen" / "echo.tasks.json").is_file()
    finally:
        server.stop()
    hook = processes.run([sys.executable, "-X", "importtime", "-m", "orsgen", "--check", "--offline"], cwd=root,
                         capture_output=True, text=True)
    assert hook.returncode == 0 and hook.stdout == "gen/echo.py: up to date\n", hook.stdout + hook.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in hook.stderr.splitlines() if line.startswith("import time:")}
    # what keeps the hook well under a second (how fast is the benchmark's job): it imports no SDK
    assert "orsgen.cli" in imported and not any(name.split(".")[0] == "openreward" for name in imported)
    module = root / "gen" / "echo.py"
    module.write_text(module.read_text().replace('"""Echo text back.', '"""Edited by hand.'))
    code, out, _ = in_process("--check", "--offline")
    assert code == 1 and "gen/echo.py: stale" in out
    code, _, err = in_process("--check")
    assert code == 2  # the live comparison needs the server
    assert "connection refused: is the server running, on this port?" in err
    assert in_process("--check", "--offline", server.url).returncode == 2


def test_hooks_offline_by_default_live_by_name():
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert hooks["orsgen-check"]["entry"] == "orsgen --check --offline"
    assert hooks["orsgen-check-live"]["entry"] == "orsgen --check"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = pyproject["optional-dependencies"].values()
    requirements = [*pyproject["dependencies"], *(r for extra in extras for r in extra)]
    black = next(r for r in requirements if re.match(r"black\s*==", r)).replace(" ", "")
    for hook in hooks.values():  # the hook's environment installs the runtime only: the generator's pins, the same
        assert black in hook["additional_dependencies"]


def test_ctrl_c_during_generation(tmp_path):
    mark, out = tmp_path / "asked", tmp_path / "gen" / "stalled.py"
    server = servers.start("tests.envs.stalled:Stalled", env={"STALLED_MARK": str(mark)})
    try:
        # SIGINT handled, as in a terminal, also when these tests run in the background of a shell: it starts them
        # with SIGINT ignored, which a child would inherit (a handler is not inherited: the child gets the default)
        ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            child = processes.popen([sys.executable, "-m", "orsgen", server.url, "-o", str(out)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, ignored)
        try:
            wait_until(lambda: mark.exists() or child.poll() is not None, waiting_for="orsgen to ask for the tools")
            assert mark.exists(), "orsgen never asked the server for its tools"
            child.send_signal(signal.SIGINT)
            stdout, stderr = child.communicate()
        finally:
            processes.stop(child)
    finally:
        server.kill()  # its tool listing never returns
    assert child.returncode == 130, stderr
    assert stderr == "orsgen: interrupted\n" and stdout == ""
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["asked"]  # nothing written, no temporary file


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["127.0.0.1:8000"], "TARGET '127.0.0.1:8000' has no scheme: use http://127.0.0.1:8000"),
        ([f"http://127.0.0.1:{servers.free_port()}"], "connection refused: is the server running, on this port?"),
        ([], 'e.g. [tool.orsgen.targets.myenv] target = "http://127.0.0.1:8010" output = "generated/myenv.py"'),
    ],
    ids=["no-scheme", "wrong-port", "no-targets"],
)
def test_errors_say_what_to_do(argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = in_process(*argv, "-o", "adapter.py") if argv else in_process()
    assert code == 2
    assert err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_empty_tools_file_is_a_redirect_saved_by_curl(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tools.json").write_text("")
    code, _, err = in_process("tools.json", "--env", "echo", "-o", "echo.py")
    assert code == 2
    assert err == ("orsgen: error: tools.json is empty (a `curl URL/tools` saves the server's redirect, which has no "
                   "body): the endpoint is URL/{env}/tools (URL/list_environments names the environments), or use "
                   "`curl -L URL/tools`\n")
    assert not Path("echo.py").exists()


def test_help_gives_examples_environment_and_exit_codes():
    code, text, _ = in_process("--help")
    assert code == 0
    assert "orsgen --check --offline" in text and "OPENREWARD_API_KEY" in text and "130 interrupted" in text
    assert len(text.splitlines()) <= 50


def test_editable_install_is_seen_by_mypy(tmp_path, monkeypatch):
    """A plain path entry, not setuptools' import hook: mypy finds orsgen's runtime and checks the names."""
    import orsgen

    assert Path(orsgen.__file__).resolve().is_relative_to(ROOT / "codegen")  # the editable install of this clone
    monkeypatch.chdir(tmp_path)
    assert in_process(str(ECHO_TOOLS), "--env", "echo", "-o", "echo.py").returncode == 0
    (tmp_path / "user.py").write_text("from echo import Echo\n\nenv = Echo()\nr: float = env.get_reward()\n")
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # mypy's defaults: a missing package is an error
    result = processes.run([sys.executable, "-m", "mypy", "--no-incremental", "user.py"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert "Cannot find implementation" not in result.stdout, result.stdout
    assert result.stdout.startswith('user.py:4: error: Incompatible types in assignment (expression has type '
                                    '"float | None", variable has type "float")'), result.stdout


def test_wheel_ships_the_templates(tmp_path):
    processes.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    names = zipfile.ZipFile(next(tmp_path.glob("orsgen-*.whl"))).namelist()
    templates = sorted(p.name for p in (ROOT / "templates").glob("*.jinja"))
    assert sorted(n.removeprefix("orsgen/templates/") for n in names if n.startswith("orsgen/templates/")) == templates
    assert not [n for n in names if n.startswith(("templates/", "tests/", "examples/"))]
    assert "orsgen/view/page.html" in names  # orsgen view's page
    assert "orsgen/tiny/__main__.py" in names  # python -m orsgen.tiny: a CPU path without the clone (issue 44)


def test_cli_without_the_generator_extra_says_so():
    """`pip install orsgen` is the run time: the CLI then names in one line the packages of the extra, which install
    as printed however orsgen was (black hidden here)."""
    code = ("import sys, runpy; sys.modules['black'] = None; sys.argv = ['orsgen', 'x']; "
            "runpy.run_module('orsgen', run_name='__main__')")
    result = processes.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == ('orsgen: error: the generator needs black: pip install "jinja2>=3.1" "black==26.10.1" (the '
                             "generator extra) (a training image needs only the run time)\n")


def test_one_max_tool_calling_iterations_everywhere():
    files = ["README.md", "templates/module.py.jinja", "generated/echo.py", "examples/demo.py"]
    found = {f: set(re.findall(r"max_tool_calling_iterations=(\d+)|MAX_TOOL_CALLING_ITERATIONS = (\d+)",
                               (ROOT / f).read_text())) for f in files}
    values = {n for pairs in found.values() for pair in pairs for n in pair if n}
    assert len(values) == 1 and all(found.values()), found


def test_quickstart_runs_from_the_clone_without_sys_path():
    result = processes.run([sys.executable, "-m", "examples.quickstart", "--help"], cwd=ROOT, capture_output=True,
                           text=True, env={k: v for k, v in os.environ.items()
                                                                     if k != "PYTHONPATH"})
    assert result.returncode == 0 and "one GRPO step" in result.stdout, result.stderr
