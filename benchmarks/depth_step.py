"""What a partial bracket level costs and buys under a round cap: the parallel plan over all 100 candidates
against the top 80, per judge (the evidence of ``budget_depth.parallel_depths``).

At N=100, K=10 the top 80 are three whole bracket levels (6 rounds, 180 questions); all 100 add a fourth, partial
level for a fifth more candidates (7 rounds, 210 questions), which fits a cap of 10 from B=315 at 1.5 calls per
question. Here ``parallel_mohajer``/``adaptive`` (all 100) is set beside ``parallel_mohajer_depth80``/``adaptive``
(the bench variant) at B in {300, ..., 500}, cap 10, per judge, as the mean over the noise realisations given (one
``--realisation`` group of rows files each: ``--judge-seed``), on the DL family and on Cranfield, whose BM25 first
stage is weak (relevant documents sit deep).

Per judge: each row's nDCG@10 per budget (mean over the realisations), its largest fall as B grows within the
span (any earlier budget to any later one), and the budget from which the top 80 is ahead of all 100 by more than
0.2 at every larger budget of the span ("-" when all 100 is within 0.2 of it or ahead at the largest budget).
Then, per budget, all 100 minus the top 80 over the judges (those given to ``--leave-out``, the ones that do not
beat the first stage, left out): the mean, how many judges it is below and below by more than 0.2, the least and
the most.

Command (from the repository root), after ``benchmarks/results/budget_depth/depth_step/run.sh``; output in
``benchmarks/results/budget_depth/depth_step.md``:

    python benchmarks/depth_step.py \\
        --realisation benchmarks/results/budget_depth/depth_step/{dl,cranfield}/r0/rows.csv.xz \\
        --realisation benchmarks/results/budget_depth/depth_step/{dl,cranfield}/r1/rows.csv.xz \\
        --realisation benchmarks/results/budget_depth/depth_step/{dl,cranfield}/r2/rows.csv.xz \\
        --realisation benchmarks/results/budget_depth/depth_step/{dl,cranfield}/r3/rows.csv.xz \\
        --realisation benchmarks/results/budget_depth/depth_step/{dl,cranfield}/r4/rows.csv.xz \\
        --leave-out ql-like
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.autotable import Scores, read_family  # noqa: E402
from activeprp_bench.regret import largest_fall, mean_scores  # noqa: E402

ROWS = ("parallel_mohajer/adaptive", "parallel_mohajer_depth80/adaptive")
CAP = 10
BUDGETS = (300, 350, 400, 450, 500)


def curves(realisations: list[list[str]], n: int = 100, k: int = 10) -> Scores:
    """``judge -> cell -> row -> nDCG@K`` at ``CAP``, the mean over the realisations (``regret.mean_scores``);
    judges without every row at every budget of ``BUDGETS`` are left out."""
    scores = mean_scores([read_family(paths, keep=lambda r, o: True)[(n, k)].ndcg for paths in realisations],
                         (CAP,))
    return {j: s for j, s in scores.items() if all(r in s.get((b, CAP), {}) for b in BUDGETS for r in ROWS)}


def curve(scores: Scores, judge: str, row: str) -> list[float]:
    """``row``'s nDCG@K of ``judge`` per budget of ``BUDGETS``."""
    return [scores[judge][(b, CAP)][row] for b in BUDGETS]


def fall(scores: Scores, judge: str, row: str) -> float:
    """``row``'s largest fall on ``judge`` as B grows over ``BUDGETS`` (``regret.largest_fall``; 0 when none)."""
    return largest_fall({judge: scores[judge]}, {(b, CAP): row for b in BUDGETS}, (BUDGETS[0], BUDGETS[-1]))[0]


def top80_ahead_from(deep: list[float], top80: list[float], margin: float = 0.2) -> str:
    """The first budget from which ``top80`` leads ``deep`` by more than ``margin`` at every later budget."""
    ahead = [t - d > margin for d, t in zip(deep, top80)]
    if not ahead[-1]:
        return "-"
    first = len(ahead) - 1
    while first > 0 and ahead[first - 1]:
        first -= 1
    return str(BUDGETS[first])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--realisation", action="append", nargs="+", required=True,
                    help="the rows files of one noise realisation (repeat per realisation)")
    ap.add_argument("--leave-out", nargs="*", default=[], metavar="JUDGE",
                    help="judges left out of the summary over judges (those that do not beat the first stage)")
    args = ap.parse_args(argv)
    table = curves(args.realisation)
    cols = " | ".join(f"B={b}" for b in BUDGETS)
    print(f"## N=100, K=10, cap {CAP}: all 100 against the top 80, nDCG@10, mean over "
          f"{len(args.realisation)} realisations\n")
    print(f"| judge | row | {cols} | largest fall | top 80 ahead from |")
    print("|---|---|" + "---:|" * (len(BUDGETS) + 2))
    for j in sorted(table):
        deep, top80 = (curve(table, j, r) for r in ROWS)
        for r, xs, ahead in ((ROWS[0], deep, ""), (ROWS[1], top80, top80_ahead_from(deep, top80))):
            print(f"| {j} | {r} | " + " | ".join(f"{x:.2f}" for x in xs) + f" | {fall(table, j, r):.2f} | {ahead} |")
    judges = [j for j in sorted(table) if j not in args.leave_out]
    print(f"\nAll 100 minus the top 80 over the {len(judges)} judges (left out: "
          f"{', '.join(args.leave_out) or 'none'}):\n")
    print("| B | mean | judges below | below by more than 0.2 | least | most |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in BUDGETS:
        gaps = [table[j][(b, CAP)][ROWS[0]] - table[j][(b, CAP)][ROWS[1]] for j in judges]
        print(f"| {b} | {mean(gaps):+.2f} | {sum(g < 0 for g in gaps)} | {sum(g < -0.2 for g in gaps)} | "
              f"{min(gaps):+.2f} | {max(gaps):+.2f} |")
    print()


if __name__ == "__main__":
    main()
