"""The sessions budget's places (`orsgen.runtime.slots.Slots`, issue 47) on an event loop of their own: starts past
the budget wait in order, a session's place is given back once, a start cancelled while it waits takes none."""

import asyncio

from orsgen.runtime.slots import Slots


def test_starts_past_the_budget_wait_in_order_and_each_place_is_given_back_once():
    async def run():
        slots, order = Slots(), []

        async def start(name):
            waited = await slots.take(2)
            order.append((name, waited > 0))
            slots.own(name)

        await asyncio.gather(start("a"), start("b"))
        later = [asyncio.ensure_future(start(n)) for n in ("c", "d")]
        await asyncio.sleep(0.05)
        assert order == [("a", False), ("b", False)] and slots.held == 2  # c and d wait
        slots.release("a")
        slots.release("a")  # once only
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [n for n, _ in order] == ["a", "b", "c"] and slots.held == 2
        slots.release("b")
        await asyncio.gather(*later)
        assert order[2:] == [("c", True), ("d", True)]
        assert slots.peak == 2
        slots.release("nobody's")  # a session that holds no place gives none back
        assert slots.held == 2

    asyncio.run(run())


def test_a_start_cancelled_while_waiting_takes_no_place_and_no_budget_waits_never():
    async def run():
        slots = Slots()
        assert await slots.take(1) == 0.0
        waiting = asyncio.ensure_future(slots.take(1))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        slots.give()
        assert slots.held == 0
        assert [await slots.take(None) for _ in range(5)] == [0.0] * 5  # no budget: 5 held at once
        assert slots.held == slots.peak == 5

    asyncio.run(run())
