"""activeprp_core.judging: JudgeStats counted from the judge's own answers, the confidence gate's margin rule,
the adaptive oracle's re-asks and their caps, and the running estimate rerank_many carries across queries."""

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activeprp_core import (
    Candidate,
    JudgeStats,
    Reranking,
    RerankResult,
    SimulatedComparator,
    rerank,
    rerank_many,
)
from activeprp_core.judging import (
    CONSISTENT_PAIRS,
    GATE_QUANTILE,
    MARGIN_WINDOW,
    MIN_ANSWERS,
    Answers,
    JudgeTally,
    gate,
    pooled,
)
from activeprp_core.oracles import ORACLES, AdaptiveOracle, BidirectionalOracle, get_oracle
from activeprp_core.rankers import RANKERS, RankContext, get_ranker
from tests.conftest import make_case


class Scripted:
    """Answers prompts from a script of probabilities (cycled), logging every (first id, second id, answer)."""

    def __init__(self, script):
        self.script, self.log = list(script), []

    def compare(self, query, pairs):
        out = []
        for a, b in pairs:
            p = self.script[len(self.log) % len(self.script)]
            self.log.append((a.id, b.id, p))
            out.append(p)
        return out


def counted(log):
    """JudgeStats by counting a comparator's log by hand."""
    ps = [p for _, _, p in log if p is not None]
    seen, pairs, flips = {}, 0, 0
    for a, b, p in log:
        if p is None:
            continue
        if (b, a) in seen:
            pairs += 1
            flips += (p > 0.5) == (seen[(b, a)] > 0.5) and p != 0.5 and seen[(b, a)] != 0.5
        seen[(a, b)] = p
    if not ps:
        return JudgeStats(0, None, None, None, None)
    return JudgeStats(len(ps), sum(p > 0.5 for p in ps) / len(ps), flips / pairs if pairs else None,
                      sum(0 < p < 1 for p in ps) / len(ps), sum(abs(p - 0.5) for p in ps) / len(ps))


def cands(n):
    return [Candidate(f"d{i}", f"passage {i}") for i in range(n)]


@pytest.mark.parametrize("script", [[1.0], [0.0, 1.0, 1.0], [0.9, 0.2, 0.55, 0.5, 1.0], [1.0, 1.0, 0.0, 0.3]])
@pytest.mark.parametrize("oracle", ["bidirectional", "randomized", "single", "adaptive"])
@pytest.mark.parametrize("ranker", ["allpairs", "mohajer", "bubblesort"])
def test_judge_stats_equal_counting_the_comparators_own_answers(script, oracle, ranker):
    comp = Scripted(script)
    res = rerank("q", cands(7), comparator=comp, ranker=ranker, oracle=oracle, top_k=3, seed=3, budget=None)
    assert _close(res.judge, counted(comp.log))
    assert res.judge.answers == res.calls == len(comp.log)  # every call answered, cache hits not counted
    assert res.stats()["judge"] == res.judge.as_dict()


def _close(a: JudgeStats, b: JudgeStats) -> bool:
    for x, y in zip(a.as_dict().values(), b.as_dict().values()):
        assert (x is None and y is None) or x == pytest.approx(y)
    return True


def test_judge_stats_on_hand_built_sequences_and_failed_calls():
    t = JudgeTally()
    assert t.stats() == JudgeStats(0, None, None, None, None)
    for p, other in [(1.0, None), (0.0, None), (0.8, None), (None, None), (0.5, None), (0.9, 0.7), (0.1, 0.95)]:
        t.record(p, other)
    s = t.stats()
    assert s.answers == 6  # the failed call (None) is no answer
    assert s.first_slot_rate == pytest.approx(3 / 6)  # 1.0, 0.8, 0.9
    assert s.soft_rate == pytest.approx(4 / 6)  # 0.8, 0.5, 0.9, 0.1
    assert s.mean_confidence == pytest.approx((0.5 + 0.5 + 0.3 + 0 + 0.4 + 0.4) / 6)
    assert s.flip_rate == pytest.approx(1 / 2)  # (0.9, 0.7) both prefer slot A: flipped; (0.1, 0.95) consistent
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.answers = 3  # frozen


def test_margin_rule_on_soft_hard_and_mixed_answers():
    hard = JudgeTally()
    for p in [1.0, 0.0] * 50:
        hard.record(p)
    assert hard.margin() == 0.0 and gate(1.0, hard.margin()) == 1.0  # hard answers: no margin, no effect
    soft = JudgeTally()
    confs = [i / 200 for i in range(100)]  # confidences 0 .. 0.495
    for c in confs:
        soft.record(0.5 + c)
    expected = sorted(confs)[int(GATE_QUANTILE * len(confs))]
    assert soft.margin() == pytest.approx(expected)
    below = [c for c in confs if gate(0.5 + c, soft.margin()) == 0.5]
    assert len(below) == int(GATE_QUANTILE * len(confs))  # the least confident quantile become ties
    assert gate(0.5 - 0.4, soft.margin()) == 0.0 and gate(0.9, soft.margin()) == 1.0  # confident: a whole win
    mixed = JudgeTally()
    for c in confs:
        mixed.record(0.5 + c)
        mixed.record(1.0)  # hard answers do not move the margin: it is a quantile of the soft ones
    assert mixed.margin() == soft.margin() and gate(0.0, mixed.margin()) == 0.0
    assert soft.margin(0.0) == 0.0 and soft.margin(1.0) == pytest.approx(max(confs))
    few = JudgeTally()
    for c in confs[:MIN_ANSWERS - 1]:
        few.record(0.5 + c)
    assert few.margin() == 0.0  # too few soft answers for a quantile: no gate yet
    few.record(0.5 + confs[MIN_ANSWERS])
    assert few.margin() > 0.0


def test_gated_outcomes_single_and_bidirectional():
    answers = Answers()
    for p in [0.52, 0.9, 0.1, 0.8] * 5:
        answers.record((5, 6), p)
    m = answers.margin
    assert 0 < m < 0.5
    low = Answers(answers.pool)
    low.record((0, 1), 0.51)
    low.record((2, 3), 0.95)
    low.record((3, 2), 0.1)
    for name in ("single", "randomized", "adaptive"):
        assert get_oracle(name).outcome(0, 1, low) == 0.5  # below the margin: a tie
        assert get_oracle(name).outcome(1, 0, low) == 0.5
    assert get_oracle("bidirectional").outcome(2, 3, low) == 1.0  # consistent, mean 0.925 above the margin: a win
    assert get_oracle("bidirectional").outcome(3, 2, low) == 0.0
    assert get_oracle("single").outcome(2, 3, low) == 1.0  # a confident soft answer: a whole win


@pytest.mark.parametrize("oracle", sorted(set(ORACLES) - {"adaptive"}))  # adaptive reads the carried bias too
@pytest.mark.parametrize("ranker", sorted(RANKERS))
def test_hard_answers_are_never_gated(ranker, oracle):
    """A margin carried from soft answers changes nothing on hard answers: the same order, calls and rounds."""
    cs, labels = make_case(30, seed=4)
    prior = JudgeTally()
    for i in range(200):  # soft, balanced between the slots: margin > 0, no position bias
        prior.record(0.5 + (i % 40) / 100 * (1 if i % 2 else -1))
    assert prior.margin() > 0.05
    kw = dict(ranker=ranker, oracle=oracle, budget=120, top_k=5, seed=9)
    comp = SimulatedComparator(labels, seed=2, position_bias=0.3, pair_noise=0.4)
    plain = drive(Reranking("q", cs, **kw), comp)
    gated = drive(Reranking("q", cs, prior_answers=prior, **kw), comp)
    assert (gated.order, gated.calls, gated.rounds, gated.ties) == (plain.order, plain.calls, plain.rounds, plain.ties)


def drive(r: Reranking, comp) -> RerankResult:
    while not r.done:
        batch = r.next_batch()
        r.send(comp.compare(batch.query, batch.pairs))
    return r.result()


class ByPrompt:
    """A judge whose answer is a fixed function of the ordered prompt (not of the call order): soft or hard, with a
    first-slot bias and noise drawn once per prompt from ``seed``. It never looks order-consistent."""

    def __init__(self, seed, soft):
        self.seed, self.soft, self.log = seed, soft, []

    def compare(self, query, pairs):
        out = []
        for a, b in pairs:
            rng = random.Random(f"{self.seed}/{a.id}/{b.id}")
            p = 0.5 + 0.4 * (rng.random() - 0.5) + 0.25 * (int(b.id[1:]) > int(a.id[1:]))  # better prior wins, mostly
            p = min(0.99, max(0.01, p + 0.15)) if self.soft else float(p + 0.15 > 0.5)  # and slot A is favoured
            self.log.append((a.id, b.id, p))
            out.append(p)
        return out


@pytest.mark.parametrize("ranker", ["mohajer", "mohajer_bubble", "heapsort", "bubblesort", "quicksort"])
@pytest.mark.parametrize("soft", [False, True])
def test_adaptive_decides_as_bidirectional_asking_again_only_upsets(ranker, soft):
    cs = cands(40)
    kw = dict(ranker=ranker, top_k=5, seed=3, budget=None)
    both_judge, adaptive_judge = ByPrompt(7, soft), ByPrompt(7, soft)
    both = rerank("q", cs, comparator=both_judge, oracle="bidirectional", **kw)
    adaptive = rerank("q", cs, comparator=adaptive_judge, oracle="adaptive", **kw)
    assert adaptive.order == both.order and adaptive.comparisons == both.comparisons
    first = {}
    for a, b, p in adaptive_judge.log:  # the first ask of each pair, then a re-ask exactly where it was an upset
        ia, ib = int(a[1:]), int(b[1:])
        if (b, a) in first:
            assert first[(b, a)]
        else:
            first[(a, b)] = (p > 0.5 and ia > ib) or (p < 0.5 and ib > ia)
    assert adaptive.calls == adaptive.comparisons + sum(first.values()) < both.calls
    assert adaptive.judge.flip_rate is not None and adaptive.judge.flip_rate > 0.05


def test_adaptive_stops_asking_again_once_the_judge_is_order_consistent():
    cs, labels = make_case(60, seed=2)
    fair = SimulatedComparator(labels, seed=0)  # no bias, no noise: the other order always agrees
    res = rerank("q", cs, comparator=fair, ranker="heapsort", oracle="adaptive", top_k=10, seed=1, budget=None)
    assert res.judge.flip_rate == 0.0  # a round's re-asks are planned together, so a few go past the threshold
    assert CONSISTENT_PAIRS <= res.calls - res.comparisons < 1.5 * CONSISTENT_PAIRS < 0.2 * res.comparisons
    always_a = Scripted([1.0])  # the bundled model under the A/B prompt: answers "A" always
    res = rerank("q", cs, comparator=always_a, ranker="heapsort", oracle="adaptive", top_k=10, seed=1, budget=None)
    assert res.judge.flip_rate == 1.0 and res.calls > res.comparisons + CONSISTENT_PAIRS


def test_once_the_judge_looks_consistent_adaptive_reads_an_upset_alone_and_flip_rate_counts_only_reasks():
    # what docs/judge-diagnostics.md says adaptive does not promise: the re-asked upsets are all flip_rate and the
    # consistency test count, and once that test holds a pair the judge flips on is read apart from bidirectional
    answers = Answers()
    for k in range(CONSISTENT_PAIRS):  # upsets (the worse prior rank preferred), each re-asked, the judge agreeing
        answers.record((2 * k + 1, 2 * k), 1.0)
        answers.record((2 * k, 2 * k + 1), 0.0)
    answers.record((70, 71), 1.0)  # an answer for the better prior rank: counted, never re-asked, not in flip_rate
    assert answers.pool.consistent and answers.own.stats().flip_rate == 0.0
    answers.record((61, 60), 1.0)  # an upset on a pair the judge flips on: LLM(61, 60) = LLM(60, 61) = 1
    adaptive = AdaptiveOracle()
    assert adaptive.reask(60, 61, answers) == [] and adaptive.outcome(60, 61, answers) == 0.0  # 61 wins alone
    answers.record((60, 61), 1.0)
    assert BidirectionalOracle().outcome(60, 61, answers) == 0.5  # a tie, so 60 (better prior rank) wins
    assert answers.own.stats().flip_rate == 1 / (CONSISTENT_PAIRS + 1)


class Fair:
    """A hard judge with no slot bias: prefers the better prior rank except on a fixed fifth of the pairs (drawn
    once per unordered pair from ``seed``), in either slot order."""

    def __init__(self, seed):
        self.seed = seed

    def compare(self, query, pairs):
        out = []
        for a, b in pairs:
            i, j = sorted((int(a.id[1:]), int(b.id[1:])))
            better = f"d{i}" if random.Random(f"{self.seed}/{i}/{j}").random() >= 0.2 else f"d{j}"
            out.append(float(a.id == better))
        return out


@pytest.mark.parametrize("max_rounds", [6, 10])
def test_a_ranker_that_plans_its_rounds_gets_no_reasks_under_a_round_cap(max_rounds):
    cs = cands(40)
    kw = dict(ranker="parallel_mohajer", top_k=5, seed=3, budget=100)
    runs = {o: rerank("q", cs, comparator=Fair(7), oracle=o, max_rounds=max_rounds, **kw)
            for o in ("randomized", "adaptive")}
    assert runs["adaptive"].order == runs["randomized"].order
    assert (runs["adaptive"].calls, runs["adaptive"].rounds) == (runs["randomized"].calls, runs["randomized"].rounds)
    assert not runs["adaptive"].judge.flip_rate  # no pair asked both ways: the judge does not look positional
    uncapped = {o: rerank("q", cs, comparator=Fair(7), oracle=o, **kw) for o in ("randomized", "adaptive")}
    assert uncapped["adaptive"].rounds > uncapped["randomized"].rounds  # without a round cap it re-asks upsets
    capped_mohajer = rerank("q", cs, comparator=Fair(7), oracle="adaptive", max_rounds=max_rounds,
                            **{**kw, "ranker": "mohajer"})
    assert capped_mohajer.calls > capped_mohajer.comparisons  # a ranker that does not plan its rounds still does


@pytest.mark.parametrize("ranker", ["budget_depth", "auto"])
@pytest.mark.parametrize("limit", [{"max_rounds": 1000}, {"time_budget": 3600.0}])
def test_a_limit_that_does_not_shape_budget_depths_plan_keeps_the_reasks(ranker, limit):
    # budget_depth runs its sequential plan where its rounds fit: no plan of rounds, so adaptive keeps re-asking
    cs = cands(100)
    kw = dict(ranker=ranker, oracle="adaptive", top_k=10, seed=3, budget=300)
    free, limited = rerank("q", cs, comparator=Fair(7), **kw), rerank("q", cs, comparator=Fair(7), **kw, **limit)
    assert limited.calls > limited.comparisons  # re-asks were sent
    assert (limited.order, limited.calls, limited.rounds) == (free.order, free.calls, free.rounds)


def test_plans_rounds_for_answers_per_query_with_the_plan_budget_depth_runs():
    from activeprp_core.budget import BudgetView, Cap
    from activeprp_core.rankers.depth import Depth

    def ctx(n, k, calls, rounds):
        caps = {"budget": Cap(calls, "budget"), "max_rounds": Cap(rounds, "max_rounds")}
        return RankContext(n, k, caps=BudgetView(caps))

    bd = get_ranker("budget_depth")
    # (N, K, budget, cap): whether the parallel plan runs, whether the plan fills the rounds left
    for case, parallel, plans in [((100, 10, 300, 6), True, True), ((100, 10, 300, 1000), False, False),
                                  ((100, 10, 300, None), False, False), ((20, 3, 50, 6), True, True),
                                  ((20, 3, 50, 20), False, True),  # the sequential plan over 20: 13 of 20 rounds
                                  ((20, 3, 20, 20), False, False)]:  # over 12: 10 rounds, re-asks fit beside them
        assert (bd.plan(ctx(*case))[0] is bd.parallel) is parallel
        assert bd.plans_rounds_for(ctx(*case)) is plans
        assert Depth(bd, 100).plans_rounds_for(ctx(*case)) is plans
        if case[0] == 100:  # auto's choice there is budget_depth (at N=20 the table may choose parallel_mohajer)
            assert get_ranker("auto").plans_rounds_for(ctx(*case)) is plans
    assert get_ranker("parallel_mohajer").plans_rounds_for(ctx(100, 10, 300, None))  # it reads the rounds left
    assert not get_ranker("mohajer").plans_rounds_for(ctx(100, 10, 300, 6))


def slot_orders(log):
    """Per unordered pair of a judge's log, the slot orders asked."""
    asked = {}
    for a, b, _ in log:
        asked.setdefault(frozenset((a, b)), set()).add((a, b))
    return asked


def test_a_positional_judge_is_asked_both_orders_at_once_where_no_reask_can_follow():
    cs = cands(40)
    kw = dict(ranker="parallel_mohajer", top_k=5, seed=3, budget=400, max_rounds=6)
    judge = ByPrompt(7, False)  # slot A wins unless the better prior rank sits in slot B and its noise is low
    res = rerank("q", cs, comparator=judge, oracle="adaptive", **kw)
    assert res.judge.first_slot_rate > 0.75 and res.rounds <= 6
    first_round = len(cs) // 2  # the brackets' first level: 20 pairs, one order each, before the judge shows
    asked = slot_orders(judge.log[first_round:])
    assert all(len(orders) == 2 for orders in asked.values())  # then every new pair in both orders at once
    fair = Fair(7)
    assert rerank("q", cs, comparator=fair, oracle="adaptive", **kw).order == \
        rerank("q", cs, comparator=fair, oracle="randomized", **kw).order  # a judge that reads the passages: no change
    tally = JudgeTally()
    for p in [1.0] * 15 + [0.0] * 5:  # a first-slot rate of 3/4: half the answers followed the slot, not more
        tally.record(p)
    assert not tally.positional
    tally.record(1.0)
    assert tally.positional


@pytest.mark.parametrize("ranker", ["parallel_mohajer", "budget_depth"])
def test_a_positional_judges_first_round_is_completed_where_the_plan_leaves_a_round(ranker):
    cs = cands(40)
    kw = dict(ranker=ranker, oracle="adaptive", top_k=10, seed=3, budget=100)  # no spare calls: one order each
    # the parallel plan over 40 (budget_depth's under a round cap): two bracket levels, then the merge
    assert get_ranker("parallel_mohajer").planned_rounds(RankContext(40, 10)) == 4
    judge = ByPrompt(7, False)
    res = rerank("q", cs, comparator=judge, max_rounds=6, **kw)
    first = judge.log[:20]  # the brackets' first level, one order each, before the judge shows
    upsets = [(b, a) for a, b, p in first if (p > 0.5) == (int(a[1:]) > int(b[1:]))]
    assert upsets and [(a, b) for a, b, _ in judge.log[20:20 + len(upsets)]] == upsets  # next, their other order
    assert res.rounds <= 6 and res.calls <= 100
    tight = ByPrompt(7, False)  # a cap of the plan's own rounds leaves none to spare: no re-ask of the first round
    rerank("q", cs, comparator=tight, max_rounds=4, **kw)
    assert tight.log[:20] == first
    assert not {frozenset(p[:2]) for p in tight.log[20:40]} & {frozenset(p[:2]) for p in first}
    fair = Fair(7)  # a judge that reads the passages never looks positional: nothing is re-asked
    assert rerank("q", cs, comparator=fair, max_rounds=6, **kw).order == \
        rerank("q", cs, comparator=fair, max_rounds=6, **{**kw, "oracle": "randomized"}).order


def test_rerank_many_plans_a_positional_judge_with_both_orders_from_the_first_round():
    cs = cands(40)
    judge = ByPrompt(7, False)
    kw = dict(ranker="budget_depth", oracle="adaptive", top_k=5, seed=3, budget=200, max_rounds=6)
    first, later = rerank_many([("q0", cs), ("q1", cs)], comparator=judge, max_active=1, **kw)
    assert first.judge.first_slot_rate > 0.75
    asked = slot_orders(judge.log[first.calls:])
    assert later.calls == len(judge.log) - first.calls and all(len(orders) == 2 for orders in asked.values())
    assert later.calls <= 200 and later.rounds <= 6


def test_an_auto_instance_is_resolved_as_the_name_is():
    from activeprp_core.rankers.auto import Auto

    cs = cands(20)
    kw = dict(oracle="adaptive", budget=50, max_rounds=6, top_k=3, seed=1)
    by_name = rerank("q", cs, comparator=ByPrompt(7, False), ranker="auto", **kw)
    by_instance = rerank("q", cs, comparator=ByPrompt(7, False), ranker=Auto(), **kw)
    assert by_instance.ranker == by_name.ranker != "auto"
    assert (by_instance.order, by_instance.calls, by_instance.rounds) == (by_name.order, by_name.calls, by_name.rounds)


@pytest.mark.parametrize("ranker", sorted(RANKERS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([0, 2, 9, 30, 60]), budget=st.sampled_from([0, 1, 10, 45, 150, None]),
       max_rounds=st.sampled_from([0, 1, 2, 3, 7, None]), soft=st.booleans(), bias=st.sampled_from([0.0, 1.5]),
       seed=st.integers(0, 999))
def test_adaptive_stays_within_budget_and_max_rounds(ranker, n, budget, max_rounds, soft, bias, seed):
    cs, labels = make_case(n, seed=seed % 31)
    comp = SimulatedComparator(labels, seed=seed, hard=not soft, position_bias=bias, pair_noise=0.5)
    res = rerank("q", cs, comparator=comp, ranker=ranker, oracle="adaptive", budget=budget, max_rounds=max_rounds,
                 top_k=5, seed=seed)
    assert sorted(res.order) == list(range(n))
    assert budget is None or res.calls <= budget
    assert max_rounds is None or res.rounds <= max_rounds
    assert res.comparisons <= res.calls <= 2 * res.comparisons
    assert res.judge.answers == res.calls


def test_rerank_many_carries_the_judges_answers_to_later_queries():
    cs, labels = make_case(30, seed=3)
    comp = SimulatedComparator(labels, seed=0, hard=False, temperature=0.5)
    reqs = [("q", cs)] * 3
    kw = dict(ranker="mohajer", oracle="randomized", top_k=5, budget=None)
    many = list(rerank_many(reqs, comparator=comp, max_active=1, **kw))
    solo = rerank("q", cs, comparator=comp, **kw)
    assert many[0].judge == solo.judge and many[0].order == solo.order  # the first query starts from nothing
    assert [r.judge.answers for r in many] == [r.calls for r in many]  # per query, never the running total
    pool = JudgeTally()
    first = Reranking("q", cs, prior_answers=pool, ranker="mohajer", top_k=5, budget=None)
    drive(first, comp)
    later = Reranking("q", cs, prior_answers=pool, ranker="mohajer", top_k=5, budget=None)
    assert later.answers.margin == pool.margin() > 0  # the gate starts from the earlier query's answers
    assert pool.answers == first.result().judge.answers


@pytest.mark.parametrize("oracle", ["randomized", "adaptive"])
def test_rerank_many_without_carrying_the_judge_equals_rerank_of_each_query(oracle):
    cs, labels = make_case(30, seed=3)
    comp = SimulatedComparator(labels, seed=0, hard=False, temperature=0.5, position_bias=1.0, pair_noise=0.5)
    kw = dict(ranker="mohajer", oracle=oracle, top_k=5, budget=80)
    reqs = [(f"q{i}", cs[i:] + cs[:i]) for i in range(4)]
    solo = [rerank(q, c, comparator=comp, **kw) for q, c in reqs]
    alone = list(rerank_many(reqs, comparator=comp, carry_judge=False, **kw))
    carried = list(rerank_many(reqs, comparator=comp, **kw))
    assert [(r.order, r.calls) for r in alone] == [(r.order, r.calls) for r in solo]
    assert [(r.order, r.calls) for r in carried[1:]] != [(r.order, r.calls) for r in solo[1:]]


def test_pooled_stats_weight_by_answers():
    a, b = JudgeStats(10, 1.0, None, 0.0, 0.5), JudgeStats(30, 0.5, 0.2, 1.0, 0.1)
    p = pooled([a, None, b, JudgeStats()])
    assert p.answers == 40 and p.first_slot_rate == pytest.approx(0.625) and p.flip_rate == pytest.approx(0.2)
    assert p.soft_rate == pytest.approx(0.75) and p.mean_confidence == pytest.approx(0.2)
    assert pooled([]) == JudgeStats() and "answers=40" in p.summary()


def test_adaptive_is_registered_and_plans_as_one_call():
    o = get_oracle("adaptive")
    assert isinstance(o, AdaptiveOracle) and o.calls_per_pair == 1 and "adaptive" in ORACLES
    assert o.prompts(1, 2, lambda p: False, random.Random(0)) in ([(1, 2)], [(2, 1)])
    assert o.reask(1, 2, {(1, 2): 1.0}) == [] and o.reask(1, 2, {(1, 2): 0.2}) == [(2, 1)]  # upset: 2 preferred
    assert o.reask(1, 2, {(2, 1): 0.7}) == [(1, 2)] and o.reask(1, 2, {(2, 1): 0.3}) == []
    assert o.reask(1, 2, {(1, 2): 0.5}) == [] and o.reask(1, 2, {(1, 2): 1.0, (2, 1): 0.0}) == []
    consistent = Answers()
    for k in range(CONSISTENT_PAIRS):  # upsets the other order confirmed: nothing left to learn from re-asks
        consistent.record((2 * k + 1, 2 * k), 1.0)
        consistent.record((2 * k, 2 * k + 1), 0.0)
    assert consistent.pool.consistent and o.reask(100, 101, {**consistent, (100, 101): 0.0}) == [(101, 100)]
    consistent[(100, 101)] = 0.0
    assert o.reask(100, 101, consistent) == []


@pytest.mark.parametrize("oracle", ["single", "randomized"])
@pytest.mark.parametrize("ranker", ["parallel_mohajer", "allpairs", "mohajer", "heapsort"])
def test_one_confidence_level_an_ulp_apart_is_not_gated(ranker, oracle):
    """A judge that answers with one confidence, P(A) = e^a / (e^a + e^b) when it prefers A and the same
    expression with the logprobs swapped when it prefers B: the two confidences differ by an ulp, which must not
    turn the answers for one slot into ties. The soft answers rank exactly as the same answers binarized."""
    high = math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.4))
    low = math.exp(-2.4) / (math.exp(-0.1) + math.exp(-2.4))
    assert abs(low - 0.5) < abs(high - 0.5)  # the float fact this test is about
    tally = JudgeTally()
    for p in [high] * 80 + [low] * 20:
        tally.record(p)
    assert gate(low, tally.margin()) == 0.0 and gate(high, tally.margin()) == 1.0
    cands, labels = make_case(16, seed=3)
    cands = sorted(cands, key=lambda c: -labels[c.id])
    cands = cands[5:6] + cands[:5] + cands[6:]  # a nearly right prior: "B" answers (upsets) are rare

    class OneLevel(SimulatedComparator):
        def compare(self, query, pairs):
            return [high if p == 1.0 else low for p in super().compare(query, pairs)]

    kw = dict(ranker=ranker, oracle=oracle, budget=60, top_k=5, seed=3)
    soft = rerank("q", cands, comparator=OneLevel(labels), **kw)
    hard = rerank("q", cands, comparator=SimulatedComparator(labels), **kw)
    assert soft.order == hard.order and soft.judge.soft_rate == 1.0


def test_a_windowed_tally_gates_on_the_last_window_of_soft_answers_and_holds_no_more():
    """``JudgeTally(window=W)``: the margin is the quantile of the last W soft first-ask confidences (hard answers
    and re-asks count in the stats, not in the sample), and the sorted sample never holds more than W (review
    s68j: the record ``rerank_many`` carries held every soft answer of the run)."""
    rng, window = random.Random(5), 64
    tally, whole = JudgeTally(window=window), JudgeTally(window=None)
    sample = []
    for i in range(2000):
        drift = i / 4000  # the judge grows more confident: an old sample would gate too much
        p = rng.choice([0.0, 1.0]) if i % 7 == 0 else 0.5 + rng.choice([-1, 1]) * (drift + rng.random() * 0.25)
        reask = i % 11 == 0
        tally.record(p, sample=not reask)
        whole.record(p, sample=not reask)
        if 0.0 < p < 1.0 and not reask:
            sample.append(abs(p - 0.5))
        recent = sorted(sample[-window:])
        assert len(tally.soft_confidences) == len(recent) <= window
        expected = recent[min(len(recent) - 1, int(GATE_QUANTILE * len(recent)))] if len(recent) >= MIN_ANSWERS else 0
        assert tally.margin() == expected
    assert tally.stats() == whole.stats()  # the counts are over every answer
    assert tally.margin() > whole.margin()  # the window follows the drift; the whole record lags behind it
    assert JudgeTally().window == MARGIN_WINDOW  # the default, a rerank's and rerank_many's
    for bad, error in [(0, ValueError), (-3, ValueError), (True, TypeError), (1.5, TypeError), ("64", TypeError)]:
        with pytest.raises(error, match="window"):
            JudgeTally(window=bad)


def _soft_requests(n_queries, n=24):
    cs, labels = make_case(n, seed=6)
    comp = SimulatedComparator(labels, seed=1, hard=False, temperature=0.5, pair_noise=0.3)
    return [(f"q{i}", cs[i:] + cs[:i]) for i in range(n_queries)], comp


def _tallies(monkeypatch, window):
    """Every ``JudgeTally`` the engine makes from now on (a rerank's own, ``rerank_many``'s carried one) keeps
    ``window`` soft answers; returns the list they are added to."""
    import activeprp_core.judging as judging
    import activeprp_core.many as many

    made = []

    class Sized(JudgeTally):
        def __init__(self):
            super().__init__(window=window)
            made.append(self)

    monkeypatch.setattr(judging, "JudgeTally", Sized)
    monkeypatch.setattr(many, "JudgeTally", Sized)
    return made


def test_rerank_many_carries_at_most_a_window_of_soft_answers(monkeypatch):
    """The record ``rerank_many`` carries (and each query's own) keeps the last ``window`` soft answers'
    confidences, not every one of the run (review s68j: memory and the cost per query grew with every query)."""
    made = _tallies(monkeypatch, 50)
    reqs, comp = _soft_requests(6)
    results = list(rerank_many(reqs, comparator=comp, ranker="mohajer", oracle="randomized", budget=None, top_k=5,
                               max_active=2))
    carried = made[0]  # made first, before any query's
    assert carried.answers == sum(r.calls for r in results) and carried.soft > 50  # randomized: no re-asks
    assert len(carried.soft_confidences) == 50 and all(len(t.soft_confidences) <= 50 for t in made)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_below_the_window_reranks_decide_as_with_the_whole_record(monkeypatch, seed):
    """Below ``MARGIN_WINDOW`` soft answers, the windowed record decides as the whole one did (``window=None``,
    the algorithm before the window): a lone rerank and a ``rerank_many`` (every committed benchmark's stay below
    it)."""
    reqs, comp = _soft_requests(5)
    kw = dict(comparator=comp, ranker="auto", oracle="auto", budget=60, top_k=5, seed=seed)
    windowed = list(rerank_many(reqs, max_active=2, **kw)) + [rerank(*reqs[0], **kw)]
    lone = dict(kw, ranker="allpairs", oracle="randomized", budget=None)  # 276 answers in one rerank
    windowed.append(rerank(*reqs[1], **lone))
    whole = _tallies(monkeypatch, None)
    assert whole == []
    old = list(rerank_many(reqs, max_active=2, **kw)) + [rerank(*reqs[0], **kw), rerank(*reqs[1], **lone)]
    assert [(r.order, r.calls, r.ties) for r in windowed] == [(r.order, r.calls, r.ties) for r in old]
    assert any(r.ties for r in old) and whole  # the gate was at work, on the whole records
