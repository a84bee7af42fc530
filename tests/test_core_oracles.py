"""activeprp_core.oracles: how one pair question becomes ordered prompts, and how answers become an outcome."""

import random

import pytest

from activeprp_core.oracles import (
    BidirectionalOracle,
    BothOrders,
    RandomizedDirectionOracle,
    SingleDirectionOracle,
    get_oracle,
)


def nothing_known(prompt):
    return False


def test_single_asks_the_order_given_and_reuses_either_order():
    o = SingleDirectionOracle()
    assert o.calls_per_pair == 1 and o.prompts(2, 5, nothing_known, random.Random(0)) == [(2, 5)]
    assert o.prompts(2, 5, lambda p: p == (5, 2), random.Random(0)) == []
    assert o.outcome(2, 5, {(5, 2): 1.0}) == 0.0
    assert o.outcome(2, 5, {(2, 5): 0.8}) == 1.0  # a soft answer is a whole win
    assert o.outcome(2, 5, {}) is None and o.outcome(2, 5, {(2, 5): None}) is None


def test_randomized_draws_the_slot_order_from_the_seeded_stream_and_maps_the_answer_back():
    o = RandomizedDirectionOracle()
    draws = [o.prompts(1, 2, nothing_known, rng)[0] for rng in [random.Random(s) for s in range(200)]]
    assert set(draws) == {(1, 2), (2, 1)} and 70 < draws.count((1, 2)) < 130
    again = [o.prompts(1, 2, nothing_known, rng)[0] for rng in [random.Random(s) for s in range(200)]]
    assert draws == again  # a pure function of the stream
    assert o.outcome(1, 2, {(2, 1): 0.0}) == 1.0  # the reversed prompt preferred slot B = candidate 1


@pytest.mark.parametrize("p1, p2, outcome", [(1.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 1.0, 0.5), (0.0, 0.0, 0.5),
                                             (0.5, 0.0, 0.5), (0.9, 0.2, 1.0)])
def test_bidirectional_rule(p1, p2, outcome):  # consistent answers: a whole win (no margin: a plain dict)
    o = BidirectionalOracle()
    assert o.calls_per_pair == 2
    assert o.prompts(3, 4, nothing_known, random.Random(0)) == [(3, 4), (4, 3)]
    assert o.prompts(3, 4, lambda p: p == (3, 4), random.Random(0)) == [(4, 3)]
    assert o.outcome(3, 4, {(3, 4): p1, (4, 3): p2}) == outcome
    assert o.outcome(3, 4, {(3, 4): p1}) is None


@pytest.mark.parametrize("name", ["single", "randomized", "bidirectional"])
def test_both_orders_question_costs_only_the_missing_orders_under_every_oracle(name):
    o, rng = get_oracle(name), random.Random(0)
    q = BothOrders(0, 1)
    assert q == (0, 1) and isinstance(q, tuple)
    assert o.question(q, nothing_known, rng) == [(0, 1), (1, 0)]
    assert o.question(q, lambda p: p == (1, 0), rng) == [(0, 1)]
    assert o.question(q, lambda p: True, rng) == []
    assert o.outcome(0, 1, {(0, 1): 1.0, (1, 0): 1.0}) == 0.5  # both orders read by the bidirectional rule


def test_question_of_a_plain_pair_is_the_oracle_prompts():
    assert get_oracle("single").question((4, 2), nothing_known, random.Random(0)) == [(4, 2)]


def test_get_oracle_names_and_errors():
    inst = BidirectionalOracle()
    assert get_oracle(inst) is inst and get_oracle("randomized").name == "randomized"
    with pytest.raises(ValueError, match="oracle"):
        get_oracle("nope")
    with pytest.raises(TypeError):
        get_oracle(3)


def test_both_orders_is_exported_for_rankers():
    assert BothOrders(3, 1) == (3, 1) and isinstance(BothOrders(3, 1), tuple)
