"""A turn's calls started ahead, when TRL turns out to make another call (issue 41, read-only note a): the calls
that are already running or done cannot be called back, so they are kept for the TRL calls they are; only those not
begun are dropped. Before, every call started ahead was forgotten at the mismatch, and TRL's own call of one that
had been sent already was sent again: the environment saw it twice. A process of its own (the mismatch turns the
feature off for its process; forked with TRL imported: tests/harness/rankfork.py), the tally environment served with
its log of calls per session."""

import json
import sys

import pytest

from tests.harness import processes, rankfork
from tests.harness.generation import served

SCRIPT = """
import json, logging, sys, time, urllib.request
sys.path[:0] = {paths!r}
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from tests.harness.generation import load
from orsgen.runtime import calls, episode_of
mod = load(__import__("pathlib").Path({path!r}))
first, second = mod.Tally(), mod.Tally()
first.reset(task_index=0)
second.reset(task_index=1)
sid = episode_of(second).session.sid

def on_server() -> int:
    with urllib.request.urlopen({url!r} + "/_log", timeout=5) as answer:
        return sum(e["session"] == sid and e["request"].endswith("/call") for e in json.loads(answer.read()))

# As the turn's first call starts them: the second rollout's nap (2 s) and a later add of the first's.
calls.start(second, [calls.Captured("nap", {{"seconds": 2.0}}), calls.Captured("add", {{"n": 7}})], second._call_ahead)
calls.start(first, [calls.Captured("add", {{"n": 1}})], first._call_ahead)
deadline = time.monotonic() + 60
while on_server() == 0:  # the nap is running on the server
    assert time.monotonic() < deadline
    time.sleep(0.02)
print(json.dumps(first.add(n=5)))  # TRL makes another call than the one started ahead: a mismatch
print(json.dumps(second.nap(seconds=2.0)))  # TRL's own call of the nap that was running
print(json.dumps(second.add(n=3)))  # not the add started ahead (dropped before it began): sent as TRL makes it
print(json.dumps([on_server(), calls.off(), calls.totals]))
mod.close_all()
"""


@pytest.fixture(scope="module")
def tally(tmp_path_factory):
    with served("tests.envs.tally:Tally", tmp_path_factory.mktemp("tally_mismatch"), "tally_mismatch") as found:
        yield found


@pytest.mark.slow
def test_a_call_already_sent_at_a_mismatch_is_taken_by_trls_call_not_sent_again(tally):
    server, mod = tally
    script = SCRIPT.format(paths=sys.path, path=str(mod.__file__), url=server.url)
    argv, env = rankfork.python("-c", script)
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    first, napped, added, (sent, off, totals) = (json.loads(line) for line in run.stdout.splitlines()[-4:])
    assert first == "total 6 after 2 calls"  # the first rollout's call started ahead ran: its session saw it
    assert napped == "napped after 1 calls"  # the nap's own result: the one that ran ahead
    assert added == "total 3 after 2 calls"  # the add started ahead never ran
    assert sent == 2  # the second session saw the nap once, then TRL's add
    assert off is True and totals == {"started": 3, "mismatched": 1}
    [warning] = [line for line in run.stderr.splitlines() if "started ahead" in line]
    assert "add(['n'])" in warning and "one by one from now on" in warning
