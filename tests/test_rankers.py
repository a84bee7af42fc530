"""activeprp_core.rankers run by hand (no engine): each ranker's schedule against a perfect judge, and the shared
building blocks (relay, parallel, match, Bracket, bubble_passes with the caps view)."""

import random

import pytest

from activeprp_core.budget import BudgetView
from activeprp_core.rankers import RANKERS, RankContext, get_ranker
from activeprp_core.rankers.base import Bracket, bubble_passes, match, parallel, relay
from activeprp_core.rankers.depth import DEFAULT_DEPTH, Depth, ParallelMohajerDepth

N, K = 30, 5
STRENGTH = random.Random(4).sample(range(1000), N)  # candidate i's true strength (prior order is random)
EXACT = sorted(set(RANKERS) - {"pac_bubble"})  # pac_bubble can only pick from the prior's top K*3


def answer(pairs):
    return [1.0 if STRENGTH[i] > STRENGTH[j] else 0.0 for i, j in pairs]


def run(schedule):
    """Drive a schedule with the perfect judge; returns (its value, rounds, pairs asked)."""
    rounds = asked = 0
    try:
        pairs = next(schedule)
        while True:
            pairs = list(pairs)  # a lazy round is read whole here (no caps)
            rounds, asked = rounds + 1, asked + len(pairs)
            pairs = schedule.send(answer(pairs))
    except StopIteration as stop:
        return stop.value, rounds, asked


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
