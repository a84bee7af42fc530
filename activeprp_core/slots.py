"""``FairSlots``: the weighted semaphore that caps calls in flight, for a comparator's ``CallGuard``: the tasks of
event loops and the threads of the sync path under one count, waiters served oldest first (a ``RerankPool``
request's calls by the request's arrival, any other call by its own)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

from .blocking import run_blocking
from .budget import check_count

T = TypeVar("T")


async def wait_done(future: asyncio.Future, seconds: float | None) -> bool:
    """Wait for ``future`` (owned elsewhere: never cancelled here) at most ``seconds`` (None: no limit); whether it
    is done. A cancellation of the waiting task always propagates: ``asyncio.wait_for(asyncio.shield(future))``
    before Python 3.12 drops it when ``future`` completes in the same turn of the loop, so a request whose client
    had gone took its slot and ran on."""
    done, _ = await asyncio.wait({future}, timeout=seconds)
    return bool(done)


class TimedOut(asyncio.TimeoutError):
    """Raised by ``wait_for`` when it cut the awaitable at its timeout (not a TimeoutError the awaitable raised)."""


async def wait_for(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``asyncio.wait_for`` (the awaitable cancelled and awaited at the timeout, then ``TimedOut``, an
    ``asyncio.TimeoutError``; None: no limit) that never drops a cancellation of the waiting task, which the built-in
    does before Python 3.12 when the awaitable completes in the same turn of the loop (a cancelled rerank then sent
    its next round)."""
    if seconds is None:
        return await awaitable
    task = asyncio.ensure_future(awaitable)
    try:
        done = await wait_done(task, seconds)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise TimedOut
    return task.result()


class LoopBlocked(RuntimeError):
    """Raised by a thread-side ``FairSlots.take`` (the sync path: ``judge``, ``rerank``) made on a thread whose own
    running event loop's tasks hold so many slots that the rest cannot grant it: blocking there would hang forever,
    as those tasks can give their slots back only when the loop, stopped by this very wait, runs again."""


class DeadlinePassed(Exception):
    """Raised inside a comparator when a query's deadline passed before a call (or a slot for it) could go out;
    the comparator turns it into ``Judgment(None, cut=...)``, it never leaves the comparator."""


Returned = asyncio.Future | concurrent.futures.Future
"""A future that says when a call has returned: an event loop's, or one a thread sets (the sync path)."""


def _both(first: Returned, second: Returned) -> concurrent.futures.Future:
    """A future done once ``first`` and ``second`` both are."""
    both: concurrent.futures.Future = concurrent.futures.Future()
    first.add_done_callback(lambda _: second.add_done_callback(lambda _: both.set_result(None)))
    return both


class Hold:
    """What ``FairSlots.take`` yields: its slots are released when the ``async with`` block ends, or, after
    ``keep_until(future)``, once ``future`` is done if that is later (a call that runs on in a thread after the
    wait for it was cut still occupies the endpoint).

    Args:
        n: the slots it holds (0: none, as an uncapped guard's).
        loop: the event loop of the task that took it (None: taken by a thread with no loop running). A loop
            closed with that task still in the block never runs its end: the slots are then ``orphaned``.
        slots: the ``FairSlots`` it was taken from, which its slots go back to (a reference, not a closure over
            the hold: a hold is no reference cycle, freed as soon as it is dropped); None: none to give back.
    """

    def __init__(self, n: int = 0, loop: asyncio.AbstractEventLoop | None = None,
                 slots: FairSlots | None = None) -> None:
        self.n, self.loop, self._slots = n, loop, slots
        self.until: Returned | None = None
        self.ended = False  # its block has ended: no task of its loop needs to run for it to be released

    def _give_back(self) -> None:
        if self._slots is not None:
            self._slots._post(self)

    def keep_until(self, future: Returned) -> None:
        if self.until is not None and not self.until.done():  # a call kept before runs on too: until both return
            future = _both(self.until, future)
        self.until = future
        if self._slots is not None:
            # its loop closed meanwhile: the block never ends, the call's return does
            future.add_done_callback(lambda _: self.orphaned and self._give_back())

    def release_then(self, release: Any) -> None:
        """``release()`` now, or once the future kept is done."""
        if self.until is None or self.until.done():
            release()
        else:
            self.until.add_done_callback(lambda _: release())

    @property
    def orphaned(self) -> bool:
        """Whether nobody will release it: its task's loop has closed (the task never resumes) and no call it
        keeps (``keep_until``) runs on."""
        return self.loop is not None and self.loop.is_closed() and (self.until is None or self.until.done())


class FairSlots:
    """A weighted semaphore whose waiters are served in ``(key, arrival)`` order: a lower ``key`` (an older request)
    goes first, and a waiter never overtakes one ahead of it. One count for every waiter: the tasks of any event
    loop and the threads of the sync path wait in one queue, so ``total`` caps them all together.

    Keys are arrival order on these slots: a request takes its key from ``next_key()`` when it starts and waits
    at it for each of its calls, and a call with no key is keyed by its own arrival (the same counter), so the
    oldest request (or call) waiting goes first, whoever made it (pools sharing a guard, direct calls on it).

    The slots of a task whose loop was closed while the task held them (or had been granted them) would never come
    back: they are reclaimed when a waiter needs them (``Hold.orphaned``; checked when a waiter arrives, when
    slots are released, and every ``RECLAIM_EVERY`` seconds by each waiter, so a waiter queued before that loop
    closed gets them then at the latest).

    Releases never wait for the lock: the task of a closed loop is garbage that the cyclic GC frees at any
    allocation of any thread, running the end of its ``take`` (its release) there, also inside this class's own
    critical section on that thread, or while that thread holds a future's lock that a granting thread needs. A
    release (or a waiter leaving on an exception) is queued (``_post``) and done by whichever thread holds the lock
    before it lets it go; every critical section does the work queued meanwhile (``_serve``, ``_serve_posted``).

    Args:
        total: the slots (int >= 1).
        threads: how ``take`` waits when its call does not say: by blocking the thread (True: the sync path; it
            never suspends, so it runs under ``blocking.run_blocking``, see ``held``), or by suspending the running
            task (False). Slots may be released from any thread (a call's own, when it returns).
    """

    RECLAIM_EVERY = 1.0
    """Seconds a waiter waits before it looks again for the slots of holders whose loop has closed meanwhile."""

    def __init__(self, total: int, threads: bool = False) -> None:
        self.total = self.free = check_count(total, "total", minimum=1)
        self.threads = threads
        # a waiter's grant is a thread-safe future, set or cancelled only under the lock: a task cancelled just as
        # its slots are granted finds them granted (and gives them back), never lost between two threads
        self._waiters: list[tuple[int, int, Hold, concurrent.futures.Future]] = []
        self._holds: set[Hold] = set()  # granted and not released yet
        self._keys = itertools.count()
        self._arrivals = itertools.count()
        self._lock = threading.Lock()
        # releases (a Hold) and waiters leaving ((grant, Hold)) queued for the lock's holder (deque: atomic appends)
        self._posted: collections.deque[Hold | tuple[concurrent.futures.Future, Hold]] = collections.deque()

    @property
    def waiting(self) -> int:
        """The waiters queued for slots now (tasks and threads)."""
        with self._lock:
            waiting = sum(not future.done() for _, _, _, future in self._waiters)
        self._serve_posted()
        return waiting

    def next_key(self) -> int:
        """A new request's key (for ``take``): its arrival order on these slots, so its calls go before those of
        every request and keyless call that comes after it."""
        with self._lock:
            key = next(self._keys)
        self._serve_posted()
        return key

    @contextlib.asynccontextmanager
    async def take(self, n: int, key: int | None = None, timeout: float | None = None, threads: bool | None = None):
        """Hold ``min(n, total)`` slots (yields a ``Hold``); waits while others with a lower key (or the same key,
        earlier) wait, at most ``timeout`` seconds (then ``DeadlinePassed``, holding nothing). ``key``: a request's
        ``next_key()``; None: this call's own arrival. ``threads``: wait by blocking the thread (the sync path:
        this never suspends) rather than suspending the task; None: the instance's ``threads``.

        Raises:
            DeadlinePassed: no slot within ``timeout``.
            LoopBlocked: a thread-side wait on a thread whose running loop's tasks hold (or were granted) so many
                slots that the others cannot serve it. Such a wait cannot be detected in every case (a task of
                that loop queued ahead of it, granted later): a thread that runs an event loop should await the
                async path on these slots (``ajudge``, ``arerank``), not block on them."""
        # None in a thread without a loop (``held``); no RuntimeError raised and caught on every sync take
        hold = Hold(min(n, self.total), asyncio._get_running_loop(), slots=self)
        future = self._queue(hold, key)
        if future is not None and not future.done():
            try:
                granted = await self._granted(future, timeout, self.threads if threads is None else threads)
            except BaseException:  # cancelled, closed by the GC, or any failure: no slot held
                self._post((future, hold))  # leaves, or gives back the slots granted meanwhile
                raise
            if not granted and self._leave(future):
                raise DeadlinePassed
        try:
            yield hold
        finally:
            hold.ended = True
            hold.release_then(hold._give_back)

    def _queue(self, hold: Hold, key: int | None) -> concurrent.futures.Future | None:
        """Take ``hold``'s slots at once when they are free and nobody waits (None), else queue a waiter for them:
        its grant, set once they are granted."""
        with self._lock:
            if not self._waiters and self.free >= hold.n:
                self.free -= hold.n
                self._holds.add(hold)
                future = None
            else:
                future = concurrent.futures.Future()
                key = next(self._keys) if key is None else key
                heapq.heappush(self._waiters, (key, next(self._arrivals), hold, future))
                self._serve()
        if self._posted:
            self._serve_posted()
        return future

    async def _granted(self, future: concurrent.futures.Future, timeout: float | None, threads: bool) -> bool:
        """Whether the waiter's slots were granted within ``timeout`` seconds (a thread blocks here; a task
        suspends until the grant, set from any thread, wakes its loop). Every ``RECLAIM_EVERY`` seconds it
        reclaims the slots of holders whose loop has closed meanwhile (nobody else may arrive or release)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if threads:
            mine = asyncio._get_running_loop()

            def wait(seconds: float) -> bool:
                if mine is not None:
                    self._refuse_own_loop(mine, future)
                return bool(concurrent.futures.wait({future}, seconds).done)
        else:
            loop = asyncio.get_running_loop()
            woken = loop.create_future()

            def wake(_: concurrent.futures.Future) -> None:
                with contextlib.suppress(RuntimeError):  # the loop has closed: its waiter is gone
                    loop.call_soon_threadsafe(lambda: woken.done() or woken.set_result(None))

            future.add_done_callback(wake)

        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            seconds = self.RECLAIM_EVERY if left is None else min(left, self.RECLAIM_EVERY)
            if wait(seconds) if threads else await wait_done(woken, seconds):
                return True
            if left is not None and left <= seconds:
                return False
            self._reclaim()

    def refuse_own_loop(self, n: int) -> None:
        """Raise ``LoopBlocked`` when a thread-side wait for ``n`` slots (at most ``total``) on the calling thread
        could never be granted: the thread runs an event loop whose tasks hold so many slots (not released before
        that loop runs again) that fewer than ``n`` are left. ``take`` checks this for the thread that waits; a sync
        caller whose slots are waited for by other threads (``RemoteComparator``'s workers, which run no loop)
        checks it for itself before it blocks on them."""
        loop = asyncio._get_running_loop()
        if loop is not None:
            with self._lock:
                stuck = self._stuck(loop)
            self._serve_posted()
            self._blocked(min(n, self.total), stuck)

    def _refuse_own_loop(self, loop: asyncio.AbstractEventLoop, future: concurrent.futures.Future) -> None:
        """Raise ``LoopBlocked`` when the thread about to block for ``future`` runs ``loop`` and the slots held by
        that loop's tasks leave too few for this waiter (``_blocked``)."""
        with self._lock:
            waiter = next((hold for _, _, hold, grant in self._waiters if grant is future), None)
            stuck = self._stuck(loop)
        self._serve_posted()
        if waiter is not None and not future.done():
            self._blocked(waiter.n, stuck)

    def _stuck(self, loop: asyncio.AbstractEventLoop) -> int:
        """The slots held by ``loop``'s tasks that are not released before the loop runs again (called holding the
        lock): granted, their block not ended."""
        return sum(hold.n for hold in self._holds if hold.loop is loop and not hold.ended)

    def _blocked(self, n: int, stuck: int) -> None:
        """Raise ``LoopBlocked`` when ``stuck`` slots held by the waiting thread's own loop leave fewer than ``n``."""
        if self.total - stuck < n:
            raise LoopBlocked(
                f"a sync call on this thread waits for {n} of {self.total} call slots while tasks of the "
                f"event loop this thread runs hold {stuck}: they can give them back only when this thread returns "
                "to its loop. From a thread that runs an event loop, await the async call on the same guard "
                "(ajudge / arerank / RerankPool.rerank) instead of the sync one, or give the sync call a guard "
                "of its own")

    def _reclaim(self) -> None:
        """Serve the waiters, reclaiming the slots of ``orphaned`` holds if the first needs them."""
        with self._lock:
            self._serve()
        self._serve_posted()

    def _leave(self, future: concurrent.futures.Future) -> bool:
        """Take a waiter out of the queue, and serve those behind it that the free slots allow: False when its own
        slots were granted first."""
        with self._lock:
            left = future.cancel()
            self._serve()
        self._serve_posted()
        return left

    def _post(self, item: Hold | tuple[concurrent.futures.Future, Hold]) -> None:
        """Give a ``Hold``'s slots back, or take a waiter ``(grant, Hold)`` out of the queue (giving back its slots
        when they were granted first), and serve the waiters: now if the lock is free, else by its holder (this
        thread too, when the GC ran this inside a critical section), never waiting for it."""
        if self._lock.acquire(blocking=False):
            try:
                self._do(item)
                self._serve()
            finally:
                self._lock.release()
            if not self._posted:
                return
        else:
            self._posted.append(item)
        self._serve_posted()

    def _serve_posted(self) -> None:
        """Do the posted work if any and the lock is free (called after letting the lock go: work posted while it
        was held, after its holder's last look, is done here)."""
        while self._posted and self._lock.acquire(blocking=False):
            try:
                self._serve()
            finally:
                self._lock.release()

    def _serve(self) -> None:
        """Do the posted work, then grant the waiters their slots (called holding the lock), until no work is left
        (work posted by a GC finalizer meanwhile included)."""
        while True:
            while self._posted:
                self._do(self._posted.popleft())
            self._grant()
            if not self._posted:
                return

    def _do(self, item: Hold | tuple[concurrent.futures.Future, Hold]) -> None:
        """Do a posted release or leave (called holding the lock); a hold's slots go back once (not when
        reclaimed already)."""
        if isinstance(item, Hold):
            hold = item
        elif item[0].cancel():  # left before its slots were granted
            return
        else:
            hold = item[1]
        if hold in self._holds:
            self._holds.remove(hold)
            self.free += hold.n

    def _grant(self) -> None:
        """Grant the waiters their slots in order while enough are free (called holding the lock); a waiter that
        left, or whose loop has closed, is dropped. When the first cannot be served, the ``orphaned`` holds are
        reclaimed first."""
        while self._waiters:
            _, _, hold, future = self._waiters[0]
            if future.done() or (hold.orphaned and future.cancel()):
                heapq.heappop(self._waiters)
                continue
            if self.free < hold.n:
                for dead in [h for h in self._holds if h.orphaned]:
                    self._holds.remove(dead)
                    self.free += dead.n
                if self.free < hold.n:
                    return
            heapq.heappop(self._waiters)
            self.free -= hold.n
            self._holds.add(hold)
            future.set_result(None)


@contextlib.contextmanager
def held(take: contextlib.AbstractAsyncContextManager[Hold]) -> Iterator[Hold]:
    """A thread-side ``take`` (``FairSlots.take`` or ``CallGuard.slots`` with ``threads=True``) as a sync context
    manager: entered and left without an event loop (it never suspends)."""
    hold = run_blocking(take.__aenter__())
    try:
        yield hold
    finally:
        run_blocking(take.__aexit__(None, None, None))
