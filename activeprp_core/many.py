"""Many queries at once: ``rerank_many`` / ``arerank_many`` drive one ``Reranking`` per query together.

Each step collects the pending batch of every query in progress. A comparator that batches across queries (a local
model: ``Comparator.batches_queries``) gets all their prompts in one ``judge_batch`` / ``ajudge_batch`` call, which
fills its forward passes; any other gets each query's calls on their own, all at once (``judge_each``; async,
``aguarded_judge`` per query, concurrently), so an endpoint comparator keeps up to ``max_concurrency`` requests in
flight across queries. Every query keeps its own budget, round cap, pair cache and seeded streams, so its result is
identical to ``rerank`` of that query alone with the same arguments. The input is streamed: at most ``max_active``
queries are in progress (started and not yet yielded), and results come out in input order.

A request that fails on its own (bad input, a comparator error for its prompts, a ranker error) yields a
``RerankFailure`` in its place and the others go on, their answers in the same step kept: no call is sent twice.
Only when a merged call fails (it returns no answer at all) are its queries asked again one by one to find the
failing one (their calls are sent again, not charged twice to their budgets: the merged call's sending of each is
billed as a retry of it, ``Resent``; what it sent of each query is what the comparator said it sent of it,
``sent_shares``). A dead endpoint stops everything fast:
a ``ComparatorAuthError`` or the open circuit breaker that all queries share raises out of the iterator, unless
``on_failure="prior"``, with which every query degrades to its best-effort order. Each query also has a breaker of
its own, as alone (``RequestGuard``): one query whose calls all fail fails (or degrades) alone, and the shared one
counts only the failed calls in a row beyond one query's (``CallGuard._streak``), so it takes two failing queries.
A ``ComparatorClosed`` (the comparator closed under a call) raises out of it whatever ``on_failure``.

``activeprp_core.stream.arerank_stream`` is the service form (``activeprp serve``) of the same machinery.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from .budget import check_count
from .comparators.base import (
    CallGuard,
    Comparator,
    RequestGuard,
    SupportsCompare,
    answered_before,
    as_comparator,
    own_breaker,
    run_error,
    spent_if_raises,
    stops_on_refusal,
)
from .comparators.clients import ComparatorClosed
from .engine import Batch, Reranking, blocking, bounded, clock_now, drive, exchange, guard_for, iterate_blocking
from .errors import ComparatorAuthError, InvalidAnswer, describe
from .judging import JudgeTally, RoundLatency, floors_by_query

# PER_REQUEST: the settings one request may set for itself, ``(query, candidates, {"budget": 20, ...})``
from .settings import PER_REQUEST, Flag, RerankSettings, takes_settings
from .types import UNSENT, Accounting, Candidate, Judgment, Pair, RerankResult, to_judgments

DEFAULT_MAX_ACTIVE = 64

Request = tuple[str, Sequence[Candidate]] | tuple[str, Sequence[Candidate], Mapping[str, Any]]
"""One request of ``rerank_many`` / ``arerank_many``: ``(query, candidates)``, or ``(query, candidates, own)`` with
``own`` its own settings among ``PER_REQUEST`` (``split_request`` reads it; a list of those items is taken too)."""


@dataclass
class RerankFailure:
    """What ``rerank_many`` / ``arerank_many`` yield in place of the ``RerankResult`` of a request that failed
    on its own.

    Attributes:
        index: the request's position in the input (0-based).
        query: its query text (None when the request itself was malformed).
        error: the exception; where calls had been spent it carries ``error.accounting``.
    """

    index: int
    query: str | None
    error: Exception

    @property
    def reason(self) -> str:
        """One line saying why: ``"<ErrorType>: <message>"``."""
        return describe(self.error)


Step = list[tuple[int, Reranking, Batch]]


@dataclass(frozen=True)
class Resent:
    """What a merged call that failed (``error``) had sent of one query's batch before its calls are asked again on
    their own: ``calls`` of its prompts (taken as its first), with ``retries``. Each call is billed once: sent
    again, the merged call's sending is a retry of it (the budget is not charged twice); not sent again, a failed
    call."""

    calls: int
    retries: int
    error: Exception

    def answers(self, judgments: Sequence[Judgment]) -> list[Judgment]:
        """The batch's ``judgments`` from its calls asked again, with what the merged call sent billed on them."""
        out = list(judgments)
        for i, j in enumerate(out[: self.calls]):
            out[i] = Judgment(None, error=describe(self.error)) if j.cut == UNSENT else replace(j,
                                                                                             retries=j.retries + 1)
        if out and self.retries:
            out[0] = replace(out[0], retries=out[0].retries + self.retries)
        return out

    def failed(self, sent: int, retries: int) -> tuple[int, int]:
        """``(sent, retries)`` for ``Reranking.fail`` when the calls asked again failed after ``sent`` of them
        reached the backend, with ``retries``: the merged call's sending billed as well."""
        return max(sent, self.calls), retries + min(sent, self.calls) + self.retries


def _spent_on(item: Reranking | RerankResult | RerankFailure) -> Accounting:
    """What a query of the window has spent: so far, in all (a ``RerankResult`` is an ``Accounting``), or up to
    its failure (none known for a request that failed before its first call)."""
    if isinstance(item, Reranking):
        return item.settled
    if isinstance(item, RerankFailure):
        return getattr(item.error, "accounting", None) or Accounting()
    return item


class _Window:
    """The queries in progress, in input order: started from the request stream up to ``max_active``, asked
    for their pending batches, answered, and handed out in order once finished."""

    def __init__(self, requests: Iterable[Request], settings: RerankSettings,
                 comparator: Comparator, max_active: int, guard: CallGuard, progress: bool,
                 carry_judge: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = enumerate(requests)
        self.settings, self.comparator, self.max_active, self.guard = settings, comparator, max_active, guard
        self.clock = guard.clock = clock  # each query's time_budget counts from its own start on it
        self.latency = guard.latency = RoundLatency(clock)  # the round latencies of every query: the rounds that fit
        self.items: dict[int, Reranking | RerankResult | RerankFailure] = {}
        self.next_out = 0
        # the comparator's answers so far, read by every query; None: each query reads only its own
        self.judge: JudgeTally | None = JudgeTally() if carry_judge else None
        self.input_left = True
        self.stopped: Exception | None = None  # the error that stopped every query (``stop``)
        self.resent: dict[int, Resent] = {}  # the queries asked again on their own after their merged call failed
        self.breakers: dict[int, CallGuard] = {}  # each query's own breaker (``RequestGuard.own``), across its steps
        self.bar = _progress_bar(requests, progress)

    @property
    def finished(self) -> bool:
        return not self.input_left and not self.items

    def fill(self) -> None:
        while self.input_left and len(self.items) < self.max_active:
            try:
                index, request = next(self.source)
            except StopIteration:
                self.input_left = False
                break
            except Exception as error:  # the caller's iterable failed: it stops everything, as a dead endpoint
                self.stop(error)
                raise
            self.items[index] = self._start(index, request)

    def _start(self, index: int, request: Any) -> Reranking | RerankResult | RerankFailure:
        query = request_query(request)
        try:
            query, candidates, own = split_request(index, request)
            settings = RerankSettings.of(self.settings, **own) if own else self.settings
            reranking = Reranking(query, candidates, settings, comparator=self.comparator, prior_answers=self.judge,
                                  clock=self.clock, latency=self.latency)
            return self._finish(index, reranking)
        except Exception as error:
            return RerankFailure(index, query, error)

    def step(self) -> Step:
        """The pending batch of every query in progress, in input order."""
        return [(i, r, r.next_batch()) for i, r in self.items.items() if isinstance(r, Reranking)]

    def time_left(self, step: Step) -> float | None:
        """The seconds a merged call for ``step`` may take: until the last of its queries' deadlines (None when
        one has none). The guard gets each query's own deadline (by query text; the earliest for a text asked
        twice), so no call of a query goes out past its deadline."""
        deadlines: dict[str, float] = {}
        for _, reranking, batch in step:
            if reranking.deadline is not None:
                deadlines[batch.query] = min(reranking.deadline, deadlines.get(batch.query, reranking.deadline))
        self.guard.deadlines = deadlines
        lefts = [r.time_left() for _, r, _ in step]
        return None if not lefts or None in lefts else max(lefts)

    def ready(self) -> Iterator[RerankResult | RerankFailure]:
        """Finished items at the head of the input order (removing them from the window)."""
        while self.next_out in self.items and not isinstance(self.items[self.next_out], Reranking):
            item = self.items.pop(self.next_out)
            self.breakers.pop(self.next_out, None)
            self.next_out += 1
            if self.bar is not None:
                self.bar.update(1)
            yield item

    def fatal(self, error: Exception) -> bool:
        """Whether ``error`` stops every query: the endpoint is dead for all (and ``on_failure`` is "raise"), or
        the comparator was closed under a call (``ComparatorClosed``, whatever ``on_failure``)."""
        if isinstance(error, ComparatorClosed):
            return True
        dead = isinstance(error, ComparatorAuthError) or self.guard.error is not None
        return dead and self.settings.on_failure == "raise"

    def send(self, step: Step, judgments: Sequence[Judgment]) -> None:
        start = 0
        for index, reranking, batch in step:
            part = judgments[start : start + len(batch.prompts)]
            start += len(batch.prompts)
            if index in self.resent:
                part = self.resent.pop(index).answers(part)
            self._resolve(index, reranking, lambda r, part=part: r.send(part))

    def failed(self, step: Step, error: Exception, sent: int, retries: int,
               sends: Mapping[str | None, int] | None = None) -> list[Step]:
        """Handle a merged call for ``step`` that raised (``sent`` of its calls reached the backend, with
        ``retries``; ``sends``: those the comparator said it sent per query text): a dead endpoint stops everything
        (raises ``error``); a lone query fails on its own; else returns the queries' batches to ask one by one, to
        find the failing query (what it sent of each is billed on them: ``Resent``)."""
        if len(step) == 1 and step[0][0] in self.resent:
            sent, retries = self.resent.pop(step[0][0]).failed(sent, retries)
        shares = sent_shares(((batch.query, len(batch.prompts)) for _, _, batch in step), sent, sends)
        if self.fatal(error):
            raise self.stop(error, shares, retries)
        if len(step) == 1:
            index, reranking, _ = step[0]
            self._resolve(index, reranking, lambda r: r.fail(error, sent, retries=retries))
            return []
        for (index, _, _), calls in zip(step, shares):
            self.resent[index] = Resent(calls, retries if calls else 0, error)
            retries = 0 if calls else retries  # the merged call's retries: billed once, on its first query that sent
        return [[part] for part in step]

    def answered(self, step: Step, outcomes: Sequence[Sequence[Judgment] | Exception],
                 guards: Sequence[CallGuard]) -> None:
        """Hand each query of ``step`` its outcome (its judgments, or the exception its calls raised after those its
        guard counted reached the backend: ``completed``, with their ``retries``); an error that means the endpoint
        is dead stops everything (raises it)."""
        fatal = next((o for o in outcomes if isinstance(o, Exception) and self.fatal(o)), None)
        if fatal is not None:
            for (_, reranking, batch), outcome, guard in zip(step, outcomes, guards):
                _charge(reranking, batch, fatal, outcome, guard)
            raise self.stop(fatal)
        for (index, reranking, batch), outcome, guard in zip(step, outcomes, guards):
            if isinstance(outcome, Exception):
                self._resolve(index, reranking, partial(Reranking.fail, error=outcome, sent=guard.completed,
                                                        answered=answered_before(outcome, batch.query, batch.pairs),
                                                        retries=guard.retries))
            else:
                self._resolve(index, reranking, partial(_send, outcome, len(batch.prompts)))

    def settle(self, finished: Sequence[tuple[int, asyncio.Task]]) -> None:
        """Hand each query ``index`` of ``finished`` the outcome of the task that ran it on its own: its result, or
        the error it raised, a failure of its own or one that stops everything (raised here, its accounting
        summed over the queries not yet handed out, those that failed just now included: ``spent``; a query
        stopped so stays its ``Reranking``, read by ``spent``, as the error's ``accounting`` is then the sum)."""
        fatal = None
        for index, task in finished:
            error = task.exception()
            if error is None:
                self.items[index] = task.result()
            elif self.fatal(error):
                fatal = fatal or error
            else:
                self.items[index] = RerankFailure(index, self.items[index].query, error)
        if fatal is not None:
            raise self.stop(fatal)

    def _resolve(self, index: int, reranking: Reranking, action) -> None:
        try:
            action(reranking)
        except Exception as error:
            self.items[index] = RerankFailure(index, reranking.query, error)
            return
        self.items[index] = self._finish(index, reranking)

    def _finish(self, index: int, reranking: Reranking) -> Reranking | RerankResult | RerankFailure:
        if not reranking.done:
            return reranking
        try:
            return reranking.result()
        except Exception as error:
            if self.fatal(error):
                raise self.stop(error) from None
            return RerankFailure(index, reranking.query, error)

    def spent(self, sent: Sequence[int] = (), retries: int = 0) -> Accounting:
        """The accounting summed over the queries not yet handed out (for an error that stops everything, which
        they are then never): in progress (batches never answered left out), finished, or failed (its error's
        ``accounting``), plus the calls of a step whose call raised that reached the backend (``sent``, per
        query) as failed ones, and their ``retries``, and those of a failed merged call whose queries were not all
        asked again (``resent``) likewise."""
        total = Accounting(retries=retries + sum(r.retries for r in self.resent.values()))
        for account in map(_spent_on, self.items.values()):
            for k, v in account.counts().items():
                setattr(total, k, getattr(total, k) + v)
        for calls in [*sent, *(r.calls for r in self.resent.values())]:
            total.calls, total.failed_calls, total.rounds = \
                total.calls + calls, total.failed_calls + calls, total.rounds + (calls > 0)
        return total

    def stop(self, error: Exception, sent: Sequence[int] = (), retries: int = 0) -> Exception:
        error = run_error(self.guard, error)  # type: ignore[assignment]
        self.stopped = error
        with contextlib.suppress(AttributeError):
            error.accounting = self.spent(sent, retries)  # type: ignore[attr-defined]
        self.close()
        return error

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _send(answers: Sequence[Any], n: int, reranking: Reranking) -> None:
    reranking.send(to_judgments(answers, n))


def _charge(reranking: Reranking, batch: Batch, error: Exception, outcome: Any, guard: CallGuard) -> None:
    """Settle the batch of a query in a step that ``error`` stops for every query (``_Window.stop`` then sums
    what each query spent): its answers, and those of the chunks before a failing one, count as answers, its other
    calls sent (``guard.completed``, with ``guard.retries``) as failed ones (``Reranking.fail``, whose raising of
    ``error`` is the caller's)."""
    answered: list[Judgment] = []
    if isinstance(outcome, Exception):
        answered = answered_before(outcome, batch.query, batch.pairs)
    else:
        with contextlib.suppress(InvalidAnswer):  # wrong-shaped answers: its sent calls count as failed
            answered = to_judgments(outcome, len(batch.prompts))
    with contextlib.suppress(Exception):
        reranking.fail(error, guard.completed, answered, guard.retries)


def sent_shares(parts: Iterable[tuple[str, int]], sent: int, sends: Mapping[str | None, int] | None) -> list[int]:
    """The calls of a merged call that reached the backend (``sent``) per query of ``parts`` (``(query text, its
    prompts)``, in the call's order): what the comparator said it sent of each query text (``sends``, counted by
    ``CallGuard.sending``), split in order among the queries with that text. When those counts do not add up to
    ``sent`` (a comparator that does not call ``sending``), the call's first ``sent`` prompts, in order (a query
    past its own deadline sends none of its prompts while the later queries go on, so the counts come first)."""
    parts = list(parts)
    if sends is not None and sum(sends.values()) == sent:
        left, shares = dict(sends), []
        for query, size in parts:
            shares.append(min(left.get(query, 0), size))
            left[query] = left.get(query, 0) - shares[-1]
        if sum(shares) == sent:
            return shares
    shares = []
    for _, size in parts:
        shares.append(min(sent, size))
        sent -= shares[-1]
    return shares


def _progress_bar(requests: Any, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError as err:
        raise ImportError('progress=True needs tqdm: pip install tqdm (or "activeprp[eval]")') from err
    return tqdm(total=len(requests) if hasattr(requests, "__len__") else None, desc="queries", unit="q")


@dataclass(frozen=True)
class _Ask:
    """A merged call the I/O-free session needs answered: ``items`` for ``judge_batch`` under ``guard``, within
    ``time_left`` seconds (None: no deadline; see ``engine.bounded``)."""

    items: list[tuple[str, Candidate, Candidate]]
    guard: CallGuard
    time_left: float | None = None


@dataclass(frozen=True)
class _AskEach:
    """The calls of a step the I/O-free session needs answered, each query's on its own (a comparator that does
    not ``batches_queries``): ``(query, pairs, guard, time_left)`` per query, each query's calls counted by its
    own guard. The answer: one outcome per query, its judgments or the exception its calls raised."""

    asks: list[tuple[str, Sequence[Pair], RequestGuard, float | None]]


def _answer(window: _Window, step: Step, asynchronous: bool):
    """Ask the calls of ``step``: each query's on its own, or, for a comparator that ``batches_queries``, in one
    merged call (``ajudge_batch`` when ``asynchronous``, else ``judge_batch``; when it fails, not fatally, its
    queries are asked one by one, each charged for its own re-sent calls only)."""
    if not window.comparator.batches_queries:
        guards = [RequestGuard(window.guard, None, index, window.clock, r.deadline, r.ledger.floor,
                               window.breakers.setdefault(index, own_breaker(window.guard)), source=r.query)
                  for index, r, _ in step]
        outcomes = yield _AskEach([(b.query, b.pairs, g, r.time_left()) for (_, r, b), g in zip(step, guards)])
        window.answered(step, outcomes, guards)
        return
    sent_before, retries_before = window.guard.completed, window.guard.retries
    items = [(batch.query, a, b) for _, _, batch in step for a, b in batch.pairs]
    window.guard.floors = floors_by_query((batch.query, r.ledger.floor) for _, r, batch in step)  # a probe's go out
    window.guard.sends = {}  # what the comparator sends of each query: a failed call's calls are billed by it
    try:
        with spent_if_raises(window.comparator, window.guard, len(items), asynchronous):
            with stops_on_refusal(window.guard):  # a refused key stops every query's calls, as on their own
                answers = yield _Ask(items, window.guard, window.time_left(step))
            judgments = to_judgments(answers, len(items))
    except Exception as error:
        for part in window.failed(step, error, window.guard.completed - sent_before,
                                  window.guard.retries - retries_before, window.guard.sent_counts()):
            yield from _answer(window, part, asynchronous)
        return
    window.send(step, judgments)


def _session(window: _Window, asynchronous: bool):
    """The I/O-free body of ``rerank_many`` and ``arerank_many`` (``asynchronous``): yields each finished item
    (answer: None) and each ``_Ask`` (answer: its judgments, or the exception raised getting them, thrown in) and
    ``_AskEach`` (answer: its outcomes)."""
    try:
        while not window.finished:
            window.fill()
            yield from window.ready()
            step = window.step()
            if step:
                yield from _answer(window, step, asynchronous)
    finally:
        window.close()


def check_requests(requests: Any) -> None:
    """Raises TypeError unless ``requests`` is an iterable of requests: not a str or bytes (each character would be
    a request), not a mapping (its keys would be the requests), not one ``(query, candidates)`` pair itself (its
    query and its candidates would be two), not an async iterable (the message names ``arerank_stream``)."""
    expected, kind = "requests must be an iterable of (query, candidates) pairs, got", type(requests).__name__
    if isinstance(requests, (str, bytes)) or not isinstance(requests, Iterable):
        async_hint = ": for an async iterable use activeprp_core.stream.arerank_stream"
        raise TypeError(f"{expected} {kind}{async_hint if isinstance(requests, AsyncIterable) else ''}")
    if isinstance(requests, Mapping):
        raise TypeError(f"{expected} a {kind}: pass its .items()")
    if isinstance(requests, tuple) and len(requests) == 2 and isinstance(requests[0], str):
        raise TypeError(f"{expected} one pair: pass [(query, candidates)]")


def split_request(index: int, request: Any) -> tuple[str, Sequence[Candidate], Mapping[str, Any]]:
    """``(query, candidates, own settings)`` of request ``index``: a ``(query, candidates)`` or ``(query,
    candidates, own)`` tuple or list (a list as JSON gives it).

    Raises:
        TypeError: another shape, or ``own`` that is not a dict with keys among ``PER_REQUEST`` (``check_own``).
    """
    if not isinstance(request, (tuple, list)) or len(request) not in (2, 3):
        raise TypeError(f"request {index} must be a (query, candidates) pair, got {type(request).__name__}"
                        + (f" of {len(request)} items" if isinstance(request, (tuple, list)) else ""))
    own = request[2] if len(request) == 3 else {}
    check_own(own, f"request {index}: its settings")
    return request[0], request[1], own


def request_query(request: Any) -> str | None:
    """The query of a request, for its ``RerankFailure`` (None when the request has no usable one)."""
    ok = isinstance(request, (tuple, list)) and request and isinstance(request[0], str)
    return request[0] if ok else None


def check_own(own: Any, what: str = "a request's own settings") -> None:
    """Raises TypeError unless ``own`` (a request's own settings) is a dict with keys among ``PER_REQUEST``."""
    if not isinstance(own, Mapping) or set(own) - set(PER_REQUEST):
        got = sorted(set(own) - set(PER_REQUEST)) if isinstance(own, Mapping) else type(own).__name__
        raise TypeError(f"{what} must be a dict with keys among {PER_REQUEST}, got {got}")


def _window(requests, settings, options, comparator, max_active, progress,
            carry_judge: bool = True) -> tuple[Comparator, _Window]:
    """The comparator and the window (on the clock of the loop it runs in, if any: ``engine.clock_now``); every
    shared setting is checked here, before any request is read."""
    check_requests(requests)
    settings = RerankSettings.of(settings, **options)
    judge = as_comparator(comparator)
    max_active = check_count(max_active, "max_active", minimum=1)
    progress, carry_judge = Flag()(progress, "progress"), Flag()(carry_judge, "carry_judge")
    guard = guard_for(judge, settings)
    return judge, _Window(requests, settings, judge, max_active, guard, progress, carry_judge, clock_now())


@takes_settings
def rerank_many(requests: Iterable[Request], settings: RerankSettings | None = None, *,
                comparator: Comparator | SupportsCompare, max_active: int = DEFAULT_MAX_ACTIVE, progress: bool = False,
                carry_judge: bool = True, **options: Any) -> Iterator[RerankResult | RerankFailure]:
    """Rerank many queries together (see the module docstring); one result per request, in input order.

    Args:
        requests: any iterable of ``(query, candidates)`` pairs, or ``(query, candidates, own)`` with ``own`` a
            dict of that request's own settings among ``settings.PER_REQUEST`` (e.g. ``{"budget": 20}``), which
            replace the shared ones for it (read lazily: a generator streams).
        settings, **options: the ``RerankSettings`` applied to every query, as for ``rerank`` (``budget``,
            ``max_rounds`` and ``token_budget`` are per query); ``max_concurrency`` caps the calls in flight
            across all queries; each query has its own circuit breaker (``max_consecutive_failures``), as alone,
            and the one they share opens on that many failed calls in a row beyond those of one query.
        comparator: as for ``rerank``.
        max_active: the most queries in progress (bounds memory; default 64).
        progress: show a tqdm bar over queries on stderr (needs tqdm).
        carry_judge: keep one running record of the comparator's answers across the queries (default), which
            the confidence gate and ``adaptive`` read, so later queries do not start from nothing; queries in
            progress together read each other's answers, so a result then depends on ``max_active``. With False
            each query reads only its own answers and its result equals ``rerank`` of it alone, whatever the
            other queries (with hard answers and a one- or two-call oracle it does anyway).

    Yields:
        ``RerankResult`` per request, or ``RerankFailure`` for a request that failed on its own.

    Raises:
        TypeError / ValueError: bad shared arguments (``progress`` or ``carry_judge`` not a bool, too) or
        ``requests`` not an iterable of pairs (``check_requests``), before any request is read.
        ``ComparatorAuthError`` / ``ComparatorUnavailable``: the endpoint is dead (with ``on_failure="raise"``);
        ``accounting`` sums the queries not yet yielded (in progress, finished or failed behind an earlier one).
        ``ComparatorClosed`` likewise, whatever ``on_failure``: the comparator was closed under a call.
        An exception raised by ``requests`` itself (a generator reading a file) likewise: as itself, whatever
        ``on_failure``, with ``accounting`` (where the exception takes attributes).
    """
    judge, window = _window(requests, settings, options, comparator, max_active, progress, carry_judge)

    def ask(item: _Ask | _AskEach) -> Any:
        if isinstance(item, _AskEach):
            return judge.judge_each([(query, pairs, guard) for query, pairs, guard, _ in item.asks])
        return judge.judge_batch(item.items, guard=item.guard)

    with contextlib.closing(_session(window, asynchronous=False)) as session:
        yield from iterate_blocking(_pump(session, blocking(ask)))


@takes_settings
async def arerank_many(requests: Iterable[Request], settings: RerankSettings | None = None,
                       *, comparator: Comparator | SupportsCompare, max_active: int = DEFAULT_MAX_ACTIVE,
                       progress: bool = False, carry_judge: bool = True,
                       **options: Any) -> AsyncIterator[RerankResult | RerankFailure]:
    """Async ``rerank_many`` (same arguments and results): the calls of all queries in progress run concurrently
    (at most ``max_concurrency`` in flight). With ``carry_judge=False`` and a comparator that does not batch
    queries (``Comparator.batches_queries``), each query sends its next round as soon as its last one is answered
    (``_on_their_own``); otherwise the queries go in steps, each awaiting every query's round.

    Those queries on their own run in background tasks: leaving ``async for`` early (``break``, an exception)
    while the iterator is still referenced leaves them sending calls (paid, up to each query's budget) until it is
    closed or garbage-collected; iterate it in ``contextlib.aclosing(arerank_many(...))``, which closes it (and
    cancels them) on the way out. In steps nothing is sent after a ``break``."""
    judge, window = _window(requests, settings, options, comparator, max_active, progress, carry_judge)
    # the inner generators are closed here, not left to the loop's finalizer: closing this one would otherwise
    # leave their tasks running (and a loop closed then would cancel them before they start)
    if not carry_judge and not judge.batches_queries:
        async with contextlib.aclosing(_on_their_own(window, judge)) as items:
            async for item in items:
                yield item
        return

    def ask(item: _Ask | _AskEach) -> Awaitable[Any]:
        if isinstance(item, _AskEach):
            return _each(judge, item)
        return bounded(judge.ajudge_batch(item.items, guard=item.guard), item.time_left, len(item.items), item.guard,
                       records_sent=False)

    with contextlib.closing(_session(window, asynchronous=True)) as session:
        async with contextlib.aclosing(_pump(session, ask)) as items:
            async for item in items:
                yield item


async def _judged(judge: Comparator, query: str, pairs: Sequence[Pair], guard: RequestGuard,
                  left: float | None) -> list[Judgment]:
    """One query's calls on their own, within its ``left`` seconds (``bounded``); a refused key stops every
    query's calls (``stops_on_refusal``)."""
    with stops_on_refusal(guard):
        return await bounded(judge.aguarded_judge(query, pairs, guard), left, len(pairs), guard)


async def _on_their_own(window: _Window, judge: Comparator) -> AsyncIterator[RerankResult | RerankFailure]:
    """``arerank_many`` without lockstep steps: each query in progress runs in its own task and sends its next
    round as soon as its last one is answered, so no query waits for the slowest round of the others
    (docs/many-queries.md, ``benchmarks/lockstep.py``). Results still come out in input order, at most
    ``max_active`` in progress. Only for queries that read only their own answers (``carry_judge=False``): their
    results do not depend on when the others' answers come."""
    tasks: dict[asyncio.Task, int] = {}

    async def run(index: int, reranking: Reranking) -> RerankResult:
        guard = RequestGuard(window.guard, None, index, window.clock, reranking.deadline,
                             reranking.ledger.floor, source=reranking.query)
        steps = exchange(reranking, guard)
        try:
            return await drive(steps, lambda batch: _judged(
                judge, batch.query, batch.pairs, guard, reranking.time_left()))
        except asyncio.CancelledError:
            if window.stopped is not None:  # its batch's calls sent fail with that error, as in steps (_charge)
                with contextlib.suppress(Exception):
                    steps.throw(window.stopped)
            raise

    try:
        while not window.finished:
            window.fill()
            running = set(tasks.values())
            for index, item in window.items.items():
                if isinstance(item, Reranking) and index not in running:
                    tasks[asyncio.ensure_future(run(index, item))] = index
            for item in window.ready():
                yield item
            if tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                window.settle([(tasks.pop(task), task) for task in done])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if window.stopped is not None and tasks:  # summed again: the batches in flight were billed meanwhile
            window.stop(window.stopped)
        window.close()


async def _each(judge: Comparator, item: _AskEach) -> list[list[Judgment] | Exception]:
    """Each query's calls of ``item`` concurrently, each within its own time left (``bounded``): one outcome per
    query, its judgments or the exception its calls raised (the others go on), except a ``ComparatorClosed``:
    the comparator was closed, so the other queries' calls are cancelled and that error is their outcome too."""
    tasks = [asyncio.ensure_future(_judged(judge, *ask)) for ask in item.asks]
    closed = None
    try:
        pending = set(tasks)
        while pending and closed is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            closed = next((t.exception() for t in done if not t.cancelled()
                           and isinstance(t.exception(), ComparatorClosed)), None)
    finally:  # none is left to cancel unless the comparator was closed, or this wait was cancelled
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    outcomes: list[list[Judgment] | Exception] = []
    for task in tasks:
        if task.cancelled() and closed is None:
            raise asyncio.CancelledError  # a cancellation: not a query's failure
        error = closed if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, Exception):
            raise error  # a KeyboardInterrupt or SystemExit, as itself
        outcomes.append(task.result() if error is None else error)
    return outcomes


async def _pump(session, ask) -> AsyncIterator[RerankResult | RerankFailure]:
    """Run the I/O-free ``session``: yield its finished items, answer its ``_Ask`` with ``await ask(item)``
    (the shared body of ``rerank_many``, where ``ask`` never suspends, and ``arerank_many``)."""
    item = next(session, None)
    while item is not None:
        if not isinstance(item, (_Ask, _AskEach)):
            yield item
            item = next(session, None)
            continue
        try:
            answer = await ask(item)
        except Exception as error:
            item = _resume(session.throw, error)
        else:
            item = _resume(session.send, answer)


def _resume(method, value):
    """``session.send(value)`` / ``session.throw(value)``; None once the session has finished."""
    try:
        return method(value)
    except StopIteration:
        return None
