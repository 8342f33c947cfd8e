"""A session start the runtime gave up on is still its own (issue 41, item 11): when the runtime stops waiting for a
start (ORSGEN_RESET_TIMEOUT) and the server opens that session later, it is closed as soon as it opens, and the
figures count the starts given up. On the SDK's own server, whose `POST /create` answers only once the environment's
constructor returned (tests/envs/late.py: 2.5 s for a task's first start), with a 1 s start limit."""

import logging
import time

import pytest
from orsgen.runtime import hooks
from orsgen.runtime.counts import Counts, figures

from tests.harness.generation import served


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    """(server counting requests, the late module generated against it)."""
    with served("tests.envs.late:Late", tmp_path_factory.mktemp("late"), "late", env={"LATE_SECONDS": "2.5"}) as found:
        yield found


def deletes(log: list[dict], sid: str) -> list[dict]:
    return [e for e in log if e["request"] == "POST /delete" and e["session"] == sid]


def test_a_start_given_up_is_closed_once_the_server_opens_it(late, monkeypatch, caplog):
    server, mod = late
    monkeypatch.setenv("ORSGEN_RESET_TIMEOUT", "1")
    opens: list = []
    hooks.add("session_open", opens.append, mod.Late)
    try:
        env = mod.Late()
        assert env.reset(task_index=0) == "Echo the word apple"  # the first attempt given up at 1 s, the retry opened
        assert env.echo(text="apple") == "apple" and env.get_reward() == 1.0
        mod.close_all()  # the run's end: waits (bounded) for what is still closing, the late session's close too
    finally:
        hooks.remove("session_open", opens.append, mod.Late)

    deadline = time.monotonic() + 60  # what the server does with the start given up, whatever the runtime did
    while any(c["answered"] is None for c in server.creates()) and time.monotonic() < deadline:
        time.sleep(0.05)
    creates = server.creates()
    log = server.log()
    assert [c["status"] for c in creates] == [200, 200]  # the server opened both: the one given up, later
    assert creates[0]["answered"] > creates[1]["answered"]  # it opened after the retry had
    assert server.open_sessions() == []
    for create in creates:  # each session deleted once, after the server had opened it
        [delete] = deletes(log, create["session"])
        assert delete["arrived"] >= create["answered"]

    assert [(o.attempt, o.given_up, o.error is None) for o in opens] == [(0, True, False), (1, False, True)]
    assert "no answer within 1s (ORSGEN_RESET_TIMEOUT)" in opens[0].error
    counts = Counts()
    for record in opens:
        counts.take("session_open", record)
    shown = figures(counts)
    assert (shown["orsgen/starts_given_up"], shown["orsgen/start_failures"], shown["orsgen/starts"]) == (1, 1, 2)
    [line] = [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno >= logging.WARNING]
    assert "given up after 1s (ORSGEN_RESET_TIMEOUT) was answered after" in line and "closed at once" in line
