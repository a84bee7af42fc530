"""``auto`` (activeprp_core/rankers/auto.py): the ranker and oracle read from the measured table, on a table made
up here and on the shipped one."""

from __future__ import annotations

from activeprp_core import SimulatedComparator, rerank
from activeprp_core.rankers import auto
from activeprp_core.rankers.auto import choose, load_table
from tests.conftest import make_case

ROWS = ["mohajer/randomized", "quicksort/bidirectional", "mohajer/bidirectional", "parallel_mohajer/randomized",
        "heapsort/randomized", "bubblesort/bidirectional", "allpairs/single"]


def _cell(budget_per_n, max_rounds, **values):
    return {"budget_per_n": budget_per_n, "max_rounds": max_rounds,
            "values": [values.get(name.replace("/", "__")) for name in ROWS]}


TABLE = {"source": "test", "metric": "test", "rows": ROWS, "settings": [
    {"n": 20, "k": 3, "cells": [
        _cell(1.0, None, mohajer__randomized=[60.0, 9.0, 20], quicksort__bidirectional=[59.0, 2.0, 20]),
        _cell(2.5, None, mohajer__bidirectional=[70.0, 10.0, 50], parallel_mohajer__randomized=[70.0, 6.0, 49],
              heapsort__randomized=[65.0, 20.0, 40]),
        _cell(2.5, 6, parallel_mohajer__randomized=[69.0, 6.0, 49], mohajer__bidirectional=[60.0, 6.0, 30]),
        _cell(None, None, bubblesort__bidirectional=[75.0, 40.0, 90])]},
    {"n": 100, "k": 10, "cells": [_cell(1.0, None, allpairs__single=[50.0, 1.0, 100])]}]}


def test_choose_takes_the_best_row_of_the_nearest_cell():
    assert choose(20, 3, 50, None, table=TABLE) == ("parallel_mohajer", "randomized")  # tie -> fewer rounds
    assert choose(20, 3, 60, 8, table=TABLE) == ("parallel_mohajer", "randomized")  # floors: 2.5 N, cap 6
    assert choose(18, 2, 25, None, table=TABLE) == ("mohajer", "randomized")  # 1.25 N -> the 1.0 N row
    assert choose(20, 3, 5, None, table=TABLE) == ("mohajer", "randomized")  # below every budget: the smallest
    assert choose(20, 3, None, None, table=TABLE) == ("bubblesort", "bidirectional")
    assert choose(90, 12, 100, 3, table=TABLE) == ("allpairs", "single")
    assert choose(20, 3, 50, None, oracle="bidirectional", table=TABLE) == ("mohajer", "bidirectional")
    assert choose(20, 3, 50, None, ranker="heapsort", table=TABLE) == ("heapsort", "randomized")
    assert choose(20, 3, 20, None, oracle="single", table=TABLE) == ("mohajer", "single")  # one call: randomized rows
    assert choose(20, 3, 50, None, ranker="mohajer", oracle="single", table=TABLE) == ("mohajer", "single")


def test_shipped_table_is_complete_and_read_by_rerank(monkeypatch):
    table = load_table()
    assert {(s["n"], s["k"]) for s in table["settings"]} >= {(20, 3), (50, 5), (100, 10)}
    assert "bench auto-table" in table["source"]
    for s in table["settings"]:
        assert {c["max_rounds"] for c in s["cells"]} >= {None, 6, 10}
        assert all(any(v is not None for v in c["values"]) for c in s["cells"])
    cands, labels = make_case(20, seed=2)
    res = rerank("q", cands, ranker="auto", oracle="auto", comparator=SimulatedComparator(labels), budget=50,
                 top_k=3, max_rounds=6)
    assert (res.ranker, res.oracle) == choose(20, 3, 50, 6) and "auto" not in (res.ranker, res.oracle)
    assert res.rounds <= 6 and res.calls <= 50
    monkeypatch.setattr(auto, "load_table", lambda: TABLE)
    res = rerank("q", cands, ranker="auto", oracle="auto", comparator=SimulatedComparator(labels), budget=None,
                 top_k=3)
    assert (res.ranker, res.oracle) == ("bubblesort", "bidirectional")
    res = rerank("q", cands, ranker="mohajer", oracle="auto", comparator=SimulatedComparator(labels), budget=50,
                 top_k=3)
    assert (res.ranker, res.oracle) == ("mohajer", "bidirectional")
