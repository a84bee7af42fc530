"""What ``budget_depth`` (``auto``'s ranker) plans per budget and round cap: the plan (``s`` = the sequential
``mohajer_bubble``, ``p`` = the parallel ``parallel_mohajer``) and its depth, for N=100/K=10, N=50/K=5 and N=20/K=3,
with the questions each plan asks per depth (``plan_size``: a judge that agrees with the first stage). Pure
arithmetic on the plans, no judge. Command (from the repository root, seconds):

    python benchmarks/budget_depth_plan.py > benchmarks/results/budget_depth/plan.md
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_core.budget import BudgetView, Cap  # noqa: E402
from activeprp_core.rankers import RankContext  # noqa: E402
from activeprp_core.rankers.budget_depth import CALLS_PER_QUESTION, BudgetDepth, plan_size  # noqa: E402

SETTINGS = ((100, 10), (50, 5), (20, 3))
PER_N = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, None)
CAPS = (None, 1, 3, 6, 10, 20)


def main() -> None:
    ranker = BudgetDepth()
    for n, k in SETTINGS:
        budgets = [None if r is None else round(r * n) for r in PER_N]
        print(f"## N={n}, K={k}: plan and depth (s = sequential, p = parallel; {CALLS_PER_QUESTION} calls per "
              "question of a one-call oracle)\n")
        print("| cap | " + " | ".join("none" if b is None else str(b) for b in budgets) + " |")
        print("|---|" + "---:|" * len(budgets))
        for cap in CAPS:
            cells = []
            for budget in budgets:
                view = BudgetView({"budget": Cap(budget, "budget"), "max_rounds": Cap(cap, "max_rounds")})
                inner, depth = ranker.plan(RankContext(n, k, caps=view))
                cells.append(f"{'s' if inner is ranker.sequential else 'p'}{depth}")
            print(f"| {'none' if cap is None else cap} | " + " | ".join(cells) + " |")
        print(f"\nQuestions and rounds of each plan over the top d (N={n}, K={k}):\n")
        depths = sorted({*range(k, n + 1, k), n})
        print("| plan | " + " | ".join(map(str, depths)) + " |")
        print("|---|" + "---:|" * len(depths))
        for name, inner in (("sequential (mohajer_bubble)", ranker.sequential),
                            ("parallel (parallel_mohajer)", ranker.parallel)):
            print(f"| {name} | " + " | ".join("{}q/{}r".format(*plan_size(inner, d, k)) for d in depths) + " |")
        print()


if __name__ == "__main__":
    main()
