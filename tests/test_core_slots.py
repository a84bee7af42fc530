"""FairSlots (activeprp_core.slots): the weighted semaphore that caps calls in flight, waiters served in key
order, none overtaken."""

import asyncio
import contextlib
import threading

import pytest

from activeprp_core.blocking import run_blocking
from activeprp_core.slots import DeadlinePassed, FairSlots, wait_for


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



async def _cancelled_as_it_goes_on(wait, go_on):
    """Start ``wait()`` in a task; once it waits, ``go_on()`` (what lets it proceed) and cancel it in the same turn
    of the loop (a request whose client has gone). Returns "cancelled" or "went on"."""
    outcome = []

    async def waiter():
        try:
            await wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        outcome.append("went on")

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0.01)
    await go_on()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return outcome[0]


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_waiter_cancelled_as_its_slot_is_handed_over_is_cancelled_and_the_slot_given_back(timeout):
    """Before Python 3.12 ``asyncio.wait_for(shield(future), timeout)`` dropped that cancellation: the waiter took
    the slot and ran on (in the service, a request whose client had gone was reranked and counted as a 200)."""
    async def scenario():
        slots = FairSlots(1)
        held = slots.take(1)
        await held.__aenter__()

        async def wait():
            async with slots.take(1, key=1, timeout=timeout):
                pass

        outcome = await _cancelled_as_it_goes_on(wait, lambda: held.__aexit__(None, None, None))
        return outcome, slots.free

    assert asyncio.run(scenario()) == ("cancelled", 1)


def test_wait_for_never_drops_a_cancellation_and_times_out_as_asyncio_does():
    async def scenario():
        answer = asyncio.get_running_loop().create_future()

        async def go_on():
            answer.set_result(1)

        async def wait():
            return await wait_for(asyncio.shield(answer), 30.0)

        cancelled = await _cancelled_as_it_goes_on(wait, go_on)
        slow = asyncio.ensure_future(asyncio.sleep(10))
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(slow, 0.01)
        return cancelled, slow.cancelled(), await wait_for(asyncio.sleep(0, "done"), 1.0)

    assert asyncio.run(scenario()) == ("cancelled", True, "done")


def test_a_thread_whose_wait_was_cut_keeps_its_slot_and_its_failure_is_retrieved(caplog):
    """``in_thread`` under a ``Hold``: the wait is cancelled (a deadline, a client gone), the slot stays taken
    until the thread returns; the thread then fails before the block is left, and asyncio logged "Future
    exception was never retrieved" (a backend's error text on stderr)."""
    import gc
    import threading

    from activeprp_core.comparators.base import in_thread

    go = threading.Event()

    def call():
        go.wait(5)
        raise RuntimeError("backend died")

    async def main():
        slots = FairSlots(1)
        async with slots.take(1) as hold:
            task = asyncio.ensure_future(in_thread(call, hold))
            await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            go.set()
            await asyncio.sleep(0.05)
        return slots.free

    with caplog.at_level("ERROR", logger="asyncio"):
        assert asyncio.run(main()) == 1
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_thread_raising_stopiteration_fails_its_wait_instead_of_hanging_it():
    from activeprp_core.comparators.base import in_thread

    def call():
        raise StopIteration

    with pytest.raises(RuntimeError, match="StopIteration"):
        asyncio.run(asyncio.wait_for(in_thread(call), 5))


@contextlib.contextmanager
def _held(take):
    """A ``take`` of ``FairSlots(threads=True)`` entered without an event loop (it never suspends)."""
    hold = run_blocking(take.__aenter__())
    try:
        yield hold
    finally:
        run_blocking(take.__aexit__(None, None, None))


def test_thread_slots_keep_a_cut_call_s_slot_until_its_thread_returns():
    """The sync path's slots (``threads``): a call cut by ``within`` keeps its slot until its thread returns, as
    ``in_thread`` does on the async path; a waiter whose timeout passes first holds nothing (``DeadlinePassed``),
    one that waits meanwhile gets the slot once the thread returns. A call's own TimeoutError is no cut."""
    from activeprp_core.comparators.base import within

    go, slots = threading.Event(), FairSlots(1, threads=True)
    with _held(slots.take(1)) as hold:
        assert within(lambda: go.wait(5), 0.01, hold) is None  # cut: the thread runs on
    assert slots.free == 0
    with pytest.raises(DeadlinePassed), _held(slots.take(1, timeout=0.01)):
        pass
    threading.Timer(0.05, go.set).start()
    with _held(slots.take(1, timeout=5.0)):
        assert slots.free == 0
    assert slots.free == 1 and not slots._waiters

    def times_out():
        raise TimeoutError("the call's own")

    with pytest.raises(TimeoutError, match="own"):
        within(times_out, 1.0)
