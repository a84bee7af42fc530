"""What ``adaptive`` measures and decides against ``bidirectional``: the ``flip_rate`` each reports for the same
judge, and how many reranks end in another order, split by the two causes (the consistency shortcut,
``JudgeTally.consistent``; the gate margin, each oracle's quantile of its own answers). Synthetic queries of
``core_counts.synthetic_query`` (N=100, K=10, no budget), the paper-calibrated simulated judge, hard and soft.

Run: python benchmarks/adaptive_sample.py > benchmarks/results/adaptive_sample/README.md
"""

from __future__ import annotations

import contextlib
import statistics
from unittest import mock

from core_counts import synthetic_query

from activeprp_core import SimulatedComparator, rerank
from activeprp_core.comparators.simulated import CALIBRATED_PARAMS
from activeprp_core.judging import JudgeTally

QUERIES = 6
DECIDERS = ("mohajer", "mohajer_bubble", "heapsort", "bubblesort", "quicksort")  # read outcomes only through beats
RANKERS = (*DECIDERS, "budget_depth")


def run(ranker: str, oracle: str, seed: int, hard: bool):
    cands, labels = synthetic_query(seed)
    judge = SimulatedComparator(labels, seed=seed, hard=hard, **CALIBRATED_PARAMS)
    return rerank("q", cands, ranker=ranker, oracle=oracle, budget=None, top_k=10, seed=seed, comparator=judge)


@contextlib.contextmanager
def variant(shortcut: bool, margin: float | None):
    """``adaptive`` without its consistency shortcut (``shortcut=False``) and/or with one fixed gate margin for
    both oracles (``margin``), as measuring devices only."""
    with contextlib.ExitStack() as stack:
        if not shortcut:
            stack.enter_context(mock.patch.object(JudgeTally, "consistent", property(lambda self: False)))
        if margin is not None:
            stack.enter_context(mock.patch.object(JudgeTally, "margin", lambda self, quantile=None: margin))
        yield


def flip_rates() -> None:
    print("## `flip_rate` reported, per query (mean and range over the queries)\n")
    print("| ranker | judge | `adaptive` | `bidirectional` | `adaptive` calls per comparison |")
    print("| --- | --- | --- | --- | --- |")
    for ranker in RANKERS:
        for hard in (True, False):
            cells, ratio = [], []
            for oracle in ("adaptive", "bidirectional"):
                results = [run(ranker, oracle, s, hard) for s in range(QUERIES)]
                rates = [r.judge.flip_rate for r in results if r.judge.flip_rate is not None]
                cells.append(f"{statistics.mean(rates):.2f} ({min(rates):.2f}-{max(rates):.2f})" if rates else "-")
                if oracle == "adaptive":
                    ratio = [r.calls / r.comparisons for r in results]
            print(f"| {ranker} | {'hard' if hard else 'soft'} | {cells[0]} | {cells[1]} | "
                  f"{statistics.mean(ratio):.2f} |")


def decisions() -> None:
    print("\n## Reranks whose order differs from `bidirectional`'s\n")
    print(f"Rankers that read outcomes only through `beats`: {', '.join(DECIDERS)}.\n")
    print("| `adaptive` | hard judge | soft judge |\n| --- | --- | --- |")
    for name, shortcut, margin in (("as shipped", True, None), ("without the consistency shortcut", False, None),
                                   ("as shipped, one fixed gate margin (0.1)", True, 0.1),
                                   ("without the shortcut, one fixed gate margin (0.1)", False, 0.1)):
        differ = {True: 0, False: 0}
        with variant(shortcut, margin):
            for ranker in DECIDERS:
                for hard in (True, False):
                    for s in range(QUERIES):
                        differ[hard] += run(ranker, "adaptive", s, hard).order != run(ranker, "bidirectional", s,
                                                                                        hard).order
        total = len(DECIDERS) * QUERIES
        print(f"| {name} | {differ[True]}/{total} | {differ[False]}/{total} |")


if __name__ == "__main__":
    print(f"# `adaptive` against `bidirectional`\n\n{QUERIES} synthetic queries (`core_counts.synthetic_query`), "
          "N=100, K=10, no budget,\nthe paper-calibrated simulated judge (`CALIBRATED_PARAMS`). "
          "Made by `benchmarks/adaptive_sample.py`.\n")
    flip_rates()
    decisions()
