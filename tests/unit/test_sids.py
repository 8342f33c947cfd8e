"""Session ids asked for ahead (`sids.Sids`, issue 43 8b) against fakes of its neighbours: the server's
`/create_session` and `/delete_session` (coroutines that hand out and take back ids) and a clock; the coroutines run
on an event loop thread of the test's own, as on the runtime's loop."""

import asyncio
import itertools
import threading
from collections.abc import Iterator

import pytest
from orsgen.runtime import sids
from orsgen.runtime.sids import Sids

from tests.harness.processes import wait_until


class Server:
    """Hands out ids 1, 2, 3 ... and records those given back."""

    def __init__(self) -> None:
        self.numbers = itertools.count(1)
        self.given_back: list[str] = []

    async def ask(self) -> str:
        return f"sid-{next(self.numbers)}"

    async def give(self, sid: str) -> None:
        self.given_back.append(sid)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(timeout=5)


def made(loop: asyncio.AbstractEventLoop) -> tuple[Sids, Server, Clock]:
    server, clock = Server(), Clock()
    return Sids(server.ask, server.give, lambda c: asyncio.run_coroutine_threadsafe(c, loop), clock), server, clock


def test_ids_are_asked_for_up_to_the_count_wanted_and_each_is_taken_once_oldest_first(loop):
    pool, _, _ = made(loop)
    pool.want(3)
    pool.want(3)  # a batch's worth waits already: nothing more is asked
    assert pool.asked == 3
    taken = [pool.take() for _ in range(4)]
    assert [f.result(timeout=5) for f in taken[:3]] == ["sid-1", "sid-2", "sid-3"] and taken[3] is None
    pool.want(2)  # the next batch's: new ids, never one handed out before
    assert [pool.take().result(timeout=5) for _ in range(2)] == ["sid-4", "sid-5"] and pool.taken == 5


def test_an_id_left_waiting_past_its_freshness_is_given_back_not_taken(loop):
    pool, server, clock = made(loop)
    pool.want(2)
    clock.now += sids.FRESH_S + 1
    pool.want(3)  # one more, fresh
    assert pool.take().result(timeout=5) == "sid-3"
    wait_until(lambda: server.given_back == ["sid-1", "sid-2"], 10, waiting_for="the stale ids given back")
    assert pool.take() is None


def test_drain_gives_back_every_id_nobody_took(loop):
    pool, server, _ = made(loop)
    pool.want(3)
    kept = pool.take()
    for future in pool.drain():
        future.result(timeout=5)
    assert sorted(server.given_back) == ["sid-2", "sid-3"] and kept.result(timeout=5) == "sid-1"
    assert pool.take() is None and pool.drain() == []


def test_an_id_the_server_never_gave_is_not_given_back(loop):
    server = Server()

    async def refused() -> str:
        raise ConnectionError("refused")

    pool = Sids(refused, server.give, lambda c: asyncio.run_coroutine_threadsafe(c, loop))
    pool.want(1)
    for future in pool.drain():
        future.result(timeout=5)  # no error: nothing to give back
    assert server.given_back == []



class FakeSession:
    """The SDK session's hooks a start under an id asked for ahead uses (client.start_with)."""

    base_url, api_key, deployment = "http://127.0.0.1:1", "key", "owner/env"

    def __init__(self) -> None:
        self.sid: str | None = None
        self.done: list[tuple] = []

    async def _post_create(self) -> None:
        self.done.append(("create", self.sid))

    async def _run_ping(self, **kwargs: object) -> None:
        self.done.append(("ping", kwargs))


def test_a_start_under_an_id_is_the_rest_of_the_sdks_start_its_create_then_its_keep_alive():
    from orsgen.runtime import client

    async def run() -> FakeSession:
        session = FakeSession()
        assert await client.start_with(session, "sid-9") is session
        await session._ping_task
        return session

    session = asyncio.run(run())
    assert session.sid == "sid-9"
    assert session.done == [("create", "sid-9"), ("ping", {"url": "http://127.0.0.1:1/ping", "sid": "sid-9",
                                                          "api_key": "key", "sleep_time": 10,
                                                          "deployment": "owner/env"})]  # the SDK's __aenter__'s
