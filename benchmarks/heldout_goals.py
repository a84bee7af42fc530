"""``auto``'s goal figures on judges outside the family (checks it was not tuned on), from their grid rows.

Per setting (N, K) and judge of the rows (every ranker x oracle row and ``auto``'s own, ``--rankers auto --oracles
auto``), nDCG@K points:

- **regret**: at each goal cell (B in {N, 1.5N, 2.5N, 5N} x caps none, 6, 10), ``auto``'s nDCG, the best measured
  row and its nDCG, and the gap (the best row minus ``auto``; the family's goal is at most 1.0, or the cell's
  in-sample minimax + 0.5 where that is above 0.5: ``benchmarks/results/budget_depth/goals.md``);
- **more budget, more quality**: the largest fall of ``auto``'s nDCG as B grows from N/2 to 5N per cap (any earlier
  budget to any later one, ``auto_falls.largest``) with its paired 95% bootstrap CI over queries
  (``regret_study.fall_ci``: a fall whose CI holds 0 may be the noise of one realisation; the CI does not correct
  for picking the largest of the falls, so it leans towards a significant fall), and the cells where
  ``auto`` spends less than 90% of B while more than 1 point below the best row;
- the judge's ceiling (``allpairs``/``bidirectional``, no budget), to set beside the first stage.

``--set J1,J2,...`` prints instead the regret goal over those judges together (``set_goal``).

Command (from the repository root), after ``benchmarks/results/heldout/run.sh``; output in
``benchmarks/results/heldout/goals.md``:

    python benchmarks/heldout_goals.py benchmarks/results/heldout/embedding-error/rows.csv.xz \\
        benchmarks/results/heldout/embedding-error-auto/rows.csv.xz \\
        benchmarks/results/heldout/embedding-error-soft/rows.csv.xz \\
        benchmarks/results/heldout/embedding-error-soft-auto/rows.csv.xz \\
        benchmarks/results/heldout/weak/rows.csv.xz benchmarks/results/heldout/weak-auto/rows.csv.xz \\
        benchmarks/results/heldout/n20_k3/rows.csv.xz benchmarks/results/heldout/n20_k3-auto/rows.csv.xz \\
        benchmarks/results/heldout/minilm/rows.csv.xz benchmarks/results/heldout/minilm-auto/rows.csv.xz
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from auto_falls import largest, rows_by_judge  # noqa: E402  (as falls.md reads falls and rows)
from regret_study import cell_minimax, fall_ci, regret_goal  # noqa: E402

from activeprp_bench.autotable import GOAL_CAPS, cells_by_cap, read_family, regret, table_choice  # noqa: E402
from activeprp_bench.regret import label  # noqa: E402
from activeprp_bench.report import Summary  # noqa: E402

AUTO = "auto/auto"
#: The goal budgets as multiples of N, and the span of the falls (N/2 to 5N).
GOAL_B, SPAN = (1.0, 1.5, 2.5, 5.0), (0.5, 5.0)


def best_other(rows: dict) -> str:
    """The best measured row of a cell other than ``auto``'s."""
    return max((r for r in rows if r != AUTO), key=rows.get)


def report(judge: str, ndcg: dict, calls: dict, n: int, ceiling: float | None, auto: Summary | None = None
           ) -> list[str]:
    """The markdown lines of one judge's figures (``ndcg``, ``calls``: cell -> row -> value); ``auto``: the
    judge's ``auto`` rows per query, for the falls' CIs (None: no CIs)."""
    out = [f"### {judge}" + ("" if ceiling is None else f" (ceiling {ceiling:.2f})"), "",
           "| B | cap | auto | best row | best | gap |", "|---:|---|---:|---|---:|---:|"]
    for cap in GOAL_CAPS:
        for b in (int(x * n) for x in GOAL_B):
            rows = ndcg.get((b, cap), {})
            if AUTO not in rows or len(rows) < 2:
                continue
            best = best_other(rows)
            out.append(f"| {b} | {label(cap)} | {rows[AUTO]:.2f} | {best} | {rows[best]:.2f} | "
                       f"{rows[best] - rows[AUTO]:+.2f} |")
    span = (SPAN[0] * n, SPAN[1] * n)
    falls = []
    for cap, cells in cells_by_cap({judge: ndcg}).items():
        if cap in GOAL_CAPS and len(cells) > 1:
            scores, pick = {judge: {c: ndcg[c] for c in cells}}, {c: AUTO for c in cells}
            ci = None if auto is None else fall_ci(auto, scores, pick, span, np.random.default_rng([n, cap + 1]))
            falls.append(f"{label(cap)}: {largest(scores, pick, span)[judge]}"
                         + ("" if ci is None else f" [{ci[1]:.2f}, {ci[2]:.2f}]"))
    if falls:  # a grid of one budget per cap has no fall to read
        out += ["", f"Largest fall of auto's nDCG as B grows from {span[0]:g} to {span[1]:g}, per cap"
                + (" [paired 95% CI]" if auto is not None else "") + ": " + ", ".join(falls)]
    gaps = {c: rows[best_other(rows)] - rows[AUTO] for c, rows in ndcg.items() if AUTO in rows and len(rows) > 1}
    under = [f"B={b} cap {label(cap)}: {calls[(b, cap)][AUTO]:.0f} calls, {gap:.2f} below"
             for (b, cap), gap in sorted(gaps.items())
             if b > 0 and cap in GOAL_CAPS and calls[(b, cap)][AUTO] < 0.9 * b and gap > 1.0]
    out += ["", "Cells where auto spends < 90% of B while > 1 point below the best row: " + ("; ".join(under) or
                                                                                          "none"), ""]
    return out


def set_goal(ndcg: dict, judges: list[str], table: dict, n: int, k: int) -> list[str]:
    """The markdown lines of the regret goal over ``judges`` together (``ndcg``: judge -> cell -> row -> value), as
    issue 31 states it for judges outside the family: per goal cell, the worst gap of the table's row
    (``autotable.table_choice``, what ``auto`` runs) over them, the cell's in-sample minimax over them
    (``regret_study.cell_minimax``: the least worst gap any row measured on all of them reaches) and the goal (1.0,
    or that minimax + 0.5 where it is above 0.5). The rows may mix the family's grids and held-out ones.

    Raises:
        ValueError: a judge that the rows do not hold.

    Command (from the repository root), output in ``benchmarks/results/heldout/set_goals.md``:

        python benchmarks/heldout_goals.py benchmarks/results/family/n100_k10/rows.csv.xz \\
            benchmarks/results/family/n100_k10_adaptive/rows.csv.xz \\
            benchmarks/results/budget_depth/n100_k10/rows.csv.xz benchmarks/results/deep/cranfield/rows.csv.xz \\
            benchmarks/results/positional/n100_k10/rows.csv.xz benchmarks/results/heldout/embedding-error/rows.csv.xz \\
            benchmarks/results/heldout/embedding-error-soft/rows.csv.xz benchmarks/results/heldout/weak/rows.csv.xz \\
            --set strong-bias,positional,soft-calibrated,calibrated@cranfield,embedding-error,embedding-error-soft \\
            --set strong-bias,positional,soft-calibrated,strong-bias@cranfield,embedding-error,embedding-error-soft,weak
    """
    missing = [j for j in judges if j not in ndcg]
    if missing:
        raise ValueError(f"no rows for judge(s) {', '.join(missing)} at N={n}: add their grids' rows files")
    scores = {j: ndcg[j] for j in judges}
    cells = [(int(x * n), cap) for cap in GOAL_CAPS for x in GOAL_B]
    cells = [c for c in cells if all(c in s for s in scores.values())]
    auto = table_choice(table, n, k, cells)
    out = [f"## N={n}, K={k}: the regret goal over {', '.join(judges)} (nDCG@{k} points)", "",
           "| B | cap | auto (the table) | worst gap [judge] | minimax [row] | goal | met |",
           "|---:|---|---|---:|---:|---:|---|"]
    met = 0
    for c in cells:
        gap, judge = max((regret(scores, j, c, auto[c]), j) for j in judges)
        least, _, row = cell_minimax(scores, c)
        goal = regret_goal(least)
        ok = gap <= goal + 1e-9
        met += ok
        out.append(f"| {c[0]} | {label(c[1])} | {auto[c]} | {gap:.2f} [{judge}] | {least:.2f} [{row}] | {goal:.2f} | "
                   f"{'yes' if ok else 'no'} |")
    return out + ["", f"Met in {met} of {len(cells)} goal cells.", ""]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="+", help="rows files of the judges' grids (every row and auto's)")
    ap.add_argument("--set", action="append", default=[], metavar="J1,J2,...",
                    help="print the regret goal over these judges together instead (repeatable)")
    ap.add_argument("--table", default="activeprp_core/data/auto_table.json", help="for --set: auto's table")
    args = ap.parse_args(argv)
    families = sorted(read_family(args.rows, keep=lambda r, o: True).items(), reverse=True)
    if args.set:
        table = json.loads(Path(args.table).read_text())
        for (n, k), fam in families:
            for judges in args.set:
                print("\n".join(set_goal(fam.ndcg, judges.split(","), table, n, k)))
        return
    by_judge = rows_by_judge(args.rows, {AUTO})
    for (n, k), fam in families:
        print(f"## N={n}, K={k}: auto against the best measured row on judges outside the family (nDCG@{k})\n")
        for judge in sorted(fam.ndcg):
            auto = Summary(by_judge[(n, k, judge)], np.random.default_rng(0), resamples=1)
            print("\n".join(report(judge, fam.ndcg[judge], fam.calls[judge], n, fam.ceiling(judge), auto)))


if __name__ == "__main__":
    main()
