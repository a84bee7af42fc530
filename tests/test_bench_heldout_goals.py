"""benchmarks/heldout_goals.py: auto's gap to the best row, its falls and its spending on a judge outside the
family, and the committed ``heldout/goals.md`` re-made from the committed rows by its documented command."""

from __future__ import annotations

import sys
from pathlib import Path

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


def test_report_of_a_grid_of_one_budget_has_no_fall():
    ndcg, calls = {(50, 6): {"auto/auto": 60.0, "x/y": 60.5}}, {(50, 6): {"auto/auto": 49.0, "x/y": 50.0}}
    text = "\n".join(heldout_goals.report("j", ndcg, calls, 20, None))
    assert "| 50 | 6 | 60.00 | x/y | 60.50 | +0.50 |" in text and "Largest fall" not in text and "ceiling" not in text


def test_the_committed_heldout_goals_are_made_again_from_the_committed_rows():
    rows = documented_command(heldout_goals.__doc__, "benchmarks/heldout_goals.py")
    committed = (ROOT / "benchmarks/results/heldout/goals.md").read_text()
    assert printed_from_root(heldout_goals.main, rows) == committed
