"""FairSlots (activeprp_core.slots): the weighted semaphore that caps calls in flight, waiters served in key
order, none overtaken."""

import asyncio
import concurrent.futures
import gc
import threading
import weakref

import pytest

from activeprp_core.blocking import run_blocking
from activeprp_core.slots import DeadlinePassed, FairSlots, held, wait_for
from tests.conftest import FakeRemote


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


def test_thread_slots_keep_a_cut_call_s_slot_until_its_thread_returns():
    """The sync path's slots (``threads``): a call cut by ``within`` keeps its slot until its thread returns, as
    ``in_thread`` does on the async path; a waiter whose timeout passes first holds nothing (``DeadlinePassed``),
    one that waits meanwhile gets the slot once the thread returns. A call's own TimeoutError is no cut."""
    from activeprp_core.comparators.base import within

    go, slots = threading.Event(), FairSlots(1, threads=True)
    with held(slots.take(1)) as hold:
        assert within(lambda: go.wait(5), 0.01, hold) is None  # cut: the thread runs on
    assert slots.free == 0
    with pytest.raises(DeadlinePassed), held(slots.take(1, timeout=0.01)):
        pass
    threading.Timer(0.05, go.set).start()
    with held(slots.take(1, timeout=5.0)):
        assert slots.free == 0
    assert slots.free == 1 and not slots._waiters

    def times_out():
        raise TimeoutError("the call's own")

    with pytest.raises(TimeoutError, match="own"):
        within(times_out, 1.0)


def test_a_hold_keeping_two_cut_calls_keeps_its_slot_until_both_threads_return():
    """A call retried while its cut attempt's thread runs on (a provider that sends in threads, with an
    ``attempt_timeout``) keeps its slot until both threads have returned, whichever returns last."""
    from activeprp_core.comparators.base import within

    first, second, slots = threading.Event(), threading.Event(), FairSlots(1, threads=True)
    with held(slots.take(1)) as hold:
        for go in (first, second):
            assert within(lambda go=go: go.wait(5), 0.01, hold) is None  # cut: the thread runs on
    second.set()
    with pytest.raises(DeadlinePassed), held(slots.take(1, timeout=0.2)):  # the first thread still runs
        pass
    first.set()
    with held(slots.take(1, timeout=5.0)):
        pass
    assert slots.free == 1


def test_threads_and_tasks_wait_for_one_count_of_slots():
    """A thread (``threads=True``) and a task wait in one queue for the same slots: a thread waits while a task
    holds the slot and gets it when the task releases it, and a task waits while a thread holds it."""
    slots, order = FairSlots(1), []
    task_holds, thread_holds, thread_may_go, thread_waits = (threading.Event() for _ in range(4))

    def thread():
        with held(slots.take(1, threads=True)):  # the task holds the slot: this waits
            order.append("thread")
            thread_holds.set()
            thread_may_go.wait(30)

    async def scenario():
        async with slots.take(1):
            task_holds.set()
            waiter = threading.Thread(target=thread)
            waiter.start()
            await _queued(slots)  # the thread waits: nothing else may take the slot
            assert slots.free == 0 and not thread_holds.is_set()
            order.append("task")
        await asyncio.get_running_loop().run_in_executor(None, thread_holds.wait, 30)
        second = asyncio.ensure_future(_enter_after(slots, order))
        await _queued(slots)  # the task waits behind the thread's hold
        assert slots.free == 0 and order == ["task", "thread"]
        thread_may_go.set()
        await asyncio.wait_for(second, 30)
        waiter.join(30)
        return order, slots.free, slots.waiting

    assert asyncio.run(scenario()) == (["task", "thread", "second task"], 1, 0)


async def _queued(slots):
    """Return once a waiter is queued for ``slots`` (polled; 30 s only ends a hung test)."""
    for _ in range(30_000):
        if slots.waiting:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no waiter queued")


async def _enter_after(slots, order):
    async with slots.take(1):
        order.append("second task")


def test_a_task_cancelled_as_a_thread_hands_it_the_slot_gives_it_back():
    """The grant, set by the releasing thread, and the cancellation of the waiting task race: the slot is either
    the task's (given back as it leaves) or never granted; it is never lost."""
    async def scenario():
        slots = FairSlots(1)
        taken = slots.take(1, threads=True)
        run_blocking(taken.__aenter__())  # held as a thread holds it (it never suspends)
        waiter = asyncio.ensure_future(_enter_after(slots, []))
        await _queued(slots)
        releaser = threading.Thread(target=run_blocking, args=(taken.__aexit__(None, None, None),))
        releaser.start()
        waiter.cancel()
        releaser.join(30)
        await asyncio.gather(waiter, return_exceptions=True)
        return slots.free, slots.waiting

    for _ in range(50):
        assert asyncio.run(scenario()) == (1, 0)


def test_a_call_cut_on_a_loop_that_has_closed_gives_its_slot_back_when_its_thread_returns():
    """``in_thread`` keeps a cut call's slots until its thread returns; it gave them back through the loop, so a
    loop closed meanwhile (``asyncio.run`` ended) kept them taken for good: one count for every loop and thread
    must not lose them."""
    from activeprp_core.comparators.base import in_thread

    go, slots = threading.Event(), FairSlots(1)

    async def cut():
        async with slots.take(1) as hold:
            task = asyncio.ensure_future(in_thread(lambda: go.wait(30), hold))
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(cut())  # the loop is closed; the call runs on in its thread, holding the slot
    assert slots.free == 0
    go.set()
    with held(slots.take(1, timeout=30.0, threads=True)):  # granted once the thread has returned
        assert slots.free == 0
    assert slots.free == 1


async def _enters(take) -> bool:
    async with take:
        return True


@pytest.mark.parametrize("leaves", ["cancelled", "timed out"])
def test_a_waiter_that_leaves_lets_the_waiters_behind_it_take_the_free_slots(leaves):
    """Cap 2, one slot held throughout: a waiter for both leaves (cancelled, or its timeout passed). A waiter for
    one slot queued behind it, and one that comes after it left, take the free slot at once; the waiter that left
    stayed in the queue ahead of them, so they waited for the holder to release (a request refused at its deadline
    while a slot sat free). The waits are bounded: a waiter still waiting fails the test."""
    async def scenario():
        slots, release = FairSlots(2), asyncio.Event()
        holder = asyncio.ensure_future(_hold_until(slots.take(1), release))
        await asyncio.sleep(0)
        big = asyncio.ensure_future(_enters(slots.take(2, timeout=None if leaves == "cancelled" else 0.01)))
        await _queued(slots)
        behind = asyncio.ensure_future(_enters(slots.take(1)))
        if leaves == "cancelled":
            await asyncio.sleep(0)
            big.cancel()
        left = await asyncio.gather(big, return_exceptions=True)
        got = [await asyncio.wait_for(behind, 5), await asyncio.wait_for(_enters(slots.take(1)), 5)]
        release.set()
        await holder
        return type(left[0]).__name__, got, slots.free, slots.waiting

    left = "CancelledError" if leaves == "cancelled" else "DeadlinePassed"
    assert asyncio.run(scenario()) == (left, [True, True], 2, 0)


async def _hold_until(take, release):
    async with take:
        await release.wait()


def _closed_with_pending(coro):
    """Run ``coro`` in a task on a new loop until it waits, then close that loop with the task pending (its
    destruction is not logged); the task."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda loop, context: None)
    task = loop.create_task(coro)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert not task.done()
    loop.close()
    return task


def test_slots_held_or_granted_on_a_loop_closed_with_its_task_pending_come_back():
    """A task holds the one slot of a guard, or waits for it, and its loop is closed with the task pending (a
    framework's private loop shut down): the block never ends. Its slot came back for no later loop and no thread
    (every call waited until its deadline, or for good): it is reclaimed when a waiter needs it, and the cap still
    holds for the live holders."""
    slots = FairSlots(1)
    held_by_dead = _closed_with_pending(_hold_until(slots.take(1), asyncio.Event()))
    with held(slots.take(1, timeout=5.0, threads=True)):  # the sync path gets it
        assert slots.free == 0
        with pytest.raises(DeadlinePassed), held(slots.take(1, timeout=0.01, threads=True)):
            pass  # one live holder: the cap holds
        waiting_in_dead = _closed_with_pending(_enters(slots.take(1)))  # then granted nothing
        assert slots.waiting == 1
    assert slots.free == 1 and slots.waiting == 0
    assert asyncio.run(asyncio.wait_for(_enters(slots.take(1, timeout=5.0)), 10))  # a later loop gets it
    assert slots.free == 1 and not held_by_dead.done() and not waiting_in_dead.done()


def test_a_call_in_flight_on_a_loop_closed_with_its_task_pending_keeps_its_slot_until_its_thread_returns():
    """The loop of a task waiting on ``in_thread`` under its ``Hold`` is closed (its block never ends): the call
    still occupies the endpoint, so its slot is not reclaimed until its thread returns, then it is, also for a
    waiter queued meanwhile."""
    from activeprp_core.comparators.base import in_thread

    go, slots = threading.Event(), FairSlots(1)

    async def calls():
        async with slots.take(1) as hold:
            await in_thread(lambda: go.wait(30), hold)

    _closed_with_pending(calls())
    with pytest.raises(DeadlinePassed), held(slots.take(1, timeout=0.01, threads=True)):
        pass  # the thread runs on
    threading.Timer(0.05, go.set).start()
    with held(slots.take(1, timeout=30.0, threads=True)):  # queued before the thread returns
        assert slots.free == 0
    assert slots.free == 1 and slots.waiting == 0


def test_requests_and_keyless_calls_wait_in_the_order_they_arrived_on_the_slots():
    """Keys are arrival order on the slots (``next_key``), for every user: a request that came first (its key drawn
    then, e.g. in one of two pools that share a guard, whose keys each counted from 0) goes before later requests
    and before keyless calls that came after it (a direct call on the guard waited with key 0, so a stream of them
    overtook every request with key >= 1); a request's later calls keep its place."""
    async def scenario():
        slots, order, release = FairSlots(1), [], asyncio.Event()
        holder = asyncio.ensure_future(_hold_until(slots.take(1), release))
        await asyncio.sleep(0)
        old, young = slots.next_key(), slots.next_key()

        async def call(name, key=None):
            async with slots.take(1, key):
                order.append(name)

        waiters = [asyncio.ensure_future(call("young", young)), asyncio.ensure_future(call("direct"))]
        await asyncio.sleep(0)
        waiters.append(asyncio.ensure_future(call("old", old)))
        await asyncio.sleep(0)
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, *waiters), 5)
        return order

    assert asyncio.run(scenario()) == ["old", "young", "direct"]


def test_a_closed_loop_s_task_freed_by_the_gc_inside_a_critical_section_neither_deadlocks_nor_leaks(monkeypatch):
    """A task holding the slot, its loop closed with it pending, is garbage in a reference cycle: the cyclic GC
    frees it at any allocation of any thread, running the end of its ``take`` (the release) there, also inside
    FairSlots' own critical section on that thread. The release waited for the lock that thread held: the guard
    hung for good, on every loop and thread. Here the GC runs inside ``_grant`` (under the lock) as a thread
    arrives."""
    slots, ended = FairSlots(1), []

    async def dead_task():
        try:
            async with slots.take(1):
                await asyncio.Event().wait()
        finally:
            ended.append(True)

    def arrives():
        with held(slots.take(1, timeout=5.0, threads=True)):
            pass

    grant = slots._grant

    def collecting():
        if not ended:
            gc.collect()  # frees the dead task here, under the lock
        grant()

    gc.disable()  # nothing frees it before
    try:
        _closed_with_pending(dead_task())  # dropped: only its own cycle refers to it
        monkeypatch.setattr(slots, "_grant", collecting)
        worker = threading.Thread(target=arrives, daemon=True)
        worker.start()
        worker.join(10)  # a watchdog: a deadlock fails the test instead of hanging it
    finally:
        gc.enable()
    assert not worker.is_alive(), "the thread deadlocked on FairSlots' own lock"
    assert ended == [True] and slots.free == 1 and slots.waiting == 0


def test_an_uncontended_take_makes_no_waiter_and_its_hold_is_no_reference_cycle(monkeypatch):
    """Free slots and nobody waiting: taken at once (no grant future, no queue), and the ``Hold`` is freed when
    dropped (it was a reference cycle through its release closure, freed only by the cyclic GC)."""
    made = []

    class Counted(concurrent.futures.Future):
        def __init__(self):
            made.append(self)
            super().__init__()

    monkeypatch.setattr(concurrent.futures, "Future", Counted)
    slots, holds = FairSlots(2), []

    async def tasks():
        for _ in range(3):
            async with slots.take(1, timeout=5.0) as hold:
                holds.append(weakref.ref(hold))
            del hold

    gc.disable()
    try:
        asyncio.run(tasks())
        for _ in range(3):
            with held(slots.take(1, threads=True)) as hold:
                holds.append(weakref.ref(hold))
            del hold
        freed = [ref() is None for ref in holds]
    finally:
        gc.enable()
    assert made == [] and freed == [True] * 6 and slots.free == 2


def test_a_thread_waiting_with_no_timeout_gets_the_slot_of_a_holder_whose_loop_closed_after_it_queued(monkeypatch):
    """A thread waits (no deadline) for the slot a task holds; then the task's loop is closed with it pending.
    Nobody else arrives or releases: the thread waited for good. It looks for such slots every ``RECLAIM_EVERY``
    seconds."""
    monkeypatch.setattr(FairSlots, "RECLAIM_EVERY", 0.02, raising=False)
    slots, got = FairSlots(1), []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda loop, context: None)
    task = loop.create_task(_hold_until(slots.take(1), asyncio.Event()))
    loop.run_until_complete(asyncio.sleep(0.01))

    def waiter():
        with held(slots.take(1, threads=True)):
            got.append(True)

    worker = threading.Thread(target=waiter, daemon=True)
    worker.start()
    for _ in range(1000):
        if slots.waiting:
            break
        threading.Event().wait(0.01)
    assert slots.waiting == 1
    loop.close()
    worker.join(10)
    assert got == [True] and slots.free == 1 and not task.done()


def test_a_sync_take_on_a_loop_s_thread_whose_tasks_hold_the_slots_it_needs_raises_instead_of_hanging():
    """The thread that runs a loop blocking for slots only that loop's tasks could give back would hang forever
    (they run only when it returns): ``LoopBlocked``, nothing held or queued. Slots another thread gives back are
    still waited for."""
    from activeprp_core import Candidate, Comparator
    from activeprp_core.comparators import CallGuard
    from activeprp_core.slots import LoopBlocked

    class Judge(Comparator):
        def compare(self, query, pairs):
            return [1.0] * len(pairs)

    async def scenario():
        slots, release = FairSlots(2), asyncio.Event()

        async def task_holds(n):
            async with slots.take(n):
                await release.wait()

        holder = asyncio.ensure_future(task_holds(2))
        await asyncio.sleep(0)
        with pytest.raises(LoopBlocked, match="tasks of the event loop this thread runs hold 2"), \
                held(slots.take(1, threads=True)):
            pass
        assert (slots.waiting, slots.free) == (0, 0)
        release.set()
        await holder
        # one slot the loop's task holds, one another thread gives back once this thread waits: served
        release.clear()
        holder = asyncio.ensure_future(task_holds(1))
        await asyncio.sleep(0)
        taken = threading.Event()

        def other_thread():
            with held(slots.take(1, threads=True)):
                taken.set()
                while not slots.waiting:
                    threading.Event().wait(0.001)

        other = threading.Thread(target=other_thread)
        other.start()
        taken.wait()
        with held(slots.take(1, threads=True)) as hold:
            assert hold.n == 1
        other.join()
        release.set()
        await holder
        # the same through a guard shared with the loop's tasks, as a RerankPool's
        guard = CallGuard(max_concurrency=1)
        release.clear()

        async def guard_holds():
            async with guard.slots(1):
                await release.wait()

        holder = asyncio.ensure_future(guard_holds())
        await asyncio.sleep(0)
        with pytest.raises(LoopBlocked):
            Judge().judge("q", [(Candidate("a", "x"), Candidate("b", "y"))], guard=guard)
        release.set()
        await holder
        return slots.free, guard.fair_slots.free

    assert asyncio.run(scenario()) == (2, 1)


def test_a_remote_sync_call_whose_workers_take_its_slots_raises_when_its_own_loop_holds_them():
    """``RemoteComparator``'s sync path with 2+ calls takes its slots in worker threads, which run no loop: the
    check is made for the calling thread before it blocks on them. It hung while a task of the caller's loop held
    every slot (here bounded by a deadline: it returned its calls unsent at it). With a slot left it is served."""
    pytest.importorskip("tenacity")
    import time

    from activeprp_core import Candidate
    from activeprp_core.comparators import CallGuard
    from activeprp_core.slots import LoopBlocked

    pairs = [(Candidate("a", "x"), Candidate("b", "y")), (Candidate("b", "y"), Candidate("a", "x"))]

    async def scenario():
        judge, guard, release = FakeRemote(max_concurrency=2), CallGuard(max_concurrency=2), asyncio.Event()

        async def task_holds(n):
            async with guard.slots(n):
                await release.wait()

        holder = asyncio.ensure_future(task_holds(2))
        await asyncio.sleep(0)
        guard.deadline = time.monotonic() + 5  # the watchdog of a regression: no hang, the calls unsent at it
        with pytest.raises(LoopBlocked, match="tasks of the event loop this thread runs hold 2"):
            judge.judge("q", pairs, guard=guard)
        assert (judge.sent, guard.fair_slots.waiting, guard.fair_slots.free) == (0, 0, 0)
        release.set()
        await holder
        release.clear()
        holder = asyncio.ensure_future(task_holds(1))
        await asyncio.sleep(0)
        guard.deadline = None
        probs = [j.prob for j in judge.judge("q", pairs, guard=guard)]  # one slot free: the workers take turns
        release.set()
        await holder
        return probs, judge.sent, guard.fair_slots.free

    assert asyncio.run(scenario()) == ([0.75, 0.75], 2, 2)
