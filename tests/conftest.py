import random

import pytest

from activeprp_core import Candidate, SimulatedComparator


def make_case(n: int, seed: int = 0, dup_every: int = 0):
    """n candidates with distinct graded labels (a strict total order) in a shuffled prior order.

    With ``dup_every`` > 0, every dup_every-th candidate repeats the previous one's text and id.
    """
    rng = random.Random(seed)
    values = rng.sample(range(10 * n + 10), n)
    cands, labels = [], {}
    for i, v in enumerate(values):
        if dup_every and i and i % dup_every == 0:
            prev = cands[-1]
            cands.append(Candidate(prev.id, prev.text, {"pos": i}))
            continue
        cands.append(Candidate(f"d{i}", f"passage {i}", {"pos": i}))
        labels[f"d{i}"] = v
    return cands, labels


def true_top(cands, labels, k):
    return sorted(range(len(cands)), key=lambda i: -labels[cands[i].id])[:k]


@pytest.fixture
def case100():
    cands, labels = make_case(100, seed=1)
    return cands, labels, SimulatedComparator(labels)
