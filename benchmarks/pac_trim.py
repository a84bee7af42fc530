"""PAC+Bubble's cut of its winner sets' union to the K best prior ranks (the project's, after the reference code;
the paper does not describe it): with a perfect judge, no budget, N=100, K=10 and the true top 10 placed at random
prior ranks inside the pool (the prior top 30), how often is the output's top 10 the true top 10?

Run: python benchmarks/pac_trim.py > benchmarks/results/pac_trim/README.md
"""

from __future__ import annotations

import random

from activeprp_core import Candidate, SimulatedComparator, rerank

N, K, TRIALS = 100, 10, 200


def trial(seed: int) -> tuple[bool, bool]:
    """Whether pac_bubble's top K is the true top K (as a set, in order) on trial ``seed``."""
    rng = random.Random(seed)
    at = set(rng.sample(range(3 * K), K))  # prior ranks of the true top K, all in the pool
    top, rest = iter(rng.sample(range(1000, 2000), K)), iter(rng.sample(range(1000), N - K))
    strength = [next(top) if p in at else next(rest) for p in range(N)]
    result = rerank("q", [Candidate(f"d{i}", "") for i in range(N)], ranker="pac_bubble", oracle="randomized",
                    comparator=SimulatedComparator({f"d{i}": v for i, v in enumerate(strength)}), budget=None,
                    top_k=K, seed=seed)
    truth = sorted(range(N), key=lambda i: -strength[i])[:K]
    return set(result.order[:K]) == set(truth), result.order[:K] == truth


if __name__ == "__main__":
    runs = [trial(s) for s in range(TRIALS)]
    print(f"# PAC+Bubble with a perfect judge, the true top {K} inside its pool\n\nN={N}, K={K}, no budget, "
          f"{TRIALS} trials (`benchmarks/pac_trim.py`).\n")
    print(f"- top {K} exact as a set: {sum(s for s, _ in runs)}/{TRIALS}")
    print(f"- top {K} exact in order: {sum(o for _, o in runs)}/{TRIALS}")
