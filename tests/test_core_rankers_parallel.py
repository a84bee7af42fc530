"""parallel_mohajer (activeprp_core/rankers/parallel.py), the ranker for few rounds: rounds, calls, exactness,
round and call caps, the leftover budget."""

from __future__ import annotations

import statistics

import pytest

from activeprp_core import SimulatedComparator, rerank
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


HUGE_CAPS_SCRIPT = """
from activeprp_core import Candidate, rerank

class Fast:  # answers in microseconds: a time budget of 1e6 s fits about 1e11 rounds
    def compare(self, query, pairs):
        return [1.0 if int(a.id) < int(b.id) else 0.0 for a, b in pairs]

cands = [Candidate(str(i), f"passage {i}") for i in range(30)]
for ranker in ("parallel_mohajer", "parallel_mohajer_depth", "budget_depth", "auto"):
    runs = [rerank("q", cands, comparator=Fast(), ranker=ranker, budget=None, **caps)
            for caps in ({"max_rounds": 2**40}, {"max_rounds": 64}, {"time_budget": 1e6})]
    huge, enough, timed = ((r.order, r.calls, r.rounds) for r in runs)
    assert huge == enough and sorted(timed[0]) == list(range(30)), (ranker, huge, enough, timed)
print("done")
"""


def test_a_huge_round_cap_or_time_budget_plans_as_fast_as_enough_rounds():
    """next_member computed 2 ** rounds left to cut a bracket: max_rounds=2**40 (a server with no round cap took it
    from a request body) or time_budget=1e6 with a fast judge never returned. Bounded by the subprocess's timeout,
    not timed: a huge cap gives the result of a cap of 64 rounds (more than the 30 candidates need)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", HUGE_CAPS_SCRIPT], cwd=root, env=env, timeout=120,
                          capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr[-2000:]
