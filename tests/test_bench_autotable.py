"""The table behind ``auto`` (activeprp_bench/autotable.py): cell means read from rows files as from ``Row``
objects, the judges that do not beat the first stage left out of the choice, and the shipped table rebuilt
identically from the rows committed in the repository by the command in its ``source``."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import shlex
from pathlib import Path

import pytest

from tests.conftest import skip_without_bench

skip_without_bench()

from activeprp_bench import autotable  # noqa: E402
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


def test_cell_means_read_in_batches_from_several_files_are_those_of_the_rows_bit_for_bit(tmp_path, monkeypatch):
    # read_family adds each key's values one by one in file order and keeps the keys in the order they first
    # appear, as family_means does, and floats tell the orders apart: judge v's values are of far apart sizes
    # ((1e16 + 1) - 1e16 = 0, but (1e16 - 1e16) + 1 = 1); judge u's collections c, d, e have the means 0.025,
    # 0.025, 0.1, whose mean in % is 5.000000000000001 in that order and 5.0 in the order e, d, c. The keys first
    # appear together in the first batch (the auto rows' collections as e, d, c, the counted rows' as c, d, e),
    # then each key's other rows come in a run over several batches of about ten rows and over three files (xz,
    # gz, plain); _grid's rows (judges x, y, z) follow.
    monkeypatch.setattr(autotable, "_BLOCK_BYTES", 1024)
    rng = random.Random(0)

    def value(judge: str, collection: str, q: int) -> float:
        if judge == "u":  # 40 rows summing to 1, 1 and 4
            return {"c": 1.0, "d": 1.0, "e": 4.0}[collection] if q == 0 else 0.0
        return rng.choice((1e16, -1e16, 1.0, rng.random()))

    keys = [(judge, ranker, collection) for judge in ("u", "v")
            for ranker, collections in (("auto", "edc"), ("mohajer", "cde")) for collection in collections]
    rows = [_row(judge, ranker, "randomized", 40, value(judge, collection, q), str(q), 0, collection)
            for qs, groups in ((range(1), [keys]), (range(1, 40), [[k] for k in keys])) for group in groups
            for q in qs for judge, ranker, collection in group] + _grid()
    paths = [tmp_path / name for name in ("a.csv.xz", "b.csv.gz", "c.csv")]
    for i, path in enumerate(paths):
        write_csv(rows[i * len(rows) // 3:(i + 1) * len(rows) // 3], path, SLIM_COLUMNS)
    read, fams = read_family(paths), family_means(rows)
    assert read == fams and repr(read) == repr(fams)  # the same floats
    # kept by keep, the auto rows' means are those of the same rows under a core ranker's name
    every = read_family(paths, keep=lambda r, o: True)[(20, 3)].ndcg
    renamed = family_means([dataclasses.replace(r, ranker="quicksort") if r.ranker == "auto" else r
                            for r in rows])[(20, 3)].ndcg
    auto = {(j, c): v.pop("auto/randomized") for j, by_cell in every.items() for c, v in by_cell.items()
            if "auto/randomized" in v}
    assert auto and auto == {(j, c): renamed[j][c].pop("quicksort/randomized") for j, c in auto}
    assert every == renamed


def test_cell_means_read_from_quoted_values_with_commas_and_line_breaks_are_those_of_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(autotable, "_BLOCK_BYTES", 512)  # a line break near a batch's end too
    rows = [dataclasses.replace(r, judge='a, "b"\nc', qid="1\n2") if i % 3 == 0 else r for i, r in enumerate(_grid())]
    write_csv(rows, tmp_path / "rows.csv", SLIM_COLUMNS)
    assert read_family([tmp_path / "rows.csv"]) == family_means(rows)


def test_reading_cell_means_names_a_missing_column_and_refuses_a_value_that_is_no_number(tmp_path):
    write_csv(_grid(), tmp_path / "rows.csv", ("collection", "qid", "ranker", "oracle", "budget", "ndcg10"))
    with pytest.raises(KeyError, match=r"rows.csv: no column judge, n, top_k, max_rounds, seed, calls, rounds"):
        read_family([tmp_path / "rows.csv"])
    write_csv(_grid(), tmp_path / "rows.csv", SLIM_COLUMNS)
    text = (tmp_path / "rows.csv").read_text().splitlines()
    (tmp_path / "empty.csv").write_text("\n".join([*text[:5], text[5].replace(",0.7,", ",,", 1), *text[6:]]))
    with pytest.raises(ValueError):
        read_family([tmp_path / "empty.csv"])


def test_a_rows_file_with_its_header_alone_adds_no_rows_with_or_without_a_line_break_after_it(tmp_path):
    write_csv(_grid(), tmp_path / "rows.csv", SLIM_COLUMNS)
    header = (tmp_path / "rows.csv").read_text().splitlines()[0]
    for name, text in (("bare.csv", header), ("ended.csv", header + "\n")):
        (tmp_path / name).write_text(text)
        assert read_family([tmp_path / name]) == {}
        assert read_family([tmp_path / "rows.csv", tmp_path / name]) == read_family([tmp_path / "rows.csv"])


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


@pytest.mark.parametrize("flag", ["--base", "--reference"])
@pytest.mark.parametrize(("name", "content", "says"), [
    ("missing.json", None, "cannot read it (No such file or directory)"),
    ("bad.json", "{bad", "not JSON (Expecting property name enclosed in double quotes"),
    ("list.json", "[1, 2]",
     "not an auto table (the table: expected a JSON object with 'rows' and 'settings', got [1, 2])"),
    ("config.json", '{"argv": ["bench"]}',
     "not an auto table (rows: expected a list of 'ranker/oracle' names, got None)"),
    ("cells.json", '{"rows": ["a/b"], "settings": [{"n": 20, "k": 3, "cells": [{"budget_per_n": 0.5, '
     '"max_rounds": null, "values": [[60, 1]]}]}]}',
     "not an auto table (settings[0].cells[0].values[0]: expected null or [nDCG %, rounds, calls], got [60, 1])"),
])
def test_auto_table_refuses_a_base_or_reference_that_is_no_auto_table_in_one_line(tmp_path, capsys, flag, name,
                                                                                  content, says):
    """``--base`` / ``--reference`` missing, not JSON, or JSON of another shape: one line naming the flag and the
    file, exit 2, before the rows are read; each was a traceback (FileNotFoundError, JSONDecodeError, TypeError,
    KeyError)."""
    write_csv(_grid(), tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    if content is not None:
        (tmp_path / name).write_text(content)
    out = tmp_path / "o" / "a.json"
    code = main(["bench", "auto-table", "--from-csv", str(tmp_path / "rows.csv.xz"), "--out", str(out), flag,
                 str(tmp_path / name), "--report", str(tmp_path / "o" / "report.md")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"activeprp: error: {flag} {tmp_path / name}: {says}"), err
    assert err.count("\n") == 1 and err.endswith("\n") and not out.exists()


def test_auto_table_report_goes_into_a_new_directory_and_a_file_in_the_way_is_a_usage_error(tmp_path, capsys):
    """``--report DIR/report.md`` with DIR not there yet: made, as ``--out``'s; a file in its way: one line, exit 2,
    before the rows are read (both ended in a traceback once the table was built)."""
    write_csv(_grid(), tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    (tmp_path / "afile").write_text("")
    argv = ["bench", "auto-table", "--from-csv", str(tmp_path / "rows.csv.xz"), "--out", str(tmp_path / "a.json")]
    assert main([*argv, "--report", str(tmp_path / "afile" / "report.md")]) == 2
    assert capsys.readouterr().err == (f"activeprp: error: --report {tmp_path}/afile/report.md: "
                                       f"'{tmp_path}/afile' is a file, not a directory\n")
    assert main([*argv, "--report", str(tmp_path / "new" / "report.md"), "--reference", str(SHIPPED)]) == 0
    assert "regret" in (tmp_path / "new" / "report.md").read_text()


def test_auto_table_report_dash_is_stdout_and_the_summary_line_goes_to_stderr(tmp_path, capsys, monkeypatch):
    """``--report -`` wrote a file named ``-`` (argparse tools read ``-`` as stdout); now the report is stdout's
    alone, the line naming the table written goes to stderr, and no file ``-`` appears."""
    write_csv(_grid(), tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "auto-table", "--from-csv", "rows.csv.xz", "--out", "a.json", "--report", "-",
                 "--reference", str(SHIPPED)]) == 0
    out, err = capsys.readouterr()
    assert not (tmp_path / "-").exists() and (tmp_path / "a.json").is_file()
    assert out == regret_report(_grid(), autotable.TOLERANCE, json.loads(SHIPPED.read_text()), rule=autotable.RULE)
    assert err.startswith("a.json: ") and err.endswith(" cells\n") and err.count("\n") == 1


def test_auto_table_out_dash_is_stdout_and_with_report_dash_a_usage_error(tmp_path, capsys, monkeypatch):
    """``--out -`` wrote a file named ``-`` while ``--report -`` meant stdout; now the table's JSON is stdout's
    alone and the summary line goes to stderr; both on stdout is one usage line, before the rows are read."""
    write_csv(_grid(), tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "auto-table", "--from-csv", "rows.csv.xz", "--reference", str(SHIPPED), "--out", "-"]
    assert main([*argv, "--report", "report.md"]) == 0
    out, err = capsys.readouterr()
    assert not (tmp_path / "-").exists() and (tmp_path / "report.md").is_file()
    table = json.loads(out)
    cells = sum(len(s["cells"]) for s in table["settings"])
    assert table["settings"] and err == f"stdout: {len(table['settings'])} settings, {cells} cells\n"
    assert main([*argv, "--report", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("activeprp: error: --out - and --report - both name stdout: write one of them "
                                 "to a file\n")
    assert not (tmp_path / "-").exists()


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


def test_auto_table_s_default_out_is_the_table_auto_reads_and_an_installed_package_needs_out(tmp_path, capsys,
                                                                                             monkeypatch):
    """The default ``--out`` was the relative ``activeprp_core/data/auto_table.json``: outside the repository root
    (from a wheel) it wrote a table under the working directory that nothing reads, while the help said it
    overwrote the shipped one (review s68c, finding 5). Now it is the imported package's own table when that is a
    source checkout, and with an installed package ``--out`` is required (before the rows are read)."""
    import activeprp_core

    write_csv(_grid(), tmp_path / "rows.csv.xz", SLIM_COLUMNS)
    checkout, work = tmp_path / "checkout", tmp_path / "work"
    (checkout / "activeprp_core" / "data").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    work.mkdir()
    monkeypatch.setattr(activeprp_core, "__file__", str(checkout / "activeprp_core" / "__init__.py"))
    monkeypatch.chdir(work)
    argv = ["bench", "auto-table", "--from-csv", str(tmp_path / "rows.csv.xz")]
    assert main(argv) == 0
    table = checkout / "activeprp_core" / "data" / "auto_table.json"
    assert json.loads(table.read_text())["settings"] and not (work / "activeprp_core").exists()
    assert capsys.readouterr().out.startswith(f"{table}: ")
    monkeypatch.chdir(checkout)  # the repository root: the path as the docs write it
    assert main(argv) == 0 and capsys.readouterr().out.startswith("activeprp_core/data/auto_table.json: ")
    (checkout / "pyproject.toml").unlink()  # an installed package
    table.write_text("{}")
    assert main(argv) == 2 and table.read_text() == "{}"
    assert capsys.readouterr().err == (
        f"activeprp: error: --out is needed: the table ranker 'auto' reads ({table}) belongs to an installed "
        "package, which a rebuild does not overwrite; give --out PATH (or run from a source checkout)\n")
    with pytest.raises(SystemExit):
        main(["bench", "auto-table", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "the shipped one: overwritten" not in help_text and "with an installed package it is required" in help_text
