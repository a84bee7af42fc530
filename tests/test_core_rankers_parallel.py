"""Quality per second: parallel_mohajer (rounds, calls, exactness, round and call caps, the leftover budget),
``auto`` read from its measured table, and the bench's latency tools (round caps, wall-time model, Pareto)."""

from __future__ import annotations

import statistics

import pytest

np = pytest.importorskip("numpy", reason='pip install "activeprp[bench]"')

from activeprp_bench.autotable import build_auto_table
from activeprp_bench.grid import Row
from activeprp_bench.instrumented import SleepingComparator
from activeprp_bench.overhead import measured_wall_time
from activeprp_bench.report import Summary, cell, compare_table, modelled_wall_s
from activeprp_core import SimulatedComparator, rerank
from activeprp_core.oracles import BothOrders
from activeprp_core.rankers import auto
from activeprp_core.rankers.auto import choose, load_table
from tests.conftest import Recorder, make_case, true_top

K = 10
NOISY = {"doc_noise": 0.3, "position_bias": 0.4, "pair_noise": 0.5}


def run(oracle="randomized", n=100, budget=None, max_rounds=None, ranker="parallel_mohajer", seed=1, **knobs):
    cands, labels = make_case(n, seed=seed)
    comp = Recorder(labels, **knobs)
    res = rerank("q", cands, ranker=ranker, oracle=oracle, comparator=comp, budget=budget, top_k=K,
                 max_rounds=max_rounds)
    return res, comp, cands, labels


def test_parallel_mohajer_is_exact_in_a_quarter_of_mohajers_rounds():
    res, comp, cands, labels = run("bidirectional")
    mohajer, *_ = run("bidirectional", ranker="mohajer")
    assert res.order[:K] == true_top(cands, labels, K) and res.converged
    assert [len(b) for b in comp.batches[:4]] == [100, 40, 20, 20]  # the brackets: 50/20/10/10 pairs, both orders
    assert res.rounds <= 16 and 3 * res.rounds <= mohajer.rounds  # measured: 13 vs 51
    assert res.calls <= 2 * 240  # measured: 464 (Mohajer 310): speculation costs calls


def test_with_an_unlimited_budget_randomized_asks_every_pair_in_both_orders():
    cands, labels = make_case(60, seed=3)
    runs = [rerank("q", cands, ranker="parallel_mohajer", oracle=o, budget=None, top_k=K, seed=5,
                   comparator=SimulatedComparator(labels, seed=2, **NOISY)) for o in ("randomized", "bidirectional")]
    assert runs[0].order == runs[1].order and runs[0].calls == runs[1].calls == 2 * runs[0].comparisons


def test_last_round_ranks_champions_and_finalists_together():
    # N=100, K=10: 4 bracket rounds; with a 5th and last round the round-robin takes each group's finalist too
    res, comp, cands, labels = run("bidirectional", max_rounds=5)
    assert res.rounds == 5 and res.exhausted is False
    last = {frozenset((a.id, b.id)) for a, b in comp.batches[-1]}
    assert len(last) == 20 * 19 // 2 - 10  # every pair of the 20 contenders but the 10 finals, played before
    assert res.order[0] == true_top(cands, labels, 1)[0]
    contenders = {x for pair in last for x in pair}
    assert {cands[i].id for i in res.order[:K]} <= contenders


def test_one_round_is_a_round_robin_over_the_best_prior_candidates_the_budget_pays_for():
    res, comp, cands, labels = run("randomized", budget=100, max_rounds=1)
    assert res.rounds == 1 and res.calls == 100
    # 14 candidates: 91 pairs; the 9 calls left buy the other slot order of 9 of them
    assert len({frozenset((a.id, b.id)) for a, b in comp.batches[0]}) == 91
    best14 = sorted(range(14), key=lambda i: -labels[cands[i].id])
    assert res.order[:14] == best14


def test_few_calls_after_the_brackets_keep_the_champions_first():
    res, comp, cands, labels = run("randomized", budget=90 + 5)
    champions = {max(range(g, 100, K), key=lambda i: labels[cands[i].id]) for g in range(K)}
    assert res.exhausted and res.calls <= 95 and set(res.order[:K]) == champions
    assert sorted(res.order) == list(range(100))


def test_leftover_budget_never_lowers_quality_on_a_noisy_judge():
    def precision(budget):
        hits = []
        for case in range(12):
            cands, labels = make_case(40, seed=case)
            best = set(true_top(cands, labels, 5))
            for seed in range(4):
                res = rerank("q", cands, ranker="parallel_mohajer", oracle="randomized", budget=budget, top_k=5,
                             seed=seed, comparator=SimulatedComparator(labels, seed=seed, **NOISY))
                hits.append(len(best & set(res.order[:5])) / 5)
        return statistics.mean(hits)

    quality = [precision(b) for b in (40, 60, 80, 120, 160, None)]
    assert all(later >= earlier for earlier, later in zip(quality, quality[1:])), quality
    assert quality[-1] - quality[0] > 0.2  # measured 0.62 -> 1.0


@pytest.mark.parametrize("max_rounds", [6, 7, 8])
@pytest.mark.parametrize("n", [8, 12])
def test_a_round_cap_the_selection_fits_in_keeps_it_exact(n, max_rounds):
    # Brackets (2 rounds) and merge fit in 6 rounds at N <= 12, K=5. The leftover calls' re-decision used to be
    # planned to the rounds left after its confirmation round; with none left it returned the prior order.
    cands, labels = make_case(n, seed=n)
    for budget in range(2 * n, 6 * n, 2):
        runs = [rerank("q", cands, ranker="parallel_mohajer", oracle="randomized", budget=budget, top_k=5,
                       max_rounds=cap, comparator=SimulatedComparator(labels)) for cap in (None, max_rounds)]
        if runs[0].order[:5] == true_top(cands, labels, 5):
            assert runs[1].order[:5] == runs[0].order[:5], (budget, runs[1].rounds)


def test_spare_calls_buy_the_other_slot_order():
    def both_orders(budget):
        res, comp, *_ = run("randomized", n=40, budget=budget, **NOISY)
        asked = {(a.id, b.id) for batch in comp.batches for a, b in batch}
        assert res.calls == len(asked) <= budget
        return sum((b, a) in asked for a, b in asked) // 2

    assert both_orders(120) < both_orders(160) < both_orders(200)  # measured: 0, 30, 70 pairs


# --- auto: read from the measured table ---------------------------------------------------------------------

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


# --- the bench's latency tools ---------------------------------------------------------------------------------

def test_wall_time_model_and_sleeping_comparator():
    assert modelled_wall_s("50 20 10 10") == pytest.approx(0.5 * (4 + 2 + 1 + 1))
    assert modelled_wall_s("3 3", latency_s=2.0, in_flight=1) == 12.0 and modelled_wall_s("") == 0.0
    cands, labels = make_case(20, seed=4)
    judge = SleepingComparator(SimulatedComparator(labels), latency_s=0.0, in_flight=4)
    t = measured_wall_time("q", cands, judge, ranker="parallel_mohajer", oracle="randomized", budget=30, top_k=3)
    assert sum(judge.batches) == t["calls"] <= 30 and len(judge.batches) == t["rounds"]
    assert t["modelled_s"] == 0.0
    direct = rerank("q", cands, ranker="parallel_mohajer", oracle="randomized", budget=30, top_k=3,
                    comparator=SimulatedComparator(labels))
    assert direct.calls == t["calls"]


def test_pareto_front_drops_dominated_cells():
    def rows(ranker, calls, rounds, ndcg):
        return [Row(collection="c", qid=str(q), ranker=ranker, oracle="randomized", budget=calls, seed=0, n=20,
                    ndcg10=ndcg, calls=calls, rounds=rounds) for q in range(3)]

    summary = Summary(rows("fast", 40, 2, 0.6) + rows("good", 60, 10, 0.7) + rows("worse", 60, 12, 0.65)
                      + rows("slow", 30, 30, 0.5), np.random.default_rng(0), 10)
    assert [k[0] for k in summary.front()] == ["fast", "good", "slow"]
    assert cell(summary, "best/*/60/-1") == ("good", "randomized", 60, -1)
    table = compare_table(summary, ["worse/randomized/60/none:best/*/60/-1"], np.random.default_rng(0), 100)
    assert "| worse/randomized/60/-1 | good/randomized/60/-1 | 65.00 | 70.00 | -5.00 | [-5.00, -5.00] |" in table
    with pytest.raises(ValueError):
        cell(summary, "good/randomized/61/-1")


def test_both_orders_is_exported_for_rankers():
    assert BothOrders(3, 1) == (3, 1) and isinstance(BothOrders(3, 1), tuple)
