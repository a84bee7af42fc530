"""The bench over a family of judges (``--judge``/``--judges``) and ``auto`` chosen by worst-case regret across
it (issue 17, items 4 and 5): the choice rule, leave-one-judge-out regret, the table layout ``choose`` reads,
and the CLI wiring. Data comes from ../shared/data."""

from __future__ import annotations

import csv
import dataclasses
import json
import lzma
import random
import re

import pytest

from tests.conftest import SHARED_DATA as DATA
from tests.conftest import needs_data, skip_without_bench

np = skip_without_bench()

from activeprp_bench.autotable import (
    build_regret_table,
    family_means,
    fewest_rows_choice,
    regret_choice,
    single_row_choice,
    worst_regret,
)
from activeprp_bench.datasets import load_noveleval
from activeprp_bench.grid import Row, read_csv, run_grid, simulator_factory
from activeprp_bench.judges import comparator_for
from activeprp_bench.regret import choice_changes, largest_fall, lojo_regret, mean_scores, regret_report
from activeprp_bench.stats import macro_diff_ci
from activeprp_cli import main
from activeprp_core.rankers.auto import choose


def test_worst_case_regret_picks_the_row_no_judge_punishes():
    # "a" wins on judge x but collapses on y; "b" is second everywhere: worst regrets a 5, b 1, c 3
    scores = {"x": {(100, -1): {"a": 70.0, "b": 69.0, "c": 67.0}},
              "y": {(100, -1): {"a": 60.0, "b": 64.0, "c": 65.0}}}
    assert worst_regret(scores, (100, -1), "a") == (5.0, "y")
    assert regret_choice(scores, tolerance=0.0) == {(100, -1): "b"}
    # without y, a is chosen and y loses 5 points; without x, c is chosen and x loses 3
    assert lojo_regret(scores, tolerance=0.0) == {"x": {(100, -1): 3.0}, "y": {(100, -1): 5.0}}


def _one_judge(table: dict[int, dict[str, float]], cap: int = -1) -> dict:
    return {"j": {(b, cap): row for b, row in table.items()}}


def test_choice_keeps_the_previous_budget_within_tolerance_and_takes_the_longest_run():
    scores = _one_judge({50: {"a": 60.0, "b": 59.9, "c": 50.0}, 100: {"a": 62.0, "b": 62.1, "c": 50.0},
                         150: {"a": 62.9, "b": 63.2, "c": 50.0}, -1: {"a": 64.0, "b": 63.0, "c": 64.1}})
    strict = regret_choice(scores, tolerance=0.0)
    assert [strict[(b, -1)] for b in (50, 100, 150, -1)] == ["a", "b", "b", "c"]
    assert choice_changes(strict) == {-1: 2}
    loose = regret_choice(scores, tolerance=0.25)
    # at 50 both a and b are eligible: b stays eligible longer (50..150), so b is taken and kept; at no budget
    # b is 1.1 below c and must go
    assert [loose[(b, -1)] for b in (50, 100, 150, -1)] == ["b", "b", "b", "c"]
    assert choice_changes(loose) == {-1: 1}
    # a row missing on some judge is no candidate
    scores["k"] = {(b, -1): {"a": 1.0, "c": 1.0} for b in (50, 100, 150, -1)}
    assert "b" not in regret_choice(scores, 0.25).values()
    with pytest.raises(ValueError, match="every judge"):
        regret_choice({"x": {(50, -1): {"a": 1.0}}, "y": {(50, -1): {"b": 1.0}}})
    with pytest.raises(ValueError, match="two judges"):
        lojo_regret(_one_judge({50: {"a": 1.0}}))


def test_rows_eligible_over_the_same_run_are_told_apart_by_their_worst_regret_over_the_whole_run():
    # a and b stay eligible at every budget (tolerance 1.5); b is 0.1 better at B=50, but 1.0 below a at B=150
    scores = {"x": {(50, 6): {"a": 60.0, "b": 60.0}, (100, 6): {"a": 62.0, "b": 62.0},
                    (150, 6): {"a": 63.0, "b": 62.0}},
              "y": {(50, 6): {"a": 59.9, "b": 60.0}, (100, 6): {"a": 61.0, "b": 61.0},
                    (150, 6): {"a": 62.0, "b": 62.0}}}
    assert worst_regret(scores, (50, 6), "b")[0] < worst_regret(scores, (50, 6), "a")[0]
    choice = regret_choice(scores, tolerance=1.5)
    assert [choice[(b, 6)] for b in (50, 100, 150)] == ["a", "a", "a"]  # a's worst over the run: 0.1; b's: 1.0


def _row(judge: str, ranker: str, oracle: str, budget: int, ndcg: float, qid: str = "1", cap: int = -1,
         rounds: int = 5) -> Row:
    return Row(collection="c", qid=qid, ranker=ranker, oracle=oracle, budget=budget, seed=0, n=20, top_k=3,
               ndcg10=ndcg, rounds=rounds, calls=max(budget, 0), max_rounds=cap, judge=judge)


def test_regret_table_is_read_by_choose_and_keeps_the_base_cells():
    rows = [_row("x", "mohajer", "randomized", 40, 0.70), _row("x", "heapsort", "bidirectional", 40, 0.69),
            _row("y", "mohajer", "randomized", 40, 0.50), _row("y", "heapsort", "bidirectional", 40, 0.66),
            _row("x", "auto", "auto", 40, 0.99), _row("y", "auto", "auto", 40, 0.99)]
    base = {"source": "old", "rows": ["mohajer/randomized", "quicksort/randomized"], "settings": [
        {"n": 20, "k": 3, "cells": [{"budget_per_n": 2.0, "max_rounds": None, "values": [[60.0, 3, 40], None]},
                                    {"budget_per_n": 1.0, "max_rounds": None, "values": [None, [9.0, 2, 20]]},
                                    {"budget_per_n": 1.0, "max_rounds": 3, "values": [None, [55.0, 2, 20]]}]},
        {"n": 100, "k": 10, "cells": [{"budget_per_n": None, "max_rounds": None, "values": [None, [50, 4, 9]]}]}]}
    table = build_regret_table(rows, "cmd", tolerance=0.0, base=base)
    assert table["rows"] == ["heapsort/bidirectional", "mohajer/randomized", "quicksort/randomized"]
    n20 = table["settings"][0]
    # the base cell at the family's cap (None) is dropped; the one at cap 3 is kept
    assert [(c["budget_per_n"], c["max_rounds"], c.get("choice")) for c in n20["cells"]] == [
        (1.0, 3, None), (2.0, None, "heapsort/bidirectional")]
    new = n20["cells"][1]
    assert new["worst_regret"] == 1.0 and new["values"] == [[67.5, 5.0, 40], [60.0, 5.0, 40], None]
    assert n20["cells"][0]["values"] == [None, None, [55.0, 2, 20]]  # moved onto the union of row names
    assert table["settings"][1]["cells"][0]["values"] == [None, None, [50, 4, 9]]
    # auto/auto takes the stored choice although the mean over judges favours nothing else here; a fixed
    # oracle the choice does not fit falls back to the best value
    assert choose(20, 3, 40, None, table=table) == ("heapsort", "bidirectional")
    assert choose(20, 3, 40, None, oracle="randomized", table=table) == ("mohajer", "randomized")
    assert choose(20, 3, 40, None, ranker="heapsort", table=table) == ("heapsort", "bidirectional")
    assert choose(20, 3, 20, 3, table=table) == ("quicksort", "randomized")  # a base cell
    assert choose(20, 3, 20, None, table=table) == ("heapsort", "bidirectional")  # below all: the family cell
    report = regret_report(rows, tolerance=0.0, reference=table)
    assert "| none | 40 | heapsort/bidirectional | 1.00 [x] | heapsort/bidirectional | 1.00 [x] | 16.00 [y] |" in report


def test_a_settings_report_and_its_cis_do_not_move_when_another_setting_is_added():
    rng = random.Random(3)
    # judge x prefers mohajer, y heapsort: the leave-one-judge-out regrets and their bootstrap CIs are not 0
    lean = {("x", "mohajer"): 0.3, ("y", "heapsort"): 0.3}
    small = [_row(j, r, o, 20, 0.5 * rng.random() + lean.get((j, r), 0.0), qid=str(q)) for j in "xy"
             for r, o in (("mohajer", "randomized"), ("heapsort", "bidirectional")) for q in range(8)]
    large = [dataclasses.replace(r, n=50, top_k=5, budget=50, calls=50, ndcg10=rng.random()) for r in small]
    alone = regret_report(small, reference=build_regret_table(small, "cmd"))
    both = regret_report(small + large, reference=build_regret_table(small + large, "cmd"))
    y_row = next(line for line in alone.splitlines() if line.startswith("| y |"))
    low, high = map(float, re.findall(r"\[(-?[\d.]+), (-?[\d.]+)\]", y_row)[-1])
    assert low < high  # y's LOJO regret carries a real bootstrap interval
    assert both.startswith(alone) and "## N=50, K=5" in both[len(alone):]


def test_macro_diff_ci_resamples_within_collections():
    rng = np.random.default_rng(0)
    mean, low, high = macro_diff_ci([[1.0, 1.0, 1.0], [3.0, 3.0]], rng, resamples=200)
    assert (mean, low, high) == (2.0, 2.0, 2.0)  # the macro mean, not the pooled 1.8
    mean, low, high = macro_diff_ci([[0.0, 2.0] * 10], rng)
    assert mean == 1.0 and 0.5 < low < 1.0 < high < 1.5
    with pytest.raises(ValueError):
        macro_diff_ci([[]], rng)


def test_diff_ci_over_realisations_averages_each_query_over_them_before_the_bootstrap():
    from activeprp_bench.regret import diff_ci
    from activeprp_bench.report import Summary

    def realisation(at_150: dict[tuple[str, str], float]) -> Summary:
        at_100 = dict.fromkeys([*at_150, ("dl20", "q4")], 0.6)  # q4 is not asked at B=150: left out
        rows = [Row(collection=c, qid=q, ranker="r", oracle="o", budget=b, seed=0, n=100, ndcg10=v)
                for b, values in ((100, at_100), (150, at_150)) for (c, q), v in values.items()]
        return Summary(rows, np.random.default_rng(0), resamples=1)

    qs = [("dl19", "q1"), ("dl19", "q2"), ("dl20", "q3")]
    one = realisation(dict.fromkeys(qs, 0.59))  # every query 1 point lower at B=150
    two = realisation({qs[0]: 0.59, qs[1]: 0.61, qs[2]: 0.59})  # q2 1 point higher
    mean, low, high = diff_ci([one, two], ("r", "o", 100, -1), ("r", "o", 150, -1), np.random.default_rng(0))
    # per query over both: q1 1.0, q2 0.0, q3 1.0 points; the macro mean over dl19 (0.5) and dl20 (1.0)
    assert mean == pytest.approx(0.75)
    assert low == pytest.approx(0.5) and high == pytest.approx(1.0)  # dl20 holds one query; dl19 spans 0 to 1
    assert diff_ci(one, ("r", "o", 100, -1), ("r", "o", 150, -1), np.random.default_rng(0))[0] == pytest.approx(1.0)


@needs_data
def test_bench_grid_judge_flags_label_rows_and_default_is_unchanged(tmp_path):
    base = ["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--rankers", "mohajer",
            "--oracles", "randomized", "--budgets", "20", "--seeds", "1", "--queries", "4", "--no-progress",
            "--paired"]
    assert main([*base, "--out", str(tmp_path / "sim")]) == 0
    sim = read_csv(tmp_path / "sim" / "rows.csv.gz")
    coll = load_noveleval(DATA / "noveleval").subset(4, None)
    again = run_grid([coll], lambda c: simulator_factory(c, _calibrated()), ["mohajer"],
                     ["randomized"], [20], {"randomized": [0]}, progress=False)
    assert [(r.qid, r.ndcg10, r.calls, r.judge) for r in sim] == [(r.qid, r.ndcg10, r.calls, "") for r in again]

    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "rows.csv.gz").write_text("an older run's rows")
    assert main([*base, "--judge", "strong-bias", "--judge", "consistent", "--judge", "strong-bias",
                 "--out", str(tmp_path / "fam")]) == 0
    assert not (tmp_path / "fam" / "rows.csv.gz").exists()  # replaced by the xz file, not left beside it
    with lzma.open(tmp_path / "fam" / "rows.csv.xz", "rt") as f:
        rows = list(csv.DictReader(f))
    assert [(r.judge, r.ndcg10) for r in read_csv(tmp_path / "fam" / "rows.csv.xz")] == [
        (r["judge"], float(r["ndcg10"])) for r in rows]
    assert [r["judge"] for r in rows] == ["strong-bias"] * 4 + ["consistent"] * 4
    strong = run_grid([coll], comparator_for("strong-bias"), ["mohajer"], ["randomized"], [20],
                      {"randomized": [0]}, progress=False)
    assert [float(r["ndcg10"]) for r in rows[:4]] == [r.ndcg10 for r in strong]
    assert (tmp_path / "fam" / "consistent" / "tables.md").is_file()
    assert "LOJO" in (tmp_path / "fam" / "tables.md").read_text()


def _calibrated() -> dict:
    from activeprp_core.comparators.simulated import CALIBRATED_PARAMS

    return dict(CALIBRATED_PARAMS)


@needs_data
def test_bench_judge_errors_are_usage_errors(tmp_path, capsys):
    base = ["bench", "grid", "--data", str(DATA), "--collections", "noveleval", "--queries", "1", "--out",
            str(tmp_path), "--no-progress"]
    for extra, message in ((["--judge", "oracle-of-delphi"], "unknown judge 'oracle-of-delphi'"),
                           (["--judge", "bundled-ql"], "judge 'bundled-ql' has no answers"),
                           (["--judges", "family", "--comparator", "bundled"], "drop --comparator bundled")):
        assert main([*base, *extra]) == 2
        assert message in capsys.readouterr().err


def test_single_row_choice_keeps_one_row_per_cap_and_lojo_takes_any_rule():
    cells = {50: {"a": 60.0, "b": 59.0}, 100: {"a": 61.0, "b": 63.0}, -1: {"a": 65.0, "b": 64.5}}
    scores = {"x": {(b, 6): row for b, row in cells.items()},
              "y": {(b, 6): {n: v + (3.0 if n == "a" else 0.0) for n, v in row.items()} for b, row in cells.items()}}
    # per-cell minimax takes a, b, a (2 changes); one row per cap: a's worst 2.0 (x, B=100) beats b's 4.0 (y, B=50)
    assert [regret_choice(scores, 0.0)[(b, 6)] for b in (50, 100, -1)] == ["a", "b", "a"]
    assert set(single_row_choice(scores).values()) == {"a"} and choice_changes(single_row_choice(scores)) == {6: 0}
    lojo = lojo_regret(scores, rule=single_row_choice)
    # without y, x alone picks b (worst 1.0 against a's 2.0), which costs y 4, 1 and 3.5; without x, y picks a
    assert lojo["y"] == {(50, 6): 4.0, (100, 6): 1.0, (-1, 6): 3.5}
    assert lojo["x"] == {(50, 6): 0.0, (100, 6): 2.0, (-1, 6): 0.0}


def test_fewest_rows_choice_takes_one_row_per_cap_only_where_it_is_within_the_tolerance():
    cells = {50: {"a": 60.0, "b": 59.0}, 100: {"a": 61.0, "b": 63.0}, -1: {"a": 65.0, "b": 64.5}}
    scores = {"x": {(b, 6): row for b, row in cells.items()},
              "y": {(b, 6): {n: v + (3.0 if n == "a" else 0.0) for n, v in row.items()} for b, row in cells.items()}}
    # regret_choice at 0.5: a, b, a (its worst over the cap: 1.0); the one row a: 2.0 (x, B=100) > 1.0 + 0.5
    assert [fewest_rows_choice(scores, 0.5)[(b, 6)] for b in (50, 100, -1)] == ["a", "b", "a"]
    # a cell where every row is bad (B=50: a and c 3 points off) makes a's 2.5 at B=100 as good as the table's 3
    cells = {50: {"a": 60.0, "b": 58.0, "c": 63.0}, 100: {"a": 60.5, "b": 63.0}, -1: {"a": 65.0, "b": 64.5}}
    y = {50: {"a": 63.0, "b": 61.0, "c": 60.0}, 100: {"a": 64.0, "b": 63.0}, -1: {"a": 68.0, "b": 64.5}}
    scores = {"x": {(b, 6): row for b, row in cells.items()}, "y": {(b, 6): row for b, row in y.items()}}
    assert [regret_choice(scores, 1.0)[(b, 6)] for b in (50, 100, -1)] == ["a", "b", "a"]
    assert set(fewest_rows_choice(scores, 1.0).values()) == {"a"}


def _falling_rows() -> list[Row]:
    """mohajer rises 100 -> 150, falls 3 points 150 -> 200 on every query, rises again at 250 (40 queries)."""
    rows = []
    rng = random.Random(5)
    for i in range(40):
        base = rng.uniform(0.3, 0.7)
        for budget, offset in ((100, 0.0), (150, 0.02), (200, -0.01), (250, 0.03)):
            ndcg = base + offset + rng.gauss(0, 0.01)
            rows.append(dataclasses.replace(_row("j", "mohajer", "randomized", budget, ndcg, qid=str(i)),
                                            collection="dl19" if i % 2 else "dl20"))
    return rows


def test_largest_fall_names_the_budgets_where_the_picked_row_falls():
    scores = family_means(_falling_rows())[(20, 3)].ndcg
    pick = dict.fromkeys(scores["j"], "mohajer/randomized")
    fall, judge, cap = largest_fall(scores, pick, (100, 250))
    assert fall == pytest.approx(3.0, abs=0.5) and (judge, cap) == ("j", "none")
    # outside the span the fall is not seen
    assert largest_fall(scores, pick, (100, 150)) == (0.0, "", "none")



def test_mean_scores_averages_what_every_realisation_has_at_the_caps_kept():
    one = {"a": {(100, -1): {"x": 60.0, "y": 50.0}, (100, 6): {"x": 40.0}}, "b": {(100, -1): {"x": 1.0}}}
    other = {"a": {(100, -1): {"x": 62.0}, (100, 6): {"x": 44.0}}}
    assert mean_scores([one, other]) == {"a": {(100, -1): {"x": 61.0}, (100, 6): {"x": 42.0}}}  # no y, no b
    assert mean_scores([one, other], caps=(6,)) == {"a": {(100, 6): {"x": 42.0}}}

@needs_data
def test_family_grid_caches_rows_per_unit_and_matches_run_grid(tmp_path):
    from activeprp_bench.family import run_family_grid

    args = dict(data=str(DATA), collections=["noveleval"], judges=["strong-bias", "ql-like"], rankers=["mohajer"],
                oracles=["randomized"], budgets=[20, None], caps=[None], seeds={"randomized": [0]}, queries=3,
                cache=tmp_path)
    rows = run_family_grid(**args, jobs=2)
    coll = load_noveleval(DATA / "noveleval").subset(3, None)
    for judge in ("strong-bias", "ql-like"):
        direct = run_grid([coll], comparator_for(judge), ["mohajer"], ["randomized"], [20, None],
                          {"randomized": [0]}, progress=False, judge=judge)
        assert [(r.qid, r.budget, r.ndcg10, r.calls) for r in rows if r.judge == judge] == [
            (r.qid, r.budget, r.ndcg10, r.calls) for r in direct]
    # a stored cell is read back, not recomputed (the doctored value comes back); a new budget is computed
    path = tmp_path / "ql-like" / "mohajer__randomized.json"
    stored = json.loads(path.read_text())
    stored["cells"]["20/-1/0"][0]["ndcg10"] = 7.0
    path.write_text(json.dumps(stored))
    again = run_family_grid(**{**args, "budgets": [20, 30]})
    assert [r.ndcg10 for r in again if r.judge == "ql-like"][0] == 7.0
    assert {r.budget for r in again} == {20, 30}
    # refresh recomputes that judge; another setting (more queries) is not read from the old file
    fresh = run_family_grid(**args, refresh=["ql-like"])
    assert [r.ndcg10 for r in fresh if r.judge == "ql-like"][0] != 7.0
    assert len(run_family_grid(**{**args, "queries": 4})) == 2 * 2 * 4
    with pytest.raises(ValueError, match="jobs"):
        run_family_grid(**args, jobs=0)


def test_shipped_auto_table_resolves_every_setting_to_registered_names_and_stays_stable():
    from activeprp_core.oracles import ORACLES
    from activeprp_core.rankers import RANKERS
    from activeprp_core.rankers.auto import load_table

    table = load_table()
    for setting in table["settings"]:
        n, k = setting["n"], setting["k"]
        for cell in setting["cells"]:
            budget = None if cell["budget_per_n"] is None else round(cell["budget_per_n"] * n)
            ranker, oracle = choose(n, k, budget, cell["max_rounds"])
            assert ranker in RANKERS and ranker != "auto" and oracle in ORACLES and oracle != "auto"
            if "choice" in cell:  # a family-built cell: auto/auto runs exactly its stored choice
                assert f"{ranker}/{oracle}" == cell["choice"]
    # the stability goal: at N=100, K=10 the resolved row changes at most 3 times along the budget axis
    for cap in (None, 6, 10):
        seq = [choose(100, 10, b, cap) for b in [*range(50, 501, 50), None]]
        assert sum(a != b for a, b in zip(seq, seq[1:])) <= 3, (cap, seq)


def test_choose_keeps_the_choices_ranker_when_the_oracle_is_fixed():
    cell = {"budget_per_n": None, "max_rounds": None, "values": [[60.0, 1, 1], [50.0, 1, 1], [55.0, 1, 1]],
            "choice": "heapsort/bidirectional"}
    table = {"rows": ["heapsort/bidirectional", "heapsort/randomized", "mohajer/randomized"],
             "settings": [{"n": 20, "k": 3, "cells": [cell]}]}
    assert choose(20, 3, None, None, table=table) == ("heapsort", "bidirectional")
    assert choose(20, 3, None, None, oracle="randomized", table=table) == ("heapsort", "randomized")
    assert choose(20, 3, None, None, ranker="mohajer", table=table) == ("mohajer", "randomized")
    del cell["choice"]  # without a stored choice: the best mean row, as before
    assert choose(20, 3, None, None, oracle="randomized", table=table) == ("mohajer", "randomized")
