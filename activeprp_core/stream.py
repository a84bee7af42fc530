"""``arerank_stream``: the service form of ``arerank_many`` (``activeprp serve``): requests from an async source
join the queries in progress as they arrive, may carry their own budget / round cap / top-K / seed
(``many.PER_REQUEST``), and come out as they finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from .comparators.base import Comparator, SupportsCompare
from .many import DEFAULT_MAX_ACTIVE, RerankFailure, _answer, _pump, _Window, _window
from .settings import RerankSettings, takes_settings
from .types import RerankResult


class _Arrivals:
    """Reads requests from an async source into a window, waiting for one only when no query is in progress."""

    def __init__(self, requests: AsyncIterable[tuple], window: _Window) -> None:
        self.source, self.window, self.index, self.reading = aiter(requests), window, 0, None

    async def admit(self) -> None:
        """Start the requests at hand, up to the window's ``max_active``; a request still on its way while
        queries are in progress joins at a later step."""
        window = self.window
        while window.input_left and len(window.items) < window.max_active:
            if self.reading is None:
                self.reading = asyncio.ensure_future(anext(self.source))
                await asyncio.sleep(0)  # one turn of the loop: a source with a request at hand hands it now
            if not self.reading.done() and window.items:
                return
            await asyncio.wait([self.reading])
            try:
                request = self.reading.result()
            except StopAsyncIteration:
                window.input_left = False
                return
            finally:
                self.reading = None
            window.items[self.index] = window._start(self.index, request)
            self.index += 1

    def cancel(self) -> None:
        if self.reading is not None:
            self.reading.cancel()


@takes_settings
async def arerank_stream(requests: AsyncIterable[tuple], settings: RerankSettings | None = None, *,
                         comparator: Comparator | SupportsCompare, max_active: int = DEFAULT_MAX_ACTIVE,
                         **options: Any) -> AsyncIterator[tuple[int, RerankResult | RerankFailure]]:
    """``arerank_many`` for a service: requests come from an async iterable (e.g. fed by an ``asyncio.Queue``)
    and join the queries in progress as they arrive, and each result comes out as soon as it is finished.

    Requests are read while queries are in progress without waiting for them: a request that arrives during a
    step joins at the next step (its calls merge with the others'); the stream waits for a request only when
    none is in progress. Same arguments, per-query results and failures as ``arerank_many``, except that no
    running record of the judge is carried from one request to the next (the confidence gate and ``adaptive``
    read the request's own answers), so every request's result equals ``arerank`` of it alone, whatever arrived
    before or beside it; requests may carry their own settings (``PER_REQUEST``).

    Yields:
        ``(index, RerankResult | RerankFailure)`` as each request finishes (``index``: its 0-based position in
        the input), not in input order; ends when the input ends and every request has finished.

    Raises:
        as ``arerank_many``: a dead endpoint (with ``on_failure="raise"``) raises out of the stream, which ends.
    """
    # carry_judge=False: each request reads only its own answers, so no result depends on other callers' traffic
    judge, window = _window((), settings, options, comparator, max_active, False, carry_judge=False)
    window.input_left = True
    arrivals = _Arrivals(requests, window)
    try:
        while not window.finished:
            await arrivals.admit()
            for item in window.finished_items():
                yield item
            step = window.step()
            if step:
                async for _ in _pump(_answer(window, step), lambda it: judge.ajudge_batch(it.items, guard=it.guard)):
                    pass  # _answer yields only the calls to make
    finally:
        arrivals.cancel()
        window.close()
