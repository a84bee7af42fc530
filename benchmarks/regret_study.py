"""Research helpers on the regret of ``auto``'s choice over a family of judges, shared by the scripts here
(``family_goal_figures.py``, ``depth_regret.py``, ``auto_goals.py``); not part of what ``activeprp bench`` runs.

- ``regret_bias``: how much of a judge's regret is the winner's curse of taking its best of many noisy rows;
- ``fall_ci``: a judge's largest fall of the default as the budget grows, with its paired bootstrap CI;
- ``cell_minimax``: the least worst regret any measured row reaches in a cell (a lower bound for any choice);
- ``scores_of``: the cell means of ``Summary`` objects, bench variants included (``autotable.family_means`` keeps
  the core rows only).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.autotable import Cell, Scores, common_rows, worst_regret  # noqa: E402
from activeprp_bench.regret import diff_ci, falls  # noqa: E402
from activeprp_bench.report import Summary  # noqa: E402


def scores_of(summaries: dict[str, Summary]) -> Scores:
    """Mean nDCG@K in % (macro over collections, then seeds) per judge, cell and ``ranker/oracle`` of ``Summary``
    objects (one per judge), whatever the rankers (bench variants too)."""
    out: Scores = {}
    for judge, s in summaries.items():
        cells: dict[Cell, dict[str, float]] = {}
        for r, o, b, m in s.keys:
            cells.setdefault((b, m), {})[f"{r}/{o}"] = 100 * s.ndcg[(r, o, b, m)][0]
        out[judge] = cells
    return out


def regret_bias(summary: Summary, cell: Cell, name: str, rng: np.random.Generator, resamples: int = 1000
                ) -> tuple[float, float, float]:
    """How much of a judge's ``regret`` at ``cell`` is the winner's curse: the best row is the largest of the
    cell's noisy means, so its in-sample gap to ``name`` is biased upwards. Resampling the queries (within each
    collection, macro mean), in nDCG points:

    Returns:
        ``(regret, corrected, floor)``: the in-sample regret; the bootstrap bias-corrected one, 2 x regret minus
        its mean over the resamples (Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993, sec. 10.3);
        and the *floor*, the mean over the resamples of the gap from the resample's best row to the full sample's
        best row: the regret this estimator shows even for the judge's own best row.
    Raises:
        ValueError: ``name`` not measured at ``cell``.
    """
    keys = [k for k in summary.keys if (k[2], k[3]) == cell]
    col = [f"{r}/{o}" for r, o, _, _ in keys].index(name)
    queries = sorted(summary.per_query[keys[0]])
    values = 100 * np.array([[summary.per_query[k][q] for k in keys] for q in queries])
    groups = [np.array([i for i, q in enumerate(queries) if q[0] == c]) for c in sorted({q[0] for q in queries})]

    def means(picks: list[np.ndarray]) -> np.ndarray:
        return np.mean([values[ix].mean(axis=0) for ix in picks], axis=0)

    full = means(groups)
    best = int(np.argmax(full))
    boot = np.array([means([ix[rng.integers(0, ix.size, ix.size)] for ix in groups]) for _ in range(resamples)])
    top = boot.max(axis=1)
    in_sample = float(full.max() - full[col])
    return in_sample, 2 * in_sample - float((top - boot[:, col]).mean()), float((top - boot[:, best]).mean())


def fall_ci(summary: Summary | Sequence[Summary], scores: Scores, pick: dict[Cell, str], span: tuple[float, float],
            rng: np.random.Generator) -> tuple[float, float, float, Cell, Cell] | None:
    """One judge's largest fall of the picked row's nDCG as the budget grows within ``span``, with its paired
    bootstrap CI (``regret.diff_ci``): ``(points, low, high, earlier cell, later cell)``; None when it never falls.
    ``scores``: that judge's cell means alone (``{judge: cells}``); ``summary``: its ``Summary``, or one per noise
    realisation (``scores`` then the mean over them, ``regret.mean_scores``)."""
    fall, _, _, ca, cb = max(falls(scores, pick, span), default=(0.0, "", "", None, None))
    if fall <= 0:
        return None
    mean, low, high = diff_ci(summary, (*pick[ca].split("/"), *ca), (*pick[cb].split("/"), *cb), rng)
    return mean, low, high, ca, cb


def regret_goal(minimax: float) -> float:
    """Issue 31's regret goal in a cell whose ``cell_minimax`` is ``minimax``: at most 1.0 nDCG point, or that
    minimax + 0.5 where it is above 0.5."""
    return 1.0 if minimax <= 0.5 else max(1.0, minimax + 0.5)


def cell_minimax(scores: Scores, cell: Cell) -> tuple[float, str, str]:
    """The least worst regret any row measured on every judge reaches at ``cell``, in-sample: ``(points, its
    worst judge, row)``. A lower bound on the worst regret of any choice among these rows there, LOJO or not."""
    judged = {j: s for j, s in scores.items() if cell in s}
    return min((*worst_regret(judged, cell, name), name) for name in sorted(common_rows(judged, cell)))
