"""The "more budget, more quality" goal of ``auto`` over several noise realisations of the family's judges.

``auto_goals.py`` reads the largest fall of ``auto``'s nDCG@K as B grows on one realisation of each judge (judge
seed 0): the largest of 45 budget pairs x 3 caps of differences between noisy means, so it is above the true fall
even where the true curve never falls. Here each judge is also run on other realisations (``--judge-seed``: which
documents it mis-reads and by how much), and the largest fall is read per realisation and on the mean over them,
where a fall that the plan causes stays and one that a realisation's noise causes shrinks.

Per (N, K) setting of the rows given: per judge, the largest fall of ``auto``'s row (the table's choice,
``autotable.table_choice``) as B grows from N/2 to 5N, per cap (none, 6, 10), any earlier budget to any later
one (``regret.falls``), per realisation and on the mean over realisations (cells and rows present in every one).
Every judge of the rows is listed, those that do not beat the first stage too (the rows here lack the first stage
and the ceiling that ``auto_goals.py`` reads to tell them). The fall on the mean comes with its paired 95% bootstrap
CI over queries (``regret_study.fall_ci``: each query's difference averaged over the realisations), which does not
correct for picking the largest of the falls.

``--row RANKER/ORACLE`` reads that row in every cell instead of ``auto``'s (the commands in
``benchmarks/results/budget_depth/prior/README.md``). ``--steps`` adds where the falls above the goal's 0.2 are:
over the curves (judge x realisation x cap; ``--exclude`` leaves judges out, such as those that do not beat the
first stage), how many fall more than 0.2, per cap and per budget step of their largest fall.

Command (from the repository root), output in ``benchmarks/results/budget_depth/falls.md``:

    python benchmarks/auto_falls.py benchmarks/results/budget_depth/n100_k10/rows.csv.xz \\
        benchmarks/results/budget_depth/realisations/r{1,2,3,4,5,6,7,8,9}/rows.csv.xz --steps --exclude ql-like
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

from auto_goals import AXIS  # noqa: E402  (the budget axis as B/N: falls are read from N/2 to 5N)
from regret_study import fall_ci  # noqa: E402

from activeprp_bench.autotable import GOAL_CAPS, cells_by_cap, core_row, read_family, table_choice  # noqa: E402
from activeprp_bench.grid import Row, read_csv  # noqa: E402
from activeprp_bench.regret import falls, label, mean_scores  # noqa: E402
from activeprp_bench.report import Summary  # noqa: E402

#: The goal's largest fall of ``auto``'s nDCG as B grows (issue 31), in points.
GOAL_FALL = 0.2


def largest(scores: dict, auto: dict, span: tuple[float, float]) -> dict[str, str]:
    """Per judge, its largest fall of ``auto``'s row, as ``points (cap, B -> B')``; ``0.00`` when it never falls."""
    out = {}
    for j in scores:
        fall = max(falls({j: scores[j]}, auto, span), default=None)
        out[j] = "0.00" if fall is None or fall[0] <= 0 else \
            f"{fall[0]:.2f} ({fall[2]}, {label(fall[3][0])} -> {label(fall[4][0])})"
    return out


def rows_by_judge(paths: list[str], rows: set[str]) -> dict[tuple[int, int, str], list[Row]]:
    """The rows of ``paths`` whose ``ranker/oracle`` is in ``rows``, per (N, K, judge)."""
    out: dict[tuple[int, int, str], list[Row]] = {}
    for path in paths:
        for r in read_csv(path, keep=lambda ranker, oracle: f"{ranker}/{oracle}" in rows):
            out.setdefault((r.n, r.top_k, r.judge), []).append(r)
    return out


def steps(families: list[dict], auto: dict, span: tuple[float, float], exclude: set[str]) -> list[str]:
    """Markdown lines: of the curves (judge x realisation x cap of ``families``, judges in ``exclude`` left out),
    those whose largest fall is above ``GOAL_FALL``, per cap and per budget step of that fall."""
    curves, by_cap, where = 0, Counter(), Counter()
    for ndcg in families:
        for j in sorted(set(ndcg) - exclude):
            for cap, cells in cells_by_cap({j: ndcg[j]}).items():
                if cap not in GOAL_CAPS:
                    continue
                curves += 1
                fall = max(falls({j: {c: ndcg[j][c] for c in cells}}, auto, span), default=None)
                if fall is not None and fall[0] > GOAL_FALL:
                    by_cap[fall[2]] += 1
                    where[f"{fall[2]}, {label(fall[3][0])} -> {label(fall[4][0])}"] += 1
    left = f"; {', '.join(sorted(exclude))} left out" if exclude else ""
    caps = [label(c) for c in GOAL_CAPS]
    return [f"Curves (judge x realisation x cap{left}) whose largest fall is above {GOAL_FALL}: "
            f"{sum(by_cap.values())} of {curves}; per cap: " + ", ".join(f"{c} {by_cap[c]}" for c in caps),
            "", "Where (cap, budgets of the largest fall: curves): "
            + "; ".join(f"{w}: {n}" for w, n in where.most_common()), ""]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="+", help="one rows file per noise realisation")
    ap.add_argument("--table", default="activeprp_core/data/auto_table.json")
    ap.add_argument("--row", help="read this row (ranker/oracle) in every cell instead of auto's")
    ap.add_argument("--steps", action="store_true", help="add where the falls above 0.2 are, per cap and budget step")
    ap.add_argument("--exclude", action="append", default=[], metavar="JUDGE", help="for --steps: leave this judge out")
    args = ap.parse_args(argv)
    table = json.loads(Path(args.table).read_text())
    per_file = [read_family([p], (lambda r, o: True) if args.row else core_row) for p in args.rows]
    for nk in sorted(set.intersection(*(set(f) for f in per_file))):
        n, k = nk
        families = [f[nk] for f in per_file]
        span = (AXIS[0] * n, AXIS[-1] * n)
        scores = mean_scores([f.ndcg for f in families], GOAL_CAPS)
        cells = sorted({c for by_cell in scores.values() for c in by_cell})
        auto = dict.fromkeys(cells, args.row) if args.row else table_choice(table, n, k, cells)
        columns = [largest({j: {c: v for c, v in fam.ndcg[j].items() if c[1] in GOAL_CAPS} for j in scores}, auto, span)
                   for fam in families] + [largest(scores, auto, span)]
        runs = [rows_by_judge([p], set(auto.values())) for p in args.rows]
        for j in scores:
            summaries = [Summary(run[(n, k, j)], np.random.default_rng(0), resamples=1) for run in runs]
            if (ci := fall_ci(summaries, {j: scores[j]}, auto, span, np.random.default_rng(0))) is not None:
                columns[-1][j] += f" [{ci[1]:.2f}, {ci[2]:.2f}]"
        print(f"## N={n}, K={k}: largest fall of {args.row or 'auto'}'s nDCG@{k} as B grows from {span[0]:g} to "
              f"{span[1]:g} (points; cap, budgets)\n")
        print("| judge | " + " | ".join(f"realisation {i}" for i in range(len(families)))
              + " | mean [paired 95% CI] |")
        print("|---|" + "---:|" * (len(families) + 1))
        for j in sorted(scores):
            print(f"| {j} | " + " | ".join(col[j] for col in columns) + " |")
        print()
        if args.steps:
            print("\n".join(steps([fam.ndcg for fam in families], auto, span, set(args.exclude))))


if __name__ == "__main__":
    main()
