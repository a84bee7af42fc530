"""Calls and rounds of every ranker x oracle (N=100, K=10, unlimited budget, perfect comparator), and NDCG@10
of mohajer vs bubblesort on a synthetic noisy case at several budgets.

Run: python benchmarks/core_counts.py
"""

from __future__ import annotations

import random
import statistics

from activeprp_cli.metrics import mean_ndcg_at_k, ranking_to_run
from activeprp_core import Candidate, SimulatedComparator, rerank
from activeprp_core.oracles import ORACLES
from activeprp_core.rankers import RANKERS

N, K = 100, 10


def synthetic_query(seed: int) -> tuple[list[Candidate], dict[str, int]]:
    """100 candidates with TREC-like graded labels (70% 0, 15% 1, 10% 2, 5% 3) in a prior order that is
    the labels plus Gaussian noise (sd 1.5 grades), i.e. a moderately informative first stage."""
    rng = random.Random(seed)
    grades = rng.choices([0, 1, 2, 3], weights=[70, 15, 10, 5], k=N)
    ids = [f"q{seed}d{i}" for i in range(N)]
    prior = sorted(range(N), key=lambda i: -(grades[i] + rng.gauss(0, 1.5)))
    return [Candidate(ids[i], "") for i in prior], {ids[i]: grades[i] for i in range(N)}


def counts_table() -> None:
    rng = random.Random(1)
    values = rng.sample(range(10 * N), N)
    cands = [Candidate(f"d{i}", "") for i in range(N)]
    labels = {f"d{i}": v for i, v in enumerate(values)}
    print("| ranker | oracle | calls | comparisons | rounds |\n|---|---|---:|---:|---:|")
    for ranker in RANKERS:
        for oracle in ORACLES:
            r = rerank("q", cands, ranker=ranker, oracle=oracle, comparator=SimulatedComparator(labels), budget=None)
            print(f"| {ranker} | {oracle} | {r.calls} | {r.comparisons} | {r.rounds} |")


def budget_table(queries: int = 40) -> None:
    knobs = dict(strength=1.0, doc_noise=0.5, pair_noise=0.8, position_bias=0.4)
    cases = [synthetic_query(s) for s in range(queries)]
    qrels = {str(q): labels for q, (_, labels) in enumerate(cases)}
    prior = {str(q): ranking_to_run([c.id for c in cands]) for q, (cands, _) in enumerate(cases)}
    flip = statistics.mean(SimulatedComparator(lab, **knobs).flip_rate([c.id for c in cands[:30]])
                           for cands, lab in cases[:5])
    print(f"\nsynthetic: {queries} queries, knobs {knobs}, flip rate {flip:.3f}, "
          f"prior NDCG@10 {mean_ndcg_at_k(qrels, prior):.4f}")
    print("| ranker | oracle | B=100 | B=200 | B=300 | B=500 |\n|---|---|---:|---:|---:|---:|")
    for ranker in ("mohajer", "bubblesort"):
        for oracle in ("randomized", "bidirectional"):
            cells = []
            for budget in (100, 200, 300, 500):
                run = {}
                for q, (cands, labels) in enumerate(cases):
                    r = rerank("q", cands, ranker=ranker, oracle=oracle,
                               comparator=SimulatedComparator(labels, seed=q, **knobs), budget=budget, seed=q)
                    run[str(q)] = ranking_to_run([c.id for c in r.ranked])
                cells.append(f"{mean_ndcg_at_k(qrels, run):.4f}")
            print(f"| {ranker} | {oracle} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    counts_table()
    budget_table()
