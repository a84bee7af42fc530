"""The goal figures of ``auto`` over the family of judges, from committed grid rows and an auto table.

Per (N, K) setting of the rows given (nDCG@K points; "kept" judges beat the first stage, ``autotable.MARGIN``):

- **regret**: at each goal cell (N=100: B in {N, 1.5N, 2.5N, 5N} x caps none, 6, 10; N=20: B=50, cap 6), the
  leave-one-judge-out (LOJO) regret of the table's rule (the one its ``source`` names, applied without the judge)
  against the judge's best measured row, its worst judge with a paired bootstrap CI over queries, and the cell's
  in-sample minimax (``regret_study.cell_minimax``: no choice among the measured rows does better); the goal is
  at most 1.0, or at most the minimax + 0.5 where the minimax is above 0.5; then the rules compared
  (``regret.rules_tried`` over caps none, 6 and 10);
- **more budget, more quality**: per kept judge, the largest fall of ``auto``'s nDCG as B grows from N/2 to 5N
  (any earlier budget to any later one, per cap) with its CI, and the cells where ``auto`` spends less than 90% of
  its budget while more than 1 point below the best row;
- **stable choice**: the changes of the resolved ranker x oracle along B in {50, 100, ..., 500, none} per cap;
- **judges worse than the first stage**: their first stage, ceiling and ``auto``'s loss against their best row;
- **the online defaults** (N=20, K=3, B=50, cap 6): ``auto``'s nDCG@3 under this table against a reference
  table's choice, per judge.

Command (from the repository root; about 2 minutes), output in ``benchmarks/results/budget_depth/goals.md``:

    python benchmarks/auto_goals.py --table activeprp_core/data/auto_table.json \\
        --reference benchmarks/results/budget_depth/auto_table_f7033c1.json --rows <the table's --from-csv files>

``--rows`` defaults to the files named in the table's ``source``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

from regret_study import cell_minimax, regret_goal  # noqa: E402

from activeprp_bench.autotable import (  # noqa: E402
    GOAL_BUDGETS_PER_N,
    GOAL_CAPS,
    RULE,
    TOLERANCE,
    Cell,
    Family,
    goal_cells,
    make_rule,
    read_family,
    regret,
    table_choice,
)
from activeprp_bench.grid import open_rows  # noqa: E402
from activeprp_bench.regret import choice_changes, falls, label, lojo_regret, rules_tried  # noqa: E402
from activeprp_bench.stats import macro_diff_ci  # noqa: E402

#: Per setting, the goal cells (budget, cap) when not N=100's.
GOALS = {(20, 3): [(50, 6)]}
#: The budget axis as B/N: the falls and the spending are read from N/2 to 5N (50 to 500 at N=100).
AXIS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0)


def per_query(paths: list[str], wanted: set[tuple]) -> dict[tuple, dict[tuple[str, str], float]]:
    """``(judge, n, k, ranker/oracle, budget, cap) -> (collection, qid) -> seed-averaged nDCG`` for the keys in
    ``wanted`` (a second, selective pass over the rows)."""
    sums: dict[tuple, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with open_rows(path, "r") as f:
            records = csv.reader(f)
            col = {name: i for i, name in enumerate(next(records))}
            for rec in records:
                key = (rec[col["judge"]], int(rec[col["n"]]), int(rec[col["top_k"]]),
                       f"{rec[col['ranker']]}/{rec[col['oracle']]}", int(rec[col["budget"]]),
                       int(rec[col["max_rounds"]]))
                if key in wanted:
                    sums[key][(rec[col["collection"]], rec[col["qid"]])].append(float(rec[col["ndcg10"]]))
    return {k: {q: float(np.mean(v)) for q, v in by_q.items()} for k, by_q in sums.items()}


def ci(queries: dict, a: tuple, b: tuple, rng: np.random.Generator) -> str:
    """``a`` minus ``b`` in points with its paired bootstrap CI over queries (within collections, macro mean)."""
    qa, qb = queries[a], queries[b]
    colls = sorted({q[0] for q in qa})
    return "{:.2f} [{:.2f}, {:.2f}]".format(*macro_diff_ci(
        [[100 * (qa[q] - qb[q]) for q in qa if q[0] == c] for c in colls], rng))


def best_row(scores: dict, judge: str, cell: Cell) -> str:
    return max(scores[judge][cell], key=scores[judge][cell].get)


def setting_report(n: int, k: int, fam: Family, table: dict, reference: dict | None, paths: list[str]) -> str:
    rule_name, tolerance = source_rule(table["source"])
    rule = make_rule(rule_name, tolerance)
    kept = fam.kept()
    scores, everyone = kept.ndcg, fam.ndcg
    cells = sorted({c for by_cell in scores.values() for c in by_cell if c[1] in GOAL_CAPS})
    auto = table_choice(table, n, k, cells)
    goal = GOALS.get((n, k)) or goal_cells(cells, n, GOAL_BUDGETS_PER_N)
    lojo = lojo_regret({j: {c: v for c, v in s.items() if c[1] in GOAL_CAPS} for j, s in scores.items()}, rule=rule)
    rng = np.random.default_rng([0, n, k])
    span = (AXIS[0] * n, AXIS[-1] * n)
    out = [f"## N={n}, K={k}: {len(scores)} judges that beat the first stage; excluded: "
           f"{', '.join(fam.excluded()) or 'none'}\n"]

    # the regret goal, with the CI of the worst judge per cell
    worst = {c: max((lojo[j][c], j) for j in lojo if c in lojo[j]) for c in goal}
    picks = {c: rule({i: s for i, s in scores.items() if i != worst[c][1]})[c] for c in goal}
    wanted = {(j, n, k, name, *c) for c, (_, j) in worst.items() for name in (best_row(scores, j, c), picks[c])}
    wanted |= {(j, n, k, auto[c], *c) for j in everyone for c in cells if span[0] <= c[0] <= span[1]}
    wanted |= {(j, n, k, best_row(everyone, j, c), *c) for j in fam.excluded() for c in goal if c in everyone[j]}
    queries = per_query(paths, wanted)
    out += ["| cell (B, cap) | auto (the table) | LOJO worst [judge] | its regret, 95% CI | minimax [row] | goal "
            "| met |",
            "|---|---|---:|---:|---:|---:|---|"]
    for c in goal:
        w, j = worst[c]
        mm, _, mm_row = cell_minimax(scores, c)
        target = regret_goal(mm)
        diff = ci(queries, (j, n, k, best_row(scores, j, c), *c), (j, n, k, picks[c], *c), rng)
        out.append(f"| {label(c[0])}, {label(c[1])} | {auto[c]} | {w:.2f} [{j}] | {diff} | {mm:.2f} [{mm_row}] | "
                   f"{target:.2f} | {'yes' if w <= target + 1e-9 else 'no'} |")

    goal_scores = {j: {c: v for c, v in s.items() if c[1] in GOAL_CAPS} for j, s in scores.items()}
    out += ["", rules_tried(goal_scores, goal, (AXIS[0] * n, AXIS[-1] * n), tolerance, rule=rule_name)]

    # more budget, more quality; spending
    out += ["", f"Largest fall of auto's nDCG@{k} as B grows from {span[0]:g} to {span[1]:g} (per cap, any earlier "
            "budget to any later one) [95% CI], and cells where auto spends < 90% of B while > 1 point below the best "
            "row:",
            "", "| judge | largest fall | cap, budgets | under-spent cells |", "|---|---:|---|---|"]
    for j in scores:
        fall = max(falls({j: scores[j]}, auto, span), default=None)
        if fall is None or fall[0] <= 0:
            text, where = "0.00", "-"
        else:
            _, _, cap, ca, cb = fall
            text = ci(queries, (j, n, k, auto[ca], *ca), (j, n, k, auto[cb], *cb), rng)
            where = f"{cap}, {label(ca[0])} -> {label(cb[0])}"
        under = [f"B={label(c[0])} cap {label(c[1])}: {kept.calls[j][c][auto[c]]:.0f} calls, "
                 f"{regret(scores, j, c, auto[c]):.2f} below" for c in cells
                 if c[0] > 0 and auto[c] in scores[j].get(c, {}) and regret(scores, j, c, auto[c]) > 1.0
                 and kept.calls[j][c][auto[c]] < 0.9 * c[0]]
        out.append(f"| {j} | {text} | {where} | {'; '.join(under) or '-'} |")

    # stable choice
    axis = [*(round(r * n) for r in AXIS), -1]
    resolved = table_choice(table, n, k, [(b, m) for m in GOAL_CAPS for b in axis])
    out += ["", f"Changes of the resolved ranker x oracle along B in {{{axis[0]}, ..., {axis[-2]}, none}}: "
            + ", ".join(f"cap {label(m)}: {c}" for m, c in choice_changes(resolved).items()) + " (" + "; ".join(
        f"cap {label(m)}: " + " -> ".join(dict.fromkeys(resolved[(b, m)] for b in axis)) for m in GOAL_CAPS) + ")"]

    # judges that do not beat the first stage
    if fam.excluded():
        out += ["", "Judges that do not beat the first stage (reported, not planned for): first stage, ceiling, "
                "auto's loss against their best row per goal cell [95% CI]:", ""]
        for j in fam.excluded():
            losses = "; ".join(f"B={label(c[0])} cap {label(c[1])}: " + ci(
                queries, (j, n, k, best_row(everyone, j, c), *c), (j, n, k, auto[c], *c), rng)
                for c in goal if c in everyone[j] and auto[c] in everyone[j][c])
            out.append(f"- {j}: first stage {fam.first_stage[j]:.2f}, ceiling {fam.ceiling(j):.2f}; {losses}")

    # the online defaults against a reference table
    if reference is not None and (n, k) == (20, 3):
        c = (50, 6)
        before = table_choice(reference, n, k, [c])[c]
        out += ["", f"Online defaults (B=50, cap 6): auto runs {auto[c]}, the reference table {before}; auto's "
                f"nDCG@3 minus the reference's, per judge: " + ", ".join(
                    f"{j} {everyone[j][c][auto[c]] - everyone[j][c][before]:+.2f}" for j in everyone
                    if before in everyone[j].get(c, {}) and auto[c] in everyone[j].get(c, {}))]
    return "\n".join(out) + "\n"


def source_rule(source: str) -> tuple[str, float]:
    """The choice rule and tolerance of a table's ``source`` command (``autotable.RULE``/``TOLERANCE`` when it
    names none)."""
    words = shlex.split(source)
    rule = words[words.index("--rule") + 1] if "--rule" in words else RULE
    return rule, float(words[words.index("--tolerance") + 1]) if "--tolerance" in words else TOLERANCE


def source_rows(source: str) -> list[str]:
    """The rows files of a table's ``source`` command (the words after ``--from-csv`` up to the next flag)."""
    words = shlex.split(source)
    after = words[words.index("--from-csv") + 1:]
    return after[:next((i for i, w in enumerate(after) if w.startswith("--")), len(after))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default="activeprp_core/data/auto_table.json")
    ap.add_argument("--reference", help="an auto table to compare the online defaults with")
    ap.add_argument("--rows", nargs="+", help="rows files (default: the --from-csv files of the table's source)")
    args = ap.parse_args(argv)
    table = json.loads(Path(args.table).read_text())
    reference = json.loads(Path(args.reference).read_text()) if args.reference else None
    paths = args.rows or source_rows(table["source"])
    for (n, k), fam in read_family(paths).items():
        if n == 100 or (n, k) in GOALS:
            print(setting_report(n, k, fam, table, reference, paths))


if __name__ == "__main__":
    main()
