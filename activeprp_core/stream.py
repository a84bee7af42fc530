"""Many concurrent reranks on one comparator, each progressing on its own: ``RerankPool`` (the engine of
``activeprp serve``) and ``arerank_stream`` (its async-iterator form).

``RerankPool.rerank`` reranks one request in the calling task: it drives the request's own ``Reranking`` and
sends each of its rounds to the comparator as soon as the round is planned, so a request never waits for the
rounds of the others (no shared lockstep step). What the requests share:

- one ``CallGuard``: the cap on calls in flight and the circuit breaker. Calls wait for a slot oldest request
  first, so under load the requests that came first finish first, and the requests that came later wait for
  slots rather than slow everyone down;
- for a comparator that batches (``max_batch_size`` set, e.g. a local model), one merged ``ajudge_batch`` at a
  time: the rounds that requests hand in while a merged call runs go out together in the next one (continuous
  batching), oldest request first, so the model's forward passes fill across requests.

Each request reads only its own answers (no running record of the judge is carried across requests), so its
result equals ``arerank`` of it alone with the same settings and seed, whatever ran beside it. A request's
``time_budget`` is enforced as ``arerank`` enforces it (``activeprp_core.engine``): its calls read its deadline
from their guard, a round still running at the deadline is cut, a round waiting for a merged call when its
deadline passes is not sent, and one in a merged call that runs on for other requests is cut at its deadline
(``DEADLINE_GRACE`` after it; the calls the comparator said it sent of it, ``CallGuard.sending``, count as cut, the
others as never sent; all of them count as cut when it says nothing); its
clock may start before the rerank (``RerankPool.rerank(started=...)``, e.g. at its arrival in a service's queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import heapq
import itertools
import math
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .budget import check_count
from .comparators.base import (
    CallGuard,
    Comparator,
    Item,
    RequestGuard,
    SupportsCompare,
    as_comparator,
    cut_in_flight,
    run_error,
    spent_if_raises,
    stops_on_refusal,
    unsent,
)
from .engine import DEADLINE_GRACE, Batch, Reranking, bounded, drive, exchange, guard_for
from .errors import ComparatorAuthError
from .judging import RoundLatency, floors_by_query
from .many import DEFAULT_MAX_ACTIVE, RerankFailure, Resent, check_own, request_query, sent_shares, split_request
from .settings import RerankSettings, takes_settings
from .slots import wait_done
from .types import UNSENT, Candidate, Judgment, RerankResult, to_judgments

MERGE_PASSES = 8
"""A merged call of a batching comparator takes the waiting rounds, oldest request first, until it holds this
many of the comparator's batches (``max_batch_size`` prompts each): enough to fill its forward passes, few enough
that a request's next round waits for at most about this many passes."""


MERGE_TURNS = 4
"""Turns of the event loop a merged call waits for more rounds, while they keep coming (a request answered by the
last merged call plans its next round within a turn or two)."""


@dataclass(eq=False)
class _Part:
    """One request's round waiting for a merged call: its items, its deadline (loop time, None = none), the
    future of its answers, whether a merged call has taken it, whether its request stopped waiting for that
    call at its deadline (``cut``: its calls were counted then, the call's answers for it are discarded), and what
    a merged call that failed had sent of it before it is asked again on its own (``resent``)."""

    items: list[Item]
    guard: RequestGuard
    deadline: float | None
    future: asyncio.Future
    taken: bool = False
    cut: bool = False
    resent: Resent | None = None


class _Merger:
    """Continuous batching for a comparator that batches: one merged ``ajudge_batch`` at a time (see the module
    docstring and ``MERGE_PASSES``), each of its queries cut at its own deadline (``CallGuard.deadlines``); a
    round whose deadline passes before a merged call takes it is not sent; a merged call that fails (not fatally),
    its answers included (``to_judgments``: ``InvalidAnswer``), is asked again request by request, so one
    request's bad prompt fails that request only. Every round a merged call took gets its answers or an error."""

    def __init__(self, pool: RerankPool) -> None:
        self.pool = pool
        self.limit = MERGE_PASSES * pool.judge.max_batch_size
        self.waiting: list[tuple[Any, int, _Part]] = []
        self._arrivals = itertools.count()
        self.running: asyncio.Task | None = None
        self.current: tuple[RequestGuard, list[_Part]] | None = None  # the merged call running: its guard, parts

    async def ask(self, items: list[Item], guard: RequestGuard, deadline: float | None) -> list[Judgment]:
        loop = asyncio.get_running_loop()
        part = _Part(items, guard, deadline, loop.create_future())
        heapq.heappush(self.waiting, (guard.key, next(self._arrivals), part))
        if self.running is None:
            self.running = loop.create_task(self._run())
        if deadline is None:
            return await part.future  # cancelled: dropped if not sent yet, else its answers are discarded
        left = max(0.0, deadline - loop.time()) + DEADLINE_GRACE
        try:
            if await wait_done(part.future, left):
                return part.future.result()
            if part.taken:  # sent in a merged call still running for other requests: cut, as arerank cuts a round
                part.cut = True
                sent = self._sent(part)
                answers = [cut_in_flight()] * sent + [unsent()] * (len(items) - sent)
                if part.resent is not None:
                    answers = part.resent.answers(answers)
                guard.completed += sum(j.cut != UNSENT for j in answers)
                return answers
            part.future.cancel()
            return [unsent()] * len(items)
        finally:
            part.future.cancel()  # cancelled or done: a merged call that has not taken it drops it

    def _sent(self, part: _Part) -> int:
        """How many of ``part``'s calls the merged call running has sent so far: its query's share of what the
        comparator said it sent (``many.sent_shares``); all of them when it said nothing (unknown); none when
        the call is not its (it waits to be asked again on its own, ``resent``)."""
        merged, parts = self.current or (None, [])
        if merged is None or part not in parts:
            return 0
        sends = merged.sent_counts()
        if not sends:
            return len(part.items)
        return _shares(parts, sum(sends.values()), sends)[parts.index(part)]

    async def _run(self) -> None:
        parts: list[_Part] = []
        try:
            while self.waiting:
                seen = -1
                for _ in range(MERGE_TURNS):  # rounds handed in at about the same moment go together
                    if len(self.waiting) == seen:
                        break
                    seen = len(self.waiting)
                    await asyncio.sleep(0)
                parts, size = [], 0
                while self.waiting and size < self.limit:
                    part = heapq.heappop(self.waiting)[2]
                    if not part.future.done():
                        part.taken = True
                        parts.append(part)
                        size += len(part.items)
                if parts:
                    try:
                        await self._send(parts)
                    except Exception as error:  # a bug past the comparator's call: its requests fail, never hang
                        _fail(parts, error)
                parts, self.current = [], None
        finally:  # cancelled (``RerankPool.aclose``): the rounds taken or waiting are cancelled, none left unset
            self.running = None
            for part in [*parts, *(entry[2] for entry in self.waiting)]:
                part.future.cancel()

    async def _send(self, parts: list[_Part]) -> None:
        loop = asyncio.get_running_loop()
        merged = RequestGuard(self.pool.guard, self.pool.slots, parts[0].guard.key, loop.time,
                              latency=self.pool.latency, merged=True)
        merged.deadlines = _latest_deadlines(parts)
        merged.floors = floors_by_query((p.items[0][0], p.guard.latency) for p in parts if p.items)
        merged.sends = {}  # what the comparator sends of each query: each request is billed what it sent
        self.current = merged, parts
        lefts = [None if p.deadline is None else p.deadline - loop.time() for p in parts]
        items = [it for p in parts for it in p.items]
        try:
            with spent_if_raises(self.pool.judge, merged, len(items), asynchronous=True):
                judgments = to_judgments(await bounded(self.pool.judge.ajudge_batch(items, guard=merged),
                                                       None if None in lefts else max(lefts), len(items), merged,
                                                       records_sent=False), len(items))
        except Exception as error:
            if len(parts) > 1 and not self.pool.fatal(error):
                retries = merged.retries  # billed once, on the first part still waiting that sent calls
                for part, calls in zip(parts, _shares(parts, merged.completed, merged.sent_counts())):
                    if not part.future.done():  # one cut at its deadline was billed then; one gone is not asked
                        part.resent = Resent(calls, retries if calls else 0, error)
                        retries = 0 if calls else retries
                for part in parts:
                    if part.resent is not None and not part.future.done():
                        await self._send([part])
                return
            _credit(parts, merged.completed, merged.sent_counts(), merged.retries)
            _fail(parts, error)
            return
        _credit(parts, merged.completed, merged.sent_counts())
        start = 0
        for part in parts:
            answers = judgments[start : start + len(part.items)]
            if not part.future.done():
                part.future.set_result(answers if part.resent is None else part.resent.answers(answers))
            start += len(part.items)


def _latest_deadlines(parts: list[_Part]) -> dict[str, float]:
    """The deadline of each query text of a merged call, read by the comparator (``CallGuard.deadlines``): the
    latest of the parts with that text, none when one of them has none. Requests with the same text may have
    different deadlines; one whose deadline comes first stops waiting for the call then (``_Merger.ask``), so
    the comparator must not cut the others' items at it."""
    latest: dict[str, float | None] = {}
    for p in parts:
        if p.items:
            query, seen = p.items[0][0], latest.get(p.items[0][0], -math.inf)
            latest[query] = None if p.deadline is None or seen is None else max(seen, p.deadline)
    return {query: at for query, at in latest.items() if at is not None}


def _fail(parts: list[_Part], error: Exception) -> None:
    """Fail the parts whose requests still wait (``_Merger.ask`` raises ``error`` in the first, a copy of it in each
    other: ``own_copy``): each request sets its own accounting on what it raises (``Reranking.fail``)."""
    first = True
    for part in parts:
        if not part.future.done():
            part.future.set_exception(error if first else own_copy(error))
            first = False


def own_copy(error: Exception) -> Exception:
    """A shallow copy of ``error`` (its type, message and attributes) with its cause, context and traceback, for
    one of several requests a single failure fails: one object raised in each would carry the accounting of
    whichever request set it last (``activeprp serve`` told each client another request's calls). ``error``
    itself when it cannot be copied (an exception whose ``__init__`` its ``args`` do not fit)."""
    try:
        copied = copy.copy(error)
    except Exception:
        return error
    copied.__cause__, copied.__context__ = error.__cause__, error.__context__
    copied.__suppress_context__ = error.__suppress_context__
    return copied.with_traceback(error.__traceback__)


def _shares(parts: list[_Part], sent: int, sends: dict[str | None, int] | None) -> list[int]:
    """The ``sent`` calls of a merged call per part: what each part's query sent (``many.sent_shares``)."""
    return sent_shares(((p.items[0][0] if p.items else "", len(p.items)) for p in parts), sent, sends)


def _credit(parts: list[_Part], sent: int, sends: dict[str | None, int] | None, retries: int = 0) -> None:
    """Count the ``sent`` calls of a merged call to its parts' requests, each what its query sent (``sends``, else
    the first ``sent`` in order: ``many.sent_shares``), and its ``retries`` to the first not cut that sent calls (a
    part cut at its request's deadline counted its calls then; ``Reranking.fail`` bills retries on failed calls); a
    part asked again on its own after a merged call failed is counted that call's sending too (``Resent.failed``)."""
    if len(parts) == 1 and parts[0].resent is not None:
        sent, retries = parts[0].resent.failed(sent, retries)
    for part, calls in zip(parts, _shares(parts, sent, sends)):
        if not part.cut and calls:
            part.guard.completed += calls
            part.guard.retries, retries = part.guard.retries + retries, 0


class RerankPool:
    """Reranks the requests of concurrent callers on one comparator (see the module docstring).

    Args:
        comparator: the judge (a ``Comparator`` or an object with ``compare``); not closed here.
        settings: the ``RerankSettings`` of every request (a request may replace ``PER_REQUEST`` fields).
        guard: the shared ``CallGuard`` (default: ``guard_for`` the comparator and settings, a breaker that
            stays open once opened). Its ``max_concurrency`` caps the calls in flight across requests, and across
            whatever else uses the guard (another pool, a direct call): its slots (``fair_slots``) are the pool's,
            and a request's key is its arrival on them (``FairSlots.next_key``), so the oldest request or direct
            call waiting goes first, whichever pool it came from. A direct sync call (``judge``) on the thread
            that runs the pool's loop cannot wait for slots the pool's tasks hold (they give them back only when
            that thread returns to its loop): it raises ``slots.LoopBlocked`` where that is certain and may hang
            otherwise (a task of that loop queued ahead of it); await the async call (``ajudge``) there.

    The requests share one record of round latencies (``judging.RoundLatency``), from which a request with a
    ``time_budget`` plans the rounds that fit. Use from coroutines of one event loop; ``await aclose()`` when done
    (cancels a merged call in flight).

    Raises:
        TypeError / ValueError: bad settings or comparator.
    """

    def __init__(self, comparator: Comparator | SupportsCompare, settings: RerankSettings,
                 guard: CallGuard | None = None) -> None:
        self.judge = as_comparator(comparator)
        self.settings = RerankSettings.of(settings)
        self.guard = guard if guard is not None else guard_for(self.judge, self.settings)
        self.slots = self.guard.fair_slots  # the guard's one count: its calls outside the pool share the cap
        self.latency = RoundLatency()
        self._merger = _Merger(self) if self.judge.batches_queries else None
        # a request's key: its arrival on the guard's slots, whose other users (pools, direct calls) key theirs so
        self._next_key = itertools.count().__next__ if self.slots is None else self.slots.next_key

    def fatal(self, error: BaseException) -> bool:
        """Whether ``error`` means the endpoint is dead for every request (a refused key, the breaker open)."""
        return isinstance(error, ComparatorAuthError) or self.guard.error is not None

    async def rerank(self, query: str, candidates: Sequence[Candidate], own: Mapping[str, Any] | None = None,
                     *, started: float | None = None) -> RerankResult:
        """Rerank one request with the pool's settings and its ``own`` (keys among ``PER_REQUEST``).

        Args:
            started: when the request's ``time_budget`` started, on the event loop's clock (``loop.time()``;
                default: now), e.g. its arrival in a queue. At the deadline the round in flight is cut and the
                result is best-effort (``exhausted_by`` holds ``"time_budget"``), as for ``arerank``.

        Raises:
            TypeError / ValueError: bad input or settings. A ``ComparatorError`` as ``arerank`` raises it.
        """
        if own is not None:
            check_own(own)
        clock = asyncio.get_running_loop().time
        settings = RerankSettings.of(self.settings, **own) if own else self.settings
        reranking = Reranking(query, candidates, settings, comparator=self.judge, clock=clock, started=started,
                              latency=self.latency)
        guard = RequestGuard(self.guard, self.slots, self._next_key(), clock, reranking.deadline,
                             reranking.ledger.floor, source=query)

        async def ask(batch: Batch) -> list[Judgment]:
            with stops_on_refusal(guard):
                if self._merger is not None:
                    items = [(batch.query, a, b) for a, b in batch.pairs]
                    return await self._merger.ask(items, guard, reranking.deadline)
                return await bounded(self.judge.aguarded_judge(batch.query, batch.pairs, guard),
                                     reranking.time_left(), len(batch.pairs), guard)

        return await drive(exchange(reranking, guard), ask)

    async def aclose(self) -> None:
        if self._merger is not None and self._merger.running is not None:
            self._merger.running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._merger.running


@takes_settings
async def arerank_stream(requests: AsyncIterable[tuple], settings: RerankSettings | None = None, *,
                         comparator: Comparator | SupportsCompare, max_active: int = DEFAULT_MAX_ACTIVE,
                         **options: Any) -> AsyncIterator[tuple[int, RerankResult | RerankFailure]]:
    """``arerank_many`` for a service: requests come from an async iterable (e.g. fed by an ``asyncio.Queue``),
    each starts as soon as it arrives (up to ``max_active`` in progress) and progresses on its own through a
    ``RerankPool``, and each result comes out as soon as it is finished.

    Same arguments, per-query results and failures as ``arerank_many``, except that no running record of the
    judge is carried from one request to the next (the confidence gate and ``adaptive`` read the request's own
    answers), so every request's result equals ``arerank`` of it alone, whatever arrived before or beside it;
    requests may carry their own settings (``(query, candidates, {"budget": 20, ...})``, keys ``PER_REQUEST``).

    Yields:
        ``(index, RerankResult | RerankFailure)`` as each request finishes (``index``: its 0-based position in
        the input), not in input order; ends when the input ends and every request has finished.

    Raises:
        TypeError / ValueError: bad shared arguments (before any request is read). As ``arerank_many``: a dead
        endpoint (with ``on_failure="raise"``) raises out of the stream, which ends (the others are cancelled).

    Requests run in background tasks: leaving ``async for`` early (``break``, an exception) while the stream is
    still referenced leaves them sending calls (paid, up to each one's budget) until it is closed or
    garbage-collected. Close it on the way out::

        async with contextlib.aclosing(arerank_stream(requests, comparator=judge, budget=50)) as results:
            async for index, result in results:
                if enough(result):
                    break  # the requests still running are cancelled here
    """
    pool = RerankPool(comparator, RerankSettings.of(settings, **options))
    max_active = check_count(max_active, "max_active", minimum=1)
    source, reading, input_left, index = aiter(requests), None, True, 0
    running: dict[asyncio.Task, tuple[int, Any]] = {}
    try:
        while input_left or running:
            if input_left and reading is None and len(running) < max_active:
                reading = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({*running, reading} - {None}, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done & running.keys(), key=lambda t: running[t][0]):
                yield _outcome(pool, *running.pop(task), task)
            if reading is not None and reading.done():
                try:
                    request = reading.result()
                except StopAsyncIteration:
                    input_left = False
                else:
                    running[asyncio.ensure_future(_one(pool, index, request))] = (index, request)
                    index += 1
                reading = None
    finally:
        for task in [reading, *running]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in [reading, *running] if t is not None), return_exceptions=True)
        await pool.aclose()


async def _one(pool: RerankPool, index: int, request: Any) -> RerankResult:
    query, candidates, own = split_request(index, request)
    return await pool.rerank(query, candidates, own)


def _outcome(pool: RerankPool, index: int, request: Any, task: asyncio.Task) -> tuple[int, Any]:
    """``(index, result or RerankFailure)`` of a finished request; a dead endpoint raises."""
    error = task.exception()
    if error is None:
        return index, task.result()
    if pool.fatal(error) and pool.settings.on_failure == "raise":
        raise run_error(pool.guard, error)
    return index, RerankFailure(index, request_query(request), error)
