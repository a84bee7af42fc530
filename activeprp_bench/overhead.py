"""Overhead and latency measurements: the library's scheduling time per call, a comparator's calls/s, and
wall time per query against a comparator that sleeps like a hosted LLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from activeprp_core.engine import arerank, rerank
from activeprp_core.types import Candidate, Pair

from .instrumented import SleepingComparator
from .report import modelled_wall_s
from .zero_cost import ZeroCostComparator


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
