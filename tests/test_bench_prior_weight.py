"""benchmarks/prior_weight.py and the ``--row`` reading of benchmarks/auto_falls.py: the evidence for
``BudgetDepth(prior_weight=...)``, re-made from the committed rows by the commands their docs give."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import documented_command, printed_from_root, skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import auto_falls  # noqa: E402
import prior_weight  # noqa: E402

PRIOR = ROOT / "benchmarks/results/budget_depth/prior"


def test_the_largest_fall_is_the_largest_drop_to_any_later_budget():
    def curve(values):  # B=50, 100, ... and no budget, which does not count
        return {**{50 * (i + 1): {0.05: v} for i, v in enumerate(values)}, None: {0.05: 0.0}}

    assert prior_weight.largest_fall(curve([1.0, 3.0, 2.0, 2.5]), 0.05) == 1.0
    assert prior_weight.largest_fall(curve([1.0, 2.0, 2.0]), 0.05) == 0.0
    assert prior_weight.largest_fall(curve([1.0, 2.0, 3.0]), 0.05) == 0.0  # it only rises
    assert prior_weight.largest_fall(curve([3.0, 2.8, 3.1, 1.5]), 0.05) == pytest.approx(1.6)


def test_the_scaled_labels_weigh_the_first_stage_by_the_share_of_pairs_that_did_not_flip():
    assert prior_weight.weights() == ["0", "0.03", "0.05", "0.07", "0.1", "0.05f", "0.07f", "0.1f"]
    assert prior_weight.weight_of("0.05f", 0.64) == pytest.approx(0.05 * 0.36)
    assert prior_weight.weight_of("0.05f", None) == 0.05  # no pair asked both ways: the whole weight
    assert prior_weight.weight_of("0.07", 0.64) == 0.07  # unscaled


def test_the_committed_change_is_made_again_from_the_committed_rows():
    args = documented_command(prior_weight.__doc__.split("prior/change.md``:", 1)[1], "benchmarks/prior_weight.py")
    assert args[0] == "--rows"
    assert printed_from_root(prior_weight.main, args) == (PRIOR / "change.md").read_text()


def test_the_committed_falls_of_the_weighed_row_are_made_again():
    readme = (PRIOR / "README.md").read_text()
    command = re.search(r"python benchmarks/auto_falls.py --row budget_depth_prior/adaptive.*?(?=\n\n|\n```)", readme,
                        re.S).group(0)
    args = documented_command("    " + command, "benchmarks/auto_falls.py")
    assert printed_from_root(auto_falls.main, args) == (PRIOR / "falls.md").read_text()


def test_the_bench_labels_the_weighed_and_the_unweighed_plan():
    from activeprp_bench.grid import make_ranker
    from activeprp_core.rankers.budget_depth import PRIOR_WEIGHT, BudgetDepth

    assert BudgetDepth().prior_weight == make_ranker("budget_depth_prior").prior_weight == PRIOR_WEIGHT > 0
    assert make_ranker("budget_depth_unweighted").prior_weight == 0
