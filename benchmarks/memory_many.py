"""Peak memory of ``rerank_many`` over many synthetic queries read from a generator (the input is streamed).

Each request is made when ``rerank_many`` pulls it: a query text and ``--candidates`` fresh ``Candidate`` objects
(ids ``d0``..``d{N-1}``, ~40-character texts). The judge is ``ZeroCostComparator`` (answers from one hidden
permutation by dict look-up), so the process holds only the engine's state: at most ``max_active`` queries in
progress, and results are dropped as they come (a checksum of the orders is kept). Prints and writes the peak
RSS (``ru_maxrss``) after the imports and at the end, and the time.

Run (repository root):
    PYTHONPATH=. python benchmarks/memory_many.py --out benchmarks/results/memory_many
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import time
from pathlib import Path

from activeprp_bench.zero_cost import ZeroCostComparator
from activeprp_core import Candidate, rerank_many


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def requests(n_queries: int, n_candidates: int):
    for q in range(n_queries):
        yield (f"synthetic query number {q}",
               [Candidate(f"d{i}", f"passage {i} of query {q}, some words of text") for i in range(n_candidates)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--queries", type=int, default=10_000)
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--budget", type=int, default=150)
    p.add_argument("--max-active", type=int, default=64)
    args = p.parse_args()
    judge = ZeroCostComparator([f"d{i}" for i in range(args.candidates)])
    before = peak_mib()
    started = time.perf_counter()
    digest, calls, n = hashlib.sha256(), 0, 0
    for result in rerank_many(requests(args.queries, args.candidates), comparator=judge, ranker="mohajer",
                              oracle="randomized", budget=args.budget, top_k=10, max_active=args.max_active):
        digest.update(bytes(result.order[:10]))
        calls += result.calls
        n += 1
    seconds = time.perf_counter() - started
    out = {"queries": n, "candidates": args.candidates, "budget": args.budget, "max_active": args.max_active,
           "calls": calls, "seconds": round(seconds, 1), "peak_rss_after_imports_mib": round(before, 1),
           "peak_rss_mib": round(peak_mib(), 1), "orders_sha256": digest.hexdigest()[:16],
           "load1": round(os.getloadavg()[0], 2)}
    print(out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "memory.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
