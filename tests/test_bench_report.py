"""``activeprp_bench.report`` and ``activeprp bench grid``'s report: what the plots draw (no-budget cells, the
metric's K), when the paper's brackets are printed, the compare table's macro difference, and bench's one-line
errors for a bad ``--out``, ``--from-csv`` or ``--paired``. Synthetic rows; no data needed."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import skip_without_bench

np = skip_without_bench()

from activeprp_bench.grid import Row, write_csv  # noqa: E402
from activeprp_bench.report import (  # noqa: E402
    Summary,
    compare_table,
    markdown_table,
    paper_setting,
    pareto_table,
    plot,
)
from activeprp_bench.stats import macro_diff_ci, macro_diff_test  # noqa: E402
from activeprp_cli import main  # noqa: E402


def _rows(ranker: str, oracle: str, budget: int, ndcg: float, *, collection: str = "dl19", queries: int = 3,
          n: int = 20, top_k: int = 10, max_rounds: int = -1, calls: int = 10) -> list[Row]:
    return [Row(collection=collection, qid=f"{collection}q{q}", ranker=ranker, oracle=oracle, budget=budget, seed=0,
                n=n, top_k=top_k, ndcg10=ndcg, max_rounds=max_rounds, calls=calls, rounds=calls // 2)
            for q in range(queries)]


@pytest.fixture
def figures(monkeypatch):
    """The matplotlib figures the code under test closes (``report.plot`` closes each after saving it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    closed, close = [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: closed.append(fig) or close(fig))
    return closed


def _grid_rows(top_k: int = 10) -> list[Row]:
    rows = []
    for oracle in ("bidirectional", "randomized"):
        for budget, ndcg in ((10, 0.5), (20, 0.6), (-1, 0.7)):
            rows += _rows("mohajer", oracle, budget, ndcg, top_k=top_k, calls=40 if budget < 0 else budget)
    return rows


def test_the_budget_plot_draws_no_budget_as_a_labelled_level_not_at_budget_minus_1(tmp_path, figures):
    """The no-budget cell (budget -1 in the rows) was drawn at x = -1 and joined after the largest budget."""
    plot(Summary(_grid_rows(), np.random.default_rng(0), 10), tmp_path / "b.png", "budget")
    (fig,) = figures
    for ax in fig.axes:
        lines = ax.get_lines()
        drawn = [line for line in lines if line.get_linestyle() == "-"]
        levels = [line for line in lines if line.get_linestyle() == ":"]
        assert [list(line.get_xdata()) for line in drawn] == [[10, 20]]
        assert [list(line.get_ydata()) for line in drawn] == [pytest.approx([50.0, 60.0])]
        assert [list(line.get_ydata()) for line in levels] == [pytest.approx([70.0, 70.0])]  # axhline: no budget
        assert levels[0].get_color() == drawn[0].get_color()
        assert all(x >= 0 for line in drawn for x in line.get_xdata())
    assert "no budget" in " ".join(t.get_text() for t in fig.axes[-1].get_legend().get_texts())


def test_the_rounds_plot_keeps_the_no_budget_cell_at_its_rounds(tmp_path, figures):
    plot(Summary(_grid_rows(), np.random.default_rng(0), 10), tmp_path / "r.png", "rounds")
    (fig,) = figures
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_xdata()) == [5.0, 10.0, 20.0]
    assert list(line.get_ydata()) == pytest.approx([50.0, 60.0, 70.0])


def test_bench_plots_label_the_grids_ndcg_at_k(tmp_path, figures):
    """Every budget and rounds plot said nDCG@10, also for a --top-k 3 grid (whose tables say nDCG@3)."""
    write_csv(_grid_rows(top_k=3), tmp_path / "rows.csv.gz")
    assert main(["bench", "grid", "--from-csv", str(tmp_path / "rows.csv.gz"), "--out", str(tmp_path / "o")]) == 0
    assert "## nDCG@3 (%)" in (tmp_path / "o" / "tables.md").read_text()
    budget, rounds = figures[:2]
    assert budget.axes[0].get_ylabel() == rounds.axes[0].get_ylabel() == "nDCG@3 (%)"


def _paper_rows(**change) -> list[Row]:
    """Rows of Table 1's setting (43 DL19 and 54 DL20 queries, 100 candidates, nDCG@10), one cell; ``change``
    overrides a ``_rows`` argument."""
    args = {"n": 100, "top_k": 10, "max_rounds": -1} | change
    return (_rows("mohajer", "bidirectional", 100, 0.5, collection="dl19", queries=43, **args)
            + _rows("mohajer", "bidirectional", 100, 0.5, collection="dl20", queries=54, **args))


@pytest.mark.parametrize(("rows", "paper"), [
    (_paper_rows(), True),
    (_paper_rows(top_k=5), False),
    (_paper_rows(n=20), False),
    (_paper_rows(max_rounds=10), False),
    (_paper_rows()[:43], False),  # DL19 alone
    (_paper_rows()[1:], False),  # --queries: one DL19 query fewer
])
def test_paper_setting_is_table_1s_collections_queries_depth_and_k(rows, paper):
    assert paper_setting(rows) is paper


@pytest.mark.parametrize(("change", "brackets"), [({}, True), ({"top_k": 5}, False), ({"n": 20}, False)])
def test_bench_grid_prints_the_papers_brackets_only_beside_its_setting(tmp_path, capsys, change, brackets):
    """A --top-k 5 or --depth 20 grid printed Table 1's nDCG@10 at N = 100 in brackets beside its cells."""
    write_csv(_paper_rows(**change), tmp_path / "rows.csv.gz")
    assert main(["bench", "grid", "--from-csv", str(tmp_path / "rows.csv.gz"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert ("(paper Table 1 in brackets)" in out) is brackets and ("(30.12)" in out) is brackets


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def test_a_row_without_its_per_round_calls_has_no_wall_figure_not_zero():
    """Rows read back from a slim rows file or a rows cache have no ``round_calls``; their modelled wall time was
    printed as 0.0 s (review s65h, finding 1). A row of no rounds (the prior order) still takes 0.0 s."""
    slim = _rows("heapsort", "adaptive", 20, 0.6, calls=20)  # rounds 10, round_calls ""
    mixed = _rows("heapsort", "adaptive", 40, 0.7, calls=40)
    mixed[0].round_calls = "16 16 8"
    full = _rows("heapsort", "adaptive", 60, 0.8, calls=60)
    for r in full:
        r.round_calls = "20 20 20"
    prior = _rows("heapsort", "adaptive", 10, 0.4, calls=0, max_rounds=0)
    s = Summary(slim + mixed + full + prior, np.random.default_rng(0), 10)
    assert s.wall[("heapsort", "adaptive", 60, -1)] == 0.5 * 6
    assert s.wall[("heapsort", "adaptive", 10, 0)] == 0.0
    assert np.isnan(s.wall[("heapsort", "adaptive", 20, -1)]) and np.isnan(s.wall[("heapsort", "adaptive", 40, -1)])
    wall = {cells[1]: cells[2:] for cells in map(_cells, markdown_table(s, "wall").splitlines()[2:])}
    assert wall == {"HeapSort (max_rounds 0)": ["0.0", "", "", ""],
                    "HeapSort (max_rounds inf)": ["", "n/a", "n/a", "3.0"]}
    front = [_cells(line)[1:7] for line in pareto_table(s).splitlines()[2:]]  # calls, nDCG, wall s, the cell
    assert front == [["0.0", "40.00", "0.0", "HeapSort", "adaptive", "10"],
                     ["20.0", "60.00", "n/a", "HeapSort", "adaptive", "20"],
                     ["40.0", "70.00", "n/a", "HeapSort", "adaptive", "40"],
                     ["60.0", "80.00", "3.0", "HeapSort", "adaptive", "60"]]


def test_compare_table_differences_are_the_macro_means_difference():
    """A and B are macro means (the mean over collections); A - B and its CI came from the pooled queries: with
    one DL19 query 10 points apart and three equal DL20 ones, A - B was +2.50 beside 55.00 and 50.00."""
    rows = (_rows("a", "single", 50, 0.6, collection="dl19", queries=1)
            + _rows("a", "single", 50, 0.5, collection="dl20", queries=3)
            + _rows("b", "single", 50, 0.5, collection="dl19", queries=1)
            + _rows("b", "single", 50, 0.5, collection="dl20", queries=3))
    table = compare_table(Summary(rows, np.random.default_rng(0), 10), ["a/single/50/-1:b/single/50/-1"],
                          np.random.default_rng(0), 200)
    cells = [c.strip() for c in table.splitlines()[-1].split("|")[1:-1]]
    assert cells[2:7] == ["55.00", "50.00", "+5.00", "[+5.00, +5.00]", "0.000"]


def test_macro_diff_test_adds_a_p_value_to_macro_diff_ci_from_the_same_resamples():
    diffs = [[1.0, -0.5, 2.0, 0.1], [0.3, -1.0, 0.4]]
    mean, low, high, p = macro_diff_test(diffs, np.random.default_rng(3), 500)
    assert (mean, low, high) == macro_diff_ci(diffs, np.random.default_rng(3), 500)
    assert 0 < p <= 1
    assert macro_diff_test([[0.0, 0.0]], np.random.default_rng(0), 100)[3] == 1.0


@pytest.fixture
def bench_files(tmp_path):
    rows = tmp_path / "rows.csv.gz"
    write_csv(_grid_rows(), rows)
    (tmp_path / "afile").write_text("")
    (tmp_path / "config.json").write_text(json.dumps({"argv": ["bench"]}, indent=1))  # as bench writes it
    (tmp_path / "bad.csv.gz").write_bytes(b"garbage")
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(b"collection,qid\n" * 50)[:30])
    (tmp_path / "notrows.csv").write_text("x,y\n1,2\n")
    (tmp_path / "fewcols.csv").write_text("collection,qid\ndl19,q1\n")
    (tmp_path / "header.csv").write_text("collection,qid,ranker\n")
    return tmp_path


@pytest.mark.parametrize(("argv", "says"), [
    (["grid", "--from-csv", "{rows}", "--out", "{afile}"], "--out {afile}: '{afile}' is a file, not a directory"),
    (["grid", "--from-csv", "{rows}", "--out", "{afile}/sub"], "--out {afile}/sub: '{afile}' is a file, not a"),
    (["grid", "--from-csv", "{d}/config.json", "--out", "{d}/o"],
     "--from-csv {d}/config.json: not a rows file of activeprp bench grid (KeyError: {{)"),
    (["grid", "--from-csv", "{d}/bad.csv.gz", "--out", "{d}/o"],
     "--from-csv {d}/bad.csv.gz: not a rows file of activeprp bench grid (BadGzipFile: Not a gzipped file"),
    (["grid", "--from-csv", "{d}/cut.csv.gz", "--out", "{d}/o"], "--from-csv {d}/cut.csv.gz: not a rows file"),
    (["grid", "--from-csv", "{d}/notrows.csv", "--out", "{d}/o"],
     "--from-csv {d}/notrows.csv: not a rows file of activeprp bench grid (KeyError: x)"),
    (["grid", "--from-csv", "{d}/fewcols.csv", "--out", "{d}/o"],
     "--from-csv {d}/fewcols.csv: not a rows file of activeprp bench grid (TypeError: "),
    (["grid", "--from-csv", "{d}/header.csv", "--out", "{d}/o"], "--from-csv {d}/header.csv: no rows, only a header"),
    (["grid", "--from-csv", "{rows}", "--out", "{d}/o", "--paired", "mohajr:mohajer"],
     "--paired mohajr:mohajer: the grid has no ranker mohajr (it has mohajer)"),
    (["auto-table", "--from-csv", "{d}/notrows.csv", "--out", "{d}/o/a.json"],
     "--from-csv {d}/notrows.csv: not a rows file of activeprp bench grid (KeyError: {d}/notrows.csv: no column"),
    (["auto-table", "--from-csv", "{rows}", "--out", "{afile}/a.json"],
     "--out {afile}/a.json: '{afile}' is a file, not a directory"),
    (["auto-table", "--from-csv", "{rows}", "--out", "{d}"], "--out {d}: is a directory, not a file"),
    (["overhead", "--repeats", "1", "--out", "{afile}"], "--out {afile}: '{afile}' is a file, not a directory"),
])
def test_bench_bad_out_or_rows_file_is_one_line_and_exit_2(bench_files, capsys, argv, says):
    """Each ended in a traceback (exit 1): FileExistsError, KeyError, BadGzipFile, TypeError; --paired with a
    ranker the grid lacks printed nothing and exited 0."""
    names = {"d": bench_files, "rows": bench_files / "rows.csv.gz", "afile": bench_files / "afile"}
    assert main(["bench", *(a.format(**names) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("activeprp: error: " + says.format(**names)), err
    assert not (bench_files / "o").exists()
