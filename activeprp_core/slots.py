"""``FairSlots``: the weighted semaphore that caps calls in flight, for a comparator's ``CallGuard`` (waiters in
arrival order) and for ``RerankPool``'s requests (oldest request first)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from typing import Any

from .budget import check_count


class DeadlinePassed(Exception):
    """Raised inside a comparator when a query's deadline passed before a call (or a slot for it) could go out;
    the comparator turns it into ``Judgment(None, cut=...)``, it never leaves the comparator."""


class FairSlots:
    """A weighted semaphore of one event loop whose waiters are served in ``(key, arrival)`` order: a lower
    ``key`` (an older request) goes first, and a waiter never overtakes one ahead of it.

    Args:
        total: the slots (int >= 1).
    """

    def __init__(self, total: int) -> None:
        self.total = self.free = check_count(total, "total", minimum=1)
        self._waiters: list[tuple[Any, int, int, asyncio.Future]] = []
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def take(self, n: int, key: Any = 0, timeout: float | None = None):
        """Hold ``min(n, total)`` slots; waits while others with a lower key (or the same key, earlier) wait, at
        most ``timeout`` seconds (then ``DeadlinePassed``, holding nothing)."""
        n = min(n, self.total)
        if self._waiters or self.free < n:
            future = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (key, next(self._arrivals), n, future))
            try:
                await asyncio.wait_for(asyncio.shield(future), timeout)
            except (asyncio.TimeoutError, asyncio.CancelledError) as stop:
                if not future.done():
                    future.cancel()  # left waiting: skipped at the next release
                elif isinstance(stop, asyncio.CancelledError):
                    self._release(n)  # granted as it was cancelled: give the slots back
                if isinstance(stop, asyncio.CancelledError):
                    raise
                if not future.done() or future.cancelled():
                    raise DeadlinePassed from None
        else:
            self.free -= n
        try:
            yield
        finally:
            self._release(n)

    def _release(self, n: int) -> None:
        self.free += n
        while self._waiters:
            _, _, want, future = self._waiters[0]
            if future.done():  # its holder was cancelled while waiting
                heapq.heappop(self._waiters)
                continue
            if self.free < want:
                return
            heapq.heappop(self._waiters)
            self.free -= want
            future.set_result(None)
