"""The harness's process helpers (tests/harness/processes.py): a command that outlives its bound goes with everything
it started, and waiting on an event says what it waited for."""

import signal
import subprocess
import sys

import pytest

from tests.harness import processes
from tests.harness.processes import wait_until

# A command that starts a grandchild (which reports its pid) and then hangs, as a torchrun or a shell pipeline does.
HANGS = ("import subprocess, sys, time\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
         "print(child.pid, flush=True)\n"
         "time.sleep(600)\n")


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie not yet reaped by init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_command_past_its_bound_is_killed_with_what_it_started_and_says_what_it_printed():
    with pytest.raises(subprocess.TimeoutExpired) as late:
        processes.run([sys.executable, "-c", HANGS], capture_output=True, text=True, timeout=5)
    grandchild = int(late.value.output.split()[0])
    wait_until(lambda: gone(grandchild), 30, waiting_for="the grandchild to be killed with its group")


def test_a_started_process_is_stopped_with_its_group_however_the_block_ends():
    with pytest.raises(RuntimeError), processes.started([sys.executable, "-c", HANGS], stdout=subprocess.PIPE,
                                                        text=True) as process:
        grandchild = int(process.stdout.readline())
        raise RuntimeError("the test failed here")
    assert process.returncode is not None
    wait_until(lambda: gone(grandchild), 30, waiting_for="the grandchild to be stopped with its group")


def test_run_gives_what_subprocess_run_gives():
    done = processes.run([sys.executable, "-c", "import sys; print(sys.stdin.read() + 'out'); sys.exit(3)"],
                         input="in ", capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "in out\n", "")
    with pytest.raises(subprocess.CalledProcessError):
        processes.run([sys.executable, "-c", "raise SystemExit(1)"], check=True)
    assert processes.run(["true"]).returncode == 0


def test_wait_until_returns_the_first_true_value_and_a_timeout_says_what_it_waited_for():
    values = iter([0, [], "found"])
    assert wait_until(lambda: next(values), 5, interval=0.01) == "found"
    with pytest.raises(AssertionError, match=r"^still waiting for the server after 0.05s$"):
        wait_until(lambda: False, 0.05, interval=0.01, waiting_for="the server")
    with pytest.raises(AssertionError, match=r"^still waiting for 3 sessions left open after 0.05s$"):
        wait_until(lambda: None, 0.05, interval=0.01, waiting_for=lambda: "3 sessions left open")


def test_a_child_takes_ctrl_c_even_when_the_tests_were_started_with_sigint_ignored():
    """A shell starting the tests in the background ignores SIGINT, and children inherit that: a Ctrl-C test's
    command would run on (tests/test_eval_faults.py's interrupted run finished instead, exit 0)."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with processes.started([sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(600)"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
            assert child.stdout.readline() == "ready\n"
            child.send_signal(signal.SIGINT)
            _, err = child.communicate()
    finally:
        signal.signal(signal.SIGINT, before)
    assert child.returncode == -signal.SIGINT and "KeyboardInterrupt" in err  # what Python dies of at Ctrl-C
