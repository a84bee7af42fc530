"""benchmarks/depth_signal.py: the share of the top-K from first-stage ranks 21-40, and the committed
``heldout/depth_signal.md`` re-made by its documented command."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from activeprp_core.types import Candidate
from tests.conftest import documented_command, needs_data, printed_from_root, skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import depth_signal  # noqa: E402

from activeprp_bench.datasets import Collection  # noqa: E402


def test_deep_share_counts_the_top_k_from_past_rank_20():
    ids = [f"d{i}" for i in range(50)]
    grades = {"d0": 3, "d25": 3, "d30": 2, "d45": 3}  # d45 is past the top 40: not counted by the grades
    coll = Collection("toy", {"q": "query"}, {"q": [Candidate(d, d) for d in ids]}, {"q": grades})
    # by the grades: d0, d25, d30, then the ungraded in first-stage order (d1 .. d7): 2 of 10 from ranks 21-40
    assert depth_signal.deep_share(coll, "q", None) == pytest.approx(0.2)
    assert 0 <= depth_signal.deep_share(coll, "q", "calibrated") <= 1


def test_deep_wins_reads_how_often_ranks_41_100_beat_the_top_10():
    ids = [f"d{i}" for i in range(60)]
    deep_better = {d: int(i >= 40) for i, d in enumerate(ids)}
    coll = Collection("toy", {"q": "query"}, {"q": [Candidate(d, d) for d in ids]}, {"q": deep_better})
    assert depth_signal.deep_wins(coll, "q", None) == 1.0
    coll.qrels["q"] = {d: 1 - g for d, g in deep_better.items()}
    assert depth_signal.deep_wins(coll, "q", None) == 0.0
    assert depth_signal.deep_wins(coll, "q", "calibrated") < 0.5  # the judge sees the top 10 better


def test_contrast_is_how_much_more_often_ranks_11_40_beat_the_top_10_than_ranks_41_100_do():
    ids = [f"d{i}" for i in range(60)]
    middle_best = {d: 3 * int(10 <= i < 40) for i, d in enumerate(ids)}
    coll = Collection("toy", {"q": "query"}, {"q": [Candidate(d, d) for d in ids]}, {"q": middle_best})
    assert depth_signal.contrast(coll, "q", None) == 1.0  # by the grades the middle always wins, the deep never
    assert depth_signal.contrast(coll, "q", "calibrated") > 0  # the judge sees it too, less sharply
    coll.qrels["q"] = {d: int(i >= 10) for i, d in enumerate(ids)}  # middle and deep alike: no contrast
    assert depth_signal.contrast(coll, "q", None) == 0.0


@needs_data
def test_the_committed_depth_signal_is_made_again():
    args = documented_command(depth_signal.__doc__, "benchmarks/depth_signal.py")
    committed = (ROOT / "benchmarks/results/heldout/depth_signal.md").read_text()
    assert printed_from_root(depth_signal.main, args) == committed


@needs_data
def test_the_depth_check_of_docs_judges_prints_what_it_says():
    text = (ROOT / "docs/judges.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "budget_depth40" in b)
    expected = block.strip().splitlines()[-1].removeprefix("# ")
    assert printed_from_root(lambda _: exec(block, {}), []).strip() == expected
