"""The rerank depth of ``parallel_mohajer_depth``: worst regret over the family of judges for each depth.

For every (budget, round cap) cell of the grids given, each depth's row (``parallel_mohajer`` with the adaptive
oracle over the prior top d; d = N is plain ``parallel_mohajer``) is compared with the judge's best row of the
whole grid (every core ranker x oracle and every depth), and the largest gap over the judges is printed, with
the largest fall of each depth's nDCG as B grows over the issue 17 goal budgets (N to 5N). Command (from the
repository root; the rows of ``benchmarks/results/family/run_n100*.sh`` and ``benchmarks/results/depth/run.sh``):

    python benchmarks/depth_regret.py benchmarks/results/family/n100_k10/rows.csv.xz \\
        benchmarks/results/family/n100_k10_adaptive/rows.csv.xz benchmarks/results/depth/n100_k10/rows.csv.xz
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.autotable import GOAL_BUDGETS_PER_N  # noqa: E402
from activeprp_bench.grid import VARIANTS, read_csv  # noqa: E402
from activeprp_bench.report import Summary  # noqa: E402
from activeprp_core.rankers.depth import DEFAULT_DEPTH  # noqa: E402


def depth_of(ranker: str, n: int) -> int | None:
    """The rerank depth of a row label, None for a row that is not parallel_mohajer at some depth."""
    if ranker == "parallel_mohajer":
        return n
    if ranker == "parallel_mohajer_depth":
        return min(n, DEFAULT_DEPTH)
    if ranker in VARIANTS and ranker.startswith("parallel_mohajer_depth"):
        return min(n, VARIANTS[ranker]().depth)
    return None


def main(paths: list[str]) -> None:
    by_judge = defaultdict(list)
    for p in paths:
        for r in read_csv(p):
            if r.oracle != "auto" and r.ranker != "auto":
                by_judge[r.judge].append(r)
    scores = {}  # judge -> (budget, cap) -> (ranker, oracle) -> nDCG %
    n = next(iter(by_judge.values()))[0].n
    for judge, rows in sorted(by_judge.items()):
        s = Summary(rows, np.random.default_rng(0), resamples=1)
        cells = defaultdict(dict)
        for r, o, b, m in s.keys:
            cells[(b, m)][(r, o)] = 100 * s.ndcg[(r, o, b, m)][0]
        scores[judge] = cells
    depths = sorted({(depth_of(r, n), r) for cells in scores.values() for c in cells.values() for r, o in c
                     if depth_of(r, n) is not None})
    cells = sorted({c for v in scores.values() for c in v}, key=lambda c: (c[1] < 0, c[1], c[0] < 0, c[0]))
    for cap in sorted({c[1] for c in cells}, key=lambda m: (m < 0, m)):
        budgets = sorted({b for b, m in cells if m == cap}, key=lambda b: (b < 0, b))
        print(f"\ncap {'none' if cap < 0 else cap}: worst regret over {len(scores)} judges (nDCG points) [judge]\n")
        print("| depth | " + " | ".join("none" if b < 0 else str(b) for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for d, name in depths:
            out = []
            for b in budgets:
                gaps = [(max(v[(b, cap)].values()) - v[(b, cap)][(name, "adaptive")], j) for j, v in scores.items()
                        if (name, "adaptive") in v.get((b, cap), {})]
                out.append(f"{max(gaps)[0]:.2f} [{max(gaps)[1]}]" if gaps else "-")
            print(f"| {d} ({name}) | " + " | ".join(out) + " |")
    span = [round(f * n) for f in GOAL_BUDGETS_PER_N]
    print(f"\nLargest fall of a depth's nDCG as B grows from {span[0]} to {span[-1]}, over judges and caps:\n")
    for d, name in depths:
        falls = []
        for j, v in scores.items():
            for cap in {c[1] for c in v}:
                curve = [v[(b, cap)].get((name, "adaptive")) for b in sorted(b for b, m in v if m == cap)
                         if span[0] <= b <= span[-1]]
                curve = [x for x in curve if x is not None]
                falls += [(max(curve[:i + 1]) - x, j, cap) for i, x in enumerate(curve)]
        fall, judge, cap = max(falls)
        print(f"- depth {d}: {fall:.2f} ({judge}, cap {'none' if cap < 0 else cap})")


if __name__ == "__main__":
    main(sys.argv[1:])
