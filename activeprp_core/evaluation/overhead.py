"""Overhead and latency measurements: the library's scheduling time per call, a comparator's calls/s, and
wall time per query against a comparator that sleeps like a hosted LLM."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any

from ..engine import arerank, rerank
from ..types import Candidate, Pair
from .report import modelled_wall_s


class SleepingComparator:
    """A hosted-LLM stand-in: every call takes ``latency_s`` seconds (``asyncio.sleep``), at most ``in_flight``
    calls run at once; the answers come from ``inner`` (any comparator). ``arerank`` awaits one round at a time,
    so a query's wall time is the sum over rounds of its waves of calls. ``batches`` notes the calls per round."""

    def __init__(self, inner: Any, latency_s: float = 0.5, in_flight: int = 16) -> None:
        self.inner, self.latency_s, self.in_flight, self.batches = inner, latency_s, in_flight, []

    async def acompare(self, query: str, pairs: Sequence[Pair]) -> list[float | None]:
        self.batches.append(len(pairs))
        gate = asyncio.Semaphore(self.in_flight)

        async def call(pair: Pair) -> float | None:
            async with gate:
                await asyncio.sleep(self.latency_s)
                return self.inner.compare(query, [pair])[0]

        return list(await asyncio.gather(*(call(p) for p in pairs)))

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float | None]:
        return asyncio.run(self.acompare(query, pairs))


def measured_wall_time(query: str, candidates: Sequence[Candidate], judge: SleepingComparator, **rerank_kw: Any
                       ) -> dict[str, Any]:
    """One ``arerank`` against ``judge``: the measured wall time next to ``modelled_wall_s`` of its rounds.

    Returns:
        ``{"measured_s", "modelled_s", "rounds", "calls", "runs_as"}`` (``runs_as``: the concrete ranker/oracle).
    """
    judge.batches = []
    start = time.perf_counter()
    res = asyncio.run(arerank(query, candidates, comparator=judge, **rerank_kw))
    measured = time.perf_counter() - start
    modelled = modelled_wall_s(" ".join(map(str, judge.batches)), judge.latency_s, judge.in_flight)
    return {"measured_s": measured, "modelled_s": modelled, "rounds": float(res.rounds), "calls": float(res.calls),
            "runs_as": f"{res.ranker}/{res.oracle}"}


class ZeroCostComparator:
    """Answers from a fixed hidden permutation by dict look-up (no model): isolates the engine's own cost."""

    def __init__(self, ids: Sequence[str], seed: int = 0) -> None:
        order = list(ids)
        random.Random(seed).shuffle(order)
        self.rank = {d: r for r, d in enumerate(order)}

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        """1.0 when the first candidate ranks higher in the hidden permutation, else 0.0."""
        return [1.0 if self.rank[a.id] < self.rank[b.id] else 0.0 for a, b in pairs]


def scheduling_overhead(rankers: Sequence[str], oracles: Sequence[str] = ("randomized", "bidirectional"),
                        n: int = 100, k: int = 10, budget: int | None = None, repeats: int = 20
                        ) -> list[dict[str, Any]]:
    """Microseconds of engine + ranker time per LLM call with ``ZeroCostComparator`` (wall clock, includes the
    comparator's dict look-ups), per (ranker, oracle): total ``rerank`` time / total calls over ``repeats``
    seeded runs on ``n`` synthetic candidates."""
    cands = [Candidate(str(i), f"passage {i}") for i in range(n)]
    out = []
    for ranker in rankers:
        for oracle in oracles:
            calls, start = 0, time.perf_counter()
            for seed in range(repeats):
                judge = ZeroCostComparator([c.id for c in cands], seed)
                calls += rerank("q", cands, ranker=ranker, oracle=oracle, comparator=judge, budget=budget,
                                top_k=k, seed=seed).calls
            elapsed = time.perf_counter() - start
            out.append({"ranker": ranker, "oracle": oracle, "calls_per_query": calls / repeats,
                        "us_per_call": 1e6 * elapsed / max(calls, 1)})
    return out


def comparator_throughput(comparator: Any, query: str, pairs: Sequence[Pair]) -> dict[str, float]:
    """Calls/s of ``comparator.compare`` one pair per call vs all ``pairs`` in one batched call.

    Measures the single-call pass first, then the batch; a comparator that caches answers (e.g. per passage)
    must be given a fresh instance or fresh pairs for a fair batch figure (the caller's responsibility).
    """
    half = len(pairs) // 2
    start = time.perf_counter()
    for p in pairs[:half]:
        comparator.compare(query, [p])
    single = half / (time.perf_counter() - start)
    start = time.perf_counter()
    comparator.compare(query, list(pairs[half:]))
    batched = (len(pairs) - half) / (time.perf_counter() - start)
    return {"single_calls_per_s": single, "batched_calls_per_s": batched, "pairs": float(len(pairs))}
