"""Call and round counts at N=100, K=10 with a perfect comparator (formulas from shared notes/algorithms.md)."""

import pytest

from activeprp_core import Candidate, rerank
from activeprp_core.rankers import RANKERS, Mohajer
from tests.conftest import Recorder, make_case, true_top

N, K = 100, 10


def run(ranker, oracle="randomized", labels=None, cands=None, **kw):
    if cands is None:
        cands, labels = make_case(N, seed=1)
    comp = Recorder(labels)
    return rerank("q", cands, ranker=ranker, oracle=oracle, comparator=comp, budget=None, top_k=K, **kw), comp


@pytest.mark.parametrize("ranker", sorted(RANKERS))
def test_bidirectional_costs_two_calls_per_comparison(ranker):
    rand, _ = run(ranker, "randomized")
    bi, _ = run(ranker, "bidirectional")
    assert bi.calls == 2 * bi.comparisons
    # budget_depth asks its confirmations (the other slot order of pairs answered once) as questions of their own
    if rand.ranker != "budget_depth":
        assert bi.comparisons == rand.comparisons
    if not rand.ranker.startswith(("parallel_mohajer", "budget_depth")):  # they buy the other slot order with
        assert rand.calls == rand.comparisons  # spare calls (their own tests)
    assert bi.order[:K] == rand.order[:K]


def test_mohajer_tournament_phase_is_n_minus_k_matches_in_four_rounds():
    res, comp = run("mohajer")
    sizes = [len(b) for b in comp.batches]
    assert sizes[:4] == [50, 20, 10, 10]  # 10 groups of 10: levels of 5, 2 (+bye), 1 (+bye), 1 matches
    assert sum(sizes[:4]) == N - K
    # every tournament match pairs two members of the same stride group
    assert all(a.id != b.id and int(a.id[1:]) % K == int(b.id[1:]) % K for batch in comp.batches[:4] for a, b in batch)
    assert res.rounds <= 60 and res.rounds < res.calls / 2  # measured: 52 rounds, 154 calls


def test_mohajer_variants_trade_calls():
    path, _ = run(Mohajer(reselect="path"))
    rerun, _ = run(Mohajer(reselect="rerun"))
    refill, _ = run(Mohajer(skip_last_refill=False))
    assert path.order[:K] == rerun.order[:K] == refill.order[:K]
    assert path.calls < rerun.calls
    assert path.calls < refill.calls


def test_mohajer_bubble_adds_at_most_the_bubble_bound():
    plain, _ = run("mohajer")
    polished, _ = run("mohajer_bubble")
    bound = sum(2 * K - 1 - p for p in range(K))  # 145
    assert plain.calls < polished.calls <= plain.calls + bound


def test_bubblesort_bound_and_early_stop():
    res, _ = run("bubblesort")
    assert res.comparisons <= sum(N - 1 - p for p in range(K))  # 945
    assert res.rounds == res.comparisons  # strictly sequential
    cands, labels = make_case(N, seed=1)
    perfect_prior = [cands[i] for i in true_top(cands, labels, N)]
    sorted_res, _ = run("bubblesort", cands=perfect_prior, labels=labels)
    assert sorted_res.comparisons == N - 1  # one pass without a swap ends the sort


def test_allpairs_asks_every_pair_once_in_one_round():
    res, comp = run("allpairs")
    assert res.comparisons == N * (N - 1) // 2 and res.rounds == 1
    bi, _ = run("allpairs", "bidirectional")
    assert bi.calls == N * (N - 1)


def test_pac_bubble_first_round_is_anchors_times_pool():
    res, comp = run("pac_bubble")
    # 5 anchors (ranks 0, 20, 40, 60, 80) x pool of 30 minus the 2 anchors inside the pool vs themselves
    # = 148 questions; (0, 20) and (20, 0) are one pair, answered once by the pair cache.
    assert len(comp.batches[0]) == 147
    assert res.cache_hits >= 1


def test_heapsort_and_quicksort_run_in_parallel_rounds():
    heap, _ = run("heapsort")
    quick, _ = run("quicksort")
    assert heap.rounds < heap.comparisons
    assert quick.rounds < quick.comparisons / 10


def test_sliding_window_matches_bubblesort_with_cache_and_pays_repeats_without():
    bubble, _ = run("bubblesort")
    sliding, _ = run("sliding_window")
    assert sliding.order == bubble.order and sliding.calls == bubble.calls
    uncached, _ = run("sliding_window", cache=False)
    assert uncached.calls > sliding.calls


def test_n_smaller_than_k_ranks_everything():
    cands = [Candidate(f"d{i}", "") for i in range(4)]
    labels = {f"d{i}": i for i in range(4)}
    res, _ = run("mohajer", cands=cands, labels=labels)
    assert res.order == [3, 2, 1, 0]
