"""The confidence gate's quantile and the ``adaptive`` oracle, on judges of the bench family (issue 17).

For each judge, ranker x oracle and gate quantile q (``activeprp_core.judging.GATE_QUANTILE``; q = 0: no gate),
``rerank_many`` over TREC DL19 + DL20 BM25 top-N (one comparator per collection, so the gate's estimate is carried
across the queries of a collection), per seed; writes one CSV row per cell: mean nDCG@10 (over the queries of
both collections), calls / comparisons, rounds. ``--summarize CSV...`` and ``--adaptive CSV...`` print Markdown
tables. The commands that made the committed results are in ``benchmarks/results/confidence_gate/README.md``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

import numpy as np  # noqa: E402

from activeprp_bench.datasets import load_trec_dl  # noqa: E402
from activeprp_bench.judges import build_judge  # noqa: E402
from activeprp_bench.stats import macro_diff_ci  # noqa: E402
from activeprp_cli.metrics import ndcg_at_k, ranking_to_run  # noqa: E402
from activeprp_core import judging, oracles, rerank_many  # noqa: E402

DATA = Path("/work/shared/data")
SOFT = ("soft-calibrated", "overconfident", "underconfident", "ql-like")
RUNS = ("mohajer/randomized", "mohajer/bidirectional", "parallel_mohajer/randomized", "allpairs/randomized")


def _both_min(p1: float, p2: float, margin: float = 0.0) -> float:
    """The alternative bidirectional gate tried: consistent answers count only when *each* is above the margin."""
    if ((p1 > 0.5 and p2 < 0.5) or (p1 < 0.5 and p2 > 0.5)) and min(abs(p1 - 0.5), abs(p2 - 0.5)) >= margin:
        return (p1 + 1.0 - p2) / 2
    return 0.5


def _both_max(p1: float, p2: float, margin: float = 0.0) -> float:
    """The other alternative: consistent answers count when *either* is above the margin."""
    if ((p1 > 0.5 and p2 < 0.5) or (p1 < 0.5 and p2 > 0.5)) and max(abs(p1 - 0.5), abs(p2 - 0.5)) >= margin:
        return (p1 + 1.0 - p2) / 2
    return 0.5


BOTH = {"mean": oracles._both_orders, "min": _both_min, "max": _both_max}


def collections(depth: int, n_queries: int | None):
    return [load_trec_dl(DATA / f"trec-dl-{year}", year).subset(n_queries, depth) for year in (2019, 2020)]


def cell(colls, judge: str, ranker: str, oracle: str, budget: int | None, quantile: float, seed: int) -> dict:
    """One row: the mean nDCG@10 over every query of ``colls`` and the spending."""
    judging.GATE_QUANTILE = quantile
    per_collection, calls, comparisons, rounds = [], 0, 0, []  # per_collection[c][i]: nDCG@10 of query i
    for coll in colls:
        per_collection.append([])
        comparator = build_judge(judge, coll.qrels, seed, queries=coll.queries)
        requests = [(coll.queries[q], coll.candidates[q]) for q in coll.qids]
        results = list(rerank_many(requests, comparator=comparator, ranker=ranker, oracle=oracle,
                                   budget=budget, top_k=10, seed=seed))
        for q, r in zip(coll.qids, results):
            run = {q: ranking_to_run([coll.candidates[q][i].id for i in r.order])}
            per_collection[-1].append(ndcg_at_k({q: coll.qrels[q]}, run, 10)[q])
            calls, comparisons = calls + r.calls, comparisons + r.comparisons
            rounds.append(r.rounds)
    scores = [x for c in per_collection for x in c]
    return {"judge": judge, "ranker": ranker, "oracle": oracle, "both": oracles._both_orders.__name__,
            "budget": budget, "quantile": quantile, "seed": seed, "queries": len(scores),
            "ndcg10": round(100 * sum(scores) / len(scores), 2),
            "calls_per_comparison": round(calls / max(comparisons, 1), 3),
            "mean_rounds": round(sum(rounds) / len(rounds), 1), "_per_query": per_collection}


def summarize(paths: list[str]) -> str:
    """A Markdown table per CSV: mean nDCG@10 over seeds per judge x run (rows) and quantile (columns)."""
    out = []
    for path in paths:
        cells: dict[tuple, list[float]] = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                cells.setdefault((r["judge"], f"{r['ranker']}/{r['oracle']}", float(r["quantile"])), []).append(
                    float(r["ndcg10"]))
        qs = sorted({q for _, _, q in cells})
        out += [f"{path}:", "", "| judge | ranker/oracle | " + " | ".join(f"q={q:g}" for q in qs) + " |",
                "|---|---|" + "---|" * len(qs)]
        for judge, run in dict.fromkeys((j, r) for j, r, _ in cells):
            means = [cells.get((judge, run, q)) for q in qs]
            out.append(f"| {judge} | {run} | " + " | ".join("-" if m is None else f"{sum(m) / len(m):.2f}"
                                                          for m in means) + " |")
        out.append("")
    return "\n".join(out)


def adaptive_table(path: str) -> str:
    """A Markdown table per judge x ranker: randomized, bidirectional, adaptive (means over seeds), adaptive minus
    the better of the two, and adaptive's calls per comparison."""
    ndcg: dict[tuple, list[float]] = {}
    cost: dict[tuple, list[float]] = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (r["judge"], r["ranker"], r["oracle"])
            ndcg.setdefault(key, []).append(float(r["ndcg10"]))
            cost.setdefault(key, []).append(float(r["calls_per_comparison"]))
    mean = {k: sum(v) / len(v) for k, v in ndcg.items()}
    out = [f"{path}:", "", "| judge | ranker | randomized | bidirectional | adaptive | adaptive - best | "
           "adaptive calls/comparison |", "|---|---|---|---|---|---|---|"]
    for judge, ranker in dict.fromkeys((j, r) for j, r, _ in ndcg):
        r, b, a = (mean[(judge, ranker, o)] for o in ("randomized", "bidirectional", "adaptive"))
        calls = cost[(judge, ranker, "adaptive")]
        out.append(f"| {judge} | {ranker} | {r:.2f} | {b:.2f} | {a:.2f} | {a - max(r, b):+.2f} | "
                   f"{sum(calls) / len(calls):.2f} |")
    return "\n".join(out + [""])


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] in (["--summarize"], ["--adaptive"]):
        tables = summarize(sys.argv[2:]) if sys.argv[1] == "--summarize" else map(adaptive_table, sys.argv[2:])
        print(tables if isinstance(tables, str) else "\n".join(tables))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--judges", nargs="+", default=list(SOFT))
    p.add_argument("--runs", nargs="+", default=list(RUNS), help="ranker/oracle pairs")
    p.add_argument("--quantiles", nargs="+", type=float, default=[0.0, 0.1, 0.25, 0.4, 0.5])
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--queries", type=int, default=None, help="judged queries per collection (default: all)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--both", choices=sorted(BOTH), default="mean",
                   help="how a consistent bidirectional pair is gated (default: the library's, mean confidence)")
    p.add_argument("--paired", nargs="*", metavar="A:B", default=[],
                   help="ranker/oracle pairs A:B (e.g. mohajer/adaptive:mohajer/bidirectional): per judge, the paired "
                        "bootstrap CI of A - B over queries (per-query nDCG@10 averaged over the seeds), printed "
                        "and written to OUT.paired.md")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    per_query: dict[tuple[str, str], list] = {}
    oracles._both_orders = BOTH[args.both]
    colls = collections(args.depth, args.queries)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = None
        for judge in args.judges:
            for run in args.runs:
                ranker, oracle = run.split("/")
                for quantile in args.quantiles:
                    for seed in args.seeds:
                        started = time.perf_counter()
                        row = cell(colls, judge, ranker, oracle, args.budget, quantile, seed)
                        per_query.setdefault((judge, run), []).append(row.pop("_per_query"))
                        if writer is None:
                            writer = csv.DictWriter(f, fieldnames=list(row))
                            writer.writeheader()
                        writer.writerow(row)
                        f.flush()
                        print(row, f"{time.perf_counter() - started:.1f}s", flush=True)
    if args.paired:
        table = paired_table(per_query, args.judges, args.paired)
        Path(args.out + ".paired.md").write_text(table)
        print(table)
    return 0


def paired_table(per_query: dict[tuple[str, str], list], judges: list[str], pairs: list[str]) -> str:
    """Markdown: per judge and pair A:B, the mean difference A - B in nDCG@10 points with its paired bootstrap 95%
    CI over queries (``activeprp_bench.stats.macro_diff_ci``; each query's nDCG averaged over the seeds and
    quantiles run)."""
    out = ["| judge | A | B | A - B [95% CI] |", "|---|---|---|---|"]
    for judge in judges:
        for pair in pairs:
            a, b = pair.split(":")
            runs = [[np.mean(c, axis=0) for c in zip(*per_query[(judge, run)])] for run in (a, b)]  # [coll][query]
            mean, low, high = macro_diff_ci([100 * (x - y) for x, y in zip(*runs)], np.random.default_rng(0))
            out.append(f"| {judge} | {a} | {b} | {mean:+.2f} [{low:+.2f}, {high:+.2f}] |")
    return "\n".join(out + [""])


if __name__ == "__main__":
    raise SystemExit(main())
