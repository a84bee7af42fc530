"""benchmarks/depth_step.py: the parallel plan over all 100 beside the top 80 under a round cap, per judge over
noise realisations, and the committed ``depth_step.md`` re-made from the committed rows by its documented command."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import documented_command, printed_from_root, skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import depth_step  # noqa: E402


def test_the_top_80_is_ahead_from_the_first_budget_of_its_last_run_of_leads():
    deep, top80 = [60.0, 61.0, 62.0, 62.5, 62.6], [60.5, 60.9, 62.3, 62.8, 62.9]
    assert depth_step.top80_ahead_from(deep, top80) == "400"  # the lead at 300 is not kept at 350
    assert depth_step.top80_ahead_from(deep, [x + 0.1 for x in deep]) == "-"  # within 0.2: not ahead
    assert depth_step.top80_ahead_from(deep, [x - 1 for x in deep]) == "-"


def test_the_committed_depth_step_is_made_again_from_the_committed_rows():
    args = documented_command(depth_step.__doc__, "benchmarks/depth_step.py")
    assert args.count("--realisation") == 5
    committed = (ROOT / "benchmarks/results/budget_depth/depth_step.md").read_text()
    assert printed_from_root(depth_step.main, args) == committed
