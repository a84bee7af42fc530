"""The rerank depth of ``parallel_mohajer_depth``: worst regret over the family of judges for each depth.

For every (budget, round cap) cell of the grids given, each depth's row (``parallel_mohajer`` with the adaptive
oracle over the prior top d; d = N is plain ``parallel_mohajer``) is compared with the judge's best row of the
whole grid (every core ranker x oracle and every depth), and the largest gap over the judges is printed, with
the largest fall of each depth's nDCG as B grows over the issue 17 goal budgets (N to 5N), and per goal cell
(budgets N to 5N at caps none, 6 and 10) the least worst regret of any row of the grids (``cell_minimax``: a
lower bound on the regret of any choice among them, knowing every judge). Command (from the
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
sys.path.insert(0, str(Path(__file__).resolve().parent))  # regret_study

from regret_study import cell_minimax, scores_of  # noqa: E402

from activeprp_bench.autotable import GOAL_BUDGETS_PER_N, GOAL_CAPS, goal_cells, worst_regret  # noqa: E402
from activeprp_bench.grid import make_ranker, read_csv  # noqa: E402
from activeprp_bench.regret import largest_fall  # noqa: E402
from activeprp_bench.report import Summary  # noqa: E402
from activeprp_core.rankers import Depth, ParallelMohajer, RankContext, get_ranker  # noqa: E402


def depth_of(label: str, n: int, k: int) -> int | None:
    """The rerank depth of a row's ranker label at (N, K), None for a ranker that is not parallel_mohajer at
    some depth."""
    ranker = get_ranker(make_ranker(label)) if label != "auto" else None
    if isinstance(ranker, ParallelMohajer):
        return n
    if isinstance(ranker, Depth) and isinstance(ranker.inner, ParallelMohajer):
        return ranker.depth_for(RankContext(n, k))
    return None


def main(paths: list[str]) -> None:
    by_judge = defaultdict(list)
    for p in paths:
        for r in read_csv(p):
            if r.oracle != "auto" and r.ranker != "auto":
                by_judge[r.judge].append(r)
    scores = scores_of({j: Summary(rs, np.random.default_rng(0), resamples=1) for j, rs in sorted(by_judge.items())})
    first = next(iter(by_judge.values()))[0]
    names = {name for cells in scores.values() for row in cells.values() for name in row}
    depths = sorted((d, name) for name in names if name.endswith("/adaptive")
                    and (d := depth_of(name.split("/")[0], first.n, first.top_k)) is not None)
    cells = {c for v in scores.values() for c in v}
    for cap in sorted({m for _, m in cells}, key=lambda m: (m < 0, m)):
        budgets = sorted({b for b, m in cells if m == cap}, key=lambda b: (b < 0, b))
        print(f"\ncap {'none' if cap < 0 else cap}: worst regret over {len(scores)} judges (nDCG points) [judge]\n")
        print("| depth | " + " | ".join("none" if b < 0 else str(b) for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for d, name in depths:
            out = []
            for b in budgets:
                measured = {j: v for j, v in scores.items() if name in v.get((b, cap), {})}
                out.append("{:.2f} [{}]".format(*worst_regret(measured, (b, cap), name)) if measured else "-")
            print(f"| {d} ({name.split('/')[0]}) | " + " | ".join(out) + " |")
    span = (min(GOAL_BUDGETS_PER_N) * first.n, max(GOAL_BUDGETS_PER_N) * first.n)
    print(f"\nLargest fall of a depth's nDCG as B grows from {span[0]:g} to {span[1]:g}, over judges and caps:\n")
    for d, name in depths:
        own = {j: {c: row for c, row in v.items() if name in row} for j, v in scores.items()}
        fall, judge, cap = largest_fall(own, {c: name for v in own.values() for c in v}, span)
        print(f"- depth {d}: {fall:.2f} ({judge}, cap {cap})")
    print(f"\nPer goal cell, the least worst regret over the {len(scores)} judges of any of the {len(names)} rows "
          "(in-sample, every judge known) [its worst judge, row]:\n")
    for b, cap in goal_cells(sorted(c for c in cells if c[1] in GOAL_CAPS), first.n):
        print("- B={}, cap {}: {:.2f} [{}, {}]".format(b, "none" if cap < 0 else cap, *cell_minimax(scores, (b, cap))))


if __name__ == "__main__":
    main(sys.argv[1:])
