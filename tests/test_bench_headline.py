"""benchmarks/headline_plot.py: README's headline plot and its points.md come from the committed rows, so a re-run
grid that moves the default's curve shows here until the plot is re-made."""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_without_bench

skip_without_bench()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import headline_plot  # noqa: E402

HEADLINE = ROOT / "benchmarks" / "results" / "headline"


def test_points_md_is_what_the_committed_rows_give():
    points = headline_plot.means([headline_plot.AUTO_ROWS, headline_plot.CORE_ROWS])
    assert headline_plot.table(points) == (HEADLINE / "points.md").read_text(encoding="utf-8")


def test_a_moved_row_changes_the_points():
    points = headline_plot.means([headline_plot.AUTO_ROWS, headline_plot.CORE_ROWS])
    default = next(iter(headline_plot.LINES))
    calls, ndcg = points[default][100]
    points[default][100] = (calls, ndcg + 0.001)
    assert headline_plot.table(points) != (HEADLINE / "points.md").read_text(encoding="utf-8")


def test_readme_shows_the_plot_that_the_script_writes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "(benchmarks/results/headline/ndcg_vs_calls.png)" in readme
    assert (HEADLINE / "ndcg_vs_calls.png").stat().st_size > 10_000


def test_points_md_says_its_means_are_pooled_and_they_are():
    """points.md's figures are means over all 97 queries together (Mohajer/bidirectional at B=100: 53.35), not
    Table 1's mean of the DL19 and DL20 means (53.48); the file says which, so the two tables read alike."""
    text = (HEADLINE / "points.md").read_text(encoding="utf-8")
    assert "pooled means over all 97 queries" in text.splitlines()[0]
    points = headline_plot.means([headline_plot.AUTO_ROWS, headline_plot.CORE_ROWS])
    ndcg = {"dl19": [], "dl20": []}
    with gzip.open(headline_plot.CORE_ROWS, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if (row["ranker"], row["oracle"], row["budget"], row["max_rounds"]) == ("mohajer", "bidirectional",
                                                                                      "100", "-1"):
                ndcg[row["collection"]].append(float(row["ndcg10"]))
    assert len(ndcg["dl19"]) + len(ndcg["dl20"]) == 97
    pooled = sum(ndcg["dl19"] + ndcg["dl20"]) / 97
    macro = (sum(ndcg["dl19"]) / len(ndcg["dl19"]) + sum(ndcg["dl20"]) / len(ndcg["dl20"])) / 2
    plotted = points["mohajer", "bidirectional", -1][100][1]
    assert plotted == pytest.approx(pooled) and abs(plotted - macro) > 1e-3
