"""``RerankService``: one long-lived ``arerank_stream`` that every HTTP request of the server feeds (no framework).

Requests go into an ``asyncio.Queue``; one driver task reads them into ``activeprp_core.stream.arerank_stream``, so
the prompts of all requests in progress share the comparator's batched calls (a local model fills its batches
across users) and one ``CallGuard`` (one cap on calls in flight to a remote endpoint, one circuit breaker). Each
request gets its own ``RerankResult``, equal to ``arerank`` of it alone with the same settings and seed.

When the endpoint is dead (an auth error, the breaker open) the stream ends with that error: every request in
progress fails with it, and the driver starts a fresh stream (a fresh breaker) for the requests still queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from activeprp_core import Candidate, RerankFailure, RerankResult
from activeprp_core.stream import arerank_stream

_END = None  # what ``stop`` puts in the queue


class RerankService:
    """Reranks the requests of many concurrent callers through one shared ``arerank_stream``.

    Args:
        comparator: the judge (any ``Comparator`` / object with ``compare``); not closed here.
        settings: ``arerank_stream`` keyword arguments shared by every request (ranker, oracle, budget, top_k,
            seed, max_rounds, on_failure, max_concurrency, max_consecutive_failures).
        max_active: the most requests reranked at once (the others wait in the queue).

    Use ``await rerank(...)`` from coroutines of one event loop; ``await stop()`` once at shutdown.
    """

    def __init__(self, comparator: Any, settings: dict[str, Any], max_active: int) -> None:
        self.comparator, self.settings, self.max_active = comparator, dict(settings), max_active
        self._queue: asyncio.Queue | None = None
        self._driver: asyncio.Task | None = None
        self._stopping = False

    async def rerank(self, query: str, candidates: Sequence[Candidate], **own: Any) -> RerankResult:
        """Rerank one request (``own``: its settings among ``activeprp_core.many.PER_REQUEST``).

        Raises:
            the request's own failure (a ``TypeError``/``ValueError`` for bad settings, a ``ComparatorError``),
            or the error that stopped every request in progress (a dead endpoint). ``RuntimeError`` after ``stop``.
        """
        if self._stopping:
            raise RuntimeError("the rerank service is shutting down")
        if self._driver is None:
            self._queue = asyncio.Queue()
            self._driver = asyncio.get_running_loop().create_task(self._drive())
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(((query, candidates, own), future))
        return await future

    async def stop(self) -> None:
        """Let the requests already accepted finish, then end the driver."""
        self._stopping = True
        if self._driver is not None:
            self._queue.put_nowait(_END)
            await self._driver

    async def _drive(self) -> None:
        while True:
            waiting: dict[int, asyncio.Future] = {}
            try:
                async for index, item in arerank_stream(self._requests(waiting), comparator=self.comparator,
                                                        max_active=self.max_active, **self.settings):
                    future = waiting.pop(index)
                    if future.done():  # its caller went away
                        continue
                    if isinstance(item, RerankFailure):
                        future.set_exception(item.error)
                    else:
                        future.set_result(item)
                return  # the input ended: stop() was called
            except Exception as error:  # the endpoint is dead: fail what is in progress, start afresh
                for future in waiting.values():
                    if not future.done():
                        future.set_exception(error)
                if self._stopping and self._queue.empty():
                    return

    async def _requests(self, waiting: dict[int, asyncio.Future]) -> AsyncIterator[tuple]:
        index = 0
        while True:
            entry = await self._queue.get()
            if entry is _END:
                return
            request, future = entry
            if future.done():  # cancelled before it started
                continue
            waiting[index] = future
            index += 1
            yield request

