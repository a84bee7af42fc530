"""The default of the wrappers, the CLI and the service (``auto``/``auto``) on soft-answer judges, fed their
answers as they are or binarized at 0.5 (issue 17 goal "soft answers": at B=250 at least 2 nDCG@10 points
above binarized, and never below it at any B).

Per soft judge of the bench family and budget: ``rerank_many`` over TREC DL19 + DL20 BM25 top-N (one comparator
per collection, so the confidence gate's estimate is carried across a collection's queries), per seed, once with
the judge's probabilities and once with each probability replaced by 1.0 / 0.0 / 0.5 (p > 0.5 / < 0.5 / = 0.5).
Prints a Markdown table (mean nDCG@10 x100, the paired difference with a 95% bootstrap CI over queries x seeds)
and writes the per-query scores as JSON.

Usage: python benchmarks/soft_default.py [--judges ...] [--budgets ...] [--seeds ...] [--depth 100] --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from activeprp_bench.datasets import load_trec_dl  # noqa: E402
from activeprp_bench.judges import build_judge  # noqa: E402
from activeprp_cli.metrics import ndcg_at_k, ranking_to_run  # noqa: E402
from activeprp_core import Comparator, rerank_many  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


class Binarized(Comparator):
    """``inner``'s answers with each probability rounded to 1.0 / 0.0 (0.5 stays a tie)."""

    def __init__(self, inner: Comparator) -> None:
        self.inner = inner

    def judge(self, query, pairs, *, guard=None):
        return [j if j.prob is None else replace(j, prob=0.5 if j.prob == 0.5 else float(j.prob > 0.5))
                for j in self.inner.judge(query, pairs, guard=guard)]


def scores(colls, judge: str, budget: int | None, seed: int, binarize: bool, ranker: str = "auto",
           oracle: str = "auto") -> list[float]:
    """nDCG@10 per query (both collections, in order) of ``ranker``/``oracle`` (default: the default) on ``judge``."""
    out = []
    for coll in colls:
        comparator = build_judge(judge, coll.qrels, seed, queries=coll.queries)
        if binarize:
            comparator = Binarized(comparator)
        requests = [(coll.queries[q], coll.candidates[q]) for q in coll.qids]
        results = rerank_many(requests, comparator=comparator, ranker=ranker, oracle=oracle, budget=budget,
                              top_k=10, seed=seed)
        for q, r in zip(coll.qids, results):
            out.append(ndcg_at_k({q: coll.qrels[q]}, {q: ranking_to_run([coll.candidates[q][i].id for i in r.order])},
                                 10)[q])
    return out


def ci(diff: np.ndarray, rng: np.random.Generator, resamples: int = 10_000) -> tuple[float, float]:
    """95% percentile bootstrap CI of the mean of ``diff``."""
    means = diff[rng.integers(0, diff.size, size=(resamples, diff.size))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--judges", nargs="+", default=["soft-calibrated", "overconfident", "underconfident", "ql-like"])
    p.add_argument("--budgets", nargs="+", type=int, default=[100, 150, 250, 500])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    colls = [load_trec_dl(DATA / f"trec-dl-{year}", year).subset(None, args.depth) for year in (2019, 2020)]
    rng, rows, raw = np.random.default_rng(0), [], {}
    for judge in args.judges:
        for budget in args.budgets:
            soft = np.array([s for seed in args.seeds for s in scores(colls, judge, budget, seed, False)])
            hard = np.array([s for seed in args.seeds for s in scores(colls, judge, budget, seed, True)])
            lo, hi = ci(100 * (soft - hard), rng)
            rows.append(f"| {judge} | {budget} | {100 * soft.mean():.2f} | {100 * hard.mean():.2f} | "
                        f"{100 * (soft - hard).mean():+.2f} [{lo:+.2f}, {hi:+.2f}] |")
            raw[f"{judge}/{budget}"] = {"soft": soft.tolist(), "binarized": hard.tolist()}
            print(rows[-1], flush=True)
    table = ("| judge | budget | default, soft answers | default, binarized | difference [95% CI] |\n"
             "|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(f"Command: `python benchmarks/soft_default.py {' '.join(argv or sys.argv[1:])}`\n\n"
                                  f"N={args.depth}, K=10, seeds {args.seeds}, auto/auto, no round cap.\n\n{table}")
    (out / "scores.json").write_text(json.dumps(raw))


if __name__ == "__main__":
    main()
