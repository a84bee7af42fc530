"""Issue 17's goal figures from the committed family grids, over the goal's round caps only (none, 6, 10).

``activeprp bench auto-table --report`` covers every cap of a grid; the issue's goal cells are B in {N, 1.5N,
2.5N, 5N} at caps none, 6 and 10. The choice along the budget axis is made per cap, so restricting the scores to
those caps leaves the choices as they are. Per (N, K) setting this prints ``regret.rules_tried`` on them (the
"all cells" column then means all cells of those caps), and for the shipped rule (``autotable.RULE``) each
judge's leave-one-judge-out (LOJO) worst goal cell, the same regret corrected for the winner's curse with the
floor of that estimator (``regret_study.regret_bias``, 1000 query resamples), and the largest fall of the default's
nDCG as B grows from N to 5N. Command (from the repository root, about four minutes):

    python benchmarks/family_goal_figures.py benchmarks/results/family/n100_k10/rows.csv.xz \\
        benchmarks/results/family/n100_k10_adaptive/rows.csv.xz benchmarks/results/family/n20_k3/rows.csv.xz
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))  # regret_study

from regret_study import fall_ci, regret_bias, scores_of  # noqa: E402

from activeprp_bench.autotable import GOAL_BUDGETS_PER_N, GOAL_CAPS, RULE, TOLERANCE, goal_cells, make_rule  # noqa: E402
from activeprp_bench.grid import read_csv  # noqa: E402
from activeprp_bench.regret import family_summaries, lojo_regret, rules_tried  # noqa: E402


def main(paths: list[str]) -> None:
    rows = [r for p in paths for r in read_csv(p)]
    for (n, k), summaries in family_summaries(rows).items():
        scores = {j: {c: v for c, v in cells.items() if c[1] in GOAL_CAPS} for j, cells in scores_of(summaries).items()}
        goal = goal_cells(sorted({c for cells in scores.values() for c in cells}), n)
        span = (min(GOAL_BUDGETS_PER_N) * n, max(GOAL_BUDGETS_PER_N) * n)
        print(f"## N={n}, K={k}, caps none/6/10\n\n{rules_tried(scores, goal, span)}\n")
        rule = make_rule(RULE, TOLERANCE)  # the shipped table's rule
        choice, lojo = rule(scores), lojo_regret(scores, rule=rule)
        print("judge: LOJO worst in the goal cells at (budget, cap); the worst bias-corrected, at (budget, cap); "
              "floor = the regret the estimator shows for the judge's own best row, mean [max] over the goal cells; "
              "largest fall of the default's nDCG [paired 95% CI over queries], cap, budgets")
        rng, fall_rng = np.random.default_rng([0, n, k]), np.random.default_rng([1, n, k])
        for judge, reg in sorted(lojo.items()):
            worst, cell = max((r, c) for c, r in reg.items() if c in goal)
            without = rule({j: s for j, s in scores.items() if j != judge})
            bias = {c: regret_bias(summaries[judge], c, without[c], rng) for c in goal if c in scores[judge]}
            corrected, at = max((b[1], c) for c, b in bias.items())
            floors = [b[2] for b in bias.values()]
            fall = "0.00"
            if (ci := fall_ci(summaries[judge], {judge: scores[judge]}, choice, span, fall_rng)) is not None:
                mean, low, high, (before, cap), (after, _) = ci
                fall = f"{mean:.2f} [{low:.2f}, {high:.2f}] (cap {'none' if cap < 0 else cap}, B {before} -> {after})"
            print(f"  {judge}: {worst:.2f} at {cell}; corrected {corrected:.2f} at {at}; floor "
                  f"{np.mean(floors):.2f} [{max(floors):.2f}]; fall {fall}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
