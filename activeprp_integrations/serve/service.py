"""``RerankService``: the requests of ``activeprp serve`` admitted, timed and reranked on one shared judge (no
framework).

- Admission: at most ``max_active`` requests are reranked at once and at most ``max_queue`` wait, first come first
  served; a request that finds the queue full is refused at once (``Overloaded``, HTTP 429) with no judge call.
- Deadlines: a request's time budget starts when it arrives, so its time in the queue counts; it is reranked with
  the time left, and one whose time runs out in the queue gets its prior order with no call.
- One judge ``Breaker`` for the whole service: while it is open a request is refused at once
  (``ComparatorUnavailable``, HTTP 503); it probes the judge on a timer and closes when the judge answers. A judge
  that answered none of its calls for its own timeout (each cut first, by a short time budget) is probed too.
- The reranks run in one ``activeprp_core.stream.RerankPool``: each request progresses on its own, its calls wait
  for the judge's slots oldest request first, and a batching comparator's calls merge across requests.
- A request whose task is cancelled (the HTTP layer cancels it when the client goes) sends no further call.
- Shutdown: ``drain(deadline)`` when the server's graceful shutdown begins refuses (``ShuttingDown``, HTTP 503) each
  request not yet reranked (queued, or arriving) whose time budget ends after the shutdown's deadline, the
  others are answered; a request whose body is still arriving is read on, and refused if it is still arriving just
  before the deadline (``arrival_refused``); ``stop`` once the requests have finished.
  ``draining`` says so from then on (``/ready``: 503).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

from activeprp_core import Candidate, ComparatorUnavailable, RerankResult, RerankSettings
from activeprp_core.comparators.base import CallGuard, as_comparator
from activeprp_core.engine import guard_cap
from activeprp_core.slots import wait_done, wait_for
from activeprp_core.stream import RerankPool

from . import DEFAULT_COOL_DOWN
from .breaker import Breaker

PROBE = ("probe: which passage mentions a probe?", Candidate("probe-a", "A passage about a probe."),
         Candidate("probe-b", "A passage about the weather."))
"""The breaker's probe: one judge call on this (query, first, second)."""
PROBE_TIMEOUT = 10.0
"""The least seconds the breaker's probe call is given, retries included (the breaker's ``cool_down``, or the
judge's own timeout of an attempt, ``attempt_timeout``, when that is longer: a judge answering within its timeout
passes); past it the probe failed. The judge's own timeout still bounds each attempt. The same figure as
``serve.DEFAULT_JUDGE_TIMEOUT`` today, not tied to it."""


class Overloaded(Exception):
    """The queue is full: the request was refused without a judge call; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ShuttingDown(RuntimeError):
    """The service is stopping (after ``RerankService.stop``, or ``drain`` for a request that would be answered
    after the shutdown's deadline): the request was refused without a judge call."""


class Admission:
    """At most ``max_active`` requests hold a slot at once and at most ``max_queue`` wait for one, first come
    first served (``enter`` / ``leave``); after ``cut``, a request that would end past the cut is refused."""

    def __init__(self, max_active: int, max_queue: int) -> None:
        self.max_active, self.max_queue = max_active, max_queue
        self.active = 0
        self._waiting: collections.deque[tuple[asyncio.Future, float]] = collections.deque()  # with their deadline
        self._cut = math.inf

    @property
    def cut_at(self) -> float:
        """The deadline of ``cut`` (the event loop's time; inf before it, or for a cut that waits for all)."""
        return self._cut

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def refusal(self, retry_after: Callable[[], int]) -> Overloaded | None:
        """The ``Overloaded`` a request arriving now would get (None: it would be admitted or queued)."""
        if self.active < self.max_active or len(self._waiting) < self.max_queue:
            return None
        return Overloaded(f"{self.active} requests are being reranked and {len(self._waiting)} are waiting, this "
                          "server's caps (--max-active, --max-queue): retry later", retry_after())

    async def enter(self, timeout: float | None, retry_after: Callable[[], int]) -> bool:
        """Take a slot, waiting in the queue at most ``timeout`` seconds (None = as long as it takes); False
        when the time ran out in the queue (no slot held).

        Raises:
            Overloaded: the queue is full. ShuttingDown: after ``cut``, the request's time (``timeout``) ends past
            the cut, on arrival or while it waits.
        """
        loop = asyncio.get_running_loop()
        deadline = math.inf if timeout is None else loop.time() + timeout
        if deadline > self._cut:
            raise _cut_off()
        if self.active < self.max_active and not self._waiting:
            self.active += 1
            return True
        refusal = self.refusal(retry_after)
        if refusal is not None:
            raise refusal
        entry = (loop.create_future(), deadline)
        self._waiting.append(entry)
        future = entry[0]
        try:
            done = await wait_done(future, timeout)
        except BaseException:  # cancelled (its client has gone), or any failure: it leaves the queue
            if _handed(future):  # the slot was handed over meanwhile: pass it on
                self.leave()
            else:
                self._forget(entry)
            raise
        if not done:
            self._forget(entry)
            return False
        future.result()  # ShuttingDown: refused by ``cut`` while it waited (no slot held)
        return True

    def cut(self, deadline: float) -> None:
        """From now on refuse (``ShuttingDown``) every request that would wait or start with a time that ends
        past ``deadline`` (the event loop's time): those waiting now at once, those arriving in ``enter``. A
        request already holding a slot runs on."""
        self._cut = deadline
        for entry in [e for e in self._waiting if e[1] > deadline]:
            self._waiting.remove(entry)
            if not entry[0].done():
                entry[0].set_exception(_cut_off())

    def _forget(self, entry: tuple[asyncio.Future, float]) -> None:
        """A request that stopped waiting in the queue: out of it."""
        entry[0].cancel()
        with contextlib.suppress(ValueError):
            self._waiting.remove(entry)

    def leave(self) -> None:
        """Give the slot back: to the first request waiting, if any."""
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.active -= 1


def _handed(future: asyncio.Future) -> bool:
    """Whether a slot was handed to the request waiting on ``future`` (``leave``), rather than refused (``cut``)."""
    return future.done() and not future.cancelled() and future.exception() is None


ARRIVAL_MARGIN = 0.5
"""Seconds before a shutdown's deadline at which a body still arriving is cut and answered 503 (``arrival_refused``):
so that the answer is sent and its connection closed before uvicorn cancels what is left (logging an ERROR)."""


def _cut_off() -> ShuttingDown:
    return ShuttingDown("this server is shutting down and could not answer this request before its shutdown's "
                        "deadline (--shutdown-timeout), which the request's time budget passes: no judge call was "
                        "sent; retry, on another replica if there is one")


class RerankService:
    """Reranks the requests of many concurrent callers on one judge (see the module docstring).

    Args:
        comparator: the judge (any ``Comparator`` / object with ``compare``); not closed here.
        settings: the ``RerankSettings`` of every request; its ``time_budget`` counts from a request's arrival (its
            time in the queue counts), its ``max_concurrency`` (else the comparator's) caps the calls in flight
            across requests, its ``max_consecutive_failures`` opens the breaker.
        max_active, max_queue: requests reranked at once, requests waiting (ints >= 1 and >= 0).
        cool_down: seconds the breaker stays open before a probe (> 0).
        on_call: called with ``ok`` and ``retries`` for every call that reached the judge (``Breaker``), for
            metrics.

    Use ``await rerank(...)`` from coroutines of one event loop; ``await start()`` at start-up (else the first
    request starts the probes), ``drain(deadline)`` when the server's shutdown begins and ``await stop()`` once the
    requests have finished.
    """

    def __init__(self, comparator: Any, settings: RerankSettings, *, max_active: int, max_queue: int,
                 cool_down: float = DEFAULT_COOL_DOWN,
                 on_call: Callable[[bool | None, int], None] | None = None) -> None:
        judge = as_comparator(comparator)
        timeout = getattr(judge, "attempt_timeout", None)  # a remote judge's timeout of one attempt
        self.probe_timeout = max(cool_down, PROBE_TIMEOUT, timeout or 0.0)
        # the breaker probes a judge that answered none of its calls for as long as one attempt may take (a judge
        # with no timeout of its own: as long as the probe is given)
        self.breaker = Breaker(guard_cap(judge, settings), settings.max_consecutive_failures, cool_down, self._probe,
                               on_call, silence=timeout or self.probe_timeout)
        self.pool = RerankPool(judge, settings, self.breaker)
        self.admission = Admission(max_active, max_queue)
        self.mean_active_s = 1.0  # running mean of the seconds a request holds its slot (for Retry-After)
        self._watch: asyncio.Task | None = None
        self._stopping = self._draining = False
        self._drain_waiters: set[asyncio.Future] = set()  # of arrival_refused, woken by drain

    @property
    def settings(self) -> RerankSettings:
        return self.pool.settings

    @property
    def draining(self) -> bool:
        """Whether the server's shutdown has begun (``drain``, or ``stop``): ``/ready`` answers 503 from then on."""
        return self._draining or self._stopping

    async def start(self) -> None:
        """Start the breaker's probes (``Breaker.watch``) on the running loop, and open the comparator's client
        for it with an empty batch (no call is sent): an endpoint comparator imports its client library on first
        use, which would otherwise hold the event loop (~0.5 s for ``openai``) while the first requests arrive."""
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self.breaker.watch())
            with contextlib.suppress(Exception):  # a warm-up only: the first request meets any real error
                await self.pool.judge.ajudge_batch([], guard=CallGuard(1, None))

    async def rerank(self, query: str, candidates: Sequence[Candidate], **own: Any) -> RerankResult:
        """Rerank one request (``own``: its settings among ``activeprp_core.settings.PER_REQUEST``); its
        ``time_budget`` (default: the service's) counts from now, the wait in the queue included (no call once it
        has run out in the queue).

        Raises:
            Overloaded: the queue is full. ComparatorUnavailable: the breaker is open (or opened during the
            request). TypeError / ValueError: bad settings. Another ``ComparatorError`` as ``arerank`` raises it.
            ShuttingDown (a RuntimeError): after ``stop``, or after ``drain`` when its time budget ends past the
            shutdown's deadline.
        """
        if self._stopping:
            raise ShuttingDown("the rerank service is shutting down")
        await self.start()
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        seconds = own.pop("time_budget", self.settings.time_budget)
        deadline = None if seconds is None else arrived + seconds
        own["time_budget"] = seconds  # counted from the arrival (``started``): the wait in the queue counts
        self._refuse_while_open()
        if not await self.admission.enter(None if deadline is None else deadline - arrived, self.retry_after):
            return await self.pool.rerank(query, candidates, own, started=arrived)  # its time ran out: no call
        started = loop.time()
        try:
            self._refuse_while_open()
            return await self.pool.rerank(query, candidates, own, started=arrived)
        finally:
            self.admission.leave()
            self.mean_active_s += 0.1 * (loop.time() - started - self.mean_active_s)

    def overloaded(self) -> Overloaded | None:
        """The ``Overloaded`` a request arriving now would get (None: there is room)."""
        return self.admission.refusal(self.retry_after)

    def retry_after(self) -> int:
        """Whole seconds after which a refused request may find room: about the time for the queue ahead of it
        to move up (at least 1)."""
        waves = (self.admission.queued + 1) / self.admission.max_active
        return max(1, math.ceil(self.mean_active_s * waves))

    def _refuse_while_open(self) -> None:
        error = self.breaker.error
        if error is not None and self.settings.on_failure == "raise":
            why = error.message.removeprefix("circuit breaker open: ")  # the breaker's own error says so already
            raise ComparatorUnavailable(f"the judge is unavailable, no call sent (circuit breaker open: "
                                        f"{why}); it is probed again in {self.breaker.retry_after()} s",
                                        status_code=error.status_code, breaker="shared",
                                        in_a_row=getattr(error, "in_a_row", None))

    async def _probe(self) -> bool:
        query, first, second = PROBE
        call = self.pool.judge.aguarded_judge(query, [(first, second)], self.breaker.probe_guard)
        answers = await wait_for(call, self.probe_timeout)
        return answers[0].prob is not None

    def drain(self, deadline: float | None) -> None:
        """The server's graceful shutdown began; it cancels the requests still running at ``deadline`` (the event
        loop's time; None: it waits for them all). Every request not yet reranked (waiting in the queue now, or
        arriving later) whose time budget ends after ``deadline`` is refused with ``ShuttingDown`` at once, with no
        judge call; the others are answered as usual, by the end of their time budget. ``draining`` is True from
        now on."""
        self._draining = True
        if deadline is not None:
            self.admission.cut(deadline)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def arrival_refused(self) -> ShuttingDown:
        """Wait until ``ARRIVAL_MARGIN`` seconds before the shutdown's deadline (``drain``'s), and return the
        ``ShuttingDown`` to refuse a request whose body is still arriving then with. Until then its body is read
        on: its own time budget, in the body, decides once it is read (``Admission.enter``); judging it by the
        service's time budget (the most it may ask for) refused at once uploads whose own budget fitted. Never
        returns while no shutdown has begun, nor for one that waits for every request (no deadline)."""
        loop = asyncio.get_running_loop()
        if not self._draining:
            waiter = loop.create_future()
            self._drain_waiters.add(waiter)
            try:
                await waiter
            finally:
                self._drain_waiters.discard(waiter)
        cut = self.admission.cut_at
        if math.isinf(cut):
            await loop.create_future()  # never done: this shutdown waits for every request
        await asyncio.sleep(max(0.0, cut - ARRIVAL_MARGIN - loop.time()))
        return _cut_off()

    async def stop(self) -> None:
        """Refuse new requests, stop the probes and the pool (the requests in flight are the server's to let
        finish first)."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await self.pool.aclose()
