"""activeprp_core.rankers run by hand (no engine): each ranker's schedule against a perfect judge, and the shared
building blocks (relay, parallel, match, Bracket, bubble_passes with the caps view)."""

import random

import pytest

from activeprp_core.budget import BudgetView
from activeprp_core.judging import JudgeStats
from activeprp_core.rankers import RANKERS, RankContext, get_ranker
from activeprp_core.rankers.base import Bracket, bubble_passes, match, parallel, relay
from activeprp_core.rankers.depth import DEFAULT_DEPTH, Depth, ParallelMohajerDepth

N, K = 30, 5
STRENGTH = random.Random(4).sample(range(1000), N)  # candidate i's true strength (prior order is random)
EXACT = sorted(set(RANKERS) - {"pac_bubble"})  # pac_bubble can only pick from the prior's top K*3


def answer(pairs, strength=STRENGTH):
    return [1.0 if strength[i] > strength[j] else 0.0 for i, j in pairs]


def drive(schedule, strength=STRENGTH):
    """Drive a schedule with the perfect judge of ``strength``; returns (its value, the rounds as asked)."""
    rounds = []
    try:
        pairs = next(schedule)
        while True:
            rounds.append(list(pairs))  # a lazy round is read whole here (no caps)
            pairs = schedule.send(answer(rounds[-1], strength))
    except StopIteration as stop:
        return stop.value, rounds


def run(schedule):
    """Drive a schedule with the perfect judge; returns (its value, rounds, pairs asked)."""
    value, rounds = drive(schedule)
    return value, len(rounds), sum(map(len, rounds))


def pairs_of(rounds):
    """The unordered pairs asked in ``rounds``."""
    return {frozenset(p) for r in rounds for p in r}


@pytest.mark.parametrize("name", EXACT)
def test_every_ranker_finds_the_true_top_k_with_a_perfect_judge(name):
    order, rounds, asked = run(get_ranker(name).schedule(RankContext(N, K, random.Random(0))))
    assert sorted(order) == list(range(N))
    assert order[:K] == sorted(range(N), key=lambda i: -STRENGTH[i])[:K]
    assert rounds >= 1 and asked >= N - 1


def test_pac_bubble_selects_k_of_its_pool_and_sorts_them():
    order, _, _ = run(get_ranker("pac_bubble").schedule(RankContext(N, K, random.Random(0))))
    top = order[:K]
    assert sorted(order) == list(range(N)) and all(i < K * 3 for i in top)
    assert top == sorted(top, key=lambda i: -STRENGTH[i])
    assert max(range(K * 3), key=lambda i: STRENGTH[i]) == top[0]


def test_pac_bubble_cuts_the_union_of_winner_sets_by_prior_rank_so_a_perfect_judge_can_miss_the_pools_top_k():
    # the cut is the project's (after the reference code), not the paper's; docs/rankers.md and pac.py say so.
    # The pool (prior top 30) holds the true top 10, one at prior rank 27; anchor 20 is 11th: its winner set
    # (the 10 and itself) is the smallest, and keeping its 10 best prior ranks keeps anchor 20, drops 27
    top = [2, 3, 4, 8, 14, 15, 18, 24, 25, 27]
    n, k = 100, 10
    strength = [1000 + i if i in top else 999 if i == 20 else 100 - i for i in range(n)]
    order, _ = drive(get_ranker("pac_bubble").schedule(RankContext(n, k, random.Random(0))), strength)
    assert sorted(order) == list(range(n))
    assert 20 in order[:k] and 27 not in order[:k]
    assert order[:k] == sorted([*top[:-1], 20], key=lambda i: -strength[i])


def test_parallel_mohajer_depth_ranks_the_true_top_k_of_the_prior_top_and_keeps_the_rest_in_prior_order():
    depth = 20
    order, _, _ = run(ParallelMohajerDepth(depth).schedule(RankContext(N, K, random.Random(0))))
    assert sorted(order) == list(range(N)) and depth < N
    assert order[:K] == sorted(range(depth), key=lambda i: -STRENGTH[i])[:K]
    assert order[depth:] == list(range(depth, N))
    asked = set()
    schedule = Depth(get_ranker("mohajer"), depth=7).schedule(RankContext(N, K))
    try:
        pairs = next(schedule)
        while True:
            asked |= {i for pair in pairs for i in pair}
            pairs = schedule.send(answer(pairs))
    except StopIteration:
        pass
    assert asked == set(range(7))  # only the top 7 are ever compared


def test_the_default_depth_is_default_depth_never_below_k_nor_above_n():
    ranker = ParallelMohajerDepth()
    assert ranker.depth_for(RankContext(100, 10)) == DEFAULT_DEPTH < 100
    assert ranker.depth_for(RankContext(100, DEFAULT_DEPTH + 7)) == DEFAULT_DEPTH + 7
    assert ranker.depth_for(RankContext(N, K)) == N  # N=30: the whole list, so it is exact above


def test_depth_at_least_n_is_the_inner_ranker():
    inner = run(get_ranker("parallel_mohajer").schedule(RankContext(N, K)))
    assert run(Depth(get_ranker("parallel_mohajer"), depth=N + 5).schedule(RankContext(N, K))) == inner


@pytest.mark.parametrize("depth, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_depth_rejects_a_bad_depth(depth, error):
    with pytest.raises(error, match="depth"):
        Depth(get_ranker("mohajer"), depth=depth)


def test_depth_and_pool_multiplier_take_any_integer_type_and_refuse_the_rest():
    from activeprp_core.rankers.pac import PACBubble

    np = pytest.importorskip("numpy")
    assert Depth(get_ranker("mohajer"), depth=np.int64(10)).depth == 10
    assert PACBubble(np.int32(2)).pool_multiplier == 2 and type(PACBubble(np.int32(2)).pool_multiplier) is int
    for bad, error in ((True, TypeError), (2.5, TypeError), ("3", TypeError), (0, ValueError)):
        with pytest.raises(error, match="pool_multiplier must be"):
            PACBubble(bad)


def test_depth_rejects_a_ranker_name_for_inner():
    with pytest.raises(TypeError, match="inner must be a Ranker instance"):
        Depth("mohajer", depth=5)


@pytest.mark.parametrize("name", sorted(RANKERS))
def test_no_candidates_no_questions(name):
    order, _, asked = run(get_ranker(name).schedule(RankContext(0, K)))
    assert order == [] and asked == 0


def test_allpairs_offers_every_pair_lazily():
    schedule = get_ranker("allpairs").schedule(RankContext(5, 2))
    offered = next(schedule)
    assert not isinstance(offered, list)  # the engine reads it up to the first refused pair
    first = [next(offered) for _ in range(3)]
    assert first == [(0, 1), (0, 2), (1, 2)]
    with pytest.raises(StopIteration) as stop:
        schedule.send([0.0, 0.0, 0.0])  # three answered pairs: 1 beats 0, 2 beats 0 and 1
    assert stop.value.value[:3] == [2, 1, 0]


def test_relay_passes_rounds_through_a_step_and_returns_the_schedule_value():
    seen = []

    def step(pairs):
        outcomes = yield [*pairs, (9, 9)]  # a step may change what goes out
        seen.append(outcomes)
        return outcomes[:-1]

    gen = relay(parallel([match(0, 1), match(2, 3)]), step)
    assert next(gen) == [(0, 1), (2, 3), (9, 9)]
    with pytest.raises(StopIteration) as stop:
        gen.send([1.0, 0.0, 0.5])
    assert stop.value.value == [True, False] and seen == [[1.0, 0.0, 0.5]]


def test_bracket_plays_levels_in_rounds_and_remove_replays_one_path():
    b = Bracket([0, 1, 2, 3, 4])
    champion, rounds, asked = run(b.play())
    assert champion == max(range(5), key=lambda i: STRENGTH[i]) and rounds == b.depth == 3 and asked == 4
    assert b.matches() == 4 and len(b.eliminated()) == 4


class Exhausts(BudgetView):
    def __init__(self, after):
        super().__init__()
        self.asked, self.after = 0, after

    @property
    def exhausted(self):
        return self.asked >= self.after


def test_bubble_passes_stop_when_the_view_says_exhausted():
    arr, caps = list(range(10)), Exhausts(after=3)
    schedule = bubble_passes(arr, 2, caps)
    pairs = next(schedule)
    with pytest.raises(StopIteration):
        while True:
            caps.asked += 1
            pairs = schedule.send(answer(pairs))
    assert caps.asked == 3 and sorted(arr) == list(range(10))


def _view(calls, rounds):
    from activeprp_core.budget import Cap

    return BudgetView({"budget": Cap(calls, "budget"), "max_rounds": Cap(rounds, "max_rounds")})


@pytest.mark.parametrize("rounds", [None, 6, 10])
def test_budget_depth_deepens_with_the_budget_up_to_n_and_its_plan_fits_the_caps(rounds):
    from activeprp_core.rankers.budget_depth import CALLS_PER_QUESTION, MIN_GROUP, BudgetDepth, plan_size

    ranker, n, k = BudgetDepth(), 100, 10
    depths = []
    for budget in [*range(50, 1001, 25), None]:
        inner, depth = ranker.plan(RankContext(n, k, caps=_view(budget, rounds)))
        questions, steps = plan_size(inner, depth, k)
        assert MIN_GROUP * k <= depth <= n
        if depth > MIN_GROUP * k:  # a plan deeper than the least fits the budget and the round cap
            assert budget is None or questions * CALLS_PER_QUESTION <= budget
            assert rounds is None or steps <= rounds
        if rounds is not None:  # under a round cap: the parallel plan, over whole bracket levels
            assert inner is ranker.parallel and depth in (40, 80, 100)
        if rounds is not None and budget is not None and depth == 100:  # a partial level past 80: a fifth more
            assert budget >= 2 * plan_size(inner, n, k)[0]  # once the plan over all 100 is paid in both orders
        depths.append(depth)
    assert depths == sorted(depths) and depths[0] == 40
    assert depths[-1] == (80 if rounds == 6 else 100)  # bracket levels of 100 candidates take 7 rounds


def test_the_parallel_plan_takes_a_partial_bracket_level_when_it_adds_half_or_its_plan_is_paid_twice():
    from activeprp_core.rankers.base import plan_size
    from activeprp_core.rankers.budget_depth import parallel_depths
    from activeprp_core.rankers.parallel import ParallelMohajer

    plan = ParallelMohajer()
    both = 2 * plan_size(plan, 100, 10)[0]  # 420: the plan over all 100 in both slot orders
    assert both > 2 * plan_size(plan, 80, 10)[0]  # more than the plan over the top 80 in both orders
    assert parallel_depths(plan, 100, 10, 40, both - 1) == [10, 20, 40, 80]  # 100 < 1.5 * 80
    assert parallel_depths(plan, 100, 10, 40, both) == parallel_depths(plan, 100, 10, 40, None) == \
        [10, 20, 40, 80, 100]
    both50 = 2 * plan_size(plan, 50, 5)[0]  # 160
    assert parallel_depths(plan, 50, 5, 20, both50 - 1) == [5, 10, 20, 40]
    assert parallel_depths(plan, 50, 5, 20, both50) == [5, 10, 20, 40, 50]
    assert parallel_depths(plan, 20, 3, 12, 10) == [3, 6, 12, 20]  # 20 >= 1.5 * 12: the online default
    assert parallel_depths(plan, 60, 5, 20, 10) == [5, 10, 20, 40, 60]  # exactly half of 40 more
    assert parallel_depths(plan, 25, 10, 25, 10) == [10, 20, 25]  # N is the least depth (N <= 4K): always there
    assert parallel_depths(plan, 80, 10, 40, 10) == [10, 20, 40, 80]  # a whole level


@pytest.mark.parametrize("ranker", ["budget_depth", "auto", "parallel_mohajer"])
def test_without_the_pair_cache_a_replanning_ranker_answers_the_pairs_it_knows(ranker):
    from activeprp_core import Candidate, rerank

    class Noisy:  # 15% of the answers flipped, fresh at every call
        def __init__(self):
            self.rng = random.Random(2)

        def compare(self, query, pairs):
            return [float((a.metadata["rel"] > b.metadata["rel"]) != (self.rng.random() < 0.15)) for a, b in pairs]

    rng = random.Random(7)
    cs = [Candidate(f"d{i}", f"passage {i}", {"rel": rng.random()}) for i in range(100)]
    kw = dict(ranker=ranker, oracle="randomized", top_k=10, budget=None, seed=2)
    cached, uncached = rerank("q", cs, comparator=Noisy(), **kw), rerank("q", cs, comparator=Noisy(), cache=False, **kw)
    # without the cache only a pair's other slot order asked later repeats a call (was 42x for budget_depth)
    assert uncached.calls <= 2 * cached.calls and uncached.rounds <= 2 * cached.rounds


def test_planned_rounds_are_the_rounds_of_the_plan_a_query_gets():
    from activeprp_core.rankers.base import plan_size
    from activeprp_core.rankers.budget_depth import BudgetDepth
    from activeprp_core.rankers.depth import ParallelMohajerDepth
    from activeprp_core.rankers.parallel import ParallelMohajer

    ranker = BudgetDepth()
    for budget, rounds, depth in ((100, 6, 40), (300, 6, 80), (350, 10, 80), (None, None, 100)):
        ctx = RankContext(100, 10, caps=_view(budget, rounds))
        inner, planned_depth = ranker.plan(ctx)
        assert planned_depth == depth
        assert ranker.planned_rounds(ctx) == plan_size(inner, depth, 10)[1]
    assert ranker.planned_rounds(RankContext(100, 10, caps=_view(100, 6))) == 4  # two bracket levels and the merge
    assert ParallelMohajerDepth(40).planned_rounds(RankContext(100, 10)) == \
        ParallelMohajer().planned_rounds(RankContext(40, 10)) == 4
    assert get_ranker("mohajer").planned_rounds(RankContext(100, 10)) is None  # not a plan of rounds


def test_budget_depth_takes_the_plan_that_reaches_deeper():
    from activeprp_core.rankers.budget_depth import BudgetDepth

    ranker = BudgetDepth()
    # without a round cap the sequential heap asks fewer questions: it reaches all 100 at 250 calls
    assert ranker.plan(RankContext(100, 10, caps=_view(250, None))) == (ranker.sequential, 100)
    assert ranker.plan(RankContext(100, 10, caps=_view(None, None))) == (ranker.sequential, 100)
    # a round cap of 20 fits the sequential plan over 20 of 50 candidates (K=5) only; the parallel one over all
    assert ranker.plan(RankContext(50, 5, caps=_view(None, 20))) == (ranker.parallel, 50)
    # with 100 calls all 50 would be a partial level past 40 that adds a quarter: the top 40
    assert ranker.plan(RankContext(50, 5, caps=_view(125, 20))) == (ranker.parallel, 40)
    # two candidates per group is all there is: N <= 4K reranks everything
    assert ranker.plan(RankContext(12, 3, caps=_view(5, 6)))[1] == 12
    # the bidirectional oracle pays two calls per question: a shallower plan for the same budget
    bidirectional = RankContext(100, 10, calls_per_pair=2, caps=_view(250, None))
    assert ranker.plan(bidirectional)[1] < 100


@pytest.mark.parametrize("k", [1, 3, 10])
def test_a_plan_for_the_top_k_of_d_asks_at_least_d_minus_k_questions(k):
    # the bound budget_depth.pays refuses a budget by without running the plan
    from activeprp_core.rankers.base import plan_size
    from activeprp_core.rankers.budget_depth import BudgetDepth

    ranker = BudgetDepth()
    for plan in (ranker.sequential, ranker.parallel):
        for d in range(1, 161):
            assert plan_size(plan, d, k)[0] >= d - k, (plan.name, d, k)


@pytest.mark.parametrize("rounds", [None, 6])
def test_budget_depth_sizes_no_plan_deeper_than_the_budget_pays_at_large_n(monkeypatch, rounds):
    # sizing every depth of 5000 candidates took 20 s of CPU before a rerank's first call
    from activeprp_core.rankers import base
    from activeprp_core.rankers.budget_depth import CALLS_PER_QUESTION, BudgetDepth

    monkeypatch.setattr(base, "_SIZES", {})
    n, k, budget = 5000, 10, 500
    inner, depth = BudgetDepth().plan(RankContext(n, k, caps=_view(budget, rounds)))
    assert base._SIZES and max(size_n for (_, size_n, _) in base._SIZES) <= budget / CALLS_PER_QUESTION + k < n
    fits = [d for (plan, d, _), (questions, steps) in base._SIZES.items() if plan == repr(inner)
            and questions * CALLS_PER_QUESTION <= budget and (rounds is None or steps <= rounds)]
    assert depth == max(fits) > k


def test_budget_depth_ranks_the_true_top_k_of_its_depth_and_keeps_the_rest_in_prior_order():
    from activeprp_core.rankers.budget_depth import BudgetDepth

    ranker = BudgetDepth(prior_weight=0)  # the plan's own order: exact with a perfect judge
    ctx = RankContext(100, 10, caps=_view(150, None))
    inner, depth = ranker.plan(ctx)
    assert depth < 100
    strength = random.Random(7).sample(range(1000), 100)
    order, rounds = drive(ranker.schedule(ctx), strength)
    asked = pairs_of(rounds)
    assert sorted(order) == list(range(100)) and all(max(p) < depth for p in asked)
    assert order[:10] == sorted(range(depth), key=lambda i: -strength[i])[:10]
    assert order[depth:] == list(range(depth, 100))


def test_budget_depth_spends_calls_left_on_the_top_k_and_its_order_stays_exact():
    from activeprp_core import Candidate, rerank
    from activeprp_core.rankers.budget_depth import BudgetDepth, plan_size

    strength = random.Random(3).sample(range(1000), 40)
    docs = [Candidate(str(i), f"passage {i}") for i in range(40)]

    prompts = []

    class Judge:  # a perfect judge answering P(first slot preferred); it notes the prompts
        def compare(self, query, pairs):
            prompts.extend((int(a.id), int(b.id)) for a, b in pairs)
            return [1.0 if strength[int(a.id)] > strength[int(b.id)] else 0.0 for a, b in pairs]

    ranker = BudgetDepth(prior_weight=0)  # the plan's own order: exact with a perfect judge
    # 95 calls complete the sequential plan over all 40 at 1.5 calls per question, the parallel one over 20
    inner, depth = ranker.plan(RankContext(40, 5, caps=_view(95, None)))
    assert (inner, depth) == (ranker.sequential, 40)
    result = rerank("q", docs, ranker=ranker, oracle="randomized", comparator=Judge(), budget=95, top_k=5)
    top = result.order[:5]
    assert top == sorted(range(40), key=lambda i: -strength[i])[:5]
    # the plan asks each question once; the calls it leaves ask pairs in both slot orders: its challengers against
    # the top-K (and each other, in the BubbleSort passes), then the plan's pairs of a top-K item
    both = {frozenset(p) for p in prompts if p[::-1] in prompts}
    assert len(prompts) == result.calls > plan_size(inner, depth, 5)[0] and result.calls >= 95 - 2
    assert both and sum(bool(pair & set(top)) for pair in both) > len(both) / 2


def test_budget_depth_challengers_are_the_candidates_outside_the_top_k_that_only_the_top_k_beat():
    from activeprp_core.rankers.budget_depth import challengers
    from activeprp_core.rankers.parallel import Evidence

    ev = Evidence()
    for pair, outcome in [((1, 7), 1.0), ((5, 6), 1.0), ((8, 5), 0.0), ((6, 9), 1.0), ((2, 9), 1.0), ((3, 4), 0.5)]:
        ev.note(pair, outcome)
    order = list(range(10))  # top-5: 0-4
    # 6, 8 and 9 lost to 5 or 6, outside the top-5; 7 lost to a top item only (fewest losses first); a tie
    # proves nothing
    assert challengers(ev, order, 5) == [5, 7]
    # with 5 in the top-5, the candidates only 5 beat (6, 8) can enter too; 9 lost to 6, outside
    assert challengers(ev, [*order[:4], 5, 4, *order[6:]], 5) == [4, 6, 7, 8]


def test_budget_depth_challenge_lets_a_candidate_a_wrong_answer_kept_out_beat_its_way_into_the_top_k():
    from activeprp_core.rankers.budget_depth import challenge
    from activeprp_core.rankers.parallel import Evidence

    strength = [100, 80, 70, 60, 50, 40, 30, 90, 20, 10]  # 7 is truly second
    ev = Evidence()
    for pair, outcome in [((1, 7), 1.0), ((5, 6), 1.0), ((5, 8), 1.0), ((6, 9), 1.0)]:  # 1 beat 7: wrong
        ev.note(pair, outcome)
    asked = []

    def cached_or_true(pairs):  # answered pairs come from the evidence, as the engine's pair cache does
        asked.extend(p for p in pairs if not ev.known(*p))
        return [ev.outcomes[(min(i, j), max(i, j))] if ev.known(i, j) and i < j else
                1.0 - ev.outcomes[(j, i)] if ev.known(i, j) else float(strength[i] > strength[j]) for i, j in pairs]

    schedule, order = challenge(RankContext(10, 5), ev, list(range(10))), None
    try:
        pairs = next(schedule)
        while True:
            pairs = schedule.send(cached_or_true(pairs))
    except StopIteration as stop:
        order = stop.value
    assert sorted(order) == list(range(10))
    assert order[:5] == [0, 1, 7, 2, 3]  # 7 beats 5, 4, 3 and 2 and stops below 1 (the cached wrong answer)
    # only new pairs of the top-5 and the challengers (5, 7) are asked
    assert asked and all(set(p) <= {0, 1, 2, 3, 4, 5, 7} for p in asked)


def test_borda_orders_by_the_sum_of_places_ties_in_the_first_order():
    from activeprp_core.rankers.budget_depth import borda

    assert borda([0, 1, 2, 3], [2, 3, 0, 1]) == [0, 2, 1, 3]  # sums 2, 4, 2, 4
    assert borda([3, 1, 2, 0], [0, 2, 1, 3]) == [3, 1, 2, 0]  # every sum is 3: the first order
    assert borda([5, 4], [5, 4]) == [5, 4]
    # the second order weighed: place in the first + weight * place in the second
    assert borda([3, 0, 1, 2], [0, 1, 2, 3], 0.5) == [0, 3, 1, 2]  # 1.5, 1, 2.5, 4
    assert borda([3, 0, 1, 2], [0, 1, 2, 3], 0.0) == [3, 0, 1, 2]  # weight 0: the first order


def test_budget_depth_weighs_its_final_order_with_the_first_stage_and_asks_the_same_questions():
    from activeprp_core.rankers.budget_depth import PRIOR_WEIGHT, BudgetDepth, borda

    # the first stage's order is the true one, except that 95 is truly 10th and 5 truly 11th
    strength = [500 - i for i in range(100)]
    for place, i in enumerate((0, 1, 2, 3, 4, 6, 7, 8, 9, 95, 5)):
        strength[i] = 1000 - place
    for budget, cap in ((150, None), (500, 6), (None, None)):
        plain, plain_rounds = drive(BudgetDepth(prior_weight=0).schedule(
            RankContext(100, 10, caps=_view(budget, cap))), strength)
        weighed, rounds = drive(BudgetDepth().schedule(RankContext(100, 10, caps=_view(budget, cap))), strength)
        assert rounds == plain_rounds  # the weight asks nothing: the same questions, round by round
        depth = BudgetDepth().plan(RankContext(100, 10, caps=_view(budget, cap)))[1]
        assert weighed == borda(plain[:depth], list(range(depth)), PRIOR_WEIGHT) + plain[depth:]
        assert sorted(weighed) == list(range(100)) and weighed[depth:] == list(range(depth, 100))
        for flip_rate in (0.5, 1.0):  # a judge whose winner flips with the slot: the weight shrinks with it
            stats = JudgeStats(answers=100, flip_rate=flip_rate)
            scaled, _ = drive(BudgetDepth().schedule(RankContext(100, 10, caps=_view(budget, cap),
                                                                 judge=lambda stats=stats: stats)), strength)
            assert scaled == borda(plain[:depth], list(range(depth)), PRIOR_WEIGHT * (1 - flip_rate)) + plain[depth:]
        assert scaled == plain  # every winner flipped: the plan's order alone
    assert BudgetDepth().prior_weight == PRIOR_WEIGHT  # the default
    assert BudgetDepth().weight(None) == PRIOR_WEIGHT and BudgetDepth(prior_weight=0.1).weight(0.25) == 0.1 * 0.75
    # over all 100 (the last case): the judge's 10th, 95, is 85 first-stage places below the 11th, 5, and loses
    # its place to it (9 + 0.05 * 95 > 10 + 0.05 * 5); it falls behind 10, 11 and 12 as well
    assert plain[:10] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 95]
    assert weighed[:14] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 5, 10, 11, 12, 95]


def test_the_first_stage_weight_changes_no_order_of_at_most_20_candidates():
    from activeprp_core.rankers.budget_depth import PRIOR_WEIGHT, borda

    rng = random.Random(11)
    for n in (2, 3, 12, 20):  # 0.05 x 19 < 1: the first stage can outweigh no whole place
        for _ in range(200):
            order = rng.sample(range(n), n)
            assert borda(order, list(range(n)), PRIOR_WEIGHT) == order
    assert borda([20, 0], list(range(21)), PRIOR_WEIGHT) == [20, 0]  # 20 places weigh one: a tie, the plan's order
    assert borda([21, 0], list(range(22)), PRIOR_WEIGHT) == [0, 21]  # more outweigh it


@pytest.mark.parametrize("bad, error", [(-0.1, ValueError), (float("inf"), ValueError), (float("nan"), ValueError),
                                        ("0.05", TypeError), (True, TypeError)])
def test_budget_depth_rejects_a_prior_weight_that_is_not_a_finite_number_at_least_0(bad, error):
    from activeprp_core.rankers.budget_depth import BudgetDepth

    with pytest.raises(error, match="prior_weight"):
        BudgetDepth(prior_weight=bad)


def test_budget_depth_takes_a_numpy_prior_weight():
    from activeprp_core.rankers.budget_depth import BudgetDepth

    np = pytest.importorskip("numpy")
    assert BudgetDepth(prior_weight=np.float32(0.25)).prior_weight == 0.25


def test_parallel_select_asks_each_pair_in_one_slot_order_and_finds_the_top_k():
    from activeprp_core.oracles import BothOrders
    from activeprp_core.rankers.parallel import Evidence, ParallelMohajer, select

    strength = random.Random(5).sample(range(1000), 60)
    ctx = RankContext(60, 6, caps=_view(10_000, None))  # calls to spare: the ranker buys both slot orders
    _, rounds = drive(ParallelMohajer().schedule(ctx), strength)
    assert any(isinstance(p, BothOrders) for r in rounds for p in r)
    order, rounds = drive(select(ctx, Evidence()), strength)
    assert order[:6] == sorted(range(60), key=lambda i: -strength[i])[:6]
    assert rounds and not any(isinstance(p, BothOrders) for r in rounds for p in r)


def test_budget_depth_adds_the_parallel_selection_once_the_calls_left_pay_it_in_both_slot_orders():
    from activeprp_core import Candidate, rerank
    from activeprp_core.rankers.budget_depth import (
        BOTH_ORDERS,
        CALLS_PER_QUESTION,
        BudgetDepth,
        plan_size,
        second_plan_size,
    )
    from activeprp_core.rankers.parallel import Evidence, select

    n, k = 100, 10
    docs = [Candidate(str(i), f"passage {i}") for i in range(n)]

    def asked(strength, budget):
        prompts = set()

        class Judge:
            def compare(self, query, pairs):
                prompts.update(frozenset((int(a.id), int(b.id))) for a, b in pairs)
                return [1.0 if strength[int(a.id)] > strength[int(b.id)] else 0.0 for a, b in pairs]

        result = rerank("q", docs, ranker=BudgetDepth(prior_weight=0), oracle="randomized", comparator=Judge(),
                        budget=budget, top_k=k)
        assert result.order[:k] == sorted(range(n), key=lambda i: -strength[i])[:k]
        return prompts

    strength = random.Random(9).sample(range(1000), n)
    assert pairs_of(drive(select(RankContext(n, k), Evidence()), strength)[1]) <= asked(strength, None)  # no budget
    # a judge that agrees with the first stage: the plan asks plan_size questions, one call each (randomized)
    agrees = [-i for i in range(n)]
    selection = pairs_of(drive(select(RankContext(n, k), Evidence()), agrees)[1])
    plan, extra = plan_size(BudgetDepth().sequential, n, k)[0], second_plan_size(BudgetDepth().sequential, n, k)[0]
    assert extra > 0 and plan * CALLS_PER_QUESTION <= plan + BOTH_ORDERS * extra - 1  # both budgets plan all 100
    assert selection <= asked(agrees, plan + BOTH_ORDERS * extra)
    assert not selection <= asked(agrees, plan + BOTH_ORDERS * extra - 1)  # pays it once, not in both orders


@pytest.mark.parametrize("bad", ["mohajer", 3])
def test_budget_depth_rejects_a_plan_that_is_not_a_ranker(bad):
    from activeprp_core.rankers.budget_depth import BudgetDepth

    with pytest.raises(TypeError, match="Ranker instance"):
        BudgetDepth(sequential=bad)
    with pytest.raises(TypeError, match="Ranker instance"):
        BudgetDepth(parallel=bad)
