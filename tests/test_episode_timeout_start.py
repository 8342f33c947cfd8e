"""ORSGEN_EPISODE_TIMEOUT counts the episode, from when it is ready (issue 41, item 15): never the process's
one-time start-up in its first reset (the openreward SDK's import, the drift check), never the session's start. A
fresh interpreter's first episode, on an environment whose sessions take 1.5 s to start and whose calls take 0.5 s
(tests/envs/late.py), with a limit of 1 s: its first call runs; the limit still voids the episode once the calls
themselves pass it."""

import json
import os
import subprocess
import sys

import pytest

from tests.harness import ROOT
from tests.harness.generation import served

SCRIPT = """
import json, sys
sys.path[:0] = [{codegen!r}, {root!r}]
from tests.harness.generation import load
mod = load(__import__("pathlib").Path({module!r}))
env = mod.Unhurried()
print(json.dumps(env.reset(task_index=0)))  # the first reset of the process: the SDK's import, the drift check
said = []
for _ in range(4):  # each call takes 0.5 s: the third starts past the limit, at the latest
    try:
        said.append(env.pause(seconds=0.5))
    except mod.ToolError as exc:
        said.append("refused: " + str(exc))
        break
print(json.dumps(said))
print(json.dumps(env.get_reward()))
mod.close_all()
"""


@pytest.mark.slow
def test_the_first_episode_of_a_process_is_timed_from_its_start_not_the_processs(tmp_path):
    with served("tests.envs.late:Unhurried", tmp_path, "unhurried", env={"UNHURRIED_START": "1.5"}) as (server, mod):
        script = SCRIPT.format(codegen=str(ROOT / "codegen"), root=str(ROOT), module=str(mod.__file__))
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT,
                             env={**os.environ, "ORSGEN_EPISODE_TIMEOUT": "1"}, check=False)
        calls = sum(e["request"].endswith("/pause") or e["request"].endswith("/call") for e in server.log())
    assert run.returncode == 0, run.stderr[-3000:]
    prompt, said, reward = (json.loads(line) for line in run.stdout.splitlines()[-3:])
    assert prompt == "Echo the word apple"
    assert said[0] == "paused 0.5s"  # the first call ran: the reset's seconds are not the episode's
    assert said[-1].startswith("refused: pause: this episode is not scored: it ran past its 1s")
    assert "ORSGEN_EPISODE_TIMEOUT" in said[-1] and 2 <= len(said) <= 3
    assert calls == len(said) - 1  # the refused call sent nothing
    assert reward is None  # void, not the reward its calls earned
