"""`orsgen serve MODULE:CLASS`: a user's own environment served from the user's folder, as the installed command runs
(`python -P`: no folder on sys.path but what orsgen puts there), in a training install (no jinja2, no black). One
line once it listens, a real generation against it, one line and exit 2 for each bad input, SIGTERM and Ctrl-C stop
it quietly. And `orsgen --help` / `--version` answer in a training install.
"""

import concurrent.futures
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.harness import processes

MYENV = '''\
from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field


class SayParams(BaseModel):
    text: str = Field(description="what to say")


class MyEnv(Environment):
    """Say the task's word."""

    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"word": "hello"}, {"word": "world"}]

    def get_prompt(self):
        return [TextBlock(text=f"say {self.task_spec['word']}")]

    @tool
    def say(self, params: SayParams) -> ToolOutput:
        """Say a word: reward 1.0 for the task's."""
        hit = params.text == self.task_spec["word"]
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=float(hit), finished=hit)


class Empty(Environment):
    pass


class Unsplit(MyEnv):
    @classmethod
    def list_splits(cls):
        raise OSError("tasks.json: not found")


def helper():
    pass
'''

# The installed `orsgen` script, where the generator's packages cannot be found (a training install).
TRAINING_INSTALL = """
import importlib.abc, sys
HIDDEN = {"jinja2", "black"}
class Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        return self.finder.find_spec(name, path, target) if hasattr(self.finder, "find_spec") else None
    def __getattr__(self, name):  # find_distributions, invalidate_caches: the finder's own
        return getattr(self.finder, name)
sys.meta_path[:] = [Hidden(f) for f in sys.meta_path]
sys.argv[0] = "orsgen"
from orsgen.command import main
raise SystemExit(main())
"""
LINE = re.compile(r'^orsgen: serving myenv:MyEnv as "myenv" at (http://127\.0\.0\.1:(\d+)) \(Ctrl-C stops\)$')


def user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "myenv.py").write_text(MYENV)
    (folder / "boom.py").write_text('import os\n\nraise RuntimeError("no API key\\nset one")\n')
    (folder / "broken.py").write_text("def f(:\n    pass\n")
    return folder


def command(*args: str, training: bool = False) -> list[str]:
    """The installed command's interpreter: -P, no script folder or '' on sys.path (a console script's own folder is
    not the user's)."""
    if training:
        return [sys.executable, "-P", "-c", TRAINING_INSTALL, *args]
    return [sys.executable, "-P", "-c", ("import sys; from orsgen.command import main; sys.argv[0] = 'orsgen'; "
            "raise SystemExit(main())"), *args]


def started(process: subprocess.Popen, timeout: float = 90.0) -> str:
    """The first stdout line of a server process (it prints one once it listens); killed if none comes in time."""
    assert process.stdout is not None
    with concurrent.futures.ThreadPoolExecutor(1) as reader:
        first = reader.submit(process.stdout.readline)
        try:
            line = first.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            process.kill()
            raise AssertionError(f"no startup line in {timeout} s") from None
    assert line, f"orsgen serve exited {process.wait()}: {process.stderr.read() if process.stderr else ''}"
    return str(line).rstrip("\n")


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        return dict(json.loads(r.read()))


@pytest.mark.slow
def test_serves_a_users_module_from_its_folder_in_a_training_install_until_sigterm(tmp_path):
    folder = user_folder(tmp_path)
    server = processes.popen(command("serve", "myenv:MyEnv", "--port", "0", training=True), cwd=folder,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = started(server)
        match = LINE.match(line)
        assert match, line
        url, port = match.group(1), match.group(2)
        assert health(url) == {"status": "ok"}  # the line came once it answers, not before

        out = tmp_path / "out" / "myenv.py"
        generated = processes.run([sys.executable, "-m", "orsgen", url, "-o", str(out)], capture_output=True,
                                  text=True)
        assert generated.returncode == 0, generated.stderr
        assert "class Myenv" in out.read_text() and "def say(self, *, text: str) -> str:" in out.read_text()

        taken = processes.run(command("serve", "myenv:MyEnv", "--port", port), cwd=folder, capture_output=True,
                              text=True)
        assert (taken.returncode, taken.stdout) == (2, "")
        assert taken.stderr == (f"orsgen: error: port {port} on 127.0.0.1 is in use (another server?): stop that, or "
                                "pick another port with --port N\n")
        assert health(url) == {"status": "ok"}

        server.send_signal(signal.SIGTERM)
        code = server.wait()  # it stops (the test's timeout is the hang guard), quietly, and frees its port
        rest, err = server.stdout.read(), server.stderr.read()
    finally:
        processes.stop(server)
    assert (code, rest, err) == (0, "", ""), (code, rest, err)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/health", timeout=5)


@pytest.mark.slow
def test_ctrl_c_stops_it_without_a_traceback(tmp_path):
    folder = user_folder(tmp_path)
    server = processes.popen([sys.executable, "-m", "orsgen", "serve", "myenv:MyEnv", "--port", "0"], cwd=folder,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert LINE.match(started(server))
        server.send_signal(signal.SIGINT)
        code = server.wait()
        err = server.stderr.read()
    finally:
        processes.stop(server)
    assert (code, err) == (0, "")


# argv after `orsgen serve` -> its one line (a regular expression), run from the user's folder. IMPORTS run as the
# command does (a subprocess: what is on sys.path is under test); the rest import the SDK (seconds of CPU each), so
# they run in this process: the same `orsgen.serve.main`, its exit code and stderr.
IMPORTS = {
    "no colon": (["myenv"], (r"'myenv' is not MODULE:CLASS: give the module and its Environment class, e\.g\. "
                             r"myenv:MyEnv for class MyEnv in myenv\.py")),
    "a dotted class": (["myenv.MyEnv"], (r"'myenv\.MyEnv' is not MODULE:CLASS: a colon goes before the class, "
                                         r"myenv:MyEnv for class MyEnv in myenv\.py")),  # issue 44
    "a file name": (["myenv.py:MyEnv"], (r"'myenv\.py' is a file name: give the module's import name, myenv:MyEnv, "
                                         r"run from the folder that holds it")),
    "no such module": (["nosuch:MyEnv"], (r"no module named nosuch in .*project or on PYTHONPATH: run orsgen serve "
                                          r"from the folder that holds nosuch\.py, or add that folder to PYTHONPATH")),
    "raises on import": (["boom:X"], (r"importing boom raised RuntimeError: no API key set one \(at boom\.py:3\): "
                                      r"fix that, then serve it again")),
    "syntax error": (["broken:X"], (r"importing broken raised SyntaxError: invalid syntax \(at broken\.py:1\): fix "
                                    r"that, then serve it again")),
    "a bad port": (["myenv:MyEnv", "--port", "http"], (r"argument --port: --port takes a number from 0 to 65535, "
                                                       r"not 'http' \(orsgen serve --help lists the options\)")),
}
CLASSES = {
    "no such class": (["myenv:MyEnvv"], r"myenv has no MyEnvv; myenv has these Environment subclasses: Empty, MyEnv, Unsplit"),
    "not a subclass": (["myenv:helper"], (r"myenv:helper is a function, not an openreward Environment subclass; "
                                          r"myenv has these Environment subclasses: Empty, MyEnv, Unsplit")),
    "the base class": (["myenv:Environment"], (r"myenv:Environment is openreward's Environment base class itself; "
                                               r"serve a subclass: myenv has these Environment subclasses: Empty, MyEnv, Unsplit")),
    "the SDK refuses it": (["myenv:Empty"], (r"the openreward Server refuses myenv:Empty: Environment 'empty' has no "
                                             r"tools defined\. Add at least one @tool method\.")),
    "list_splits() raises": (["myenv:Unsplit"], (r"the openreward Server refuses myenv:Unsplit: OSError: "
                                                  r"tasks\.json: not found")),
    "twice": (["myenv:MyEnv", "myenv:MyEnv"], (r"two of them are named 'myenv' \(the SDK serves each under its "
                                               r"name\(\), lowercased\): serve each class once, or give one a "
                                               r"name\(\) of its own")),
    "no such host": (["myenv:MyEnv", "--host", "nosuch.invalid"], (r"cannot listen on 'nosuch\.invalid': no such "
                                                                   r"address; --host takes an address of this "
                                                                   r"machine, e\.g\. 127\.0\.0\.1")),
}


def wrong(case: str, expected: str, code: int, out: str, err: str) -> list[str]:
    if (code, out) == (2, "") and re.fullmatch(f"orsgen: error: {expected}\n", err):
        return []
    return [f"{case}: exit {code}, stdout {out!r}, stderr {err!r}"]


def test_a_bad_import_is_one_line_and_exit_2(tmp_path):
    folder = user_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return processes.run(command("serve", *argv), cwd=cwd, capture_output=True, text=True,
                             env={**os.environ, **(env or {})})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = {case: pool.submit(run, argv, folder) for case, (argv, _) in IMPORTS.items()}
        away = pool.submit(run, ["myenv:MyEnv"], elsewhere)
        # the line's other remedy works: PYTHONPATH names the folder (and the module is imported: it raises)
        on_path = pool.submit(run, ["boom:X"], elsewhere,
                              {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])})
    found = []
    for case, (_, expected) in IMPORTS.items():
        result = runs[case].result()
        found += wrong(case, expected, result.returncode, result.stdout, result.stderr)
    # from another folder the module is not found, and the line says how to make it importable
    result = away.result()
    found += wrong("elsewhere", re.escape(f"no module named myenv in {elsewhere} or on PYTHONPATH: run orsgen serve "
                                          "from the folder that holds myenv.py, or add that folder to PYTHONPATH"),
                   result.returncode, result.stdout, result.stderr)
    result = on_path.result()
    found += wrong("on PYTHONPATH", r"importing boom raised RuntimeError: .*", result.returncode, result.stdout,
                   result.stderr)
    assert not found, "\n".join(found)


def test_a_bad_class_is_one_line_and_exit_2(tmp_path, monkeypatch):
    from orsgen import serve

    monkeypatch.chdir(user_folder(tmp_path))
    monkeypatch.setenv("OPENREWARD_LOG_LEVEL", "WARNING")  # what main sets: this process's, for this test only
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the folder first
    found = []
    try:
        for case, (argv, expected) in CLASSES.items():
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = serve.main(argv)
            found += wrong(case, expected, code, out.getvalue(), err.getvalue())
    finally:
        sys.modules.pop("myenv", None)  # this test's, not another's
    assert not found, "\n".join(found)


def test_help_and_version_answer_in_a_training_install():
    version = processes.run(command("--version", training=True), capture_output=True, text=True)
    from orsgen import __version__

    assert (version.returncode, version.stdout, version.stderr) == (0, f"orsgen {__version__}\n", "")
    help_ = processes.run(command("--help", training=True), capture_output=True, text=True)
    assert (help_.returncode, help_.stderr) == (0, ""), help_.stderr
    lines = help_.stdout.splitlines()
    assert lines[0].startswith("usage: orsgen [TARGET ...] [-o FILE] [--check]")
    assert lines[1].strip() == "orsgen serve MODULE:CLASS [MODULE:CLASS ...] [--port N] [--host HOST]"
    assert lines[2].strip().startswith("orsgen eval TARGET --model NAME")
    assert lines[3].strip() == "orsgen view PATH... [-o FILE.html]"
    assert lines[4].strip().startswith("orsgen doctor TARGET")
    assert lines[5].strip().startswith("orsgen replay RECORDS")
    assert lines[6:] == [('generating and checking modules needs the generator (jinja2 and black are not installed '
                         'here): pip install "jinja2>=3.1" "black==26.10.1" (the generator extra); orsgen serve, eval, '
                         'view, doctor and replay need only this install')]
    # and generating there still says what to install, in one line
    refused = processes.run(command("http://127.0.0.1:9", "-o", "x.py", training=True), capture_output=True,
                            text=True)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith('orsgen: error: the generator needs jinja2 and black: pip install '
                                     '"jinja2>=3.1" "black==26.10.1"') and refused.stderr.count("\n") == 1


def test_help_names_orsgen_serve():
    from orsgen import cli

    assert "orsgen serve myenv:MyEnv --port 8010" in cli.parser().format_help()
