"""A newcomer's own project, second pass (issue 44): the messages that stopped or misled, each as it now reads. The
drift of a nested field and `--resume`'s own arguments are tested alone (tests/unit/test_drift.py,
tests/unit/test_eval_options.py), `orsgen serve a.b.C` with serve's other lines (tests/test_serve.py), a resumed run's
`--concurrency` in tests/test_eval_faults.py, the install lines as printed in fresh venvs (tests/test_install.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT, evaluation, processes, servers
from tests.harness.generation import in_process, orsgen

ECHO_TOOLS = ROOT / "tests" / "golden" / "echo" / "tools.json"
COMMANDS = ("orsgen serve", "orsgen eval", "orsgen view", "orsgen doctor", "orsgen replay")


def test_help_lists_the_commands():
    code, text, _ = in_process("--help")
    assert code == 0
    usage = text[:text.index("\n\n")]
    assert all(command in usage for command in COMMANDS), usage
    assert "each command has its --help" in text


def test_check_offline_takes_a_module_target_and_refuses_a_server(tmp_path, monkeypatch):
    """`orsgen --check --offline gen/x.py`: a module TARGET is offline already, so the flags agree."""
    monkeypatch.chdir(tmp_path)
    assert in_process(str(ECHO_TOOLS), "--env", "echo", "-o", "gen/echo.py").returncode == 0
    assert in_process("--check", "--offline", "gen/echo.py") == (0, "gen/echo.py: up to date\n", "")
    code, out, err = in_process("--check", "--offline", "http://127.0.0.1:9")
    assert (code, out) == (2, "") and err == ("orsgen: error: --offline goes without TARGET, or with orsgen modules: it "
                                              "checks modules against their own snapshots, sending no request\n")


def test_a_url_with_an_environment_path_names_the_base_url_and_env(echo_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = in_process(f"{echo_server.url}/echo", "-o", "echo.py")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.endswith(f": give the server's base URL and the environment as --env: orsgen {echo_server.url} --env "
                        "echo (it serves echo)\n"), err
    assert list(tmp_path.iterdir()) == []


def test_eval_names_the_module_a_typo_meant(tmp_path):
    (tmp_path / "gen").mkdir()
    shutil.copy(ROOT / "generated" / "echo.py", tmp_path / "gen" / "shop.py")
    refused = orsgen("eval", "gen/shpo.py", "--model", "m", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr == ("orsgen: error: gen/shpo.py: no such file (did you mean gen/shop.py? a TARGET is a "
                              "generated module, a bundle, or a [tool.orsgen] target name)\n")


@pytest.mark.slow
def test_eval_pointed_at_an_ors_server_says_so(echo_server, tmp_path):
    """The README served the environment and pointed --base-url at the same port: a bare "404 for model"."""
    module = tmp_path / "echo.py"
    assert in_process(echo_server.url, "-o", str(module)).returncode == 0
    for url in (f"{echo_server.url}/v1", echo_server.url):
        refused = evaluation.orsgen_eval(str(module), "--base-url", url, "--model", "tiny", "--out", "run",
                                         cwd=tmp_path)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr == (f"orsgen: error: the endpoint at {url} answered 404: it is an ORS environment "
                                  "server (it serves echo), not a model's endpoint: --base-url is the /v1 address of "
                                  "the model's server (transformers serve, vLLM, ...), on a port of its own\n")
    assert not (tmp_path / "run").exists()


def test_no_pytorch_advice_on_stderr_without_torch(tmp_path):
    """transformers says "PyTorch was not found..." when imported without torch: `--report` in the README's no-torch
    install printed it on every run. Here torch is hidden from the interpreter (transformers then finds none)."""
    code = ("import sys; sys.modules['torch'] = None; from orsgen.command import main; "
            f"sys.argv = ['orsgen', {str(ECHO_TOOLS)!r}, '--env', 'echo', '--report']; sys.exit(main())")
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    shown = processes.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert shown.returncode == 0 and "text: required" in shown.stdout, shown.stderr
    assert shown.stderr == ""


def test_make_installs_only_when_what_it_installs_from_changed(tmp_path):
    """`make demo` (and every target) ran both `pip install`s first: now only when pyproject.toml or setup.py is newer
    than the venv's mark. `make -n` prints what would run, running nothing."""
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy2(ROOT / name, tmp_path / name)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".installed").touch()  # set up: newer than what it was installed from

    def planned(target: str) -> str:
        done = processes.run(["make", "-n", target, "VENV=venv"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "pip install" not in planned("demo") and "-m examples.demo" in planned("demo")
    assert "pip install" not in planned("test-unit")
    later = (venv / ".installed").stat().st_mtime + 10
    os.utime(tmp_path / "pyproject.toml", (later, later))  # an edited pyproject.toml: set up again, once
    assert planned("demo").count("pip install") == 2


def test_no_clone_needed_for_the_tiny_model():
    """`python -m orsgen.tiny` is the package's: its help answers from a folder outside the clone."""
    outside = Path("/")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = processes.run([sys.executable, "-m", "orsgen.tiny", "--help"], cwd=outside, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    assert shown.returncode == 0 and "-o DIR" in shown.stdout, shown.stderr


@pytest.mark.slow
def test_the_tiny_model_without_its_environment_served_is_one_line(tmp_path):
    server = servers.start("examples.echo:Echo")
    try:
        assert in_process(server.url, "-o", str(tmp_path / "echo.py")).returncode == 0
    finally:
        server.stop()
    refused = processes.run([sys.executable, "-m", "orsgen.tiny", "echo.py", "-o", "tiny"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stdout == f"orsgen tiny: echo.py: asking its environment at {server.url} for its tools and tasks\n"
    assert refused.stderr.startswith(f"orsgen: error: the environment echo at {server.url} cannot run an episode: ")
    assert refused.stderr.endswith("is it running? orsgen serve MODULE:CLASS --port N)\n")
    assert not (tmp_path / "tiny").exists()


def test_the_tiny_model_replaces_no_folder_of_the_users(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused = processes.run([sys.executable, "-m", "orsgen.tiny", "echo.py", "-o", "mine"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == ("orsgen: error: -o mine: a folder orsgen.tiny did not write: nothing there is replaced; "
                              "give a new folder, or one it wrote before\n")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_eval_help_shows_a_local_model_command():
    """`orsgen eval` named `transformers serve` but showed no command, nor a model that calls tools (issue 44)."""
    shown = orsgen("eval", "--help")
    assert shown.returncode == 0
    assert "transformers serve DIR --port 8020" in shown.stdout and "python -m orsgen.tiny" in shown.stdout
