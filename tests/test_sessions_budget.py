"""The sessions budget per environment (`max_sessions`, ORSGEN_MAX_SESSIONS, `orsgen eval --max-sessions`; issue 47),
against the server's own count of the sessions open or opening on it: a start past the budget waits for a session of
that environment to close (no failure, no error), its wait reported with the start (`SessionOpen.waited`) and in
`orsgen/slot_wait_seconds`; every place given back once its session is closed, a start that failed included.
Training under the budget across ranks, and its refusal below a batch, are in test_multinode.py; `orsgen eval
--max-sessions` in test_eval_scale.py."""

import threading

import pytest
from orsgen.runtime import counts, hooks

from tests.harness import servers
from tests.harness.processes import wait_until
from tests.harness.servers import settle


@pytest.fixture(scope="module")
def counted():
    with servers.running("examples.echo:Echo", "tests.envs.faulty:Faulty", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        yield server


def test_a_start_past_the_budget_waits_for_a_close_and_the_server_never_holds_more(counted, generate, monkeypatch):
    monkeypatch.setenv("ORSGEN_MAX_SESSIONS", "2")
    mod = generate(counted.url, "--env", "echo")
    opens, tally = [], counts.Counts()

    def heard(record):
        opens.append(record)
        tally.take("session_open", record)

    hooks.add("session_open", heard)
    try:
        first, second, third = mod.Echo(), mod.Echo(), mod.Echo()
        assert first.reset(task_index=0).startswith("Echo the word")
        second.reset(task_index=1)
        assert mod.runtime.open_sessions() == 2
        prompts = []
        waiting = threading.Thread(target=lambda: prompts.append(third.reset(task_index=2)))
        waiting.start()
        # the third start waits: nothing reached the server for it while both places are held
        creates = len(counted.creates())
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and len(counted.creates()) == creates and prompts == []
        first.echo(text="x")  # a tool call takes no place
        first._close(wait=True)  # its session closed on the server: the third start goes
        waiting.join(timeout=60)
        assert not waiting.is_alive() and prompts and prompts[0].startswith("Echo the word")
    finally:
        hooks.remove("session_open", heard)
    mod.close_all()
    settle()
    assert counted.peak_sessions() == 2  # the server's own count: never three at once
    assert counted.open_sessions() == []
    assert [r.error for r in opens] == [None] * 3
    assert [r.waited > 0 for r in opens] == [False, False, True]
    assert tally.slot_wait_seconds == opens[2].waited
    assert counts.figures(tally)["orsgen/slot_wait_seconds"] == opens[2].waited


def test_a_start_the_server_refused_gives_its_place_back(counted, generate, monkeypatch):
    monkeypatch.setenv("ORSGEN_MAX_SESSIONS", "1")
    echo = generate(counted.url, "--env", "echo")
    mod = generate(counted.url, "--env", "faulty", name="faulty")

    class Once(mod.Faulty):
        start_retries = 1

    holder = echo.Echo()
    holder.reset(task_index=0)  # another environment's session: its own budget, but the server's capacity
    counted.set_capacity(1)
    refused, fine, said = Once(), Once(), []

    def starts():  # a place kept by a refused attempt would leave its retry, then the next start, waiting for ever
        with pytest.raises(mod.runtime.StartError, match="at capacity after 2 attempts"):
            refused.reset(task_index=0)
        said.append("refused")
        counted.set_capacity(0)
        said.append(fine.reset(task_index=1))

    runner = threading.Thread(target=starts)
    try:
        runner.start()
        wait_until(lambda: len(said) == 2, 60, waiting_for="two refused attempts, then a start after them")
    finally:
        counted.set_capacity(0)
    assert said == ["refused", "faulty task 1"]
    assert [c["status"] for c in counted.creates()[-3:]] == [429, 429, 200]
    mod.close_all()
    settle()
    assert counted.open_sessions() == []
