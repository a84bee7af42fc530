"""The comparator base class, and the per-rerank I/O policy (``CallGuard``) the engine hands it with each batch.

A comparator judges ordered pairs ``(first, second)`` of candidates for a query: P(first is more relevant), one
LLM call per pair. Subclass ``Comparator`` and implement ``compare`` (plain probabilities) or ``judge``
(``Judgment`` objects with retries and token usage); ``ajudge``, ``judge_batch`` / ``ajudge_batch`` (the
cross-query entry of ``rerank_many``; a local model that batches across queries overrides them and sets
``max_batch_size``), ``estimate_tokens`` and ``close`` / ``aclose`` have defaults (their docstrings say how).

Objects that are not ``Comparator`` instances but have ``compare`` (and optionally ``acompare``, ``judge``,
``ajudge``, ``estimate_tokens``) are accepted everywhere and wrapped by ``as_comparator``.

Deadlines (``time_budget``): the ``CallGuard`` tells a comparator the time left for each query
(``CallGuard.time_left``). The base class sends no chunk once it is past, and waits for a chunk no longer than
the time left: the async path cancels the chunk (``asyncio.wait_for``), the sync path runs it in a worker thread
and stops waiting for it (its late answers are discarded; the call itself runs on until it returns, since a
blocking call cannot be interrupted, and keeps its ``max_concurrency`` slots until then, on both paths). Such
calls come back as ``Judgment(None, cut=...)``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import copy
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..blocking import blocking, run_blocking
from ..budget import check_count
from ..errors import (
    MAX_CONSECUTIVE_FAILURES,
    ComparatorAuthError,
    ComparatorError,
    ComparatorUnavailable,
    InvalidAnswer,
)
from ..judging import CallFloor
from ..slots import DeadlinePassed, FairSlots, Hold, wait_for
from ..types import IN_FLIGHT, UNSENT, Candidate, Judgment, Pair, to_judgments

Item = tuple[str, Candidate, Candidate]
"""One prompt of ``judge_batch``: (query, first, second)."""

T = TypeVar("T")


@runtime_checkable
class SupportsCompare(Protocol):
    """The duck type accepted wherever a comparator is: ``compare(query, pairs)`` returning one probability (or
    None) per pair, in a list or any sequence (``-> list[float]`` matches too; ``types.to_judgments`` reads it)."""

    def compare(self, query: str, pairs: Sequence[Pair]) -> Sequence[float | None]: ...


DEADLINE_SLACK = 0.02
"""Seconds before a deadline from which it counts as passed: no call is started with less time left (it could not
be answered in time, and would reach the endpoint after the deadline), and a timeout firing that close to the
deadline is the deadline's."""


def unsent(reason: str = "not sent: the time budget ran out") -> Judgment:
    """The answer of a call the deadline kept from being sent."""
    return Judgment(None, error=reason, cut=UNSENT)


def cut_in_flight(retries: int = 0, reason: str = "cut at the deadline: no answer in time") -> Judgment:
    """The answer of a call sent whose answer did not come before the deadline."""
    return Judgment(None, retries=retries, error=reason, cut=IN_FLIGHT)


def cut_before_retry(retries: int, last: str, status_code: int | None = None) -> Judgment:
    """The answer of a call whose attempt failed with ``last`` (its error, as a message may show it; its HTTP
    ``status_code`` if it had a response) and whose retry the deadline kept from going out: cut in flight, and a
    judge error (``Judgment.cut_before_retry``)."""
    return Judgment(None, retries=retries, error=f"cut at the deadline before its retry (last: {last})",
                    cut=IN_FLIGHT, cut_before_retry=True, status_code=status_code)


class CallGuard:
    """The I/O policy of one rerank (or of one ``rerank_many``, shared by its queries), handed to the
    comparator with each batch: a cap on calls in flight and a circuit breaker.

    Args:
        max_concurrency: the most LLM calls in flight at once (None = no cap). Batch comparators get their
            batches in chunks of at most this many pairs; endpoint comparators hold one of ``slots`` per request.
        max_consecutive_failures: the circuit breaker: after this many calls in a row failed (after their
            retries), ``check`` raises ``ComparatorUnavailable`` and no further call is sent (None = never). A
            streak that ends in an unusable answer (the judge replied, but not A or B), or in a failed call whose
            retry the deadline withheld (a passing fault can fail a round's calls at the end of a time budget; both
            are recorded with ``unusable``), opens it only while no call
            on this guard has been answered, or when its failed calls came from two queries or more (the
            ``RequestGuard`` views of a shared guard): once the judge has answered, one query's unusable answers
            come from its prompts (a document can carry an instruction), and its calls fail one by one, within its
            budget. Shared by queries (``RequestGuard``), it counts for opening only the failed calls in a row
            beyond those of the one query with the most of them (``_streak``): one query whose every call fails
            (its prompts make the endpoint fail) is stopped by its own breaker (``RequestGuard``), as it would be
            alone, and never stops the others; a dead endpoint, failing every query's calls, opens it after about
            twice ``max_consecutive_failures`` failed calls.

    Comparators call ``check()`` before sending, ``record(ok, reason)`` for every call that reached the backend
    (``completed`` counts them and ``retries`` their transport retries, so the engine can refund the calls of a
    failed batch that never went out and bill the retries of those that did; with an answered call's ``seconds``,
    they set the call floor of ``too_late``), and
    ``trip(error)`` on an error that must stop every later call (e.g. a 401). They read ``time_left(query)``
    (seconds; None = no deadline) to wait no longer than a query's deadline, and ``too_late(query)`` to send
    nothing that could not come back before it: the engine sets the deadlines (``deadline`` for every query,
    ``deadlines`` per query text, both on ``clock``) and the record of round latencies (``latency``; ``floors``
    per query text, for a call made for several queries at once).
    Thread-safe; its slots (``fair_slots``) are one count for the tasks of any event loop and the threads of the
    sync path together: ``judge`` in threads and ``ajudge`` on a loop at once still have ``max_concurrency`` in all.
    They are waited for oldest first (a pool's request by its arrival, a direct call by its own), and the slots of
    a task whose loop was closed before it gave them back are reclaimed (``slots.FairSlots``). A sync call made
    on the thread that runs an event loop cannot wait for slots that loop's tasks hold (they give them back only
    when that thread returns to its loop): it raises ``slots.LoopBlocked`` where that is certain and may hang
    otherwise (a task of that loop queued ahead of it); await ``ajudge`` there.

    Raises:
        TypeError / ValueError: a limit that is not an int >= 1 or None.
    """

    def __init__(self, max_concurrency: int | None = None,
                 max_consecutive_failures: int | None = MAX_CONSECUTIVE_FAILURES) -> None:
        self._setup(check_count(max_concurrency, "max_concurrency", minimum=1, allow_none=True),
                    check_count(max_consecutive_failures, "max_consecutive_failures", minimum=1, allow_none=True))

    @classmethod
    def of_checked(cls, max_concurrency: int | None, max_consecutive_failures: int | None) -> CallGuard:
        """A guard from limits checked already (a ``RerankSettings``' values): nothing is checked again."""
        guard = cls.__new__(cls)
        guard._setup(max_concurrency, max_consecutive_failures)
        return guard

    def _setup(self, max_concurrency: int | None, max_consecutive_failures: int | None) -> None:
        self.max_concurrency, self.max_consecutive_failures = max_concurrency, max_consecutive_failures
        self.clock: Callable[[], float] = time.monotonic
        self.deadline: float | None = None
        self.deadlines: dict[str, float] = {}
        self.latency: Any = None  # the rerank's judging.RoundLatency (a query's judging.CallFloor), read by too_late
        self.floors: dict[str, Any] = {}  # per query text, read by too_late instead of latency: judging.floors_by_query
        self.sends: dict[str | None, int] | None = None  # calls sent per query text, when set: ``sending``
        self._lock = threading.Lock()
        self.completed = 0
        self.retries = 0
        self._failures = 0
        self._answered = False  # a call on this guard got a usable answer
        self._sources: dict[Any, int] = {}  # failed calls in a row by query (RequestGuard source; None: no view's)
        self._last_reason: str | None = None
        self._last_status: int | None = None  # of the streak's last failed call that got an HTTP response
        self._error: ComparatorError | None = None
        self.shared_by_queries = False  # RequestGuard views were made on it: its breaker's error says "shared"
        self._fair_slots = None if max_concurrency is None else FairSlots(max_concurrency)

    def time_left(self, query: str | None = None) -> float | None:
        """Seconds until the deadline of ``query`` (its entry in ``deadlines``, else ``deadline``) on ``clock``;
        None when it has none; <= 0 once past."""
        at = self.deadlines.get(query, self.deadline) if query is not None else self.deadline
        return None if at is None else at - self.clock()

    def past(self, query: str | None = None) -> bool:
        """Whether the deadline of ``query`` has passed (within ``DEADLINE_SLACK``)."""
        left = self.time_left(query)
        return left is not None and left <= DEADLINE_SLACK

    def too_late(self, query: str | None = None) -> bool:
        """Whether a call of ``query`` started now would end past its deadline: ``past``, or no more time left than
        the record's call floor (``query``'s entry in ``floors``, else ``latency``: anything with
        ``call_floor()``, a ``judging.RoundLatency``, or a query's ``judging.CallFloor``, none while its round is
        the probe of a stale record; set by the engine): the answered calls' latency (their ``LATENCY_QUANTILE``
        quantile; timed by the comparator, ``record(seconds=...)``), else the fastest answered round, raised to the
        longest time a round's calls were in flight and cut with no call back since the newest answer
        (``RoundLatency.call_floor``; ``sending`` ends a round's wait for slots). Calls wait for
        their slots after their round is planned: under load they would otherwise go out too late, each cut at the
        deadline and its slot taken from a call that could be answered; and a judge slower than the time budget
        would get a round of calls from every query, none answered (docs/latency.md)."""
        left = self.time_left(query)
        if left is None:
            return False
        latency = self._floor_of(query)
        floor = latency.call_floor() if latency is not None else None
        return left <= max(DEADLINE_SLACK, floor or 0.0)

    def sending(self, query: str | None = None, calls: int = 1) -> None:
        """Note that ``calls`` calls of ``query`` go out now, after their wait for slots and ``too_late``: its
        round's first ends the round's wait for slots (``judging.CallFloor.sent``), which a round cut with no call
        back does not count as the judge's latency, and the time to record those sent is kept back from the
        deadline (``CallFloor.reserve``). A comparator that says nothing leaves the round's wait counted.
        With ``sends`` set (a dict: the caller of a merged call sets one per call), ``calls`` is added to its entry
        for ``query``: what each query of the call sent (``many.sent_shares``)."""
        if self.sends is not None:
            with self._lock:
                self.sends[query] = self.sends.get(query, 0) + calls
        latency = self._floor_of(query)
        if isinstance(latency, CallFloor):
            latency.sent(self.clock(), calls)

    def sent_counts(self) -> dict[str | None, int] | None:
        """A copy of ``sends`` (None: not counted), taken under the lock (a comparator's threads add to it)."""
        with self._lock:
            return None if self.sends is None else dict(self.sends)

    def _floor_of(self, query: str | None) -> Any:
        """What ``query``'s calls read for the call floor: its entry in ``floors``, else ``latency``."""
        return self.floors.get(query, self.latency) if query is not None else self.latency

    def chunks(self, pairs: Sequence[T]) -> Iterator[Sequence[T]]:
        """``pairs`` cut into consecutive chunks of at most ``max_concurrency`` (one chunk when uncapped)."""
        size = self.max_concurrency or max(len(pairs), 1)
        return (pairs[s : s + size] for s in range(0, len(pairs), size))

    @property
    def error(self) -> ComparatorError | None:
        """The error that stopped calls (breaker open, or a tripped fatal error), else None."""
        return self._error

    def check(self) -> None:
        """Raise (a fresh copy of) the stopping error when the breaker is open or a fatal error was tripped."""
        error = self._error
        if error is not None:
            raise fresh_error(error) from error

    def trip(self, error: ComparatorError) -> None:
        """Stop every later call with ``error`` (the first tripped error wins)."""
        with self._lock:
            if self._error is None:
                self._error = error

    def record(self, ok: bool | None, reason: str | None = None, retry_after: float | None = None,
               unusable: bool = False, source: Any = None, retries: int = 0, seconds: float | None = None,
               status_code: int | None = None) -> None:
        """Note one call that reached the backend; ``max_consecutive_failures`` failures in a row open the breaker.
        ``ok=None``: it was sent but its outcome is unknown (cancelled in flight): counted, streak unchanged; with
        a ``reason``, an attempt failed with ``reason`` before the deadline and its retry was cut in flight
        (``Judgment.cut_before_retry``): still no count here, but a breaker that can probe the judge (``activeprp
        serve``'s) counts it as a suspect failure, as an unusable answer.
        ``retry_after``: the seconds a failed call's backend asked to wait (read by a breaker that probes back).
        ``unusable``: the failed call was answered, but with no usable answer (what the prompt, and so a caller's
        documents, can cause; a breaker shared by strangers checks the judge before it opens on that), or its
        attempts failed and the deadline kept its retry from going out (what a passing fault at the end of a time
        budget can cause): a suspect failure (``_streak_full``).
        ``source``: the query the call belongs to (a ``RequestGuard`` passes its ``source``: its query's text).
        ``retries``: the call's transport retries (its requests to the backend beyond the first), whatever its
        outcome: summed in ``retries`` (what a failed batch's accounting bills: ``Reranking.fail``).
        ``seconds``: an answered call's (``ok``) own latency, from its first attempt's send to its answer (not its
        wait for a slot; None: not timed): noted on the record ``too_late`` reads (``note_call``). For a call cut
        (``ok=None``): how long its last attempt had been out with no answer (None: none was, or not timed), not
        read here (``activeprp serve``'s breaker reads it: a judge silent that long is probed).
        ``status_code``: the HTTP status of a failed call's last response (None: it got none), which the breaker's
        ``ComparatorUnavailable`` carries (the streak's last one)."""
        self.note_call(ok, seconds)
        with self._lock:
            self.completed += 1
            self.retries += retries
            if ok is None:
                return
            if ok:
                self._answered = True
                self._new_streak()
                return
            self._failures += 1
            self._sources[source] = self._sources.get(source, 0) + 1
            self._last_reason = reason or self._last_reason
            self._last_status = self._last_status if status_code is None else status_code
            limit = self.max_consecutive_failures
            if limit is not None and self._streak() >= limit and self._error is None:
                self._streak_full(unusable)

    def note_call(self, ok: bool | None, seconds: float | None) -> None:
        """Note an answered (``ok``) call's ``seconds`` on ``latency`` (its ``record_call``:
        ``judging.RoundLatency``, a query's ``judging.CallFloor``; nothing when either is None), whose call floor
        ``too_late`` reads. A call made for several queries at once reads ``floors``, each a view of that same
        record (``judging.floors_by_query``)."""
        if ok and seconds is not None and self.latency is not None:
            self.latency.record_call(seconds)

    def _new_streak(self) -> None:
        """Start the count of failed calls in a row afresh (called holding the lock)."""
        self._failures = 0
        self._sources.clear()
        self._last_status = None

    def _streak(self) -> int:
        """The failed calls in a row that count towards opening the breaker (called holding the lock): all of them,
        less those of the query (``RequestGuard.source``, its text) with the most, which its own breaker stops;
        calls recorded with no source (this guard's own, or a call merged for several queries) all count. So it
        opens on failed calls in a row of two query texts or more, ``max_consecutive_failures`` beyond the top
        one's: a dead endpoint, or two queries whose prompts make the judge fail; a query asked again (a client
        retrying a request, the same text in another request) is one source."""
        return self._failures - max((n for key, n in self._sources.items() if key is not None), default=0)

    def _streak_full(self, unusable: bool) -> None:
        """``max_consecutive_failures`` calls in a row failed, the last one ``unusable`` or not (called holding the
        lock): open the breaker, unless this reply was unusable, the judge has answered before, and the streak is
        one query's."""
        if not (unusable and self._answered and len(self._sources) < 2):
            self._error = self._unavailable()

    def _unavailable(self, why: str = "") -> ComparatorUnavailable:
        """The error of an open breaker: the streak of failed calls (across queries: ``shared_by_queries``) and the
        last one's reason, then ``why``; which breaker it is (``ComparatorUnavailable.breaker``) as data."""
        across = " across queries" if self.shared_by_queries else ""
        return ComparatorUnavailable(
            f"circuit breaker open: {self._failures} calls in a row failed{across} (last: {self._last_reason}){why}",
            status_code=self._last_status, breaker="shared" if self.shared_by_queries else "own",
            in_a_row=self._failures)

    def record_all(self, judgments: Sequence[Judgment], seconds: float | None = None) -> None:
        """``record`` each judgment in order (a failed call is one with ``prob is None``); ``seconds``: the
        latency of the one call (a local model's forward pass) that answered them all (None: not timed)."""
        for j in judgments:
            self.record(j.prob is not None, j.error, retries=j.retries, seconds=seconds, status_code=j.status_code)

    @property
    def fair_slots(self) -> FairSlots | None:
        """The ``FairSlots`` of ``max_concurrency`` that every call on this guard holds, on both paths (None:
        uncapped)."""
        return self._fair_slots

    def slots(self, n: int = 1, timeout: float | None = None, threads: bool = False):
        """An async context manager holding ``n`` of the ``max_concurrency`` slots (``fair_slots``), waited for by
        suspending the running task, or with ``threads`` by blocking the thread (the sync path: it never suspends;
        ``slots.held`` enters it without a loop); no wait when uncapped. Both kinds of waiter share the one count,
        served in arrival order (a ``RequestGuard`` of a pool waits at its request's arrival instead).
        It raises ``DeadlinePassed`` when they are not free within ``timeout`` seconds."""
        if self._fair_slots is None:
            return _no_slots()
        return self._fair_slots.take(n, timeout=timeout, threads=threads)


class RequestGuard(CallGuard):
    """One query's view of a shared ``CallGuard`` (a request of ``RerankPool``, a query of ``rerank_many``): its own
    count of the calls that reached the backend (``completed``) and of their retries (``retries``), what
    ``Reranking.fail`` is told, its deadlines (``deadline`` / ``deadlines`` on ``clock``, read by the comparator through
    ``time_left``) and its calls' place in the queue for slots (``key``: lower goes first, with ``slots``, a
    ``FairSlots``, whose ``next_key()`` gives a request's; None: the shared guard's slots, each call in its arrival
    order); the breaker and the cap on calls in flight are the shared guard's. Its slots are waited for by tasks and by
    threads alike (``slots(threads=...)``), in one queue.

    The query has a breaker of its own as well (``own``: a ``CallGuard`` with no cap, kept for the query's whole
    rerank by whoever makes a view per round; a fresh one when not given): ``max_consecutive_failures`` of its calls
    failing in a row stop that query alone (``check`` raises its ``ComparatorUnavailable``), as they stop ``rerank``
    of it alone, while the shared breaker, which stops every query (``error``), counts only the failures beyond the
    one query with the most (``CallGuard._streak``), its failed calls counted under ``source`` (the query's text:
    the same text asked again, in a retried request or another, is one query there; None: ``key``). ``merged``: a
    view for a call made for several queries at once (a pool's merged call): no breaker of its own, its failed
    calls counted on the shared guard under no source."""

    def __init__(self, shared: CallGuard, slots: FairSlots | None, key: Any, clock: Callable[[], float],
                 deadline: float | None = None, latency: Any = None, own: CallGuard | None = None,
                 merged: bool = False, source: Any = None) -> None:  # no _setup: the shared state stays
        self.shared, self._fair, self.key, self.latency = shared, slots, key, latency
        self.source = key if source is None else source
        self.max_concurrency = shared.max_concurrency
        self.max_consecutive_failures = shared.max_consecutive_failures
        self.clock, self.deadline, self.deadlines, self.floors = clock, deadline, {}, {}
        self.completed = self.retries = 0
        self.sends, self._lock = None, threading.Lock()
        self.own = None if merged else own if own is not None else own_breaker(shared)
        shared.shared_by_queries = True

    @property
    def error(self) -> ComparatorError | None:
        """The shared guard's error, which stops every query (this query's own breaker raises from ``check``)."""
        return self.shared.error

    def check(self) -> None:
        self.shared.check()
        if self.own is not None:
            self.own.check()

    def trip(self, error: ComparatorError) -> None:
        self.shared.trip(error)

    def record(self, ok: bool | None, reason: str | None = None, retry_after: float | None = None,
               unusable: bool = False, source: Any = None, retries: int = 0, seconds: float | None = None,
               status_code: int | None = None) -> None:
        self.note_call(ok, seconds)  # on this request's record (its too_late's), not the shared guard's
        self.completed += 1
        self.retries += retries
        if self.own is not None:
            self.own.record(ok, reason, unusable=unusable, status_code=status_code)
        # an answer's latency is noted once, above; a cut call's time unanswered is the shared breaker's to read
        self.shared.record(ok, reason, retry_after, unusable, None if self.own is None else self.source, retries,
                           None if ok else seconds, status_code)

    @property
    def fair_slots(self) -> FairSlots | None:
        return self.shared.fair_slots if self._fair is None else self._fair

    def slots(self, n: int = 1, timeout: float | None = None, threads: bool = False):
        if self._fair is None:
            return self.shared.slots(n, timeout, threads)
        return self._fair.take(n, self.key, timeout, threads)


def fresh_error(error: ComparatorError) -> ComparatorError:
    """A new ``error``: its type, message, status and, for a ``ComparatorUnavailable``, which breaker and how many
    calls in a row; no accounting (each raise of a guard's stopping error sets its own)."""
    fresh = type(error)(error.message, status_code=error.status_code)
    if isinstance(error, ComparatorUnavailable):
        fresh.breaker, fresh.in_a_row = error.breaker, error.in_a_row
    return fresh


def run_error(guard: CallGuard, error: BaseException) -> BaseException:
    """The error that stops every query on ``guard`` (shared by them) for ``error``, one query's: a fresh copy of
    the shared guard's error (``fresh_error``) when ``error`` is a query's own breaker's (``breaker == "own"``)
    and the shared one is open too, so its numbers are the shared breaker's, with ``error``'s accounting; else
    ``error``."""
    shared = guard.error
    if shared is None or not isinstance(error, ComparatorUnavailable) or error.breaker != "own":
        return error
    fresh = fresh_error(shared)
    fresh.accounting = error.accounting
    fresh.__cause__ = error  # the query's own breaker had opened first
    return fresh


def own_breaker(shared: CallGuard) -> CallGuard:
    """A query's own breaker on ``shared`` (``RequestGuard.own``): ``shared``'s ``max_consecutive_failures``, no cap."""
    return CallGuard.of_checked(None, shared.max_consecutive_failures)


@asynccontextmanager
async def _no_slots():
    yield Hold()


async def gather_or_cancel(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` that cancels the others when one raises (then re-raises the first error)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def comparator_stopped(stop: StopIteration) -> RuntimeError:
    """The error raised for a ``StopIteration`` that a comparator's ``compare`` / ``judge`` (or ``acompare`` /
    ``ajudge``) raised, its cause ``stop``: it cannot pass through the coroutines that call it, where Python turns it
    into a ``RuntimeError`` that names nothing ("coroutine raised StopIteration", PEP 479). The same on the sync and
    the async path, and like any other exception of the comparator it propagates, with the accounting."""
    error = RuntimeError(f"the comparator raised {stop!r}")
    error.__cause__ = stop
    return error


def _stop_iteration(error: Exception) -> StopIteration | None:
    """The ``StopIteration`` that ``error`` is, or that PEP 479 (or ``comparator_stopped``) turned into the
    ``RuntimeError`` ``error`` on its way out of a coroutine; None otherwise."""
    if isinstance(error, StopIteration):
        return error
    cause = error.__cause__
    return cause if isinstance(error, RuntimeError) and isinstance(cause, StopIteration) else None


def _in_daemon_thread(call: Callable[[], T], done: Callable[[T | None, BaseException | None], None],
                      daemon: bool = True) -> None:
    """Start ``call()`` in a daemon thread, in a copy of the caller's context (its ``contextvars``: tracing, a
    framework's callbacks); ``done(value, error)`` in that thread when it returns. A daemon thread, not an
    executor's: a call cut at a deadline runs on without holding a worker others wait for, or the exit. With
    ``daemon=False`` the interpreter's exit waits for it (work that stops soon once cut, and must not be inside a
    C++ library when the interpreter finalises: a local model's forward pass aborts the process there)."""

    def run() -> None:
        try:
            value, error = call(), None
        except StopIteration as exc:  # a future cannot hold it (the wait for it would never end)
            value, error = None, comparator_stopped(exc)
        except BaseException as exc:  # handed to the waiting side
            value, error = None, exc
        done(value, error)

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name="activeprp-call", daemon=daemon).start()


def in_daemon_workers(calls: Sequence[Callable[[], T]], workers: int) -> list[concurrent.futures.Future]:
    """Each of ``calls`` run by one of ``workers`` daemon threads (``_in_daemon_thread``), in order, each call in a
    copy of the caller's context: one future per call, a call whose future is cancelled before a worker takes it is
    never run, and the workers end once no call is left. ``ThreadPoolExecutor``'s role, without its joins: Python
    waits for an executor's workers at its exit, so a call no longer waited for (cut at a deadline, with no timeout
    of its own) kept the process alive until it returned.

    Raises:
        ValueError: ``workers`` below 1 while there are calls.
    """
    if calls and workers < 1:
        raise ValueError(f"workers must be at least 1 to run {len(calls)} calls, got {workers}")
    futures = [concurrent.futures.Future() for _ in calls]
    queue = collections.deque(zip(futures, [partial(contextvars.copy_context().run, c) for c in calls]))

    def work() -> None:
        while True:
            try:
                future, call = queue.popleft()  # atomic: each call is taken by one worker
            except IndexError:
                return
            if not future.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                future.set_result(call())
            except BaseException as error:  # handed to the waiting side, as an executor's worker does
                future.set_exception(error)

    for _ in range(min(workers, len(calls))):
        _in_daemon_thread(work, lambda value, error: None)
    return futures


def thread_timeout(seconds: float | None) -> float | None:
    """``seconds`` as the timeout of a thread's wait: None (no limit) past ``threading.TIMEOUT_MAX`` (about 292
    years), which ``Lock.acquire`` and the futures' waits refuse with ``OverflowError``; a ``time_budget`` may be
    any finite number of seconds."""
    return None if seconds is None or seconds > threading.TIMEOUT_MAX else seconds


def within(call: Callable[[], T], seconds: float, hold: Hold | None = None) -> T | None:
    """``call()`` run in a daemon worker thread (``_in_daemon_thread``) and waited for at most ``seconds``: its
    value (or its exception, raised here), or None when it has not returned by then (it runs on; what it returns
    later is discarded). With ``hold``, the slots it holds stay taken until the thread returns (as ``in_thread``)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def done(value: Any, error: BaseException | None) -> None:
        future.set_result(value) if error is None else future.set_exception(error)

    _in_daemon_thread(call, done)
    if hold is not None:
        hold.keep_until(future)
    if not concurrent.futures.wait({future}, thread_timeout(max(seconds, 0.0))).done:
        return None
    return future.result()


async def in_thread(call: Callable[[], T], hold: Hold | None = None, daemon: bool = True) -> T:
    """``await call()`` run in a daemon thread (``_in_daemon_thread``; cancelling the wait leaves it running,
    outside the loop's default executor, which ``asyncio.run`` waits for at its exit; ``daemon=False``: the
    interpreter's exit waits for it). With ``hold``, the slots it holds stay taken until the thread returns, even
    when the wait is cut: the endpoint still has those calls."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    returned: concurrent.futures.Future = concurrent.futures.Future()  # set by the thread: the loop may be gone

    def settle(value: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_result(value) if error is None else future.set_exception(error)

    def done(value: Any, error: BaseException | None) -> None:
        returned.set_result(None)
        with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
            loop.call_soon_threadsafe(settle, value, error)

    _in_daemon_thread(call, done, daemon)
    # once the wait is cut nobody awaits it: its outcome is retrieved here (asyncio logs an exception never retrieved)
    future.add_done_callback(lambda f: f.cancelled() or f.exception())
    if hold is not None:
        hold.keep_until(returned)
    return await asyncio.shield(future)


_CUT = object()


async def _until(awaitable: Awaitable[T], seconds: float, guard: CallGuard, query: str) -> T | object:
    """``await awaitable`` for at most ``seconds``: its value, or ``_CUT`` when the deadline of ``query`` came
    first (it is cancelled). A timeout of the awaitable's own, before the deadline, propagates."""
    try:
        return await wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        if not guard.past(query):
            raise
        return _CUT


def sent_unknown(guard: CallGuard, n: int) -> None:
    """Record ``n`` calls as sent, their outcome unknown (``guard.record(None)``: spent, the breaker's streak
    unchanged)."""
    for _ in range(n):
        guard.record(None)


def cut_calls(guard: CallGuard, n: int) -> list[Judgment]:
    """The answers of ``n`` calls cut in flight at the deadline: sent (``sent_unknown``), their answers not
    awaited."""
    sent_unknown(guard, n)
    return [cut_in_flight()] * n


def answers_of(raw: Any, chunk: Sequence[Pair], guard: CallGuard) -> list[Judgment]:
    """A chunk's answers as ``Judgment`` objects (``to_judgments``). Answers that are not usable (``InvalidAnswer``)
    came back from calls that were sent: each is recorded on ``guard`` as a failed call before the error
    propagates, so the rerank's accounting counts them."""
    try:
        return to_judgments(raw, len(chunk))
    except InvalidAnswer as error:
        for _ in chunk:
            guard.record(False, str(error))
        raise


async def _chunked(query: str, pairs: Sequence[Pair], guard: CallGuard,
                   send: Callable[[str, Sequence[Pair], CallGuard], Awaitable[Any]]) -> list[Judgment]:
    """The chunk loop of ``Comparator.judge`` (``send`` never suspends) and ``ajudge``: ``send`` each chunk
    of ``guard.chunks(pairs)`` until the deadline of ``query``; ``send`` returns the chunk's judgments, ``_CUT``
    (cut in flight at the deadline: the rest is not sent) or None (not sent: no time or slot left). Returns one
    ``Judgment`` per pair, in order, the pairs not sent as ``unsent()``. An exception raised for a chunk (by
    ``send``, or the breaker open before it) propagates carrying the judgments of the chunks answered before it
    (``answered_before``): they were paid for, and the engine keeps them as answers."""
    out: list[Judgment] = []
    try:
        for chunk in guard.chunks(pairs):
            if guard.too_late(query):
                break
            answers = await send(query, chunk, guard)
            if answers is None:
                break
            if answers is _CUT:
                out.extend(cut_calls(guard, len(chunk)))
                break
            guard.record_all(answers)
            out.extend(answers)
    except Exception as error:
        with contextlib.suppress(AttributeError, TypeError):  # an exception that takes no attributes: none kept
            # set on every raise (an exception object raised again is not stale), with the question they answer:
            # one object may be raised for several queries (a client's stored error, a merged call's)
            setattr(error, _ANSWERED, (query, list(pairs[: len(out)]), out))
        raise
    return out + [unsent()] * (len(pairs) - len(out))


_ANSWERED = "activeprp_answered"
"""The attribute of an exception raised by the chunk loop that holds the judgments answered before it."""


def answered_before(error: BaseException, query: str, pairs: Sequence[Pair]) -> list[Judgment]:
    """The judgments of the first pairs of the batch ``query``, ``pairs`` (the same ``Candidate`` objects),
    answered by the chunks before the one ``error`` was raised for (the chunk loop of ``Comparator.judge`` /
    ``ajudge``), in order; [] when none, or when ``error`` was last raised for another batch (another query's, or a
    merged call's: the answers it holds are not this batch's). A driver hands them to ``Reranking.fail``."""
    kept = getattr(error, _ANSWERED, None)
    if not (isinstance(kept, tuple) and len(kept) == 3):
        return []
    asked, answered_pairs, answered = kept
    if asked != query or len(answered_pairs) > len(pairs) or any(
            a[0] is not b[0] or a[1] is not b[1] for a, b in zip(answered_pairs, pairs)):
        return []
    return list(answered)


@contextmanager
def stops_on_refusal(guard: CallGuard) -> Iterator[None]:
    """Around one query's calls: a ``ComparatorAuthError`` raised inside (a refused key, whichever comparator
    said so) stops every later call on ``guard`` (``trip``), the other queries' calls included."""
    try:
        yield
    except ComparatorAuthError as error:
        guard.trip(error)
        raise


@contextmanager
def spent_if_raises(comparator: Comparator, guard: CallGuard, n: int, asynchronous: bool) -> Iterator[None]:
    """Around a merged call of ``n`` items on ``guard`` (``comparator.judge_batch``, or ``ajudge_batch`` when
    ``asynchronous``) and the check of its answers (``to_judgments``), for ``rerank_many`` / ``arerank_many`` /
    ``RerankPool``: when it raises, the comparator's own batch method (a subclass overrides it and does not
    ``guards_calls``) was handed the ``n`` calls and recorded none of them, so they are recorded as sent, outcome
    unknown (``record(None)``), as ``_send_chunk`` counts a raising ``compare``. The base class's batch methods,
    a class that guards its calls, and an own method that recorded calls on ``guard`` keep their exact count."""
    before = guard.completed
    try:
        yield
    except Exception:
        name = "ajudge_batch" if asynchronous else "judge_batch"
        own = getattr(type(comparator), name) is not getattr(Comparator, name)
        if own and not comparator.guards_calls and guard.completed == before:
            sent_unknown(guard, n)
        raise


def outcome_of(call: Callable[[], T], guard: CallGuard) -> T | Exception:
    """``call()`` (the calls of one query, under ``stops_on_refusal``), or the exception it raised: a query's
    outcome in ``judge_each``."""
    try:
        with stops_on_refusal(guard):
            return call()
    except Exception as error:
        return error


def group_by_query(items: Sequence[Item]) -> list[tuple[str, list[Pair]]]:
    """Consecutive items of the same query as ``(query, pairs)`` groups, in order."""
    groups: list[tuple[str, list[Pair]]] = []
    for query, first, second in items:
        if not groups or groups[-1][0] != query:
            groups.append((query, []))
        groups[-1][1].append((first, second))
    return groups


class FreshState:
    """Copies and pickles of a comparator that holds state of this process (clients, locks, a loaded model): its
    configuration (every other attribute) is copied, and the copy makes its own state.

    ``copy.copy`` shares everything, ``fresh_state`` included (as ``with_prompts`` copies do; a counter, an int, is
    shared only as its value then: the copy counts on from it by itself). ``copy.deepcopy`` and pickling (Ray ships
    pickles to its workers) copy the configuration and call ``renew_state`` on the copy. Sharing
    one comparator between rerankers is safe: a rerank's caps, breaker and counters are its own. Counters a
    comparator keeps of its own work (``TransformersComparator.scored_prompts``; ``RemoteComparator`` keeps none)
    are state of the object, in ``fresh_state``: a deep copy or an unpickled comparator counts from 0. Used by
    ``RemoteComparator`` and ``TransformersComparator`` (list it before ``Comparator`` among the bases); other
    comparators keep Python's own copies and pickles (``__slots__`` and ``__reduce__`` included).

    Raises:
        TypeError: ``copy.deepcopy`` of a comparator holding an attribute that cannot be deep-copied (e.g. a
            framework model whose client holds a lock): the message names it and says what to do instead.
    """

    fresh_state: tuple[str, ...] = ()
    """The attributes that belong to this object in this process and are never copied (clients, locks, a loaded
    model, counters of its work): a deep copy or an unpickled comparator gets its own from ``renew_state``. A
    subclass holding such state names it here and makes it in ``renew_state``."""

    def renew_state(self) -> None:
        """Make the state of ``fresh_state`` anew: on a deep copy and an unpickled comparator, after their
        configuration is in place. Default: nothing."""

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle holds: every attribute but ``fresh_state``."""
        return {name: value for name, value in self.__dict__.items() if name not in self.fresh_state}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.renew_state()

    def __copy__(self) -> FreshState:
        """A shallow copy sharing everything, ``fresh_state`` included."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> FreshState:
        """A deep copy of the configuration (``__getstate__``) with state of its own (``__setstate__``, which runs
        ``renew_state``); the original is not touched.

        Raises:
            TypeError: an attribute that cannot be deep-copied, named, with what to do instead.
        """
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        state = {}
        for name, value in self.__getstate__().items():
            try:
                state[name] = copy.deepcopy(value, memo)
            except Exception as err:
                kind, why = type(value).__name__, self._message(f"{type(err).__name__}: {err}")
                raise TypeError(
                    f"{type(self).__name__} cannot be deep-copied: its {name} ({kind}) cannot be ({why}). Share the "
                    f"judge instead, which is safe (copy.copy(comparator), or a reranker's model_copy() without "
                    f"deep=True), or build a new {type(self).__name__} (or reranker) from a new {kind}. If you wrote "
                    f"{type(self).__name__} and its {name} is state of this process (a client, a lock), name it in "
                    f"fresh_state and make it in renew_state") from err
        new.__setstate__(state)
        return new

    def _message(self, text: str) -> str:
        """``text`` as an error message may show it (a subclass holding secrets replaces them). Default: as is."""
        return text


class Comparator:
    """Base class of pairwise judges (see the module docstring for what to override).

    Attributes:
        max_batch_size: prompts this comparator takes best in one ``judge_batch`` call (e.g. a local model's
            batch size); ``rerank_many`` merges the prompts of many queries up to it. None = no preference.
        max_concurrency: the default cap on calls in flight when the caller sets none (None = no cap).
        model_name: a readable name of the model for events, traces and logs (None = the class name).
        guards_calls: whether this class's ``judge`` / ``ajudge`` apply the ``CallGuard`` they are given
            themselves (chunks of ``max_concurrency``, the circuit breaker, deadlines, and ``record`` for each call
            sent, one cancelled in flight included: a batch cancelled past its deadline is billed for the calls
            recorded, no others), as ``RemoteComparator`` and ``TransformersComparator`` do. False (default): a
            subclass's ``judge`` / ``ajudge`` answer the pairs they are given, and the engine calls them chunk by
            chunk inside the base class's guarded loop (``guarded_judge``), in sync and async alike.

    Copies and pickles are Python's own; a comparator holding clients, locks or a loaded model also derives from
    ``FreshState``, as ``RemoteComparator`` and ``TransformersComparator`` do.

    Raises:
        TypeError: an instance of a subclass that overrides neither ``compare`` nor ``judge``.
    """

    max_batch_size: int | None = None
    max_concurrency: int | None = None
    model_name: str | None = None
    guards_calls: bool = False

    def __new__(cls, *args: Any, **kwargs: Any):
        # Checked when an instance is made, not when the class is defined: cloudpickle (Ray) rebuilds a class
        # defined in __main__ or a notebook empty first and sets its methods afterwards.
        if all(getattr(cls, m) is getattr(Comparator, m) for m in ("compare", "judge", "_judge_chunk")):
            raise TypeError(f"{cls.__name__} must implement compare(query, pairs) or judge(query, pairs)")
        return super().__new__(cls)

    #: The default ``estimate_tokens`` adds this to the prompt's UTF-8 bytes: chat-template framing and the
    #: one-label completion (a comparator with another template or longer answers overrides the method).
    ESTIMATE_OVERHEAD_TOKENS = 32

    @classmethod
    def estimate_tokens(cls, query: str, pairs: Sequence[Pair]) -> list[int]:
        """An upper bound of the prompt + completion tokens each call on ``pairs`` will report (one int >= 0 per
        pair, in order), reserved by the engine against ``token_budget`` before the calls are sent.

        Default (local, no tokenizer): the UTF-8 bytes of the PRP prompt (``prompts.PRP_PROMPT``) filled with the
        query and both texts, plus ``ESTIMATE_OVERHEAD_TOKENS``; a byte-level BPE token spans at least one byte,
        so this bounds any such tokenizer's count for that prompt. Comparators with a tokenizer or another prompt
        override it (exact counts for local models). A class method: a ``Reranking`` given no comparator uses it.
        """
        from .prompts import PRP_PROMPT, render

        return [len(render(PRP_PROMPT, query=query, first=a.text, second=b.text).encode("utf-8"))
                + cls.ESTIMATE_OVERHEAD_TOKENS for a, b in pairs]

    # ---- what subclasses implement (one of the two) -------------------------------------------------
    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float | None]:
        """P(first preferred) per ordered pair (None or NaN = the call failed)."""
        return [j.prob for j in self.judge(query, pairs)]

    async def acompare(self, query: str, pairs: Sequence[Pair]) -> list[float | None]:
        """Async ``compare``."""
        return [j.prob for j in await self.ajudge(query, pairs)]

    def _judge_chunk(self, query: str, chunk: Sequence[Pair]) -> Sequence[Any]:
        """One chunk's raw answers (floats, None or ``Judgment``s): the subclass's ``judge``, else ``compare``."""
        if type(self).judge is not Comparator.judge:
            return self.judge(query, chunk)
        return self.compare(query, chunk)

    def _native_async(self) -> Callable[[str, Sequence[Pair]], Awaitable[Sequence[Any]]] | None:
        """The subclass's ``ajudge``, else its ``acompare``; None: its chunks run ``_judge_chunk`` in a thread."""
        if type(self).ajudge is not Comparator.ajudge:
            return self.ajudge
        if type(self).acompare is not Comparator.acompare:
            return self.acompare
        return None

    def _ajudge_chunk(self, query: str, chunk: Sequence[Pair], hold: Hold | None = None) -> Awaitable[Sequence[Any]]:
        """One chunk's raw answers: natively async (``_native_async``), else ``_judge_chunk`` in a daemon thread
        whose slots (``hold``) stay taken until it returns (``in_thread``)."""
        native = self._native_async()
        return native(query, chunk) if native is not None else in_thread(partial(self._judge_chunk, query, chunk), hold)

    # ---- the engine's entry -------------------------------------------------------------------------
    def guarded_judge(self, query: str, pairs: Sequence[Pair], guard: CallGuard) -> list[Judgment]:
        """``judge`` under ``guard``: the class's own ``judge`` when it guards its calls (``guards_calls``), else
        the base class's chunk loop around it, so a subclass's ``judge`` gets the same chunks, circuit breaker
        and deadlines in ``rerank`` as in ``arerank``."""
        return (self.judge if self.guards_calls else partial(Comparator.judge, self))(query, pairs, guard=guard)

    async def aguarded_judge(self, query: str, pairs: Sequence[Pair], guard: CallGuard) -> list[Judgment]:
        """Async ``guarded_judge``."""
        return await (self.ajudge if self.guards_calls else partial(Comparator.ajudge, self))(query, pairs,
                                                                                            guard=guard)

    # ---- what the engine calls ----------------------------------------------------------------------
    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query``, in order, sent in chunks of at most
        ``guard.max_concurrency`` pairs, each holding as many of the guard's sync slots (a cap shared by every
        query using the guard), with the circuit breaker checked before each chunk. With a deadline
        (``guard.time_left``), no chunk is sent past it (nor once no slot frees before it) and each runs in a
        worker thread that is waited for at most the time left: a chunk still running then is cut (its late answers
        discarded; its slots stay taken until its thread returns), the chunks after it are not sent.

        Raises:
            ComparatorUnavailable / another ComparatorError: the guard stopped calls before a chunk.
            InvalidAnswer: a chunk answered with the wrong number of items or an answer that is not a number in [0, 1].
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        return run_blocking(_chunked(query, pairs, guard, partial(self._send_chunk, threads=True)))

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge``: chunks hold ``guard.slots`` (a cap shared by every query using the guard), and await
        ``acompare`` when the subclass has one, else run in a worker thread (a task cancelled mid-chunk stops
        before the next chunk; the thread finishes the chunk it is in). With a deadline, no chunk is sent past
        it and a chunk still running at the deadline is cancelled (cut)."""
        guard = guard or CallGuard(self.max_concurrency, None)
        return await _chunked(query, pairs, guard, self._send_chunk)

    async def _send_chunk(self, query: str, chunk: Sequence[Pair], guard: CallGuard,
                          threads: bool = False) -> list[Judgment] | object | None:
        """One chunk under ``guard``, for ``_chunked``: its slots (``threads``: the sync path's, and this never
        suspends), then its answers, ``_CUT`` or None (not sent: no slot before the deadline, or too late). A chunk
        the subclass's ``judge`` / ``compare`` raised on was handed to it: its calls are recorded as sent, outcome
        unknown (``record(None)``: spent, the breaker's streak unchanged), before the error propagates; a
        ``StopIteration`` as ``comparator_stopped``, on both paths."""
        try:
            async with guard.slots(len(chunk), guard.time_left(query), threads) as hold:
                guard.check()  # after the wait for slots: the breaker may have opened meanwhile
                left = guard.time_left(query)
                if left is not None and guard.too_late(query):
                    return None
                guard.sending(query, len(chunk))
                try:
                    raw = await (blocking(self._judge_within) if threads else self._ajudge_within)(
                        query, chunk, guard, hold, left)
                except asyncio.CancelledError:  # sent, its outcome unknown (e.g. the client went away)
                    cut_calls(guard, len(chunk))
                    raise
                except Exception as error:
                    sent_unknown(guard, len(chunk))
                    stop = _stop_iteration(error)
                    if stop is not None:
                        raise comparator_stopped(stop) from stop
                    raise
        except DeadlinePassed:  # no slot before the deadline
            return None
        return raw if raw is _CUT else answers_of(raw, chunk, guard)

    def _judge_within(self, query: str, chunk: Sequence[Pair], guard: CallGuard, hold: Hold,
                      left: float | None) -> Sequence[Any] | object:
        """A chunk's raw answers, here (no deadline), or from a worker thread waited for ``left`` seconds at most
        (``within``; its slots stay taken until it returns): ``_CUT`` when it did not return by then."""
        if left is None:
            return self._judge_chunk(query, chunk)
        answered = within(lambda: (self._judge_chunk(query, chunk),), left, hold)  # a 1-tuple: None is "cut" here
        return _CUT if answered is None else answered[0]

    def _ajudge_within(self, query: str, chunk: Sequence[Pair], guard: CallGuard, hold: Hold,
                       left: float | None) -> Awaitable[Sequence[Any] | object]:
        """Async ``_judge_within``: the chunk cancelled (``_until``) when it has not returned within ``left``."""
        sending = self._ajudge_chunk(query, chunk, hold)
        return sending if left is None else _until(sending, left, guard, query)

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)`` item, in order; items may belong to different
        queries. Default: ``judge`` per run of consecutive items of one query (``guarded_judge``)."""
        guard = guard or CallGuard(self.max_concurrency, None)
        return [j for query, pairs in group_by_query(items) for j in self.guarded_judge(query, pairs, guard)]

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``; by default the queries' ``ajudge`` calls run concurrently (the guard caps
        calls in flight across them)."""
        guard = guard or CallGuard(self.max_concurrency, None)
        parts = await gather_or_cancel([self.aguarded_judge(q, pairs, guard) for q, pairs in group_by_query(items)])
        return [j for part in parts for j in part]

    @property
    def batches_queries(self) -> bool:
        """Whether this comparator batches across queries (it sets ``max_batch_size``: a local model whose forward
        passes mix queries). ``rerank_many`` then sends it one merged ``judge_batch`` / ``ajudge_batch`` per step,
        the prompts of all its queries together, and ``RerankPool`` merges the rounds of concurrent requests;
        otherwise each query's calls go out on their own (``judge_each``; async: ``aguarded_judge`` per query,
        concurrently). A merged call that raises loses the answers of every query in it: they are asked again
        query by query to find the failing one."""
        return self.max_batch_size is not None

    def judge_each(self, asks: Sequence[tuple[str, Sequence[Pair], CallGuard]]) -> list[list[Judgment] | Exception]:
        """Per ``(query, pairs, guard)``: one ``Judgment`` per pair, or the exception its calls raised. One query's
        failure neither stops nor loses the others' answers (the sync entry of ``rerank_many`` when not
        ``batches_queries``; each query has its own guard, a ``RequestGuard``, which counts its calls). Default:
        ``guarded_judge`` per query, one after another."""
        return [outcome_of(partial(self.guarded_judge, query, pairs, guard), guard) for query, pairs, guard in asks]

    # ---- lifetime -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release what this comparator holds (clients, files). Default: nothing."""

    async def aclose(self) -> None:
        """Async ``close``."""
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _member(obj: Any, name: str) -> Any:
    """An optional member of a duck-typed comparator (None when absent)."""
    return getattr(obj, name, None)


class _Wrapped(Comparator):
    """A duck-typed comparator (``compare`` and optionally ``judge``/``acompare``/``ajudge``, ``estimate_tokens``,
    ``max_batch_size``, ``max_concurrency``, ``model_name``/``model``) as a ``Comparator``: its optional members
    are read once here, the only place that inspects a comparator's shape. Never closes or changes the object."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.max_batch_size, self.max_concurrency = _member(inner, "max_batch_size"), _member(inner, "max_concurrency")
        names = [_member(inner, "model_name"), _member(inner, "model")]
        self.model_name = next((n for n in names if isinstance(n, str) and n), type(inner).__name__)
        self._judge = _member(inner, "judge") if callable(_member(inner, "judge")) else inner.compare
        self._ajudge = next((m for m in (_member(inner, "ajudge"), _member(inner, "acompare")) if callable(m)), None)
        estimate = _member(inner, "estimate_tokens")
        self._estimate = estimate if callable(estimate) else None

    def estimate_tokens(self, query: str, pairs: Sequence[Pair]) -> list[int]:
        """The object's own ``estimate_tokens`` when it has one (its prompt may be longer than the base class's
        bound), else the base class's."""
        if self._estimate is None:
            return super().estimate_tokens(query, pairs)
        return self._estimate(query, pairs)

    def _judge_chunk(self, query: str, chunk: Sequence[Pair]) -> Sequence[Any]:
        return self._judge(query, chunk)

    def _native_async(self) -> Callable[[str, Sequence[Pair]], Awaitable[Sequence[Any]]] | None:
        return self._ajudge

    def __repr__(self) -> str:
        return repr(self.inner)


def as_comparator(comparator: Comparator | SupportsCompare) -> Comparator:
    """``comparator`` itself when it is a ``Comparator``, else a wrapper around an object with ``compare``.

    Raises:
        TypeError: as ``check_comparator``.
    """
    return comparator if isinstance(comparator, Comparator) else _Wrapped(check_comparator(comparator))


def check_comparator(comparator: Any) -> Any:
    """``comparator`` unchanged when it can judge pairs (a ``Comparator``, or an object with a callable
    ``compare``), without wrapping it (``as_comparator`` wraps).

    Raises:
        TypeError: the object has no callable ``compare``, or is a class (its ``compare`` is callable, but a call
            then lacks ``self``).
    """
    if isinstance(comparator, type):
        name = comparator.__name__
        raise TypeError(f"comparator must be an instance, got the class {name} (call it: {name}(...))")
    if not isinstance(comparator, Comparator) and not callable(_member(comparator, "compare")):
        raise TypeError(f"comparator must be a Comparator or have a compare(query, pairs) method, got "
                        f"{type(comparator).__name__}")
    return comparator


def comparator_name(comparator: Any) -> str:
    """A readable name for events, traces and logs: the comparator's ``model_name`` (for a duck-typed object its
    ``model_name`` or ``model`` string), else the class name."""
    try:
        return as_comparator(comparator).model_name or type(comparator).__name__
    except TypeError:  # not a comparator at all: still named, for an error message
        return type(comparator).__name__
