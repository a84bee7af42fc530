"""The engine: one query's reranking as a sans-I/O state machine (``Reranking``), and the loops that feed it.

``Reranking`` drives a ranker's rounds against an oracle, a pair cache and two hard caps (``budget`` calls,
``max_rounds`` rounds), in the style of h11's ``Connection``: it never calls a comparator. Its user asks
``next_batch()`` for the ordered prompts to send (or ``DONE``), sends them to any comparator however it likes,
and hands the answers back with ``send(judgments)`` (or reports the batch's failure with ``fail(error)``);
``result()`` gives the ``RerankResult``. ``rerank`` / ``arerank`` are short loops over one ``Reranking``;
``rerank_many`` / ``arerank_many`` (``activeprp_core.many``) drive many of them together.

Failures (see ``activeprp_core.errors``): a comparator error stops the rerank and propagates with the partial
accounting attached, unless ``on_failure="prior"``: then no further call is sent, the ranker finishes on what it
knows (the prior order for the rest), and the result says why (``failure``, ``errors``, ``converged=False``).
A rerank in which every call failed raises ``ComparatorUnavailable`` (with ``on_failure="raise"``), so a dead
endpoint never looks like a reranking. Failed or degraded reranks log a WARNING on the ``activeprp`` logger.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .budget import Budget, check_count
from .comparators.base import CallGuard, Comparator, SupportsCompare, as_comparator
from .errors import ComparatorError, ComparatorUnavailable, RankerError
from .oracles import Oracle, Prompt, get_oracle
from .rankers import Outcomes, RankContext, Ranker, get_ranker
from .rankers.auto import choose
from .types import Accounting, Candidate, Judgment, RerankResult, to_judgments

log = logging.getLogger("activeprp.engine")

OnFailure = Literal["raise", "prior"]
ON_FAILURE = ("raise", "prior")
MAX_CONSECUTIVE_FAILURES = 5
"""The circuit breaker's default: calls in a row that may fail (after their retries) before a rerank stops."""
MAX_ERRORS_KEPT = 5


class _Done:
    def __repr__(self) -> str:
        return "DONE"


DONE = _Done()
"""What ``Reranking.next_batch()`` returns once the ranker has finished: call ``result()``."""


@dataclass(frozen=True)
class Batch:
    """The ordered prompts one round of a reranking needs answered, in the order answers must come back.

    Attributes:
        query: the query text.
        prompts: ``(first, second)`` candidate indices per prompt (first = slot A).
        pairs: the same prompts as ``(Candidate, Candidate)`` tuples, ready for ``Comparator.judge``.
    """

    query: str
    prompts: list[Prompt]
    pairs: list[tuple[Candidate, Candidate]]


def _check_candidates(query: Any, candidates: Any) -> list[Candidate]:
    if not isinstance(query, str):
        raise TypeError(f"query must be str, got {type(query).__name__}")
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise TypeError("candidates must be a list of Candidate")
    for c in candidates:
        if not isinstance(c, Candidate):
            raise TypeError(f"candidates must be Candidate objects, got {type(c).__name__}")
    return list(candidates)


class Reranking:
    """One query's reranking as a sans-I/O state machine (see the module docstring).

    Args:
        query, candidates, ranker, oracle, budget, top_k, seed, cache, max_rounds: as for ``rerank``.
        on_failure: ``"raise"`` (default) or ``"prior"`` (degrade to the best-effort order; see ``fail``).

    Protocol: ``next_batch()`` returns the pending ``Batch`` (the same one until it is answered) or ``DONE``;
    ``send(judgments)`` answers it (``Judgment`` objects, or floats / None, one per prompt, in order);
    ``fail(error)`` reports that it could not be answered; ``result()`` once ``DONE``.

    Raises:
        TypeError / ValueError: bad arguments (as ``rerank``). ``RuntimeError``: ``send``/``fail`` with no
        batch pending, ``result`` before ``DONE``.
    """

    def __init__(
        self,
        query: str,
        candidates: Sequence[Candidate],
        *,
        ranker: str | Ranker = "mohajer",
        oracle: str | Oracle = "randomized",
        budget: int | None,
        top_k: int = 10,
        seed: int = 0,
        cache: bool = True,
        max_rounds: int | None = None,
        on_failure: OnFailure = "raise",
    ) -> None:
        self.started = time.perf_counter()
        self.query, self.candidates = query, _check_candidates(query, candidates)
        self.top_k = check_count(top_k, "top_k", minimum=1)
        seed = check_count(seed, "seed", minimum=None)
        if on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {on_failure!r}")
        self.on_failure = on_failure
        self.calls, self.rounds = Budget(budget, "budget"), Budget(max_rounds, "max_rounds")
        ranker, oracle = choose(len(self.candidates), self.top_k, self.calls.limit, self.rounds.limit, ranker,
                                oracle)  # "auto"
        self.ranker: Ranker = get_ranker(ranker)
        self.oracle: Oracle = get_oracle(oracle)
        self.cache = cache
        streams = random.Random(seed)
        self._oracle_rng, ranker_rng = random.Random(streams.getrandbits(64)), random.Random(streams.getrandbits(64))
        ctx = RankContext(len(self.candidates), self.top_k, ranker_rng, self.calls.limit, self.oracle.calls_per_pair,
                          self.rounds.limit)
        self.answers: dict[Prompt, float | None] = {}
        self.counts = Accounting()
        self.exhausted = False  # a cap refused a question
        self.failure: str | None = None  # the error that stopped the calls (on_failure="prior")
        self.errors: list[str] = []
        self._pending: Batch | None = None
        self._order: list[int] | None = None
        self._steps = self._drive(self.ranker.schedule(ctx))
        self._advance(None)

    # ---- the protocol ------------------------------------------------------------------------------
    def next_batch(self) -> Batch | _Done:
        """The batch to answer now, or ``DONE``."""
        return DONE if self._pending is None else self._pending

    def send(self, judgments: Sequence[Judgment | float | None]) -> None:
        """Answer the pending batch: one answer per prompt, in order.

        Raises:
            InvalidAnswer: the wrong number of answers, or a probability outside [0, 1].
        """
        batch = self._require_pending("send")
        self._advance(to_judgments(judgments, len(batch.prompts)))

    def fail(self, error: BaseException, sent: int | None = None) -> None:
        """Report that the pending batch could not be answered because of ``error``; ``sent`` = how many of its
        calls reached the backend (None = unknown: all of them). Calls never sent are refunded to the budget
        (and the round, when none went out); the sent ones are failed calls.

        With ``on_failure="prior"`` and a ``ComparatorError``, no further call is asked for and the ranker
        finishes on what it knows. Otherwise ``error`` is raised again, with this reranking's partial
        accounting attached as ``error.accounting``.
        """
        batch = self._pending
        if batch is not None:
            n = len(batch.prompts)
            sent = n if sent is None else min(sent, n)
            self.calls.refund(n - sent)
            self.counts.comparisons -= (n - sent) // self.oracle.calls_per_pair
            if sent == 0:
                self.rounds.refund(1)
        message = f"{type(error).__name__}: {error}"
        if self.on_failure != "prior" or not isinstance(error, ComparatorError) or batch is None:
            if batch is not None:
                self.counts.failed_calls += sent
            with contextlib.suppress(AttributeError):  # also on foreign exceptions, where they take attributes
                error.accounting = self.accounting  # type: ignore[attr-defined]
            if isinstance(error, ComparatorError):
                log.warning("rerank of %d candidates failed after %d calls: %s", len(self.candidates),
                            self.calls.spent, message)
            raise error
        self.failure = message
        self._note_error(message)
        self._advance([Judgment(None, error=message)] * n)
        self.counts.failed_calls -= n - sent  # the ones never sent are unknown, not failed

    @property
    def done(self) -> bool:
        """Whether the ranker has finished (``next_batch()`` is ``DONE``)."""
        return self._pending is None

    @property
    def accounting(self) -> Accounting:
        """What this reranking has spent so far (calls of a batch in flight included)."""
        counts = Accounting(**self.counts.counts())
        counts.calls, counts.rounds = self.calls.spent, self.rounds.spent
        counts.wall_time_s = time.perf_counter() - self.started
        return counts

    def result(self) -> RerankResult:
        """The finished reranking.

        Raises:
            ComparatorUnavailable: every call failed (with ``on_failure="raise"``; the accounting attached).
            RankerError: the ranker returned something that is not a permutation.
        """
        if self._order is None:
            raise RuntimeError("result() before the reranking is done: answer next_batch() until it is DONE")
        order, n = self._order, len(self.candidates)
        if sorted(order) != list(range(n)):
            raise RankerError(f"ranker {self.ranker.name} returned a non-permutation of {n} candidates: {order[:20]}")
        counts = self.accounting
        if self.on_failure == "raise" and counts.calls and counts.failed_calls == counts.calls:
            error = ComparatorUnavailable(f"every one of the {counts.calls} calls failed: {'; '.join(self.errors)}")
            error.accounting = counts
            log.warning("rerank of %d candidates failed: %s", n, error)
            raise error
        scores = [0.0] * n
        for rank, i in enumerate(order):
            scores[i] = (n - rank) / n
        result = RerankResult(
            candidates=self.candidates, order=order, scores=scores, ranker=self.ranker.name, oracle=self.oracle.name,
            budget=self.calls.limit, max_rounds=self.rounds.limit, top_k=self.top_k, exhausted=self.exhausted,
            converged=not self.exhausted and counts.failed_calls == 0 and self.failure is None, failure=self.failure,
            errors=list(self.errors),
            **counts.counts(),
        )
        if counts.failed_calls or self.failure:
            log.warning("rerank of %d candidates %s: %d of %d calls failed%s", n,
                        "degraded to the prior order for what was unknown" if self.failure else "finished",
                        counts.failed_calls, counts.calls, f" ({'; '.join(self.errors)})" if self.errors else "")
        return result

    # ---- internals ---------------------------------------------------------------------------------
    def _require_pending(self, what: str) -> Batch:
        if self._pending is None:
            raise RuntimeError(f"{what}() with no batch pending: call next_batch() first (or result() when DONE)")
        return self._pending

    def _advance(self, judgments: list[Judgment] | None) -> None:
        try:
            prompts = self._steps.send(judgments)
        except StopIteration as stop:
            self._pending, self._order = None, stop.value
            return
        pairs = [(self.candidates[a], self.candidates[b]) for a, b in prompts]
        self._pending = Batch(self.query, prompts, pairs)

    def _drive(self, schedule: Generator) -> Generator[list[Prompt], list[Judgment], list[int]]:
        """Plan each round of the ranker's schedule, yield the prompts that need calls, record the answers and
        send the outcomes back; returns the ranker's order."""
        try:
            pairs = next(schedule)
            while True:
                prompts = self._plan(pairs)
                if prompts:
                    self._record(prompts, (yield prompts))
                pairs = schedule.send(self._outcomes(pairs, set(prompts)))
        except StopIteration as stop:
            return stop.value

    def _plan(self, pairs: Sequence[tuple[int, int]]) -> list[Prompt]:
        """The ordered prompts to send for a round: deduplicated, skipping what the cache answers, cut to fit the
        call budget (a pair that does not fit is refused whole); nothing once ``max_rounds`` rounds have sent
        calls or the calls were stopped by a failure."""
        prompts: list[Prompt] = []
        planned: set[Prompt] = set()

        def known(p: Prompt) -> bool:
            return p in self.answers or p in planned

        may_send = self.rounds.fits(1) and self.failure is None
        for pair in pairs:
            i, j = pair
            if i == j:
                raise RankerError(f"ranker {self.ranker.name} asked to compare candidate {i} with itself")
            need = self.oracle.question(pair, known, self._oracle_rng)
            if not need:
                self.counts.cache_hits += 1
            elif may_send and self.calls.take(len(need)):
                prompts.extend(need)
                planned.update(need)
                self.counts.comparisons += 1
            elif self.failure is None:
                self.exhausted = True
        if prompts:
            self.rounds.take(1)
            log.debug("round %d: %d calls (%s calls left)", self.rounds.spent, len(prompts), self.calls.remaining)
        return prompts

    def _record(self, prompts: Sequence[Prompt], judgments: Sequence[Judgment]) -> None:
        for prompt, j in zip(prompts, judgments):
            self.answers[prompt] = j.prob
            self.counts.failed_calls += j.prob is None
            self.counts.retries += j.retries
            self.counts.prompt_tokens += j.prompt_tokens
            self.counts.completion_tokens += j.completion_tokens
            if j.prob is None and j.error:
                self._note_error(j.error)

    def _note_error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

    def _outcomes(self, pairs: Sequence[tuple[int, int]], fresh: set[Prompt]) -> Outcomes:
        outs = [self.oracle.outcome(i, j, self.answers) for i, j in pairs]
        self.counts.ties += sum(o == 0.5 for (i, j), o in zip(pairs, outs) if (i, j) in fresh or (j, i) in fresh)
        if not self.cache:
            self.answers.clear()
        return Outcomes(outs, calls_left=self.calls.remaining, rounds_left=self.rounds.remaining,
                        exhausted=self.exhausted or self.failure is not None)


def guard_for(comparator: Comparator, max_concurrency: int | None,
              max_consecutive_failures: int | None = MAX_CONSECUTIVE_FAILURES) -> CallGuard:
    """The ``CallGuard`` of one rerank call: the caller's cap on calls in flight (else the comparator's
    ``max_concurrency``) and the circuit breaker."""
    cap = max_concurrency if max_concurrency is not None else comparator.max_concurrency
    return CallGuard(cap, max_consecutive_failures)


def rerank_settings(ranker, oracle, budget, top_k, seed, cache, max_rounds, on_failure) -> dict[str, Any]:
    """The per-query settings of ``rerank``/``rerank_many``, as ``Reranking`` keyword arguments."""
    return dict(ranker=ranker, oracle=oracle, budget=budget, top_k=top_k, seed=seed, cache=cache,
                max_rounds=max_rounds, on_failure=on_failure)


def rerank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    ranker: str | Ranker = "mohajer",
    oracle: str | Oracle = "randomized",
    comparator: Comparator | SupportsCompare,
    budget: int | None,
    top_k: int = 10,
    seed: int = 0,
    cache: bool = True,
    max_rounds: int | None = None,
    on_failure: OnFailure = "raise",
    max_concurrency: int | None = None,
    max_consecutive_failures: int | None = MAX_CONSECUTIVE_FAILURES,
) -> RerankResult:
    """Rerank ``candidates`` for ``query`` with a pairwise ``comparator`` under a hard call ``budget``.

    Args:
        query: the query text.
        candidates: N ``Candidate`` objects in prior (first-stage) order, best first; never mutated.
        ranker: a name (``mohajer``, ``mohajer_bubble``, ``parallel_mohajer``, ``pac_bubble``, ``bubblesort``,
            ``heapsort``, ``quicksort``, ``allpairs``, ``sliding_window``, ``auto``) or a ``Ranker`` instance.
        oracle: ``randomized`` (1 call per pair, random slot order), ``bidirectional`` (2 calls per pair),
            ``single`` (1 call, fixed order) or ``auto``, or an ``Oracle`` instance (paper section 3). ``auto``
            (ranker and/or oracle) is resolved from measured data for (N, top_k, budget, max_rounds)
            (``activeprp_core.rankers.auto.choose``); ``RerankResult.ranker``/``oracle`` name the choice.
        comparator: a ``Comparator``, or any object with ``compare(query, pairs) -> list[float | None]``.
        budget: the most LLM calls this query may use (int >= 0), or None for unlimited.
        top_k: K, the length of the reranked prefix (``min(top_k, N)`` when N < K).
        seed: seeds the oracle's direction draws and the ranker's random choices (deterministic per call).
        cache: reuse answers to repeated pair questions at no cost (default True).
        max_rounds: the most sequential rounds that send calls (int >= 0; None = no cap; 0 = the prior order).
            A round past the cap is refused like calls past the budget: the ranker is told and still returns
            a permutation, and ``RerankResult.rounds <= max_rounds``.
        on_failure: ``"raise"`` (default): a comparator failure raises a ``ComparatorError`` carrying the
            partial accounting; ``"prior"``: return the best-effort order instead, with ``failure``/``errors``
            set, ``converged=False`` and a WARNING logged.
        max_concurrency: the most calls in flight (None = the comparator's own ``max_concurrency``); batch
            comparators get each round in chunks of at most this many pairs. The comparator is not changed.
        max_consecutive_failures: the circuit breaker: after this many failed calls in a row no further call is
            sent and ``ComparatorUnavailable`` is raised (None = never).

    Returns:
        ``RerankResult``: ``order`` is always a permutation of ``range(N)``, plus scores and accounting.

    Raises:
        TypeError: a non-str query, non-Candidate candidates, a comparator without ``compare``, non-integer
            seed, budget or max_rounds. ValueError: negative budget or max_rounds, top_k < 1, unknown ranker,
            oracle or on_failure. ComparatorError (see ``activeprp_core.errors``): the comparator failed,
            including ``InvalidAnswer`` (also a ValueError) for answers of the wrong length or outside [0, 1].
    """
    reranking = Reranking(query, candidates, **rerank_settings(ranker, oracle, budget, top_k, seed, cache, max_rounds,
                                                         on_failure))
    judge = as_comparator(comparator)
    guard = guard_for(judge, max_concurrency, max_consecutive_failures)
    while not reranking.done:
        batch, sent_before = reranking.next_batch(), guard.completed
        try:
            reranking.send(judge.judge(batch.query, batch.pairs, guard=guard))
        except Exception as error:
            reranking.fail(error, sent=guard.completed - sent_before)
    return reranking.result()


async def arerank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    ranker: str | Ranker = "mohajer",
    oracle: str | Oracle = "randomized",
    comparator: Comparator | SupportsCompare,
    budget: int | None,
    top_k: int = 10,
    seed: int = 0,
    cache: bool = True,
    max_rounds: int | None = None,
    on_failure: OnFailure = "raise",
    max_concurrency: int | None = None,
    max_consecutive_failures: int | None = MAX_CONSECUTIVE_FAILURES,
) -> RerankResult:
    """Async ``rerank`` (same arguments, same result for the same seed): each round goes to the comparator's
    ``ajudge`` as one batch, so its calls can run concurrently (at most ``max_concurrency`` in flight); a
    comparator with only ``compare`` runs in a worker thread, chunk by chunk."""
    reranking = Reranking(query, candidates, **rerank_settings(ranker, oracle, budget, top_k, seed, cache, max_rounds,
                                                         on_failure))
    judge = as_comparator(comparator)
    guard = guard_for(judge, max_concurrency, max_consecutive_failures)
    while not reranking.done:
        batch, sent_before = reranking.next_batch(), guard.completed
        try:
            reranking.send(await judge.ajudge(batch.query, batch.pairs, guard=guard))
        except Exception as error:
            reranking.fail(error, sent=guard.completed - sent_before)
    return reranking.result()
