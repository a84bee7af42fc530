"""Scheduling work bounded by the budget: time and peak memory of one rerank at N=5000 candidates, B=500 calls,
K=10, with a zero-cost comparator (so only the engine and the ranker are measured), for every ranker.

Run: python benchmarks/budget_work.py > benchmarks/results/budget_work.md
"""

from __future__ import annotations

import os
import time
import tracemalloc

from activeprp_bench.zero_cost import ZeroCostComparator
from activeprp_core import Candidate, rerank
from activeprp_core.rankers import RANKERS

N, B, K = 5000, 500, 10


def main() -> None:
    cands = [Candidate(f"d{i}", "") for i in range(N)]
    print(f"N={N}, B={B}, K={K}, randomized oracle, ZeroCostComparator; load average {os.getloadavg()[0]:.1f}\n")
    print("| ranker | seconds | peak traced allocation (MB) | calls | rounds |\n|---|---:|---:|---:|---:|")
    for ranker in sorted(RANKERS):
        judge = ZeroCostComparator([c.id for c in cands], seed=1)
        tracemalloc.start()
        start = time.perf_counter()
        res = rerank("q", cands, ranker=ranker, comparator=judge, budget=B, top_k=K)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"| {ranker} | {elapsed:.3f} | {peak / 1e6:.1f} | {res.calls} | {res.rounds} |")


if __name__ == "__main__":
    main()
