"""benchmarks/headline_plot.py: README's headline plot and its points.md come from the committed rows, so a re-run
grid that moves the default's curve shows here until the plot is re-made."""

from __future__ import annotations

import sys
from pathlib import Path

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
