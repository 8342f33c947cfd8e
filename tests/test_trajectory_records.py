"""Trajectory records without a trainer (issue 30): what one episode's record holds, capped and redacted; a file a
killed process left with a cut line; a full disk; `ORSGEN_TRAJECTORIES` alone in a process that exits without
cleaning up."""

import json
import os
import sys
import textwrap

import pytest
from orsgen.runtime import Recorder

from tests.harness import ROOT, processes, rankfork
from tests.harness.generation import load, orsgen

KEY = "canary-api-key-0d9c2e"


@pytest.fixture
def echo_path(echo_server, tmp_path):
    out = tmp_path / "echo.py"
    assert orsgen(echo_server.url, "-o", str(out)).returncode == 0
    return out


def episode(mod, text: str) -> float | None:
    env = mod.Echo(api_key=KEY)
    env.reset(task_index=0)
    env.echo(text=text)
    reward = env.get_reward()
    env.reset(task_index=1)  # the first episode is over; the second ends unread when its adapter goes
    mod.close_all()
    return reward


def test_a_record_is_capped_redacted_and_says_what_was_cut(echo_path, tmp_path):
    mod = load(echo_path)
    recorder = Recorder(tmp_path / "traj", max_result_chars=1_000)
    long = "HEAD" + "x" * 50_000 + f" {KEY} " + "y" * 50_000 + "TAIL"
    reward = episode(mod, long)
    recorder.close()
    text = recorder.path.read_text()
    assert KEY not in text  # neither in the arguments nor in the result that echoed it
    first, second = (json.loads(line) for line in text.splitlines())
    call = first["tool_calls"][0]
    assert call["arguments"]["text"].count("[secret]") == 1  # arguments are kept whole, redacted
    assert call["cut"] == len(long) - 1_000 + len("[secret]") - len(KEY)  # redacted first: no part of it is kept
    assert call["result"].startswith("HEAD") and call["result"].endswith("TAIL")
    assert f"[orsgen: {call['cut']} of " in call["result"] and len(call["result"]) < 1_100
    assert first["reward"] == reward and first["task_index"] == 0 and first["stream"] is None
    assert first["prompt"] is None and first["completion"] is None  # read outside TRL's reward computation
    assert first["task_spec"] is not None  # fetched from the server (the module pinned no tasks)
    assert second["task_index"] == 1 and second["tool_calls"] == [] and second["reward"] is None


def test_a_cut_last_line_is_removed_before_appending(echo_path, tmp_path):
    directory = tmp_path / "traj"
    directory.mkdir()
    whole = json.dumps({"schema": "orsgen.trajectory/1", "earlier": True})
    (directory / "trajectories-rank0.jsonl").write_text(whole + "\n" + '{"schema": "orsgen.traj')
    recorder = Recorder(directory)
    episode(load(echo_path), "apple")
    recorder.close()
    lines = recorder.path.read_text().splitlines()
    assert json.loads(lines[0]) == json.loads(whole)
    assert [json.loads(line)["task_index"] for line in lines[1:]] == [0, 1]


SCRIPT = """
import resource, sys, logging
sys.path[:0] = [{codegen!r}, {root!r}]
from tests.harness.generation import load
from orsgen.runtime import Recorder
logging.basicConfig(format="%(message)s")
mod = load(__import__("pathlib").Path({module!r}))
sys.dont_write_bytecode = True  # CPython keeps a .pyc its write cut short: every later process would fail to load it
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a disk with 4 KiB left for this process
recorder = Recorder({directory!r})
for i in range(6):
    env = mod.Echo()
    env.reset(task_index=0)
    env.echo(text="z" * 1500)
    assert env.get_reward() is not None
mod.close_all()
recorder.close()
print(recorder.written, recorder.dropped)
"""


@pytest.mark.slow
def test_a_full_disk_warns_once_counts_what_it_dropped_and_training_goes_on(echo_path, tmp_path):
    directory = tmp_path / "traj"
    script = SCRIPT.format(codegen=str(ROOT / "codegen"), root=str(ROOT), module=str(echo_path),
                           directory=str(directory))
    argv, env = rankfork.python("-c", script)
    run = processes.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    written, dropped = map(int, run.stdout.split())
    assert written + dropped == 6 and dropped > 0 and written > 0
    warnings = [line for line in run.stderr.splitlines() if "trajectory records are not being written" in line]
    assert len(warnings) == 1, run.stderr
    lines = (directory / "trajectories-rank0.jsonl").read_text().splitlines()
    assert len(lines) == written and all(json.loads(line)["reward"] is not None for line in lines)


@pytest.mark.slow
def test_the_variable_alone_records_a_process_that_exits_without_cleanup(echo_path, tmp_path):
    """`ORSGEN_TRAJECTORIES=DIR` and nothing in the code: what a spawned rollout worker inherits from a
    `Trajectories` in its parent. The process never closes anything; its exit writes what was queued."""
    directory = tmp_path / "traj"
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(ROOT / "codegen")!r}, {str(ROOT)!r}]
        from tests.harness.generation import load
        mod = load(__import__("pathlib").Path({str(echo_path)!r}))
        env = mod.Echo()
        env.reset(task_index=2)
        env.echo(text="plum")
        print(env.get_reward())
    """)
    variable = json.dumps({"dir": str(directory), "owner": 1, "run": "parent-run"})  # another process made it
    argv, env = rankfork.python("-c", script, env={**os.environ, "ORSGEN_TRAJECTORIES": variable})
    run = processes.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    (file,) = directory.iterdir()
    assert file.name.startswith("trajectories-rank0-pid") and file.name.endswith(".jsonl")
    (record,) = (json.loads(line) for line in file.read_text().splitlines())
    assert record["run"] == "parent-run" and record["task_index"] == 2
    assert record["tool_calls"][0]["result"] == "plum" and str(record["reward"]) == run.stdout.strip()


def test_a_bad_variable_is_one_line(tmp_path):
    run = processes.run([sys.executable, "-c", "import orsgen.runtime"], capture_output=True,
                        text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "codegen"),
                                                    "ORSGEN_TRAJECTORIES": "{not json"})
    assert run.returncode != 0
    assert "ORSGEN_TRAJECTORIES='{not json': a directory to write trajectory records to" in run.stderr
