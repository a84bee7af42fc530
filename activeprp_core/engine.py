"""The engine: drives a ranker's rounds against an oracle, a pair cache and a hard call budget.

The driving logic is itself a sans-I/O generator (``_drive``: yields batches of ordered prompts, receives
``Judgment``s), so ``rerank`` and ``arerank`` differ only in how one batch reaches the comparator.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Generator, Sequence
from typing import Any

from .budget import Budget, check_count
from .errors import RankerError
from .oracles import Oracle, Prompt, get_oracle
from .rankers import Outcomes, RankContext, Ranker, get_ranker
from .types import Candidate, Judgment, RerankResult, to_judgments


class Session:
    """Per-query state: the pair cache (raw answers per ordered prompt), the two caps and the accounting.

    ``plan(pairs)`` turns a round of pair questions into the ordered prompts to send now: deduplicated,
    skipping what the cache answers, and cut to fit the call budget (a pair whose prompts do not fit is refused
    whole and marks the session exhausted); once ``max_rounds`` rounds have sent calls, every question the cache
    cannot answer is refused. ``record`` stores the answers, ``outcomes`` reads them back with the caps' state.
    With ``cache=False`` answers are forgotten after each round (repeats cost new calls).
    """

    def __init__(self, oracle: Oracle, budget: Budget, rng: random.Random, cache: bool = True,
                 max_rounds: Budget | None = None) -> None:
        self.oracle, self.budget, self.rng, self.cache = oracle, budget, rng, cache
        self.max_rounds = max_rounds or Budget(None, "max_rounds")
        self.answers: dict[Prompt, float | None] = {}
        self.exhausted = False
        self.comparisons = self.cache_hits = self.ties = 0
        self.failed_calls = self.retries = self.prompt_tokens = self.completion_tokens = 0

    def plan(self, pairs: Sequence[tuple[int, int]]) -> list[Prompt]:
        prompts: list[Prompt] = []
        planned: set[Prompt] = set()

        def known(p: Prompt) -> bool:
            return p in self.answers or p in planned

        round_left = self.max_rounds.fits(1)
        for i, j in pairs:
            if i == j:
                raise ValueError(f"ranker asked to compare candidate {i} with itself")
            need = self.oracle.prompts(i, j, known, self.rng)
            if not need:
                self.cache_hits += 1
            elif round_left and self.budget.take(len(need)):
                prompts.extend(need)
                planned.update(need)
                self.comparisons += 1
            else:
                self.exhausted = True
        if prompts:
            self.max_rounds.take(1)
        return prompts

    def record(self, prompts: Sequence[Prompt], judgments: Sequence[Judgment]) -> None:
        for prompt, j in zip(prompts, judgments):
            self.answers[prompt] = j.prob
            self.failed_calls += j.prob is None
            self.retries += j.retries
            self.prompt_tokens += j.prompt_tokens
            self.completion_tokens += j.completion_tokens

    @property
    def rounds(self) -> int:
        """Rounds that sent calls."""
        return self.max_rounds.spent

    def outcomes(self, pairs: Sequence[tuple[int, int]], fresh: set[Prompt]) -> Outcomes:
        outs = [self.oracle.outcome(i, j, self.answers) for i, j in pairs]
        self.ties += sum(o == 0.5 for (i, j), o in zip(pairs, outs) if (i, j) in fresh or (j, i) in fresh)
        if not self.cache:
            self.answers.clear()
        return Outcomes(outs, calls_left=self.budget.remaining, rounds_left=self.max_rounds.remaining,
                        exhausted=self.exhausted)


def _drive(session: Session, ranker: Ranker, ctx: RankContext) -> Generator[list[Prompt], list[Judgment], list[int]]:
    schedule = ranker.schedule(ctx)
    try:
        pairs = next(schedule)
        while True:
            prompts = session.plan(pairs)
            if prompts:
                session.record(prompts, (yield prompts))
            pairs = schedule.send(session.outcomes(pairs, set(prompts)))
    except StopIteration as stop:
        return stop.value


class _Job:
    """Validated inputs of one rerank plus its session and driver."""

    def __init__(self, query, candidates, ranker, oracle, comparator, budget, top_k, seed, cache, max_rounds) -> None:
        if not isinstance(query, str):
            raise TypeError(f"query must be str, got {type(query).__name__}")
        if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
            raise TypeError("candidates must be a list of Candidate")
        for c in candidates:
            if not isinstance(c, Candidate):
                raise TypeError(f"candidates must be Candidate objects, got {type(c).__name__}")
        top_k = check_count(top_k, "top_k", minimum=1)
        seed = check_count(seed, "seed", minimum=None)
        if not callable(getattr(comparator, "compare", None)):
            raise TypeError("comparator must have a compare(query, pairs) method")
        self.query, self.candidates, self.comparator = query, list(candidates), comparator
        self.ranker: Ranker = get_ranker(ranker)
        self.oracle: Oracle = get_oracle(oracle)
        self.top_k = top_k
        streams = random.Random(seed)
        oracle_rng, ranker_rng = random.Random(streams.getrandbits(64)), random.Random(streams.getrandbits(64))
        calls, rounds = Budget(budget, "budget"), Budget(max_rounds, "max_rounds")
        self.session = Session(self.oracle, calls, oracle_rng, cache, rounds)
        ctx = RankContext(len(self.candidates), top_k, ranker_rng, calls.limit, self.oracle.calls_per_pair,
                          rounds.limit)
        self.driver = _drive(self.session, self.ranker, ctx)
        self.started = time.perf_counter()

    def pairs(self, prompts: Sequence[Prompt]) -> list[tuple[Candidate, Candidate]]:
        return [(self.candidates[a], self.candidates[b]) for a, b in prompts]

    def result(self, order: list[int]) -> RerankResult:
        n = len(self.candidates)
        if sorted(order) != list(range(n)):
            raise RankerError(f"ranker {self.ranker.name} returned a non-permutation of {n} candidates: {order[:20]}")
        scores = [0.0] * n
        for rank, i in enumerate(order):
            scores[i] = (n - rank) / n
        s = self.session
        return RerankResult(
            candidates=self.candidates, order=order, scores=scores, ranker=self.ranker.name,
            oracle=self.oracle.name, budget=s.budget.limit, max_rounds=s.max_rounds.limit, top_k=self.top_k,
            calls=s.budget.spent,
            comparisons=s.comparisons, rounds=s.rounds, cache_hits=s.cache_hits, exhausted=s.exhausted,
            converged=not s.exhausted and s.failed_calls == 0, ties=s.ties,
            failed_calls=s.failed_calls, retries=s.retries, prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens, wall_time_s=time.perf_counter() - self.started,
        )


def judge_pairs(comparator: Any, query: str, pairs: Sequence) -> list[Judgment]:
    """One batch of ordered pairs through any comparator: its ``judge`` when it has one, else ``compare``.

    Raises:
        ValueError: a wrong number of answers or a probability outside [0, 1] (see ``to_judgments``).
    """
    judge = getattr(comparator, "judge", None)
    answers = judge(query, pairs) if callable(judge) else comparator.compare(query, pairs)
    return to_judgments(answers, len(pairs))


async def ajudge_pairs(comparator: Any, query: str, pairs: Sequence) -> list[Judgment]:
    """Async ``judge_pairs``: the comparator's ``ajudge``, else ``acompare``, else ``judge_pairs`` in a thread."""
    for name in ("ajudge", "acompare"):
        method = getattr(comparator, name, None)
        if callable(method):
            return to_judgments(await method(query, pairs), len(pairs))
    return await asyncio.to_thread(judge_pairs, comparator, query, pairs)


def rerank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    ranker: str | Ranker = "mohajer",
    oracle: str | Oracle = "randomized",
    comparator: Any,
    budget: int | None,
    top_k: int = 10,
    seed: int = 0,
    cache: bool = True,
    max_rounds: int | None = None,
) -> RerankResult:
    """Rerank ``candidates`` for ``query`` with a pairwise ``comparator`` under a hard call ``budget``.

    Args:
        query: the query text.
        candidates: N ``Candidate`` objects in prior (first-stage) order, best first; never mutated.
        ranker: a name (``mohajer``, ``mohajer_bubble``, ``pac_bubble``, ``bubblesort``, ``heapsort``,
            ``quicksort``, ``allpairs``, ``sliding_window``, ``auto``) or a ``Ranker`` instance.
        oracle: ``randomized`` (1 call per pair, random slot order), ``bidirectional`` (2 calls per pair) or
            ``single`` (1 call, fixed order), or an ``Oracle`` instance (paper section 3).
        comparator: any object with ``compare(query, pairs) -> list[float | None]`` (see ``Comparator``).
        budget: the most LLM calls this query may use (int >= 0), or None for unlimited.
        top_k: K, the length of the reranked prefix (``min(top_k, N)`` when N < K).
        seed: seeds the oracle's direction draws and the ranker's random choices (deterministic per call).
        cache: reuse answers to repeated pair questions at no cost (default True).
        max_rounds: the most sequential rounds that send calls (int >= 0; None = no cap; 0 = the prior order).
            A round past the cap is refused like calls past the budget: the ranker is told and still returns
            a permutation, and ``RerankResult.rounds <= max_rounds``.

    Returns:
        ``RerankResult``: ``order`` is always a permutation of ``range(N)``, plus scores and accounting.

    Raises:
        TypeError: a non-str query, non-Candidate candidates, a comparator without ``compare``, a non-int seed
            or budget. ValueError: negative budget, top_k < 1, unknown ranker or oracle name, or a
            comparator answer outside [0, 1] or of the wrong length.
    """
    job = _Job(query, candidates, ranker, oracle, comparator, budget, top_k, seed, cache, max_rounds)
    try:
        prompts = next(job.driver)
        while True:
            prompts = job.driver.send(judge_pairs(comparator, query, job.pairs(prompts)))
    except StopIteration as stop:
        return job.result(stop.value)


async def arerank(
    query: str,
    candidates: Sequence[Candidate],
    *,
    ranker: str | Ranker = "mohajer",
    oracle: str | Oracle = "randomized",
    comparator: Any,
    budget: int | None,
    top_k: int = 10,
    seed: int = 0,
    cache: bool = True,
    max_rounds: int | None = None,
) -> RerankResult:
    """Async ``rerank`` (same arguments, same result for the same seed): each round goes to the comparator's
    ``ajudge``/``acompare`` as one batch, so its calls can run concurrently; a comparator with only
    ``compare`` runs in a worker thread. The budget is reserved before a round is sent."""
    job = _Job(query, candidates, ranker, oracle, comparator, budget, top_k, seed, cache, max_rounds)
    try:
        prompts = next(job.driver)
        while True:
            prompts = job.driver.send(await ajudge_pairs(comparator, query, job.pairs(prompts)))
    except StopIteration as stop:
        return job.result(stop.value)
