"""The SDK's keep-alive, as the runtime hooks it (client.first_ping_later): a session's first ping waits its interval
instead of going out as the session opens, so a batch's starts do not share the server with eight pings, and a
session closed within the interval never pings. A fake session stands in for the SDK's (its `_run_ping` hook)."""

import asyncio

from orsgen.runtime import client


class FakeSession:
    def __init__(self) -> None:
        self.pinged: list[dict] = []

    async def _run_ping(self, **kwargs: object) -> None:
        self.pinged.append(kwargs)


def ping_task(session: FakeSession, sleep_time: float) -> asyncio.Task:
    """What the SDK's `__aenter__` starts once the session is open."""
    return asyncio.create_task(session._run_ping(url="http://127.0.0.1/ping", sid="s1", api_key=None,
                                                 sleep_time=sleep_time, deployment=None))


def test_the_first_ping_waits_its_interval_and_a_session_closed_before_it_never_pings():
    async def run() -> FakeSession:
        session = FakeSession()
        client.first_ping_later(session)
        task = ping_task(session, sleep_time=3600)
        for _ in range(5):  # the loop turns: the session's first requests go, no ping among them
            await asyncio.sleep(0)
        assert session.pinged == []
        task.cancel()  # the session closes (the SDK's __aexit__ cancels its ping task)
        await asyncio.gather(task, return_exceptions=True)
        return session

    assert asyncio.run(run()).pinged == []


def test_after_its_interval_the_sdks_own_ping_loop_runs_with_its_arguments():
    async def run() -> FakeSession:
        session = FakeSession()
        client.first_ping_later(session)
        await ping_task(session, sleep_time=0)
        return session

    assert asyncio.run(run()).pinged == [{"url": "http://127.0.0.1/ping", "sid": "s1", "api_key": None,
                                          "sleep_time": 0, "deployment": None}]


def test_an_sdk_without_the_hook_is_left_as_it_is():
    session = object()
    client.first_ping_later(session)
    assert not hasattr(session, "_run_ping")
