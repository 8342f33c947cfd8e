"""The harness's forked torchrun ranks (tests/harness/rankfork.py): what torchrun gives a rank reaches the forked
process (its RANK, LOCAL_RANK, WORLD_SIZE, folder, argv and output), its exit code comes back to torchrun, and
a forked process ends with torchrun (SIGTERM) or with its rank (SIGKILL)."""

import json
import os
import re
import signal
import subprocess

import pytest

from tests.harness import processes, rankfork
from tests.harness.processes import wait_until

pytestmark = pytest.mark.slow  # the ranks' zygote imports TRL once: some 12 s of CPU

SAYS = """import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "rank": os.environ["RANK"], "local": os.environ["LOCAL_RANK"],
                  "world": os.environ["WORLD_SIZE"], "cwd": os.getcwd(), "argv": sys.argv[1:],
                  "fresh": "orsgen.runtime" not in sys.modules}), flush=True)
if sys.argv[1] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[2]) if os.environ["RANK"] == "1" else 0)
"""


def launch(tmp_path, *args: str):
    (tmp_path / "says.py").write_text(SAYS)
    return rankfork.command("says", *args, env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])})


def test_a_forked_rank_gets_what_torchrun_gives_and_its_exit_code_goes_back(tmp_path):
    argv, env = launch(tmp_path, "exit", "3")
    run = processes.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path)
    said = sorted(objects(run.stdout), key=lambda r: r["rank"])
    assert [(r["rank"], r["local"], r["world"]) for r in said] == [("0", "0", "2"), ("1", "1", "2")], run.stdout
    assert all(r["cwd"] == str(tmp_path) and r["argv"] == ["exit", "3"] and r["fresh"] for r in said), said
    assert run.returncode != 0 and "exitcode  : 3" in run.stderr, run.stderr[-2000:]


def objects(text: str) -> list[dict]:
    """The ranks' JSON objects in what they printed to one pipe: two may share a line (seen once in a run)."""
    return [json.loads(found) for found in re.findall(r"\{[^{}]*\}", text)]


def children(pid: int) -> list[int]:
    return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]


@pytest.mark.parametrize("killed", ["torchrun", "ranks"])
def test_a_forked_rank_ends_with_torchrun_or_with_its_rank(tmp_path, killed):
    """SIGTERM to torchrun's group: torchrun passes it on to its ranks, each to its forked process. SIGKILL to the
    ranks themselves (as the OOM killer ends one): each forked process sees its rank gone and ends too."""
    argv, env = launch(tmp_path, "sleep", "0")
    process = processes.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                              cwd=tmp_path)
    try:
        said: list[dict] = []
        while len(said) < 2:
            line = process.stdout.readline()
            assert line, said
            said += objects(line)
        pids = [r["pid"] for r in said]
        if killed == "torchrun":
            processes.killpg(process, signal.SIGTERM)
        else:
            for rank in children(process.pid):
                os.kill(rank, signal.SIGKILL)
        wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), timeout=60,
                   waiting_for=f"the forked ranks {pids} to be gone")
        assert process.wait(timeout=60) != 0
    finally:
        processes.stop(process)
