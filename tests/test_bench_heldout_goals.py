"""benchmarks/heldout_goals.py: auto's gap to the best row, its falls and its spending on a judge outside the
family, and the committed ``heldout/goals.md`` re-made from the committed rows by its documented command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import documented_command, printed_from_root, skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import heldout_goals  # noqa: E402


def test_report_reads_the_gap_the_fall_and_the_under_spent_cells():
    ndcg = {(100, -1): {"auto/auto": 60.0, "x/y": 61.5}, (150, -1): {"auto/auto": 59.7, "x/y": 59.0},
            (250, -1): {"auto/auto": 62.0, "x/y": 61.0}, (500, -1): {"auto/auto": 62.5, "x/y": 62.0}}
    calls = {(100, -1): {"auto/auto": 80.0, "x/y": 100.0}, (150, -1): {"auto/auto": 150.0, "x/y": 150.0},
             (250, -1): {"auto/auto": 250.0, "x/y": 250.0}, (500, -1): {"auto/auto": 400.0, "x/y": 500.0}}
    text = "\n".join(heldout_goals.report("j", ndcg, calls, 100, 63.0))
    assert "### j (ceiling 63.00)" in text
    assert "| 100 | none | 60.00 | x/y | 61.50 | +1.50 |" in text
    assert "| 250 | none | 62.00 | x/y | 61.00 | -1.00 |" in text  # auto ahead of every other row
    assert "none: 0.30 (none, 100 -> 150)" in text
    # B=100: 80 calls and 1.5 below; B=500: 400 calls but ahead of the best other row
    assert "B=100 cap none: 80 calls, 1.50 below" in text and "B=500" not in text.split("Cells where")[1]


def test_report_gives_the_largest_fall_a_paired_ci_from_the_auto_rows():
    import numpy as np

    from activeprp_bench.grid import Row
    from activeprp_bench.report import Summary

    # auto: 4 queries, each 0.2 lower at B=150 than at 100 except one 0.2 higher: the fall is 10 points (the mean)
    change = {"q1": -0.2, "q2": -0.2, "q3": -0.2, "q4": 0.2}
    rows = [Row(collection="dl19", qid=q, ranker="auto", oracle="auto", budget=b, seed=0, n=100, ndcg10=0.6 + d,
                calls=b) for q, c in change.items() for b, d in ((100, 0.0), (150, c))]
    auto = Summary(rows, np.random.default_rng(0), resamples=1)
    ndcg = {(100, -1): {"auto/auto": 60.0, "x/y": 60.0}, (150, -1): {"auto/auto": 50.0, "x/y": 61.0}}
    calls = {c: {"auto/auto": 100.0, "x/y": 100.0} for c in ndcg}
    text = "\n".join(heldout_goals.report("j", ndcg, calls, 100, None, auto))
    # the bootstrap resamples the per-query drops (+20, +20, +20, -20 points): 5% of its resampled means are -10
    # or less, so the CI starts there
    assert "per cap [paired 95% CI]: none: 10.00 (none, 100 -> 150) [-10.00, 20.00]" in text


def test_report_of_a_grid_of_one_budget_has_no_fall():
    ndcg, calls = {(50, 6): {"auto/auto": 60.0, "x/y": 60.5}}, {(50, 6): {"auto/auto": 49.0, "x/y": 50.0}}
    text = "\n".join(heldout_goals.report("j", ndcg, calls, 20, None))
    assert "| 50 | 6 | 60.00 | x/y | 60.50 | +0.50 |" in text and "Largest fall" not in text and "ceiling" not in text


def test_the_committed_heldout_goals_are_made_again_from_the_committed_rows():
    rows = documented_command(heldout_goals.__doc__, "benchmarks/heldout_goals.py")
    committed = (ROOT / "benchmarks/results/heldout/goals.md").read_text()
    assert printed_from_root(heldout_goals.main, rows) == committed


def _two_judges(b_lead: float) -> dict:
    """Judge ``a``: row x/y 2.0 above the table's row (budget_depth/adaptive at every N=100 goal cell); judge ``b``:
    the table's row ``b_lead`` above x/y."""
    cells = [(b, cap) for cap in (-1, 6, 10) for b in (100, 150, 250, 500)]
    return {"a": {c: {"budget_depth/adaptive": 60.0, "x/y": 62.0} for c in cells},
            "b": {c: {"budget_depth/adaptive": 60.0 + b_lead, "x/y": 60.0} for c in cells}}


def test_set_goal_allows_the_minimax_plus_half_a_point_where_no_row_serves_every_judge():
    table = json.loads((ROOT / "activeprp_core/data/auto_table.json").read_text())
    # x/y's worst gap is 3.0 (on b), the table's 2.0 (on a): the minimax is 2.0, the goal 2.5, met
    text = "\n".join(heldout_goals.set_goal(_two_judges(3.0), ["a", "b"], table, 100, 10))
    assert "| 250 | 6 | budget_depth/adaptive | 2.00 [a] | 2.00 [budget_depth/adaptive] | 2.50 | yes |" in text
    assert "Met in 12 of 12 goal cells." in text
    # x/y's worst gap is 1.0 (on b): the minimax is 1.0, the goal 1.5, and the table's 2.0 misses it
    text = "\n".join(heldout_goals.set_goal(_two_judges(1.0), ["a", "b"], table, 100, 10))
    assert "| 100 | none | budget_depth/adaptive | 2.00 [a] | 1.00 [x/y] | 1.50 | no |" in text
    assert "Met in 0 of 12 goal cells." in text


def test_set_goal_names_a_judge_without_rows():
    table = json.loads((ROOT / "activeprp_core/data/auto_table.json").read_text())
    with pytest.raises(ValueError, match="no rows for judge.*c"):
        heldout_goals.set_goal(_two_judges(3.0), ["a", "c"], table, 100, 10)


def test_the_committed_set_goals_are_made_again_from_the_committed_rows():
    rows = documented_command(heldout_goals.set_goal.__doc__, "benchmarks/heldout_goals.py")
    committed = (ROOT / "benchmarks/results/heldout/set_goals.md").read_text()
    assert printed_from_root(heldout_goals.main, rows) == committed
