"""SimulatedComparator (activeprp_core/comparators/simulated.py): its noise model, determinism and ``from_qrels``."""

import itertools
import re

import pytest

from activeprp_core import Candidate, SimulatedComparator, rerank

IDS = [f"d{i}" for i in range(30)]
LABELS = {d: i % 4 for i, d in enumerate(IDS)}


def answers(comp, pairs):
    return comp.compare("q", [(Candidate(a, ""), Candidate(b, "")) for a, b in pairs])


def test_deterministic_per_seed_and_ordered_pair():
    pairs = list(itertools.permutations(IDS[:8], 2))
    noisy = dict(doc_noise=0.5, pair_noise=1.0, position_bias=0.3)
    a = answers(SimulatedComparator(LABELS, seed=1, **noisy), pairs)
    assert a == answers(SimulatedComparator(LABELS, seed=1, **noisy), pairs[::-1])[::-1]
    assert a != answers(SimulatedComparator(LABELS, seed=2, **noisy), pairs)


def test_ids_with_lone_surrogates_get_their_own_stable_draws():
    ids = ["s\ud800", "s\udc80", "s\ufffd"]  # distinct ids stay distinct (not all U+FFFD)
    noisy = dict(doc_noise=0.5, pair_noise=1.0, hard=False)
    comp = SimulatedComparator(dict.fromkeys(ids, 1), **noisy)
    a = answers(comp, list(itertools.permutations(ids, 2)))
    assert len(set(a)) == 6 and a == answers(SimulatedComparator(dict.fromkeys(ids, 1), **noisy),
                                             list(itertools.permutations(ids, 2)))
    # and the default token estimate (the UTF-8 of the prompt) reads their texts as the model gets them
    result = rerank("q\udfff", [Candidate(i, f"text {i}") for i in ids], comparator=comp, budget=4, token_budget=10**4)
    assert result.calls > 0 and sorted(result.order) == [0, 1, 2]


def test_perfect_judge_has_no_order_effects_or_cycles():
    distinct = {d: i for i, d in enumerate(IDS)}
    comp = SimulatedComparator(distinct)
    assert comp.flip_rate(IDS) == 0.0
    for a, b in itertools.combinations(IDS, 2):
        assert answers(comp, [(a, b)]) == [float(distinct[a] > distinct[b])]


def test_position_bias_raises_flip_rate():
    rates = [SimulatedComparator(LABELS, position_bias=b, pair_noise=0.3).flip_rate(IDS) for b in (0.0, 0.5, 2.0)]
    assert rates[0] < rates[1] < rates[2]
    # the flip rate is what the comparator really answers in both orders
    comp = SimulatedComparator(LABELS, position_bias=0.5, pair_noise=0.3)
    pairs = list(itertools.combinations(IDS, 2))
    fwd = answers(comp, pairs)
    bwd = answers(comp, [(b, a) for a, b in pairs])
    assert sum(f == b for f, b in zip(fwd, bwd)) / len(pairs) == pytest.approx(comp.flip_rate(IDS))


def test_pair_noise_makes_cycles():
    comp = SimulatedComparator({d: 0 for d in IDS}, pair_noise=1.0)

    def wins(a, b):
        return answers(comp, [(a, b)])[0] == 1.0 and answers(comp, [(b, a)])[0] == 0.0

    cycles = sum(wins(a, b) and wins(b, c) and wins(c, a) for a, b, c in itertools.permutations(IDS[:12], 3))
    assert cycles > 0


def test_doc_noise_is_persistent_and_soft_mode_agrees_with_hard():
    comp = SimulatedComparator(LABELS, doc_noise=1.0, seed=3)
    assert comp.utility("d5") == comp.utility("d5") != LABELS["d5"]
    soft = SimulatedComparator(LABELS, doc_noise=1.0, pair_noise=0.5, seed=3, hard=False)
    hard = SimulatedComparator(LABELS, doc_noise=1.0, pair_noise=0.5, seed=3)
    pairs = list(itertools.permutations(IDS[:6], 2))
    for p, h in zip(answers(soft, pairs), answers(hard, pairs)):
        assert 0.0 < p < 1.0 and (p > 0.5) == (h == 1.0)
    assert hard.calls == len(pairs)


def test_from_qrels_routes_by_query_text_and_answers_as_the_query_s_own_judge():
    knobs = {"doc_noise": 1.0, "pair_noise": 0.5, "position_bias": 0.3}
    qrels = {"q1": {d: g for d, g in LABELS.items() if g}, "q2": {"d1": 3, "d2": -1}}
    judge = SimulatedComparator.from_qrels(qrels, {"q1": "alpha", "q2": "beta", "q3": "unjudged"}, seed=4, **knobs)
    pairs = [(Candidate(a, ""), Candidate(b, "")) for a, b in itertools.permutations(IDS[:6], 2)]
    for text, labels in (("alpha", LABELS), ("beta", {"d1": 3}), ("unjudged", {})):  # negative grades count as 0
        assert judge.compare(text, pairs) == SimulatedComparator(labels, seed=4, **knobs).compare(text, pairs)
    assert judge.compare("alpha", pairs) != judge.compare("beta", pairs)
    with pytest.raises(ValueError, match="no simulated judge for query 'gamma'"):
        judge.compare("gamma", pairs)
    assert judge.calls == 5 * len(pairs)  # the refused call counted nothing
    by_text = SimulatedComparator.from_qrels({"alpha": qrels["q1"]})  # no queries: the keys are the texts
    assert by_text.compare("alpha", pairs) == SimulatedComparator(LABELS).compare("alpha", pairs)
    with pytest.raises(ValueError, match="queries q1 and q2 have the same text but different qrels"):
        SimulatedComparator.from_qrels({"q1": {"d1": 1}}, {"q1": "same", "q2": "same"})


@pytest.mark.parametrize(("knobs", "error", "says"), [
    ({"hard": "no"}, TypeError, "hard must be a bool, got str"),  # ran as hard=True
    ({"hard": 0}, TypeError, "hard must be a bool, got int"),
    ({"strength": "x"}, TypeError, "strength must be a number, got str"),  # failed late, in compare
    ({"position_bias": True}, TypeError, "position_bias must be a number, got bool"),
    ({"temperature": None}, TypeError, "temperature must be a number > 0, got NoneType"),
    ({"seed": "3"}, TypeError, "seed must be an int, got str"),  # hashed as "3": a realisation of its own
    ({"seed": 1.5}, TypeError, "seed must be an int, got float"),
    ({"doc_noise": float("nan")}, ValueError, "doc_noise must be a finite number >= 0, got nan"),  # answers all 0
    ({"position_bias": float("inf")}, ValueError, "position_bias must be a finite number, got inf"),
    ({"pair_noise": -1}, ValueError, "pair_noise must be a number >= 0, got -1"),
    ({"temperature": 0}, ValueError, "temperature must be a number > 0, got 0"),
])
def test_a_knob_of_the_wrong_type_or_range_is_refused_at_construction(knobs, error, says):
    with pytest.raises(error, match=f"^SimulatedComparator: {re.escape(says)}$"):
        SimulatedComparator(LABELS, **knobs)
    with pytest.raises(error, match=f"^SimulatedComparator: {re.escape(says)}$"):
        SimulatedComparator.from_qrels({"q": LABELS}, **knobs)


def test_knobs_of_the_right_types_are_kept_negative_strength_and_bias_too():
    np = pytest.importorskip("numpy")
    judge = SimulatedComparator(LABELS, strength=-2, position_bias=-0.5, doc_noise=np.float64(0.5), hard=False,
                                seed=np.int64(3))
    assert (judge.strength, judge.position_bias, judge.doc_noise, judge.hard, judge.seed) == (-2, -0.5, 0.5, False, 3)
    assert judge.margin("d1", "d2") == SimulatedComparator(LABELS, strength=-2.0, position_bias=-0.5, doc_noise=0.5,
                                                           seed=3).margin("d1", "d2")


@pytest.mark.parametrize(("labels", "error", "says"), [
    ({"a": "x", "b": "y"}, TypeError, "labels['a'] must be a number, got str"),  # failed in the rerank: "could not
    ([1, 2], TypeError, "labels must be a mapping {candidate id: grade}, got list"),  # convert string to float"
    ({"a": float("nan")}, ValueError, "labels['a'] must be a finite number, got nan"),  # taken, answers garbled
    ({1: 2.0}, TypeError, "labels must have str candidate ids as keys, got int"),
    ({"a": None}, TypeError, "labels['a'] must be a number, got NoneType"),
])
def test_labels_of_the_wrong_shape_or_type_are_refused_at_construction(labels, error, says):
    with pytest.raises(error, match=f"^SimulatedComparator: {re.escape(says)}$"):
        SimulatedComparator(labels)
    with pytest.raises(error, match=re.escape(says.replace("labels", "qrels['q']", 1))):
        SimulatedComparator.from_qrels({"q": labels})
