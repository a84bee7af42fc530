"""The research helpers of ``benchmarks/regret_study.py`` (the winner's curse of a regret, the CI of a fall, the
least worst regret of a cell), on rows made up here."""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_without_bench

np = skip_without_bench()

from activeprp_bench.autotable import family_means, regret  # noqa: E402
from activeprp_bench.grid import Row  # noqa: E402
from activeprp_bench.regret import family_summaries, largest_fall  # noqa: E402

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "regret_study.py"
_spec = importlib.util.spec_from_file_location("regret_study", _PATH)
study = importlib.util.module_from_spec(_spec)
sys.modules["regret_study"] = study
_spec.loader.exec_module(study)


def _row(ranker: str, budget: int, ndcg: float, qid: str, collection: str) -> Row:
    return Row(collection=collection, qid=qid, ranker=ranker, oracle="randomized", budget=budget, seed=0, n=20,
               top_k=3, ndcg10=ndcg, rounds=5, calls=budget, judge="j")


def _noisy_rows(offsets: dict[str, float], queries: int = 60, seed: int = 3) -> list[Row]:
    """Rows of one judge at one cell: per query a shared difficulty plus each row's own noise and offset."""
    rng = random.Random(seed)
    rows = []
    for i in range(queries):
        base = rng.uniform(0.3, 0.7)
        for ranker, offset in offsets.items():
            rows.append(_row(ranker, 100, base + offset + rng.gauss(0, 0.1), str(i), "dl19" if i % 2 else "dl20"))
    return rows


def test_regret_bias_separates_a_real_gap_from_the_winners_curse():
    cell = (100, -1)
    # a real gap: mohajer is 5 points above heapsort on every query, so no resample changes the best row or the gap
    heap = _noisy_rows({"heapsort": 0.0})
    rows = heap + [dataclasses.replace(r, ranker="mohajer", ndcg10=r.ndcg10 + 0.05) for r in heap]
    summary = family_summaries(rows)[(20, 3)]["j"]
    assert study.regret_bias(summary, cell, "heapsort/randomized", np.random.default_rng(0), 200) == (
        pytest.approx((5.0, 5.0, 0.0)))
    # six rows with the same true mean: the in-sample best is luck; its gap to the others is mostly optimism
    rows = _noisy_rows(dict.fromkeys(("mohajer", "heapsort", "allpairs", "quicksort", "bubblesort",
                                      "mohajer_bubble"), 0.0))
    summary = family_summaries(rows)[(20, 3)]["j"]
    scores = family_means(rows)[(20, 3)].ndcg
    best = max(scores["j"][cell], key=scores["j"][cell].get)
    worst = min(scores["j"][cell], key=scores["j"][cell].get)
    in_sample, corrected, floor = study.regret_bias(summary, cell, worst, np.random.default_rng(0), 500)
    assert in_sample == pytest.approx(regret(scores, "j", cell, worst)) and in_sample > 0
    assert floor > 0.3 and corrected < in_sample - 0.3
    assert study.regret_bias(summary, cell, best, np.random.default_rng(0), 500)[1:] == pytest.approx((-floor, floor))
    with pytest.raises(ValueError):
        study.regret_bias(summary, cell, "pac_bubble/randomized", np.random.default_rng(0))


def test_cell_minimax_is_the_least_worst_regret_of_the_rows_every_judge_measured():
    scores = {"x": {(100, -1): {"a": 70.0, "b": 69.0, "c": 67.0, "d": 71.0}},
              "y": {(100, -1): {"a": 60.0, "b": 64.0, "c": 65.0}}}
    # d is not measured on y, so it is no candidate, but it is x's best row: worst regrets a 5 (y), b 2 (x), c 4
    assert study.cell_minimax(scores, (100, -1)) == (2.0, "x", "b")
    del scores["x"][(100, -1)]["d"]  # a 5 (y), b 1 on both judges (the max names y), c 3 (x)
    assert study.cell_minimax(scores, (100, -1)) == (1.0, "y", "b")


def test_fall_ci_brackets_the_largest_fall_at_the_budgets_where_it_happens():
    rng = random.Random(5)
    rows = []
    for i in range(40):  # mohajer rises 100 -> 150, falls 3 points 150 -> 200 on every query, rises again at 250
        base = rng.uniform(0.3, 0.7)
        for budget, offset in ((100, 0.0), (150, 0.02), (200, -0.01), (250, 0.03)):
            rows.append(_row("mohajer", budget, base + offset + rng.gauss(0, 0.01), str(i),
                             "dl19" if i % 2 else "dl20"))
    summary = family_summaries(rows)[(20, 3)]["j"]
    scores = family_means(rows)[(20, 3)].ndcg
    pick = dict.fromkeys(scores["j"], "mohajer/randomized")
    mean, low, high, before, after = study.fall_ci(summary, scores, pick, (100, 250), np.random.default_rng(0))
    assert (before, after) == ((150, -1), (200, -1)) and mean == pytest.approx(largest_fall(scores, pick,
                                                                                            (100, 250))[0])
    assert 2.0 < low < mean < high < 4.0
    assert study.fall_ci(summary, scores, pick, (100, 150), np.random.default_rng(0)) is None
