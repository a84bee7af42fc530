"""benchmarks/auto_falls.py: the largest fall of ``auto``'s row along the budget per noise realisation and on
their mean, and the committed ``falls.md`` files (the family's, by the command in its docstring, and the held-out
judges', by those of benchmarks/results/heldout/README.md) re-made from the committed rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import documented_command, printed_from_root, skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import auto_falls  # noqa: E402

from activeprp_bench.autotable import Family  # noqa: E402
from activeprp_bench.regret import mean_scores  # noqa: E402


def _family(curves: dict[str, list[float]]) -> Family:
    """A family whose judges have ``auto``'s row ``budget_depth/adaptive`` at B=50, 100, ... without a cap."""
    ndcg = {j: {(50 * (i + 1), -1): {"budget_depth/adaptive": v} for i, v in enumerate(c)} for j, c in curves.items()}
    return Family(ndcg=ndcg, rounds={}, calls={}, first_stage={})


def test_a_fall_of_one_realisation_shrinks_on_the_mean_and_a_fall_of_the_plan_stays():
    one = _family({"noisy": [60.0, 61.0, 60.4], "planned": [60.0, 61.0, 60.5]})
    other = _family({"noisy": [60.0, 60.6, 61.0], "planned": [60.2, 61.2, 60.7]})
    auto = {c: "budget_depth/adaptive" for c in one.ndcg["noisy"]}
    per = [auto_falls.largest(f.ndcg, auto, (50, 500)) for f in (one, other)]
    mean = auto_falls.largest(mean_scores([one.ndcg, other.ndcg]), auto, (50, 500))
    assert per[0]["noisy"] == "0.60 (none, 100 -> 150)" and per[1]["noisy"] == "0.00"
    assert mean["noisy"] == "0.10 (none, 100 -> 150)"  # 60.8 -> 60.7: the mean curve falls less
    assert per[0]["planned"] == per[1]["planned"] == mean["planned"] == "0.50 (none, 100 -> 150)"


def test_the_committed_falls_are_made_again_from_the_committed_rows():
    rows = documented_command(auto_falls.__doc__, "benchmarks/auto_falls.py")
    assert printed_from_root(auto_falls.main, rows) == (ROOT / "benchmarks/results/budget_depth/falls.md").read_text()


def test_steps_counts_the_curves_that_fall_past_the_goal_and_where():
    one = _family({"noisy": [60.0, 61.0, 60.4], "flat": [60.0, 60.1, 60.2], "left-out": [62.0, 60.0, 60.0]})
    other = _family({"noisy": [60.0, 60.6, 61.0], "flat": [60.0, 60.0, 60.0], "left-out": [62.0, 60.0, 60.0]})
    auto = {c: "budget_depth/adaptive" for c in one.ndcg["noisy"]}
    lines = auto_falls.steps([one.ndcg, other.ndcg], auto, (50, 500), {"left-out"})
    # four curves (two judges x two realisations, one cap); only noisy's first realisation falls more than 0.2
    assert lines[0] == ("Curves (judge x realisation x cap; left-out left out) whose largest fall is above 0.2: "
                        "1 of 4; per cap: none 1, 6 0, 10 0")
    assert lines[2] == "Where (cap, budgets of the largest fall: curves): none, 100 -> 150: 1"


@pytest.mark.parametrize("stage", ["bm25", "minilm", "cranfield", "minilm40"])
def test_the_held_out_falls_are_made_again_from_the_committed_rows(stage):
    # the commands of benchmarks/results/heldout/README.md ("Falls over ten noise realisations"), one per folder
    folder = f"benchmarks/results/heldout/realisations/{stage}"
    rows = [f"{folder}/r{r}/rows.csv.xz" for r in range(10)]
    row = ["--row", "budget_depth40/adaptive"] if stage == "minilm40" else []
    assert printed_from_root(auto_falls.main, [*rows, *row, "--steps"]) == (ROOT / folder / "falls.md").read_text()
