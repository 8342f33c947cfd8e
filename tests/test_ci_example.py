"""examples/ci/orsgen-check.yml, the GitHub Actions job of the README: parsed, and its shell steps after the install
run as the runner runs them (`bash -eo pipefail`, the job's env, later steps skipped after a failure unless
`if: always()`), in a user's project whose environment it serves with `orsgen serve`. Up to date gives 0, a changed
environment (a stale module) 1, a server that does not answer where the module's target says 2; each says which.
"""

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from examples import serve
from tests.harness import ROOT, processes
from tests.harness.generation import in_process

JOB = ROOT / "examples" / "ci" / "orsgen-check.yml"

MYENV = '''\
from openreward.environments import Environment, TextBlock, ToolOutput, tool
from pydantic import BaseModel


class SayParams(BaseModel):
    text: str


class MyEnv(Environment):
    @classmethod
    def list_splits(cls):
        return ["train"]

    @classmethod
    def list_tasks(cls, split):
        return [{"word": "hello"}]

    def get_prompt(self):
        return [TextBlock(text="say hello")]

    @tool
    def say(self, params: SayParams) -> ToolOutput:
        """Say a word."""
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=float(params.text == "hello"), finished=True)
'''
SHOUT = '''
    @tool
    def shout(self, params: SayParams) -> ToolOutput:
        """Say it louder (new: the committed module does not have it)."""
        return ToolOutput(blocks=[TextBlock(text=params.text.upper())])
'''


def job() -> dict:
    workflow = yaml.safe_load(JOB.read_text())
    (only,) = workflow["jobs"].values()
    return dict(only)


def run_job(project: Path, tmp_path: Path, **env: str) -> tuple[int, str]:
    """The job's steps after "Install orsgen" (this environment has orsgen: an `orsgen` script on PATH, run as the
    installed one is, with -P), in `project`: the job's exit code (its first failed step's) and all output."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    script = bin_ / "orsgen"
    script.write_text(f"#!{sys.executable} -P\nimport sys\nfrom orsgen.command import main\nsys.exit(main())\n")
    script.chmod(0o755)
    spec = job()
    steps = spec["steps"]
    after = [i for i, step in enumerate(steps) if step.get("name") == "Install orsgen"]
    assert after, "the job has an 'Install orsgen' step"
    base = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", **spec.get("env", {}), **env}
    failed, output = 0, []
    for step in steps[after[0] + 1:]:
        assert "run" in step, f"a step after the install that is not a shell step: {step}"
        if failed and step.get("if") != "always()":
            continue
        result = processes.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=project,
                               env={**base, **step.get("env", {})}, capture_output=True, text=True)
        output.append(f"## {step['name']}: exit {result.returncode}\n{result.stdout}{result.stderr}")
        if result.returncode and not failed:
            failed = result.returncode
    return failed, "\n".join(output)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's project: myenv.py, pyproject.toml naming its target on PORT, and the module generated from it."""
    folder = tmp_path_factory.mktemp("ci") / "project"
    folder.mkdir()
    (folder / "myenv.py").write_text(MYENV)
    port = serve.free_port()
    (folder / "pyproject.toml").write_text(f'[tool.orsgen.targets.myenv]\ntarget = "http://127.0.0.1:{port}"\n'
                                           'output = "generated/myenv.py"\n')
    path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])
    with serve.running("myenv:MyEnv", port=port, env={"PYTHONPATH": path}):
        made = in_process(cwd=folder)
    assert made.returncode == 0, made.stderr
    return folder, port


def copy(project: tuple[Path, int], tmp_path: Path) -> tuple[Path, str]:
    folder, port = project
    mine = tmp_path / "project"
    shutil.copytree(folder, mine)
    return mine, str(port)


def stopped(folder: Path, timeout: float = 60.0) -> bool:
    """Whether the server the job started has exited (a zombie, if nothing reaps orphans here, has) before
    `timeout` (a hang guard); if not, it is killed here (the runner would end it with the job)."""
    pid = int((folder / "orsgen-serve.pid").read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    if "serve" in Path(f"/proc/{pid}/cmdline").read_text():  # still the job's server
        os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.slow
def test_up_to_date_is_0(project, tmp_path):
    folder, port = copy(project, tmp_path)
    code, output = run_job(folder, tmp_path, ORSGEN_PORT=port)
    ended = stopped(folder)  # first: a failed assert below leaves no server running
    assert code == 0, output
    assert f'orsgen: serving myenv:MyEnv as "myenv" at http://127.0.0.1:{port}' in output
    assert "orsgen --check: up to date" in output and "::error" not in output, output
    assert ended, "the last step stops the server"


@pytest.mark.slow
def test_a_changed_environment_is_stale_1(project, tmp_path):
    folder, port = copy(project, tmp_path)
    (folder / "myenv.py").write_text(MYENV + SHOUT)
    code, output = run_job(folder, tmp_path, ORSGEN_PORT=port)
    ended = stopped(folder)  # first: a failed assert below leaves no server running
    assert code == 1, output
    assert "generated/myenv.py: stale" in output and "+ shout" in output, output
    assert "::error title=orsgen: stale::" in output and "unreachable" not in output, output
    assert ended


@pytest.mark.slow
def test_a_server_that_does_not_answer_is_2(project, tmp_path):
    folder, port = copy(project, tmp_path)
    elsewhere = str(serve.free_port())  # served there; the module's target names `port`, where nothing listens
    code, output = run_job(folder, tmp_path, ORSGEN_PORT=elsewhere)
    ended = stopped(folder)  # first: a failed assert below leaves no server running
    assert code == 2, output
    assert f"cannot reach ORS server at http://127.0.0.1:{port}" in output, output
    assert "::error title=orsgen: unreachable or bad input::" in output and "stale" not in output, output
    assert ended


def test_the_job_says_how_to_adapt_it():
    text = JOB.read_text()
    spec = job()
    assert set(spec["env"]) == {"ORSGEN_PACKAGE", "ORSGEN_ENV", "ORSGEN_PORT"}
    for name in spec["env"]:
        assert f"#   - {name}:" in text, f"the comments say how to set {name}"
    assert any("orsgen serve $ORSGEN_ENV" in step.get("run", "") for step in spec["steps"])
