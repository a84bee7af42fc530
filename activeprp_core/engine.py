"""The engine: one query's reranking as a sans-I/O state machine (``Reranking``), and the loops that feed it.

``Reranking`` drives a ranker's rounds against an oracle, a pair cache and the hard caps of its
``RerankSettings`` (``budget`` calls, ``max_rounds`` rounds, ``token_budget`` tokens), in the style of h11's
``Connection``: it never calls a comparator. Its user asks ``next_batch()`` for the ordered prompts to send (or
``DONE``), sends them to any comparator however it likes, and hands the answers back with ``send(judgments)``
(or reports the batch's failure with ``fail(error)``); ``result()`` gives the ``RerankResult``. ``rerank`` /
``arerank`` are short loops over one ``Reranking``; ``rerank_many`` / ``arerank_many`` (``activeprp_core.many``)
drive many of them together.

Caps (``activeprp_core.budget``): every question reserves its cost in each cap *before* its prompts are sent; a
question that does not fit is refused whole, and ``exhausted_by`` says which cap refused.

Time (``time_budget``): the clock starts when the query's ``Reranking`` is made; past the deadline every question
is refused, like a question past any cap. The drivers hand each call the time left (``CallGuard.time_left``), so
the comparator sends nothing past the deadline and waits no longer for a call (see ``comparators.base``); the
async drivers also cancel a batch still running ``DEADLINE_GRACE`` after the deadline (a comparator that ignores
the guard's deadlines, or is slow to honour a cancellation): its calls sent are cut, those still waiting for slots
are not sent and cost nothing (``bounded``).

Failures (see ``activeprp_core.errors``): a comparator error stops the rerank and propagates with the partial
accounting attached, unless ``on_failure="prior"``: then no further call is sent, the ranker finishes on what it
knows (the prior order for the rest), and the result says why (``failure``, ``errors``, ``converged=False``).
A rerank in which no call was answered and some call failed or was cut before its retry (``Ledger.judge_failure``)
raises ``ComparatorUnavailable`` (with ``on_failure="raise"``), so a dead endpoint never looks like a reranking.
Failed or degraded reranks log a WARNING on the ``activeprp`` logger. Only an error raised getting a batch's
answers is a failure of that batch's calls; one raised planning the next round (a ranker's ``RankerError``, the
comparator's ``estimate_tokens``) is raised as itself with the accounting of the calls answered, none failed,
or, for a ``ComparatorError`` with ``on_failure="prior"``, degrades the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

from .blocking import blocking, drive, iterate_blocking, run_blocking  # noqa: F401 (re-exported)
from .budget import check_count
from .comparators.base import (
    CallGuard,
    Comparator,
    SupportsCompare,
    answered_before,
    as_comparator,
    cut_calls,
    cut_in_flight,
    unsent,
)
from .reranking import DONE, Batch, Done, Reranking, check_candidates  # noqa: F401 (re-exported)
from .settings import MAX_CONSECUTIVE_FAILURES, ON_FAILURE, OnFailure, RerankSettings, takes_settings  # noqa: F401
from .slots import wait_for
from .types import Candidate, RerankResult, to_judgments

DEADLINE_GOAL = 0.3
"""The promise of a ``time_budget``: ``rerank`` and ``arerank`` return within ``time_budget`` + these seconds even
when the judge hangs, for every async comparator and the shipped remote comparators (a blocking custom
comparator: docs/latency.md), on a machine whose CPU is free at the deadline. The time past the deadline is
``DEADLINE_GRACE`` and then the cut calls' clean-up (an HTTP client's): at most 0.28 s (sync) and 0.17 s (async)
past ``time_budget=1`` in benchmarks/results/time_budget/, measured by benchmarks/deadline_holds.py. docs/contract.md
and docs/latency.md state it."""
DEADLINE_GRACE = 0.1
"""Seconds past a deadline an async driver still waits for a batch (a comparator cuts its own calls at the
deadline and answers at once) before it cancels the batch: part of the ``DEADLINE_GOAL`` a rerank may take past
it, not the whole."""


def clock_now() -> Callable[[], float]:
    """The clock of a rerank started here: the running event loop's (``loop.time``, what its timeouts read), else
    ``time.monotonic``."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:
        return time.monotonic


async def bounded(awaitable: Awaitable[Any], seconds: float | None, n: int, guard: CallGuard,
                  records_sent: bool = True) -> Any:
    """``await awaitable`` (a batch of ``n`` calls on ``guard``) for at most ``seconds`` + ``DEADLINE_GRACE`` (None:
    no limit): its answers, or, when it runs past, its ``n`` calls cut (it is cancelled, and its cancellation
    awaited). With ``records_sent`` (``aguarded_judge``: the base class's chunk loop, and a comparator that guards
    its calls, record on ``guard`` every call they sent, answered or cut, by the time the cancellation ends) the calls
    ``guard`` saw sent meanwhile (``guard.completed``) are cut in flight (already recorded), and the rest, still
    waiting for slots, were never sent (``unsent``: they cost nothing). Without it (a merged ``ajudge_batch``, which
    may run on in a thread of its own) all ``n`` count as sent, recorded here, and cut."""
    if seconds is None:
        return await awaitable
    loop = asyncio.get_running_loop()
    until = loop.time() + max(0.0, seconds) + DEADLINE_GRACE
    before = guard.completed
    try:
        return await wait_for(awaitable, until - loop.time())
    except asyncio.TimeoutError:
        if loop.time() < until:
            raise  # the batch's own timeout, not the deadline's
        if not records_sent:
            return cut_calls(guard, n)
        sent = min(n, guard.completed - before)  # in order: a query's chunks go out one after the other
        return [cut_in_flight()] * sent + [unsent()] * (n - sent)


def guard_cap(comparator: Any, settings: RerankSettings) -> int | None:
    """The cap on calls in flight of a guard: the settings' ``max_concurrency`` (checked already), else the
    comparator's (checked here; None = no cap). Used by ``guard_for`` and by ``activeprp serve``'s breaker.

    Raises:
        TypeError / ValueError: the comparator's ``max_concurrency`` is not an int >= 1 or None.
    """
    if settings.max_concurrency is not None:
        return settings.max_concurrency
    return check_count(comparator.max_concurrency, "the comparator's max_concurrency", minimum=1, allow_none=True)


def guard_for(comparator: Comparator, settings: RerankSettings) -> CallGuard:
    """The ``CallGuard`` of one rerank call: the cap on calls in flight (``guard_cap``) and the circuit breaker
    (the settings' values, checked already)."""
    return CallGuard.of_checked(guard_cap(comparator, settings), settings.max_consecutive_failures)


def exchange(reranking: Reranking, guard: CallGuard) -> Generator[Batch, Any, RerankResult]:
    """The I/O-free body of ``rerank`` and ``arerank``: yields each batch to answer, takes its answers (or the
    exception raised while getting them, thrown in), returns the result. Only the exception raised getting a
    batch's answers, or answers that are not one per prompt, is that batch's failure (``Reranking.fail``, told
    the calls ``guard`` saw reach the comparator, their retries, and the answers of the chunks before the failing
    one); one raised planning the next round once the answers are recorded propagates from ``Reranking.send`` with
    its accounting (see ``Reranking``)."""
    while not reranking.done:
        batch, sent_before, retries_before = reranking.next_batch(), guard.completed, guard.retries
        try:
            judgments = to_judgments((yield batch), len(batch.prompts))
        except Exception as error:
            answered = answered_before(error, batch.query, batch.pairs)
            reranking.fail(error, sent=guard.completed - sent_before, answered=answered,
                           retries=guard.retries - retries_before)
            continue
        reranking.send(judgments)
    return reranking.result()


def _start(query: Any, candidates: Any, settings: RerankSettings | None, comparator: Any, options: dict):
    judge = as_comparator(comparator)
    reranking = Reranking(query, candidates, settings, comparator=judge, clock=clock_now(), **options)
    guard = guard_for(judge, reranking.settings)
    guard.clock, guard.deadline, guard.latency = reranking.clock, reranking.deadline, reranking.ledger.floor
    return judge, reranking, guard, exchange(reranking, guard)


@takes_settings
def rerank(query: str, candidates: Sequence[Candidate], settings: RerankSettings | None = None, *,
           comparator: Comparator | SupportsCompare, **options: Any) -> RerankResult:
    """Rerank ``candidates`` for ``query`` with a pairwise ``comparator`` under hard per-query caps.

    Args:
        query: the query text.
        candidates: N ``Candidate`` objects in prior (first-stage) order, best first; never mutated.
        settings: a ``RerankSettings``; ``**options`` are its fields, given directly or replacing its values:
            ``ranker``, ``oracle``, ``budget`` (calls; required), ``max_rounds``, ``token_budget``,
            ``time_budget`` (seconds), ``top_k``, ``seed``, ``cache``, ``on_failure``, ``max_concurrency``,
            ``max_consecutive_failures`` (see ``RerankSettings``). ``auto`` ranker/oracle is resolved from
            measured data for (N, top_k, budget, max_rounds) (``activeprp_core.rankers.auto.choose``);
            ``RerankResult.ranker``/``oracle`` name the choice. A question past a cap is refused: the ranker is
            told and still returns a permutation, and ``RerankResult.exhausted_by`` names the caps that refused.
        comparator: a ``Comparator``, or any object with ``compare(query, pairs) -> list[float | None]``.

    Returns:
        ``RerankResult``: ``order`` is always a permutation of ``range(N)``, plus scores and accounting.

    Raises:
        TypeError / ValueError: bad settings (see ``RerankSettings``), a non-str query, non-Candidate candidates,
            a comparator without ``compare``. ComparatorError (see ``activeprp_core.errors``): the comparator
            failed (with ``on_failure="raise"``), including ``InvalidAnswer`` (also a ValueError) for answers of
            the wrong length or outside [0, 1]. With ``on_failure="prior"`` the best-effort order is returned
            instead, with ``failure``/``errors`` set, ``converged=False`` and a WARNING logged.
    """
    judge, _, guard, steps = _start(query, candidates, settings, comparator, options)
    return run_blocking(drive(steps, blocking(lambda batch: judge.guarded_judge(batch.query, batch.pairs, guard))))


@takes_settings
async def arerank(query: str, candidates: Sequence[Candidate], settings: RerankSettings | None = None, *,
                  comparator: Comparator | SupportsCompare, **options: Any) -> RerankResult:
    """Async ``rerank`` (same arguments, same result for the same seed): each round goes to the comparator's
    ``ajudge`` as one batch, so its calls can run concurrently (at most ``max_concurrency`` in flight); a
    comparator with only ``compare`` runs in a worker thread, chunk by chunk. With a ``time_budget`` it returns
    within the budget plus ``DEADLINE_GOAL`` (0.3 s; its docstring says for which comparators): calls in flight at
    the deadline are cancelled."""
    judge, reranking, guard, steps = _start(query, candidates, settings, comparator, options)

    def ask(batch: Batch) -> Awaitable[Any]:
        return bounded(judge.aguarded_judge(batch.query, batch.pairs, guard), reranking.time_left(), len(batch.pairs),
                       guard)

    return await drive(steps, ask)
