"""Issue 17's goal figures from the committed family grids, over the goal's round caps only (none, 6, 10).

``activeprp bench auto-table --report`` covers every cap of a grid; the issue's goal cells are B in {N, 1.5N,
2.5N, 5N} at caps none, 6 and 10. Per rule (``regret_choice`` at tolerances 0-1, ``single_row_choice``) this
prints the choice changes along B, the in-sample and leave-one-judge-out (LOJO) worst regret, and the largest
fall of the default's nDCG as B grows from N to 5N (any earlier budget to any later one); then, for the shipped
rule, each judge's LOJO worst cell and largest fall. Command (from the repository root, about a minute):

    python benchmarks/family_goal_figures.py benchmarks/results/family/n100_k10/rows.csv.gz \\
        benchmarks/results/family/n100_k10_adaptive/rows.csv.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.autotable import (  # noqa: E402
    TOLERANCE,
    choice_changes,
    family_summaries,
    lojo_regret,
    regret_choice,
    scores_of,
    single_row_choice,
    worst_regret,
)
from activeprp_bench.grid import read_csv  # noqa: E402

CAPS = (-1, 6, 10)  # -1: no cap


def falls(scores, choice, n: int) -> dict[str, tuple[float, tuple | None]]:
    """Per judge: the largest drop of the chosen row's nDCG from a budget to a larger one, B in [N, 5N]."""
    span = [b for b in sorted({c[0] for c in choice if c[0] > 0}) if n <= b <= 5 * n]
    out = {}
    for judge, cells in scores.items():
        worst: tuple[float, tuple | None] = (0.0, None)
        for cap in CAPS:
            v = [(b, cells[(b, cap)][choice[(b, cap)]]) for b in span]
            for i, (b1, x) in enumerate(v):
                for b2, y in v[i + 1:]:
                    worst = max(worst, (x - y, (b1, b2, cap)), key=lambda t: t[0])
        out[judge] = worst
    return out


def main(paths: list[str]) -> None:
    rows = [r for p in paths for r in read_csv(p)]
    for (n, k), summaries in family_summaries(rows).items():
        scores = scores_of(summaries)
        rules = {f"regret_choice, tolerance {t}": (lambda s, t=t: regret_choice(s, t)) for t in (0.0, 0.25, 0.5, 1.0)}
        rules["single_row_choice"] = single_row_choice
        print(f"## N={n}, K={k}, caps none/6/10\n")
        for name, rule in rules.items():
            choice, lojo = rule(scores), lojo_regret(scores, rule=rule)
            goal = [c for c in choice if c[1] in CAPS and c[0] in (n, 3 * n // 2, 5 * n // 2, 5 * n)]
            capped = [c for c in choice if c[1] in CAPS]
            changes = choice_changes(choice)
            print(f"{name}: changes {[changes.get(m) for m in CAPS]}, "
                  f"worst {max(worst_regret(scores, c, choice[c])[0] for c in goal):.2f}, "
                  f"LOJO goal {max(r for reg in lojo.values() for c, r in reg.items() if c in goal):.2f}, "
                  f"LOJO all {max(r for reg in lojo.values() for c, r in reg.items() if c in capped):.2f}, "
                  f"largest fall {max(f for f, _ in falls(scores, choice, n).values()):.2f}")
        choice, lojo = regret_choice(scores, TOLERANCE), lojo_regret(scores, TOLERANCE)
        goal = [c for c in choice if c[1] in CAPS and c[0] in (n, 3 * n // 2, 5 * n // 2, 5 * n)]
        fall = falls(scores, choice, n)
        print("\njudge: LOJO worst in the goal cells (budget, cap); largest fall (from, to, cap)")
        for judge, reg in sorted(lojo.items()):
            worst = max(((r, c) for c, r in reg.items() if c in goal), key=lambda t: t[0])
            print(f"  {judge}: {worst[0]:.2f} at {worst[1]}; fall {fall[judge][0]:.2f} at {fall[judge][1]}")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
