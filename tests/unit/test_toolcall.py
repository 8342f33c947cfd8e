"""One tool-call path (issue 43): a call's steps (`toolcall.steps`) against a stand-in session, waited for in line,
on the caller's own loop (async tools) and on the runtime's loop (a call started ahead): the same outcome, the same
failure text, the same record of it, whichever way it waited."""

import asyncio
from types import SimpleNamespace

import pytest
from orsgen.runtime import client, hooks, toolcall
from orsgen.runtime.budgets import Budgets
from orsgen.runtime.episode import Episode
from orsgen.runtime.errors import TimedOut, ToolError
from orsgen.runtime.settings import resolve


class Env:
    """The adapter the episode is about."""


class Session:
    """A session whose tool answers after `seconds`, or raises `error`."""

    def __init__(self, seconds: float = 0.0, error: Exception | None = None) -> None:
        self.seconds, self.error, self.sent = seconds, error, []

    async def call_tool(self, name, arguments):
        self.sent.append((name, arguments))
        await asyncio.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return SimpleNamespace(reward=1.0, metadata=None, finished=False, blocks=[SimpleNamespace(type="text", text="done")])


ENV = Env()  # (an episode holds its adapter weakly)


def episode(session, **given):
    config = resolve(None, {"tool_timeout": 0.2, **given})
    made = Episode(ENV, "train", 0, None, config, budgets=Budgets(None, config))
    made.session = session
    return made


WAYS = {
    "in line": toolcall.run,
    "async tool": lambda steps: asyncio.run(toolcall.arun(steps)),
    "started ahead": lambda steps: client.loop().submit(toolcall.arun(steps, here=True)).result(timeout=30),
}


@pytest.mark.parametrize("way", WAYS)
def test_a_call_answers_the_same_whichever_way_it_waits(way):
    ep = episode(Session())
    assert WAYS[way](toolcall.steps(ep, "echo", {"text": "x"})) == "done"
    assert (ep.calls, ep.failures, ep.reward, ep.session.sent) == (1, 0, 1.0, [("echo", {"text": "x"})])


@pytest.mark.parametrize("way", WAYS)
def test_a_timeout_reads_the_same_whichever_way_it_waited(way):
    seen = []
    hooks.add("tool_call", seen.append, Env)
    try:
        ep = episode(Session(seconds=5))
        with pytest.raises(TimedOut) as raised:
            WAYS[way](toolcall.steps(ep, "slow", {}))
    finally:
        hooks.remove("tool_call", seen.append, Env)
    assert str(raised.value) == "slow failed: TimeoutError: no answer within 0.2s (ORSGEN_TOOL_TIMEOUT)"
    assert (ep.calls, ep.failures) == (1, 1)
    assert [(r.error, r.timed_out) for r in seen] == [(str(raised.value), True)]


@pytest.mark.parametrize("way", WAYS)
def test_a_refused_or_failed_call_reads_the_same_whichever_way(way):
    from aiohttp import ClientConnectionError

    ep = episode(Session(error=ClientConnectionError("reset by peer")))
    with pytest.raises(ToolError, match="^echo failed: ClientConnectionError: reset by peer$"):
        WAYS[way](toolcall.steps(ep, "echo", {}))
    limited = episode(Session(), max_tool_calls=1)
    WAYS[way](toolcall.steps(limited, "echo", {}))
    with pytest.raises(ToolError, match="^echo: this episode is not scored: the model called tools more than its 1 "):
        WAYS[way](toolcall.steps(limited, "echo", {}))
    assert len(limited.session.sent) == 1  # the refused call sent nothing
