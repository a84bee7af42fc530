"""The table behind ``auto`` (activeprp_bench/autotable.py): cell means read from rows files as from ``Row``
objects, the judges that do not beat the first stage left out of the choice, and the shipped table rebuilt
identically from the rows committed in the repository by the command in its ``source``."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shlex
from pathlib import Path

import pytest

from tests.conftest import skip_without_bench

skip_without_bench()

from activeprp_bench.autotable import (  # noqa: E402
    FIRST_STAGE,
    build_auto_table,
    build_regret_table,
    family_means,
    read_family,
)
from activeprp_bench.grid import SLIM_COLUMNS, Row, write_csv  # noqa: E402
from activeprp_bench.regret import regret_report  # noqa: E402
from activeprp_cli import main  # noqa: E402
from activeprp_core.rankers.auto import choose  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "activeprp_core" / "data" / "auto_table.json"


def _row(judge: str, ranker: str, oracle: str, budget: int, ndcg: float, qid: str = "1", seed: int = 0,
         collection: str = "dl19", cap: int = -1) -> Row:
    return Row(collection=collection, qid=qid, ranker=ranker, oracle=oracle, budget=budget, seed=seed, n=20,
               top_k=3, ndcg10=ndcg, rounds=4, calls=max(budget, 0) + seed, max_rounds=cap, judge=judge)


def _grid() -> list[Row]:
    """Judges x and y beat the first stage (its order: 0.40); z's ceiling (allpairs/bidirectional, no budget)
    is 0.41, within 2 points of it. z alone prefers heapsort."""
    rows = []
    for judge, (moh, heap, ceiling) in {"x": (0.70, 0.60, 0.75), "y": (0.65, 0.62, 0.70),
                                        "z": (0.45, 0.60, 0.41)}.items():
        for seed in (0, 1):
            for (q, coll), budget in itertools.product((("1", "dl19"), ("2", "dl19"), ("3", "dl20")), (40, -1)):
                rows += [_row(judge, "mohajer", "randomized", budget, moh + 0.01 * seed, q, seed, coll),
                         _row(judge, "heapsort", "randomized", budget, heap, q, seed, coll)]
        rows += [_row(judge, "allpairs", "bidirectional", -1, ceiling, q, 0, c) for q, c in (("1", "dl19"),
                                                                                           ("3", "dl20"))]
        rows += [_row(judge, FIRST_STAGE, "randomized", -1, 0.40, q, 0, c) for q, c in (("1", "dl19"),
                                                                                      ("3", "dl20"))]
    return rows


def test_cell_means_read_from_a_rows_file_equal_those_of_the_rows(tmp_path):
    rows = _grid() + [dataclasses.replace(r, ranker="auto") for r in _grid()[:3]]  # auto rows are no table rows
    write_csv(rows, tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    fams, read = family_means(rows), read_family([tmp_path / "rows.csv.xz"])
    assert list(read) == list(fams) == [(20, 3)]
    assert read[(20, 3)] == fams[(20, 3)]
    fam = fams[(20, 3)]
    # the macro mean: per seed the mean over collections of the per-query means, then the mean over seeds
    assert fam.ndcg["x"][(40, -1)]["mohajer/randomized"] == pytest.approx(70.5)
    assert fam.calls["x"][(40, -1)]["mohajer/randomized"] == pytest.approx(40.5)
    assert fam.first_stage == {"x": pytest.approx(40.0), "y": pytest.approx(40.0), "z": pytest.approx(40.0)}
    assert "auto/randomized" not in fam.ndcg["x"][(40, -1)]


def test_judges_that_do_not_beat_the_first_stage_are_left_out_of_the_choice_and_reported():
    rows = _grid()
    fam = family_means(rows)[(20, 3)]
    assert fam.excluded() == ["z"] and fam.beats_first_stage("x") and fam.excluded(margin=0.5) == []
    table = build_regret_table(rows, "cmd", tolerance=0.0)
    cell = table["settings"][0]["cells"][0]
    assert cell["budget_per_n"] == 2.0
    # over x and y mohajer is best everywhere; with z it would lose 15 points there and heapsort would be chosen
    assert table["settings"][0]["excluded"] == ["z"] and cell["choice"] == "mohajer/randomized"
    assert build_regret_table(rows, "cmd", tolerance=0.0, margin=0.5)["settings"][0]["cells"][0]["choice"] == (
        "heapsort/randomized")  # z's 15 points outweigh x's 10.5
    assert cell["values"][table["rows"].index("mohajer/randomized")][0] == pytest.approx(68.0)  # x and y only
    without_first_stage = [r for r in rows if r.ranker != FIRST_STAGE]  # nothing to compare with: z is kept
    assert build_regret_table(without_first_stage, "cmd", tolerance=0.0)["settings"][0]["excluded"] == []
    report = regret_report(rows, tolerance=0.0, reference=table)
    assert "excluded (ceiling within 2.0 points of the first stage or below it): z" in report
    assert "Judges that do not beat the first stage" in report.split("| z |")[0]


def test_the_shipped_auto_table_is_rebuilt_identically_from_committed_rows_by_its_source(tmp_path, monkeypatch):
    source = json.loads(SHIPPED.read_text())["source"]
    argv = shlex.split(source)
    assert argv[:3] == ["activeprp", "bench", "auto-table"] and "--out" not in argv
    paths = argv[argv.index("--from-csv") + 1:]
    paths = paths[:next((i for i, w in enumerate(paths) if w.startswith("--")), len(paths))]
    assert paths and all(p.startswith("benchmarks/results/") and (ROOT / p).is_file() for p in paths)
    monkeypatch.chdir(ROOT)  # the source names the rows relative to the repository root
    assert main([*argv[1:], "--out", str(tmp_path / "auto_table.json")]) == 0
    assert (tmp_path / "auto_table.json").read_text() == SHIPPED.read_text()


def test_auto_table_is_built_from_grid_rows():
    def row(ranker, oracle, budget, ndcg, rounds, seed=0, qid="1", cap=-1):
        return Row(collection="c", qid=qid, ranker=ranker, oracle=oracle, budget=budget, seed=seed, n=20, top_k=3,
                   ndcg10=ndcg, rounds=rounds, calls=max(budget, 0), max_rounds=cap)

    rows = [row("mohajer", "randomized", 40, 0.6, 9), row("mohajer", "randomized", 40, 0.8, 9, seed=1),
            row("heapsort", "bidirectional", 40, 0.65, 20), row("auto", "auto", 40, 0.9, 1),
            row("parallel_mohajer", "randomized", -1, 0.75, 6, cap=6)]
    table = build_auto_table(rows, "bench auto-table --from-csv x")
    (setting,) = table["settings"]
    assert (setting["n"], setting["k"]) == (20, 3)
    assert table["rows"] == ["heapsort/bidirectional", "mohajer/randomized", "parallel_mohajer/randomized"]
    cells = {(c["budget_per_n"], c["max_rounds"]): c["values"] for c in setting["cells"]}
    assert cells[(2.0, None)] == [[65.0, 20.0, 40], [70.0, 9.0, 40], None]
    assert cells[(None, 6)] == [None, None, [75.0, 6.0, 0]]
    assert choose(20, 3, 40, None, table=table) == ("mohajer", "randomized")
    with pytest.raises(ValueError):
        build_auto_table([row("auto", "auto", 40, 0.9, 1)], "x")
