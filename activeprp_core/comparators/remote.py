"""The transport half of remote comparators: ``RemoteComparator`` owns retries (tenacity), the ``CallGuard``
bookkeeping, the sync thread pool, the async fan-out and the client lifetime (``clients``); a provider subclass
says what a pair's request, a reply and a failure (``failures``) mean. See docs/comparators-extending.md."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from functools import partial
from typing import Any

from ..budget import check_count, check_seconds  # noqa: F401 (check_seconds: importable here too)
from ..errors import ComparatorError, scrub
from ..slots import Hold, TimedOut, held, wait_for
from ..types import Judgment, Pair
from .answers import Answer, BilledReply, UnusableAnswer
from .base import (
    DEADLINE_SLACK,
    CallGuard,
    Comparator,
    DeadlinePassed,
    FreshState,
    Item,
    cut_before_retry,
    cut_calls,
    cut_in_flight,
    gather_or_cancel,
    in_daemon_workers,
    in_thread,
    outcome_of,
    thread_timeout,
    unsent,
)
from .clients import ComparatorClosed, LoopClients
from .failures import MAX_MESSAGE, Failure, Fault


def require(owner: str, extra: str, *modules: str) -> None:
    """Raise an ImportError naming ``extra`` when one of ``modules`` is not installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{owner} needs {', '.join(missing)}: install it with {extra}")


MAX_CONCURRENCY = 8
"""The default ``max_concurrency`` of a remote judge: the cap on requests in flight of each rerank that sets none
(per rerank, not per comparator: see ``RemoteComparator``)."""
MAX_ATTEMPTS = 3
"""The default ``max_attempts``: attempts of a call on a retried failure (timeouts, 429, 5xx ...)."""
BACKOFF_INITIAL = 0.5
"""The default ``backoff_initial`` (seconds): the first wait between attempts, doubled after each."""
BACKOFF_MAX = 8.0
"""The default ``backoff_max`` (seconds): the longest wait between attempts."""
MAX_RETRY_AFTER = 60.0
"""The default ``max_retry_after`` (seconds): the most of an endpoint's Retry-After that is honoured."""


class _Abandoned(Exception):
    """Raised inside a sync worker whose batch already raised: no further attempt is made."""


class RemoteComparator(FreshState, Comparator):
    """Base class of comparators that send one request per ordered pair to a remote model (an HTTP endpoint,
    or any Python callable such as a framework's chat model). A provider sets ``model`` and ``endpoint`` and
    implements ``request``, ``asend`` (``send`` for a sync path), ``parse`` and ``classify``, and the four
    client methods when it holds clients.

    Args (keyword, passed on by the provider's ``__init__``):
        max_concurrency: the cap on requests in flight of each rerank on this comparator that sets none (its
            ``max_concurrency=None``): a cap per rerank (a ``rerank_many`` is one), not per comparator, so N
            reranks at once on one comparator may have N times it in flight. One cap across an app's concurrent
            requests: rerank them through one ``stream.RerankPool`` (``pool.rerank`` per request, as ``activeprp
            serve`` does), whose guard's cap counts the calls of all of them. The defaults of these
            five are the module's constants (``MAX_CONCURRENCY`` 8, ``MAX_ATTEMPTS`` 3, ``BACKOFF_INITIAL`` 0.5 s,
            ``BACKOFF_MAX`` 8 s, ``MAX_RETRY_AFTER`` 60 s), the defaults of every remote judge too.
        max_attempts, backoff_initial, backoff_max, max_retry_after: up to ``max_attempts`` attempts on a
            ``Fault.RETRY``, exponential backoff with jitter (``backoff_initial`` x 2^k s plus up to
            ``backoff_initial``, at most ``backoff_max``), at least an asked Retry-After (capped at
            ``max_retry_after`` s). Retries are reported in ``Judgment.retries``, never billed.
        secrets: strings never shown in a message (replaced by ``***``).

    Copies and pickles (``FreshState``'s): a comparator is configuration (its settings and the objects it was given,
    e.g. a framework's model) plus state of this process that is never copied (``fresh_state``: the clients and
    their lock). ``copy.copy`` and ``with_prompts`` share everything, clients included (closing one closes them for
    both). ``copy.deepcopy`` and pickling (Ray ships a pickled object to its workers) copy the configuration, deep,
    and give the copy its own fresh state (``renew_state``: no client until its first call); the original is not
    touched. A pickle holds the configuration as it is, API key included. Sharing one comparator between rerankers
    is safe (a rerank's caps, breaker and counters are the rerank's own, never the comparator's).

    Raises:
        TypeError / ValueError: a count that is not an int >= 1, a time that is not a finite number >= 0.
        TypeError: ``copy.deepcopy`` of a comparator holding an object that cannot be deep-copied (LangChain's
            ``ChatOpenAI``, whose openai client holds a lock): the message names it and says to share the comparator
            instead (``copy.copy``, a reranker's ``model_copy()`` without ``deep=True``) or to build a new one.
    """

    guards_calls = True  # its judge / ajudge apply the guard

    model: str = ""
    """The model name (in messages; ``comparator_name``)."""
    endpoint: str = ""
    """Where requests go, for messages (never with credentials)."""
    attempt_timeout: float | None = None
    """The most seconds one attempt may take, whole, on the async path (``ajudge``: ``arerank``, ``activeprp serve``);
    past it the attempt is cancelled and fails as a timeout (retried, then a failed call for the circuit breaker).
    An HTTP client's own timeout is per read, so a judge that sends its answer a byte at a time never trips it.
    None: no cap but the deadline. A provider sets it to its ``timeout``. Not applied when ``sends_in_thread()``."""
    fresh_state: tuple[str, ...] = ("_clients",)
    """``FreshState.fresh_state``: the clients. A provider holding more such state (a client, a lock, a copy of the
    user's model wired to its clients) adds their names and makes them in ``renew_state``."""

    def __init__(self, *, max_concurrency: int = MAX_CONCURRENCY, max_attempts: int = MAX_ATTEMPTS,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 max_retry_after: float = MAX_RETRY_AFTER, secrets: Sequence[str] = ()) -> None:
        self.max_concurrency = check_count(max_concurrency, "max_concurrency", minimum=1)
        self.max_attempts = check_count(max_attempts, "max_attempts", minimum=1)
        self.backoff_initial = check_seconds(backoff_initial, "backoff_initial")
        self.backoff_max = check_seconds(backoff_max, "backoff_max")
        self.max_retry_after = check_seconds(max_retry_after, "max_retry_after")
        self._secrets = tuple(s for s in secrets if s)
        require(type(self).__name__, 'pip install "activeprp[openai]" (tenacity)', "tenacity")
        import tenacity  # noqa: F401 - now, not in the first call (a first call under a deadline must not import)

        RemoteComparator.renew_state(self)  # a provider's own part of it needs its settings, set after this

    def renew_state(self) -> None:
        """Make the state of ``fresh_state`` anew (the clients, none opened yet): on a deep copy and an unpickled
        comparator, after their configuration is in place (``FreshState.__deepcopy__`` / ``__setstate__``)."""
        self._clients = LoopClients(self.open_client, self.open_async_client, self.close_client, self.aclose_client)

    @property
    def model_name(self) -> str:
        """The model name, for events and logs."""
        return self.model

    # ---- extension points ---------------------------------------------------------------------------
    def request(self, query: str, first: str, second: str) -> Any:
        """The request for one ordered pair (passage texts), handed to ``send``/``asend`` as is."""
        raise NotImplementedError

    async def asend(self, client: Any, request: Any) -> Any:
        """Send ``request`` once with the running loop's client; return the raw reply or raise."""
        raise NotImplementedError

    def send(self, client: Any, request: Any) -> Any:
        """Sync ``asend`` with the sync client. Default: ``asend`` in a fresh event loop (no client), on a helper
        thread when this thread runs a loop (a sync ``rerank`` inside ``async def``, whose calls may run in the
        caller's thread): ``asyncio.run`` refuses a thread whose loop is running."""
        if asyncio._get_running_loop() is None:
            return asyncio.run(self.asend(None, request))
        (sent,) = in_daemon_workers([lambda: asyncio.run(self.asend(None, request))], 1)
        return sent.result()

    def sends_in_thread(self) -> bool:
        """Whether the async path sends each attempt through ``send`` in a worker thread (``base.in_thread``)
        instead of awaiting ``asend``: for a transport whose async call would block the event loop (a LlamaIndex
        ``CustomLLM``, whose ``achat`` runs the blocking ``chat``) or run in its default executor (LangChain's own
        ``_agenerate``), which ``asyncio.run`` waits for at its exit. Such a call holds its slot until its thread
        returns, also when the deadline cut it, and ``attempt_timeout`` does not cut its attempts (as on the sync
        path: a thread cannot be stopped, so a retry would run beside it, over ``max_concurrency``). Default:
        False."""
        return False

    def parse(self, response: Any) -> Answer:
        """The ``Answer`` in a reply (see ``answers.answer_from``). Raises ``ValueError`` only: not usable."""
        raise NotImplementedError

    def classify(self, error: Exception) -> Failure | None:
        """What a failed attempt means; None = not a transport failure (a bug): it propagates as is."""
        return None

    def timed(self, request: Any, seconds: float) -> Any:
        """``request`` with at most ``seconds`` as its own timeout, for an attempt sent under a deadline. Default:
        unchanged (the transport still stops waiting at the deadline: the async path cancels the attempt, the sync
        path stops waiting for its thread)."""
        return request

    def open_client(self) -> Any:
        """The sync client (made on first use, shared with ``with_prompts`` copies). Default: None."""

    def open_async_client(self) -> Any:
        """An async client for the running loop. Default: None (nothing to register or close)."""

    def close_client(self, client: Any) -> None:
        """Close a sync client."""

    async def aclose_client(self, client: Any) -> None:
        """Close an async client, inside its own loop."""

    # ---- one call -----------------------------------------------------------------------------------
    def _message(self, text: str) -> str:
        return scrub(text, self._secrets)[:MAX_MESSAGE]

    def _call_failed(self, error: BaseException, reason: str, status_code: int | None = None) -> str:
        """The message of a call that failed with ``error`` for ``reason``: the error's type, where the call went
        (``endpoint``, ``model``) and why, scrubbed and cut (``_message``), ending with its HTTP ``status_code``
        when it had one, as a ``ComparatorError`` says it ("(HTTP 500)"): an SDK's message may not say it (the
        openai SDK's is the body's ``error.message``), and a result's ``errors`` keep only this text."""
        where = (f" from {self.endpoint}" if self.endpoint else "") + (f" (model {self.model!r})" if self.model else "")
        status = "" if status_code is None else f" (HTTP {status_code})"
        return self._message(f"{type(error).__name__}{where}: {reason}")[:MAX_MESSAGE - len(status)] + status

    def _fault(self, error: BaseException) -> Failure | None:
        if isinstance(error, AttemptTimedOut):
            return Failure(Fault.RETRY, str(error))
        if isinstance(error, (ComparatorError, ComparatorClosed)) or not isinstance(error, Exception):
            return None
        return self.classify(error)

    def _send_open(self, client: Any, request: Any) -> Any:
        """``send``; a failure on a client that ``close`` ended meanwhile raises ``ComparatorClosed``."""
        try:
            return self.send(client, request)
        except Exception:
            self._raise_if_closed(client)
            raise

    async def _asend_open(self, client: Any, request: Any) -> Any:
        """Async ``_send_open``: ``asend``."""
        try:
            return await self.asend(client, request)
        except Exception:
            self._raise_if_closed(client)
            raise

    def _raise_if_closed(self, client: Any) -> None:
        """Raise ``ComparatorClosed`` when ``close`` / ``aclose`` ended ``client`` after a call took it: its attempt
        failed for that (httpx: "the client has been closed"), not for the endpoint."""
        if not self._clients.current(client):
            raise ComparatorClosed(f"{type(self).__name__} was closed (close(), aclose() or the end of a with block) "
                                   "while a rerank's call was in flight on its client: close a shared comparator "
                                   "once no rerank uses it") from None

    def _handled(self, error: Exception) -> bool:
        return isinstance(error, ComparatorError) or self._fault(error) is not None

    def _call(self, guard: CallGuard, item: Item, stop: _Stop, abandoned: threading.Event,
              job: _Job | None = None) -> Judgment:
        """One call in a worker thread: no attempt once ``stop`` is set (not sent: ``stop.unsent()``; a retry
        withheld at the deadline fails the call, ``_deadline_cut``; one withheld as its batch stopped is recorded
        as sent, outcome unknown), no record once ``abandoned`` (raised), nor
        once the waiting side cut it at the deadline (``job.cut_at_deadline``, with its attempts: ``job.cut``):
        whichever side records the call first is the only one that does (``job.claim``)."""
        from tenacity import Retrying

        if stop.is_set():
            return stop.unsent()
        query = item[0]
        if guard.too_late(query):
            return unsent()
        guard.check()
        request, client = self.request(query, item[1].text, item[2].text), self._clients.sync()
        tries = _Attempts(guard, query)
        if job is not None:
            job.cut = partial(self._deadline_cut, tries)

        def record() -> bool:  # not once its batch raised, nor when the waiting side cut it first
            return not abandoned.is_set() and (job is None or job.claim())

        def attempt() -> Any:
            if tries.count:  # a retry: not once the batch or the rerank has stopped
                if stop.is_set():
                    raise _Abandoned
                guard.check()
            return tries.send(partial(self._send_open, client), request, self.timed)

        retrying = _retrying(self, Retrying, tries, sleep=stop.wait)  # a backoff wait ends at its stop
        try:
            response = retrying(attempt)
            outcome = _settle(self, guard, retrying, response, record=record(), seconds=tries.seconds())
        except _Abandoned:  # stopped before a retry: the deadline withheld it (failed), else its batch stopped
            if stop.at_deadline:
                outcome = self._deadline_cut(tries, record())
            else:  # its attempts went out: billed, outcome unknown (the waiting side bills it if it claims first)
                if record():
                    tries.sent_unknown()
                outcome = None
        except Exception as err:
            outcome = self._after(err, guard, retrying, tries, record=record())
        if outcome is None:  # the stopped guard's error (a 401, an open breaker), else dropped with its ask's raise
            guard.check()
            outcome = Judgment(None, tries.retries, error=f"not retried: {stop.reason}")
        if isinstance(outcome, ComparatorError):
            raise outcome  # outside the except block: the client's error (and its body) is not chained
        return outcome

    async def _acall(self, guard: CallGuard, item: Item) -> Judgment:
        from tenacity import AsyncRetrying

        query, threaded = item[0], self.sends_in_thread()
        # a thread cannot be stopped: an attempt cut at attempt_timeout would run on beside its retry, over the cap
        cap = None if threaded else self.attempt_timeout
        request, tries = self.request(query, item[1].text, item[2].text), _Attempts(guard, query, cap)

        async def attempt(send: Callable[[Any], Awaitable[Any]]) -> Any:  # a coroutine function: tenacity awaits it
            if tries.count:  # a retry: not once the rerank has stopped
                guard.check()
            return await tries.asend(send, request, self.timed)

        retrying = _retrying(self, AsyncRetrying, tries)
        try:
            async with guard.slots(1, guard.time_left(query)) as hold:
                guard.check()
                # the client now, not the batch's: a call that starts after a close() opens a new one
                send = self._threaded(hold) if threaded else partial(self._asend_open,
                                                                     await self._clients.for_running_loop())
                try:
                    response = await retrying(attempt, send)
                    outcome = _settle(self, guard, retrying, response, seconds=tries.seconds())
                except asyncio.CancelledError:
                    if tries.count:  # it went out: it counts as spent, its outcome is unknown
                        tries.sent_unknown(seconds=tries.unanswered())
                    raise
                except Exception as err:
                    outcome = self._after(err, guard, retrying, tries)
        except DeadlinePassed:  # no slot before the deadline
            return unsent()
        if isinstance(outcome, ComparatorError):
            raise outcome
        return outcome

    def _threaded(self, hold: Hold) -> Callable[[Any], Awaitable[Any]]:
        """The async path's send for a provider whose ``asend`` would block the loop (``sends_in_thread``): ``send``
        with the sync client, in a daemon thread whose slot (``hold``) stays taken until it returns. Its attempt is
        cut at the deadline as an awaited one is (the wait for the thread ends; its late answer is discarded)."""
        client = self._clients.sync()
        return lambda req: in_thread(partial(self._send_open, client, req), hold)

    def _after(self, error: Exception, guard: CallGuard, retrying: Any, tries: _Attempts,
               record: bool = True) -> Judgment | ComparatorError:
        """The outcome of a call whose attempts ended in ``error``: not sent (the deadline came first), cut (its
        last attempt was still waiting at the deadline, or failed only at it: spent, recorded as outcome unknown,
        so the breaker neither counts nor resets on it), or ``_settle``'s reading of ``error``: also when its retry
        would have started past the deadline (``_retrying`` ends it at once, with no wait, whether the backoff or
        the endpoint's Retry-After made the wait that long): the endpoint answered every attempt with a failure
        before the deadline, so the call failed, and the breaker counts it (``_Attempts.withheld``).

        Raises:
            ``error`` itself when it is no transport failure (a bug), or a ``ComparatorClosed``: recorded as sent,
            its outcome unknown, so the rerank's accounting bills it.
        """
        if isinstance(error, (DeadlinePassed, _InFlight)):
            # cut: in flight at the deadline, failed only at it (late), or its retry stopped by it
            return self._deadline_cut(tries, record) if tries.count else unsent()
        if not self._handled(error):  # a ComparatorClosed, or a bug: sent (billed), the breaker unchanged
            if record and tries.count:
                tries.sent_unknown()
            raise error
        if tries.timed_out(self._fault(error)):  # its last attempt failed only at the deadline: cut in flight
            return self._deadline_cut(tries, record)
        return _settle(self, guard, retrying, error=error, record=record, retries=tries.retries,
                       withheld=tries.withheld)

    def _deadline_cut(self, tries: _Attempts, record: bool) -> Judgment:
        """A call the deadline stopped: failed (``_settle``, ``withheld``) when its last attempt failed before the
        deadline with a transient error and the deadline kept its retry from going out (its worker woke from its
        backoff past the deadline, or the waiting side stopped it in its backoff); else cut (``_cut``), by
        slowness alone when no attempt of it failed before the deadline, or as a judge error (``cut_before_retry``,
        with that attempt's error: ``tries.judge_error``) when its retry was cut in flight (a dead judge slower
        than the time left)."""
        error = tries.judge_error
        if error is None:
            return _cut(tries, record)
        fault = self._fault(error)
        if tries.out_since is None and fault is not None and fault.fault is Fault.RETRY:
            return _settle(self, tries.guard, None, error=error, record=record, retries=tries.retries,
                           withheld=True)  # type: ignore[return-value]  # a RETRY failure settles as a Judgment
        return _cut(tries, record, self._call_failed(error, _reason(fault, error), _status(fault)), _status(fault))

    def _honoured(self, failure: Failure | None) -> float | None:
        """The seconds ``failure``'s endpoint asked to wait (its Retry-After) as honoured: capped at
        ``max_retry_after``; None when it asked none."""
        return None if failure is None or failure.retry_after is None else min(failure.retry_after,
                                                                               self.max_retry_after)

    # ---- what the engine calls ----------------------------------------------------------------------
    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ``(query, first, second)``, sent by up to ``guard.max_concurrency`` threads, each call
        holding one of the guard's slots (one cap with ``ajudge_batch`` and every other thread on the guard). When
        a call raises, queued calls are dropped and no retry starts; the batch raises at once when the guard is
        stopped (a 401, an open breaker), else once the calls in flight have answered.

        Raises:
            ComparatorError: a call raised (see ``failures``).
            slots.LoopBlocked: called on a thread that runs an event loop whose tasks hold every slot of ``guard``
                (await ``ajudge_batch`` there); nothing sent.
        """
        guard = guard or CallGuard(self.max_concurrency, None)
        answers = _in_threads(self._call, [(guard, items)])[0]
        if isinstance(answers, Exception):
            raise answers
        return answers

    def judge_each(self, asks: Sequence[tuple[str, Sequence[Pair], CallGuard]]) -> list[list[Judgment] | Exception]:
        """``Comparator.judge_each`` with every query's calls in one pool of up to ``max_concurrency`` threads (the
        queries' guards share the cap): a call that raises stops its own query's calls (see ``judge_batch``), and
        every query's once the guard stops (a 401, an open breaker)."""
        return _in_threads(self._call, [(guard, [(query, a, b) for a, b in pairs]) for query, pairs, guard in asks])

    async def ajudge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge_batch``: concurrent requests, at most ``guard.max_concurrency`` at a time; when one
        raises, the others are cancelled."""
        guard = guard or CallGuard(self.max_concurrency, None)
        return await gather_or_cancel([self._acall(guard, item) for item in items])

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """One ``Judgment`` per ordered pair of ``query`` (see ``judge_batch``)."""
        return self.judge_batch([(query, a, b) for a, b in pairs], guard=guard)

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        """Async ``judge`` (see ``ajudge_batch``)."""
        return await self.ajudge_batch([(query, a, b) for a, b in pairs], guard=guard)

    def close(self) -> None:
        """Close the clients (shared with ``with_prompts`` copies), each async one on its own loop. A later
        call opens new ones; a call in flight on one of them fails, and its rerank raises ``ComparatorClosed`` (a
        ``RuntimeError``: close a shared comparator once no rerank uses it), not retried, not counted by the
        circuit breaker."""
        self._clients.close()

    async def aclose(self) -> None:
        """Async ``close``: awaits the running loop's client."""
        await self._clients.aclose()


def _in_threads(call: Any, asks: Sequence[tuple[CallGuard, Sequence[Item]]]) -> list[list[Judgment] | Exception]:
    """``call(guard, item, stop, abandoned)`` per item of each ask ``(guard, items)``, in at most ``max_concurrency``
    daemon threads (the first guard's: the asks' guards share one cap; ``base.in_daemon_workers``, so a cut call
    never holds up the interpreter's exit), each in a copy of the caller's context (its ``contextvars``, as
    ``asyncio.to_thread`` does: a framework's callbacks and tracing see the calls), each call holding one of its
    guard's slots (``_holding_a_slot``: the guard's cap counts the calls of every batch and of the async path at
    once, not these threads).

    Returns per ask its judgments, or the exception of its call that raised: that drops the ask's queued calls and
    starts no retry of its own (the other asks go on), and ends the wait at once when its guard stopped (a 401, an
    open breaker) or it was a ``ComparatorClosed`` (the comparator closed under it: no ask sends another call); the
    ask's calls still in flight then are recorded as sent, outcome unknown (billed; their answers dropped). Under
    deadlines the calls are waited for until the last of the asks' deadlines: a call not started by then (or
    still waiting for its slot) is not sent, one still running is cut (its thread runs on, holding its slot; its
    late answer is discarded).

    Raises:
        BaseException: a call's ``KeyboardInterrupt`` or ``SystemExit`` (any exception that is no ``Exception``),
            as itself and at once, not as its ask's outcome: every ask's queued calls are dropped and no retry
            starts (calls in flight run on in their threads, their answers dropped).
        slots.LoopBlocked: the calling thread runs an event loop whose tasks hold every slot of a guard (they give
            them back only when this thread returns to its loop): nothing is sent.
    """
    jobs = [(k, guard, item) for k, (guard, items) in enumerate(asks) for item in items]
    stops, abandoned = [_Stop() for _ in asks], threading.Event()
    lefts = [guard.time_left(item[0]) for _, guard, item in jobs]
    timeout = None if not jobs or None in lefts else thread_timeout(max(0.0, max(lefts)))
    workers = min(asks[0][0].max_concurrency or len(jobs), len(jobs)) if jobs else 0
    # the workers wait for the slots and run no loop: a wait the caller's own loop blocks is refused here
    for slots in {id(s): s for s in (guard.fair_slots for guard, items in asks if items) if s is not None}.values():
        slots.refuse_own_loop(1)
    if workers <= 1 and timeout is None:
        def slotted(guard: CallGuard, item: Item, stop: _Stop, abandoned: threading.Event) -> Judgment:
            return _holding_a_slot(call, guard, item, stop, abandoned, _Job())

        out: list[list[Judgment] | Exception] = []
        for (guard, items), stop in zip(asks, stops):
            if any(isinstance(outcome, ComparatorClosed) for outcome in out):
                stop.set(_Stop.STOPPED)
            out.append(_in_turn(slotted, guard, items, stop, abandoned))
        return out
    holding = [_Job() for _ in jobs]
    futures = in_daemon_workers([partial(_holding_a_slot, call, guard, item, stops[k], abandoned, job)
                                 for (k, guard, item), job in zip(jobs, holding)], workers)
    owners = [[(f, job) for f, job, (k, _, _) in zip(futures, holding, jobs) if k == ask] for ask in range(len(asks))]
    try:
        at_deadline = _wait([[f for f, _ in own] for own in owners], stops, [guard for guard, _ in asks], timeout)
        for future in futures:  # also one that raised as the wait ended (at the deadline, or a guard's stop)
            if future.done() and not future.cancelled():
                _raise_interrupt(future)
        for stop in stops:  # before reading which calls hold a slot: one that gets it now sends nothing
            stop.set(_Stop.DEADLINE if at_deadline else _Stop.STOPPED, at_deadline)
        out: list[list[Judgment] | Exception] = []
        for (guard, _), own, stop in zip(asks, owners, stops):
            failed = next((f for f, _ in own if f.done() and not f.cancelled() and f.exception()), None)
            if failed is not None:
                for f, job in own:  # still in flight once past its checks (the wait ended as its guard stopped)
                    if not f.done() and job.cut is not None and job.claim():
                        job.cut(True)  # sent: billed, outcome unknown, with its attempts
                out.append(failed.exception())  # type: ignore[arg-type]
                continue
            out.append([f.result() if f.done() else stop.unsent() if f.cancel() or not job.has_slot.is_set()
                        else job.cut_at_deadline(guard) for f, job in own])
        return out
    finally:
        abandoned.set()
        for stop in stops:
            stop.set(_Stop.ENDED)
        for future in futures:  # the queued calls: never run
            future.cancel()


class _Stop:
    """The stop of one ask of ``_in_threads``, and why: once set, a call of the ask not sent yet is not sent
    (``unsent``, refunded: it cost nothing) and no retry of it starts. Set once, by the waiting thread only."""

    FAILED = "the batch already failed"
    """A call of the ask raised: its calls' judgments are dropped for that error."""
    DEADLINE = "the time budget ran out"
    """The wait reached the deadline (``at_deadline``): a call still queued or waiting for its slot is not sent."""
    STOPPED = "the judge was stopped"
    """The wait ended when a guard stopped (a 401, an open breaker) or the comparator was closed under a call."""
    ENDED = "the batch already returned"
    """The batch returned (or raised): its judgments are no longer read."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self.at_deadline = False

    def set(self, reason: str, at_deadline: bool = False) -> None:
        """Stop, for ``reason`` (one of the class's reasons); a stop already set keeps its first reason."""
        if not self._event.is_set():
            self.reason, self.at_deadline = reason, at_deadline
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set or for ``timeout`` seconds (a retry's backoff, which the stop ends); whether it is set."""
        return self._event.wait(timeout)

    def unsent(self) -> Judgment:
        """The judgment of a call this stop kept from being sent."""
        return unsent(f"not sent: {self.reason}")


class _Job:
    """One call of ``_in_threads`` as its waiting side sees it: ``has_slot`` once it holds a slot, and ``cut`` (set
    by the call once it has attempts to tell of) the ``Judgment`` of cutting it at the deadline, recorded when
    given True. The call is recorded on its guard once, by whichever of the worker (settling it) and the waiting
    side (cutting it at the deadline) ``claim``s it first: a worker that wakes from its backoff, or whose answer
    comes, just as the waiting side cuts it records nothing."""

    def __init__(self) -> None:
        self.has_slot = threading.Event()
        self.cut: Callable[[bool], Judgment] | None = None
        self._claimed = False
        self._lock = threading.Lock()

    def claim(self) -> bool:
        """Whether the caller is the first to record this call (True once, to one thread)."""
        with self._lock:
            first, self._claimed = not self._claimed, True
        return first

    def cut_at_deadline(self, guard: CallGuard) -> Judgment:
        """The waiting side's judgment of the call, still running at the deadline: cut with its attempts
        (``cut``), or in flight when it has not set ``cut`` yet; recorded on ``guard`` unless the worker recorded
        the call first."""
        record = self.claim()
        if self.cut is not None:
            return self.cut(record)
        return (cut_calls(guard, 1) if record else [cut_in_flight()])[0]


def _holding_a_slot(call: Any, guard: CallGuard, item: Item, stop: _Stop, abandoned: threading.Event,
                    job: _Job) -> Judgment:
    """``call(guard, item, stop, abandoned, job)`` holding one of ``guard``'s slots, waited for by this thread (set
    ``job.has_slot`` once it has it; ``call`` then checks ``stop`` first): not sent once ``stop`` is set, nor when no
    slot frees before the deadline of the item's query."""
    if stop.is_set():
        return stop.unsent()
    try:
        with held(guard.slots(1, guard.time_left(item[0]), threads=True)):
            job.has_slot.set()
            return call(guard, item, stop, abandoned, job)
    except DeadlinePassed:  # no slot before the deadline
        return unsent()


def _in_turn(call: Any, guard: CallGuard, items: Sequence[Item], stop: _Stop,
             abandoned: threading.Event) -> list[Judgment] | Exception:
    """``call`` per item of one ask in this thread: its judgments, or the exception of the first call that raised."""
    return outcome_of(lambda: [call(guard, item, stop, abandoned) for item in items], guard)


def _wait(owners: list[list[Future]], stops: list[_Stop], guards: list[CallGuard], timeout: float | None) -> bool:
    """Wait for the calls of every ask (``owners[k]``: ask k's futures) for at most ``timeout`` seconds (None: no
    limit); a call that raises stops its ask (``stops[k]``) and drops its queued calls, and ends the wait when the
    ask's guard stopped (``guards[k].error``) or it raised ``ComparatorClosed``. Returns whether the wait ended at
    ``timeout`` (the deadline) with calls pending."""
    until = None if timeout is None else time.monotonic() + timeout
    ask_of = {future: k for k, own in enumerate(owners) for future in own}
    pending = set(ask_of)
    while pending:
        left = None if until is None else until - time.monotonic()
        if left is not None and left <= 0:
            return True
        done, pending = wait(pending, timeout=left, return_when=FIRST_EXCEPTION)
        for future in done:
            if future.cancelled() or future.exception() is None:
                continue
            _raise_interrupt(future)
            k = ask_of[future]
            stops[k].set(_Stop.FAILED)
            for queued in owners[k]:
                queued.cancel()
            if guards[k].error is not None or isinstance(future.exception(), ComparatorClosed):
                return False
    return False


def _raise_interrupt(future: Future) -> None:
    """Raise the exception of the finished ``future`` when it is no ``Exception`` (a ``KeyboardInterrupt``, a
    ``SystemExit``): it is no ask's outcome but propagates as itself, as it does from a call in this thread; the
    caller's ``finally`` then stops every ask (queued calls dropped, no retry started)."""
    error = future.exception()
    if error is not None and not isinstance(error, Exception):
        raise error


class _InFlight(Exception):
    """Raised by an attempt still waiting for its answer at the deadline (it was cancelled)."""


class AttemptTimedOut(Exception):
    """Raised by an attempt that took ``RemoteComparator.attempt_timeout`` seconds before the deadline (it was
    cancelled): a transport failure that retries."""


class _Attempts:
    """The attempts of one call to ``query`` under ``guard``: how many went out, the last one's error, and whether
    the deadline cut the last one. An attempt is not sent past the deadline (``DeadlinePassed``) and is sent with
    the time left as its timeout (the provider's ``timed``); on the async path it is cancelled after ``cap`` seconds
    (``RemoteComparator.attempt_timeout``) or at the deadline, whichever comes first."""

    def __init__(self, guard: CallGuard, query: str, cap: float | None = None) -> None:
        self.guard, self.query, self.cap = guard, query, cap
        self.count, self.late = 0, False  # late: the last attempt failed past the deadline
        self.left: float | None = None  # the seconds left when the last attempt failed (None: no deadline)
        self.judge_error: Exception | None = None  # the last error of an attempt that failed before the deadline
        self.sent_at: float | None = None  # when the first attempt went out (on guard.clock)
        self.out_since: float | None = None  # when the last attempt went out, unless it failed before the deadline
        self.withheld = False  # the deadline, not the endpoint, kept its retry from going out (``retry_too_late``)

    @property
    def retries(self) -> int:
        """The attempts after the first (0 when none went out): the call's ``Judgment.retries``."""
        return max(self.count - 1, 0)

    def sent_unknown(self, reason: str | None = None, seconds: float | None = None,
                     status_code: int | None = None) -> None:
        """Record the call on its guard as sent, its outcome unknown (``CallGuard.record(None, ...)``: billed, the
        breaker's streak unchanged), with its ``retries``: every such record site of a call goes through here."""
        self.guard.record(None, reason, retries=self.retries, seconds=seconds, status_code=status_code)

    def unanswered(self) -> float | None:
        """Seconds the last attempt has been out with no answer, for a call cut now (at the deadline, or cancelled):
        None when no attempt went out or the last one failed before the deadline (the endpoint answered it, with
        an error). What ``CallGuard.record`` is told as a cut call's ``seconds``."""
        return None if self.out_since is None else self.guard.clock() - self.out_since

    def seconds(self) -> float | None:
        """Seconds since the first attempt went out (on ``guard.clock``): the call's own latency once answered,
        its wait for a slot not counted (None: no attempt went out)."""
        return None if self.sent_at is None else self.guard.clock() - self.sent_at

    def _failed(self, error: Exception) -> None:
        self.late, self.left = self.guard.past(self.query), self.guard.time_left(self.query)
        if not self.late:
            self.judge_error, self.out_since = error, None

    def _left(self) -> float | None:
        """Seconds until the deadline (None: no deadline); ``DeadlinePassed`` once the call's first attempt would end
        past it (``guard.too_late``: no more time left than the call floor), or a retry's once it has passed
        (``guard.past``): a round's latency says nothing of one retry's, and a retry withheld by it would be a
        judge error that only the estimate made (a lone request got a 503 with 2 s left)."""
        left = self.guard.time_left(self.query)
        if left is not None and (self.guard.past(self.query) if self.count else self.guard.too_late(self.query)):
            raise DeadlinePassed
        return left

    def _start(self, request: Any, timed: Any) -> tuple[Any, float | None]:
        left = self._left()
        if not self.count:
            self.sent_at = self.guard.clock()
            self.guard.sending(self.query)
        self.count += 1
        self.out_since = self.guard.clock()
        return (request if left is None else timed(request, left)), left

    def send(self, call: Any, request: Any, timed: Any) -> Any:
        request, _ = self._start(request, timed)
        try:
            return call(request)
        except Exception as error:
            self._failed(error)
            raise

    async def asend(self, call: Any, request: Any, timed: Any) -> Any:
        async def attempt() -> Any:  # checked when it runs: a busy loop may start it later than it was made
            return await call(self._start(request, timed)[0])

        left = self._left()
        limit = self.cap if left is None else left if self.cap is None else min(left, self.cap)
        try:
            return await wait_for(attempt(), limit)
        except asyncio.TimeoutError as error:  # the cap or the deadline cut it, or the provider's own timeout
            if self.guard.past(self.query):
                raise _InFlight from None
            if isinstance(error, TimedOut):  # the cap (``attempt_timeout``), before the deadline
                error = AttemptTimedOut(f"the attempt timed out after {limit:.3g} s")
            self._failed(error)
            raise error from None
        except DeadlinePassed:
            raise
        except Exception as error:
            self._failed(error)
            raise

    def asked_past_deadline(self, asked: float | None) -> bool:
        """Whether the endpoint, failing the last attempt, asked to wait ``asked`` seconds (its Retry-After as
        honoured; None: it asked none) and so past the deadline, counted from that failure: the endpoint, not the
        deadline, keeps the retry from going out in time (``retry_too_late``)."""
        return asked is not None and self.left is not None and self.left - asked <= DEADLINE_SLACK

    def retry_too_late(self, wait: float, asked: float | None) -> bool:
        """Whether a retry after ``wait`` seconds (the backoff, at least the endpoint's Retry-After ``asked``) would
        start past the deadline (``DEADLINE_SLACK`` before it): then it is not waited for, and the call ends at
        once, failed with the last attempt's error (a wait into the deadline held its call, and its slot, until
        then for nothing). ``withheld`` is set unless the endpoint asked to wait that long
        (``asked_past_deadline``): the deadline kept the retry from going out, a failure the breaker counts as a
        suspect one (``CallGuard.record``'s ``unusable``), since a passing fault at the end of a time budget can
        fail a whole round's calls in a row. It was a cut (outcome unknown), which the breaker never counted: a
        dead endpoint under a short time budget got every call of each round and never opened it."""
        left = self.guard.time_left(self.query)
        if left is None or left - wait > DEADLINE_SLACK:
            return False
        self.withheld = not self.asked_past_deadline(asked)
        return True

    def timed_out(self, fault: Failure | None) -> bool:
        """Whether the last attempt, failing (a failure of kind ``fault``) only once the deadline had passed, was
        cut by it (its timeout was the time left) rather than failed."""
        return fault is not None and fault.fault in (Fault.RETRY, Fault.FAIL) and self.late


def _retrying(comp: RemoteComparator, kind: Any, tries: _Attempts | None = None, **kw: Any) -> Any:
    """A tenacity ``Retrying``/``AsyncRetrying`` (``kind``) with ``comp``'s retry policy. No wait starts that would
    end past the deadline of the call's query (``tries.retry_too_late``, whether the backoff or the endpoint's
    Retry-After made it that long): the retry could never go out, so the call ends at once."""
    from tenacity import retry_if_exception, stop_after_attempt, stop_any, wait_exponential_jitter

    backoff = wait_exponential_jitter(multiplier=comp.backoff_initial, max=comp.backoff_max,
                                      jitter=comp.backoff_initial)

    def asked(state: Any) -> float | None:
        return comp._honoured(comp._fault(state.outcome.exception()) if state.outcome else None)

    def wait_s(state: Any) -> float:
        ask = asked(state)
        return backoff(state) if ask is None else max(backoff(state), ask)

    def transient(error: BaseException) -> bool:
        failure = comp._fault(error)
        return failure is not None and failure.fault is Fault.RETRY

    def too_late(state: Any) -> bool:  # tenacity runs it after wait_s: upcoming_sleep is the wait
        return tries is not None and tries.retry_too_late(state.upcoming_sleep, asked(state))

    return kind(retry=retry_if_exception(transient), wait=wait_s, reraise=True,
                stop=stop_any(stop_after_attempt(comp.max_attempts), too_late), **kw)


def _settle(comp: RemoteComparator, guard: CallGuard, retrying: Any, response: Any = None,
            error: Exception | None = None, record: bool = True, retries: int | None = None,
            seconds: float | None = None, withheld: bool = False) -> Judgment | ComparatorError:
    """The outcome of one call that reached the endpoint: a ``Judgment`` (answered or failed), or the
    ``ComparatorError`` to raise (recorded, and tripped when the endpoint refuses every call). ``retries``:
    the attempts after the first (default: tenacity's count). ``seconds``: the call's own latency (``_Attempts``:
    from its first attempt's send), recorded with an answer (``CallGuard.record``: the call floor). ``withheld``:
    the deadline kept the failed call's retry from going out, recorded as a suspect failure (``unusable``: a
    breaker opens on a streak of them only while the judge has not answered, or checks it with a probe first)."""
    retries = retrying.statistics.get("attempt_number", 1) - 1 if retries is None else retries
    failure = None if error is None else comp._fault(error)
    unusable = False
    if error is None:
        try:
            prob, prompt_tokens, completion_tokens = comp.parse(response)
            outcome = Judgment(prob, retries, prompt_tokens, completion_tokens)
        except ValueError as err:  # billed all the same when the endpoint reported tokens (BilledReply)
            # an UnusableAnswer is a reply with neither A nor B, which a prompt can cause; any other ValueError is
            # a body that is no reply at all (a gateway's error page with a 200): the endpoint is down
            unusable = isinstance(err, UnusableAnswer)
            tokens = (err.prompt_tokens, err.completion_tokens) if isinstance(err, BilledReply) else (0, 0)
            outcome = Judgment(None, retries, *tokens, error=comp._message(f"unusable answer: {err}"))
        ok, reason = outcome.prob is not None, outcome.error
    elif isinstance(error, ComparatorError):  # the guard stopped the retries
        outcome, ok, reason = error, False, error.message
    elif failure is None or failure.fault in (Fault.RETRY, Fault.FAIL):
        ok, reason = False, comp._call_failed(error, _reason(failure, error), _status(failure))
        outcome = Judgment(prob=None, retries=retries, error=reason, status_code=_status(failure))
    else:
        outcome = failure.error(comp._call_failed(error, failure.message), status_code=failure.status_code)
        if failure.fault is Fault.REFUSE:
            guard.trip(outcome)
        ok, reason = failure.fault is Fault.REJECT, outcome.message  # a REJECT (e.g. too long): the endpoint is up
    if record:
        guard.record(ok, reason, comp._honoured(failure), unusable or withheld, retries=retries, seconds=seconds,
                     status_code=_status(failure))
    return outcome


def _status(failure: Failure | None) -> int | None:
    """The HTTP status of a failed attempt (None: it got no response)."""
    return None if failure is None else failure.status_code


def _reason(failure: Failure | None, error: Exception) -> str:
    """What a failed attempt's ``error`` says: its ``Failure``'s message, else the error itself."""
    return failure.message if failure else str(error)


def _cut(tries: _Attempts, record: bool, last: str | None = None, status_code: int | None = None) -> Judgment:
    """The outcome of a call the deadline cut after ``tries`` went out: recorded on its guard (when ``record``) as
    sent, its outcome unknown (``record(None)``: spent, the breaker's streak neither counts nor resets on it), with
    the seconds its last attempt was out unanswered (``_Attempts.unanswered``: what a breaker that watches the
    judge's silence reads). ``last``: the error of an attempt that failed before the deadline when its retry was
    then cut in flight (``cut_before_retry``; recorded with it as the reason, with its HTTP ``status_code``), else
    None (cut in flight). A call the waiting side cuts before its first attempt is counted (it may be going out) is
    a plain cut in flight, with no retry."""
    if record:
        tries.sent_unknown(last, tries.unanswered(), status_code)
    return cut_in_flight(tries.retries) if last is None else cut_before_retry(tries.retries, last, status_code)
