"""``FairSlots``: the weighted semaphore that caps calls in flight, for a comparator's ``CallGuard`` (waiters in
arrival order; the tasks of event loops and the threads of the sync path, under one count) and for ``RerankPool``'s
requests (oldest request first)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import itertools
import threading
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


class DeadlinePassed(Exception):
    """Raised inside a comparator when a query's deadline passed before a call (or a slot for it) could go out;
    the comparator turns it into ``Judgment(None, cut=...)``, it never leaves the comparator."""


Returned = asyncio.Future | concurrent.futures.Future
"""A future that says when a call has returned: an event loop's, or one a thread sets (the sync path)."""


class Hold:
    """What ``FairSlots.take`` yields: its slots are released when the ``async with`` block ends, or, after
    ``keep_until(future)``, once ``future`` is done if that is later (a call that runs on in a thread after the
    wait for it was cut still occupies the endpoint)."""

    def __init__(self) -> None:
        self.until: Returned | None = None

    def keep_until(self, future: Returned) -> None:
        self.until = future

    def release_then(self, release: Any) -> None:
        """``release()`` now, or once the future kept is done."""
        if self.until is None or self.until.done():
            release()
        else:
            self.until.add_done_callback(lambda _: release())


class FairSlots:
    """A weighted semaphore whose waiters are served in ``(key, arrival)`` order: a lower ``key`` (an older request)
    goes first, and a waiter never overtakes one ahead of it. One count for every waiter: the tasks of any event
    loop and the threads of the sync path wait in one queue, so ``total`` caps them all together.

    Args:
        total: the slots (int >= 1).
        threads: how ``take`` waits when its call does not say: by blocking the thread (True: the sync path; it
            never suspends, so it runs under ``blocking.run_blocking``, see ``held``), or by suspending the running
            task (False). Slots may be released from any thread (a call's own, when it returns).
    """

    def __init__(self, total: int, threads: bool = False) -> None:
        self.total = self.free = check_count(total, "total", minimum=1)
        self.threads = threads
        # a waiter's grant is a thread-safe future, set or cancelled only under the lock: a task cancelled just as
        # its slots are granted finds them granted (and gives them back), never lost between two threads
        self._waiters: list[tuple[Any, int, int, concurrent.futures.Future]] = []
        self._arrivals = itertools.count()
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        """The waiters queued for slots now (tasks and threads)."""
        with self._lock:
            return sum(not future.done() for _, _, _, future in self._waiters)

    @contextlib.asynccontextmanager
    async def take(self, n: int, key: Any = 0, timeout: float | None = None, threads: bool | None = None):
        """Hold ``min(n, total)`` slots (yields a ``Hold``); waits while others with a lower key (or the same key,
        earlier) wait, at most ``timeout`` seconds (then ``DeadlinePassed``, holding nothing). ``threads``: wait by
        blocking the thread (the sync path: this never suspends) rather than suspending the task; None: the
        instance's ``threads``. A thread that runs an event loop must not block here while that loop's tasks hold
        slots: they could not give them back."""
        n = min(n, self.total)
        future = self._queue(n, key)
        if future is not None:
            try:
                granted = await self._granted(future, timeout, self.threads if threads is None else threads)
            except BaseException:  # cancelled, or any failure: no slot held
                if not self._leave(future):
                    self._release(n)  # granted meanwhile: give the slots back
                raise
            if not granted and self._leave(future):
                raise DeadlinePassed
        hold = Hold()
        try:
            yield hold
        finally:
            hold.release_then(lambda: self._release(n))

    def _queue(self, n: int, key: Any) -> concurrent.futures.Future | None:
        """Take ``n`` slots now (None), or queue a waiter for them: its grant, set once they are granted."""
        with self._lock:
            if not self._waiters and self.free >= n:
                self.free -= n
                return None
            future: concurrent.futures.Future = concurrent.futures.Future()
            heapq.heappush(self._waiters, (key, next(self._arrivals), n, future))
            return future

    @staticmethod
    async def _granted(future: concurrent.futures.Future, timeout: float | None, threads: bool) -> bool:
        """Whether the waiter's slots were granted within ``timeout`` seconds (a thread blocks here; a task
        suspends until the grant, set from any thread, wakes its loop)."""
        if threads:
            return bool(concurrent.futures.wait({future}, timeout).done)
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake(_: concurrent.futures.Future) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: its waiter is gone
                loop.call_soon_threadsafe(lambda: woken.done() or woken.set_result(None))

        future.add_done_callback(wake)
        return await wait_done(woken, timeout)

    def _leave(self, future: concurrent.futures.Future) -> bool:
        """Take a waiter out of the queue (skipped at the next release): False when its slots were granted first."""
        with self._lock:
            return future.cancel()

    def _release(self, n: int) -> None:
        with self._lock:
            self.free += n
            while self._waiters:
                _, _, want, future = self._waiters[0]
                if future.done():  # its holder left while waiting
                    heapq.heappop(self._waiters)
                    continue
                if self.free < want:
                    return
                heapq.heappop(self._waiters)
                self.free -= want
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
