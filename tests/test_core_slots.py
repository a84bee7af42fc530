"""FairSlots (activeprp_core.slots): the weighted semaphore that caps calls in flight, waiters served in key
order, none overtaken."""

import asyncio

from activeprp_core.slots import FairSlots


def test_fair_slots_serve_lower_keys_first_and_never_let_a_waiter_be_overtaken():
    async def scenario():
        slots, order = FairSlots(2), []

        async def hold(key, n, release):
            async with slots.take(n, key):
                order.append(key)
                await release.wait()

        first = asyncio.Event()
        holder = asyncio.ensure_future(hold(0, 2, first))  # takes both slots
        await asyncio.sleep(0)
        done = asyncio.Event()
        done.set()
        waiters = {key: asyncio.ensure_future(hold(key, n, done)) for key, n in ((3, 1), (1, 2), (2, 1), (4, 1))}
        await asyncio.sleep(0)
        waiters[4].cancel()  # a waiter that leaves is skipped
        first.set()
        await asyncio.gather(holder, *(w for k, w in waiters.items() if k != 4))
        return order, slots.free

    order, free = asyncio.run(scenario())
    assert order == [0, 1, 2, 3]  # key 1 needs both slots: keys 2 and 3 wait behind it
    assert free == 2
