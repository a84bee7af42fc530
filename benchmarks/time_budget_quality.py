"""Quality per second: ``time_budget`` against fixed round caps, on a judge with heavy-tailed latency.

The goal: with the bench's judges behind an endpoint whose calls take a lognormal time (median 0.5 s, p99 5 s),
N=20, K=3, budget 50, the online preset's ``auto`` ranker and oracle, ``time_budget`` of 1.5, 3 and 6 s reaches an
nDCG@3 at least that of the best fixed ``max_rounds`` whose p95 wall time fits the same time, minus 0.3 point.

How it runs in minutes: the reranks run through the real ``arerank_many`` (one query at a time, so each query's
wall time is its own and the round latencies are carried from query to query, as ``rerank_many`` carries them)
on an asyncio event loop whose clock is simulated (``VirtualClockLoop``): when every task waits, the loop jumps
to its next timer instead of sleeping. The endpoint (``LatentEndpoint``) is a ``RemoteComparator`` whose one
request per ordered pair awaits ``asyncio.sleep(latency)`` and answers with the bench judge's answer, so retries,
``max_concurrency`` (8 in flight, the comparator's default), the deadline's timeouts and cancellations, the clock
of the machine and the round-latency estimate all run as they do against a real endpoint, in simulated seconds.

Data: TREC DL19 + DL20 BM25 top-20 (97 judged queries); judges: ``activeprp_bench.judges.FAMILY`` minus
``bundled-ql``; two latency seeds. Command (from the repository root; about 3 minutes on 2 cores):

    python benchmarks/time_budget_quality.py --out benchmarks/results/time_budget
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import selectors
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from activeprp_bench.datasets import load_trec_dl  # noqa: E402
from activeprp_bench.judges import FAMILY, build_judge  # noqa: E402
from activeprp_cli.metrics import ndcg_at_k, ranking_to_run  # noqa: E402
from activeprp_core import Candidate, arerank_many  # noqa: E402
from activeprp_core.comparators.remote import RemoteComparator  # noqa: E402
from activeprp_core.settings import ONLINE  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
N, K, BUDGET = 20, 3, 50
MEDIAN_S, P99_S = 0.5, 5.0
SIGMA = math.log(P99_S / MEDIAN_S) / 2.3263478740408408  # z of the 99th percentile
TIME_BUDGETS = (1.5, 3.0, 6.0)
ROUND_CAPS = (0, 1, 2, 3, 4, 5, 6, 8, 10, None)
SEEDS = (0, 1)
JUDGES = tuple(j for j in FAMILY if j != "bundled-ql")


class _Selector(selectors.DefaultSelector):
    """The selector of ``VirtualClockLoop``: real I/O is polled without waiting; a wait for the next timer
    advances the loop's simulated clock instead of sleeping."""

    loop: VirtualClockLoop

    def select(self, timeout: float | None = None):
        events = super().select(0)
        if events or timeout is None or timeout <= 0:
            return events if events or timeout is not None else super().select(None)
        self.loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a simulated clock (``time()``): timers fire in order, and an idle loop jumps to the next
    one. ``asyncio.sleep``, ``wait_for`` and every timeout of the rerank read this clock."""

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop, self.now = self, 0.0

    def time(self) -> float:
        return self.now


class LatentEndpoint(RemoteComparator):
    """A simulated endpoint in front of ``judge``: one request per ordered pair (the candidates' texts are their
    ids), answered after a lognormal latency (median ``MEDIAN_S``, p99 ``P99_S``) drawn from ``rng``."""

    model, endpoint = "latent", "simulated"

    def __init__(self, judge, rng: random.Random, max_concurrency: int | None = 8) -> None:
        super().__init__(max_concurrency=1)
        self.max_concurrency = max_concurrency  # None: every call of a round in flight at once
        self.judge, self.rng = judge, rng

    def request(self, query: str, first: str, second: str):
        return query, first, second

    async def asend(self, client, request):
        await asyncio.sleep(self.rng.lognormvariate(math.log(MEDIAN_S), SIGMA))
        query, first, second = request
        return self.judge.compare(query, [(Candidate(first, first), Candidate(second, second))])[0]

    def parse(self, response):
        return float(response), 0, 0


def collection() -> tuple[dict, dict, dict]:
    """``(queries, candidates, qrels)`` of DL19 + DL20, top-N, judged queries only; candidates' texts are ids."""
    queries, cands, qrels = {}, {}, {}
    for year in (2019, 2020):
        coll = load_trec_dl(DATA / f"trec-dl-{year}", year).subset(depth=N)
        for qid in coll.qids:
            if coll.qrels.get(qid):
                queries[qid], qrels[qid] = coll.queries[qid], coll.qrels[qid]
                cands[qid] = [Candidate(c.id, c.id) for c in coll.candidates[qid]]
    return queries, cands, qrels


def run_cell(judge_name: str, seed: int, queries, cands, qrels, max_concurrency: int | None,
             **settings) -> list[dict]:
    """Every query reranked with ``settings`` (one at a time, the round latencies carried), on the simulated
    clock; one row per query: nDCG@K, wall seconds, calls, rounds, cut calls."""
    judge = build_judge(judge_name, qrels, seed, queries=queries)
    endpoint = LatentEndpoint(judge, random.Random(f"{judge_name}/{seed}/latency"), max_concurrency)
    requests = [(queries[q], cands[q]) for q in sorted(queries)]

    async def collect():
        return [r async for r in arerank_many(requests, comparator=endpoint, max_active=1, seed=seed, **settings)]

    loop = VirtualClockLoop()
    try:
        results = loop.run_until_complete(collect())
    finally:
        loop.close()
    runs = {q: ranking_to_run([c.id for c in r.ranked]) for q, r in zip(sorted(queries), results)}
    ndcg = ndcg_at_k(qrels, runs, K)
    return [{"qid": q, "ndcg": ndcg[q], "wall": r.wall_time_s, "calls": r.calls, "rounds": r.rounds,
             "cut": r.cut_calls, "ranker": r.ranker} for q, r in zip(sorted(queries), results)]


def summary(rows: list[dict]) -> dict:
    walls = sorted(r["wall"] for r in rows)
    return {"ndcg3": 100 * statistics.fmean(r["ndcg"] for r in rows), "p95_wall": walls[int(0.95 * (len(walls) - 1))],
            "max_wall": walls[-1], "calls": statistics.fmean(r["calls"] for r in rows),
            "rounds": statistics.fmean(r["rounds"] for r in rows), "cut": statistics.fmean(r["cut"] for r in rows),
            "n": len(rows)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="directory for results.json and table.md")
    p.add_argument("--judges", nargs="*", default=list(JUDGES))
    p.add_argument("--max-concurrency", type=lambda x: None if x == "none" else int(x), default=8,
                   help="the endpoint's calls in flight (none: a round's calls all at once; default 8)")
    args = p.parse_args()
    queries, cands, qrels = collection()
    base = {"ranker": ONLINE.ranker, "oracle": ONLINE.oracle, "budget": BUDGET, "top_k": K}
    configs = {**{f"time_budget={t}": {"time_budget": t, "max_rounds": None} for t in TIME_BUDGETS},
               **{f"max_rounds={r}": {"max_rounds": r} for r in ROUND_CAPS}}
    began = time.monotonic()
    cells = {}
    for name, extra in configs.items():
        rows = [row for judge in args.judges for seed in SEEDS
                for row in run_cell(judge, seed, queries, cands, qrels, args.max_concurrency, **base, **extra)]
        cells[name] = summary(rows)
        print(f"{name:>16}: nDCG@3 {cells[name]['ndcg3']:.2f}  p95 wall {cells[name]['p95_wall']:.2f} s  "
              f"max {cells[name]['max_wall']:.2f} s  calls {cells[name]['calls']:.1f}  rounds "
              f"{cells[name]['rounds']:.2f}  cut {cells[name]['cut']:.2f}  ({time.monotonic() - began:.0f} s)",
              flush=True)
    table = ["| time budget (s) | nDCG@3 with time_budget | p95 / max wall (s) | best fixed max_rounds with p95 <= "
             "budget | its nDCG@3 | its p95 wall (s) | difference (points) | goal (>= -0.3) |",
             "|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for t in TIME_BUDGETS:
        ours = cells[f"time_budget={t}"]
        fits = {r: cells[f"max_rounds={r}"] for r in ROUND_CAPS if cells[f"max_rounds={r}"]["p95_wall"] <= t}
        best_r = max(fits, key=lambda r: fits[r]["ndcg3"]) if fits else None
        best = fits.get(best_r) if fits else None
        diff = ours["ndcg3"] - (best["ndcg3"] if best else 0.0)
        verdicts.append(diff >= -0.3)
        label = f"{best_r}{' (the prior order)' if best_r == 0 else ''}"
        theirs = ("none", "-", "-") if best is None else (label, f"{best['ndcg3']:.2f}", f"{best['p95_wall']:.2f}")
        table.append(f"| {t} | {ours['ndcg3']:.2f} | {ours['p95_wall']:.2f} / {ours['max_wall']:.2f} | "
                     f"{' | '.join(theirs)} | {diff:+.2f} | {'met' if diff >= -0.3 else 'missed'} |")
    print("\n".join(table))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        tag = f"quality_per_second_concurrency_{args.max_concurrency or 'all'}"
        (args.out / f"{tag}.json").write_text(json.dumps(
            {"settings": {**base, "N": N, "median_s": MEDIAN_S, "p99_s": P99_S, "sigma": SIGMA, "seeds": SEEDS,
                          "judges": args.judges, "queries": len(queries), "max_concurrency": args.max_concurrency},
             "cells": cells}, indent=1))
        (args.out / f"{tag}.md").write_text("\n".join(table) + "\n")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
