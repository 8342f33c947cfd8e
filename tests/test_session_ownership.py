"""Who owns every session the runtime requests, and when each is closed (issue 26, items 4 to 7), asserted on what
the server saw: a reset interrupted by Ctrl-C while its session starts; a pool the size of one batch with sessions
opened ahead; what is opened ahead for a trainer that raised, was collected or stopped early; the metrics of
look-ahead starts that finish during an evaluation pass."""

import signal
import subprocess
import sys
import time

import pytest

from tests.harness import ROOT, servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle


@pytest.fixture(scope="module")
def sleepy(tmp_path_factory):
    """(server, module path): the echo environment whose sessions take 2 s to start, its requests logged."""
    with servers.running("tests.envs.sleepy:Sleepy", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("sleepy") / "sleepy.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        yield server, out


# -- item 6: Ctrl-C inside reset() ------------------------------------------------------------------------------

INTERRUPTED = """
import gc, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell's background job inherits SIGINT ignored
from pathlib import Path
from tests.harness.generation import load
from tests.harness.servers import settle
mod = load(Path({path!r}))
env = mod.Sleepy()
print("resetting", flush=True)
{ending}
"""
ENDINGS = {
    # the user's handler closes what is open, then the process lives on (the test looks, then lets it end)
    "close_all": "try:\n    env.reset(task_index=0)\nexcept KeyboardInterrupt:\n    mod.close_all()\n"
                 "    print('handled', flush=True)\n    sys.stdin.read()",
    # the adapter is dropped (after the handler: its traceback holds the reset's frame); the start still running
    # holds it until its session is open, then it is collected and closes that session
    "collected": "try:\n    env.reset(task_index=0)\nexcept KeyboardInterrupt:\n    pass\ndel env\ngc.collect()\n"
                 "settle()\nprint('handled', flush=True)\nsys.stdin.read()",
    # nothing catches it: the exit hook closes it
    "exit": "env.reset(task_index=0)",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_reset_interrupted_while_its_session_starts_leaves_nothing_open(sleepy, ending):
    """SIGINT reaches the process while the server runs the session's 2 s setup: the session the interrupted
    reset requested is closed on the server by close_all() in the handler, by garbage collection of the adapter, or
    at plain exit."""
    server, path = sleepy
    before = len(server.creates())
    script = INTERRUPTED.format(path=str(path), ending=ENDINGS[ending])
    run = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "resetting"
        deadline = time.monotonic() + 60
        while len(server.creates()) == before:  # the start is on its way: its setup sleeps on the server
            assert time.monotonic() < deadline and run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.02)
        run.send_signal(signal.SIGINT)
        if ending != "exit":
            assert run.stdout.readline().strip() == "handled", run.stderr.read() if run.stderr else ""
            created = server.creates()[before:]
            assert [c["status"] for c in created] == [200]
            deadline = time.monotonic() + (10 if ending == "collected" else 0)
            while created[0]["session"] in server.open_sessions() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert created[0]["session"] not in server.open_sessions()  # closed while the process still lives
        _, err = run.communicate(input="", timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    if ending == "exit":
        assert "KeyboardInterrupt" in err, err[-3000:]
    else:
        assert run.returncode == 0, err[-3000:]
    created = server.creates()[before:]
    assert [c["status"] for c in created] == [200]
    assert created[0]["session"] not in server.open_sessions(), ending
