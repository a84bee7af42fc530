"""``auto``: the paper's practitioner recipe (Active Learners as Efficient PRP Rerankers, section 7)."""

from __future__ import annotations

import math

from .base import RankContext, Ranker, Schedule
from .mohajer import Mohajer
from .sorting import HeapSort, QuickSort


class Auto(Ranker):
    """Pick a ranker from the budget, the oracle's cost per comparison ``c`` and the sizes N, K.

    - warm-up = c * (N - K): the calls Mohajer's group tournaments need before it can place anything
      (90 randomized / 180 bidirectional at N=100, K=10; the paper calls it "about K x K" and shows Mohajer at
      ~30 NDCG@10 below it with the bidirectional oracle).
    - refine = c * (N + 2 K ceil(log2 N)): roughly what a top-K HeapSort needs to finish (measured ~245
      randomized / ~432 bidirectional at N=100, K=10).

    Rule: B < warm-up -> ``quicksort`` (the best sorting baseline at B=100-150 in the paper);
    warm-up <= B < refine -> ``mohajer``; B >= refine or unlimited -> ``heapsort`` ("sorting catches up
    as global refinement pays off"). Ties at the thresholds go to the later choice.
    """

    name = "auto"

    def choose(self, ctx: RankContext) -> Ranker:
        n, k, c = ctx.n, ctx.top, ctx.calls_per_pair
        warm_up = c * (n - k)
        refine = c * (n + 2 * k * math.ceil(math.log2(max(n, 2))))
        if ctx.budget is None or ctx.budget >= refine:
            return HeapSort()
        if ctx.budget >= warm_up:
            return Mohajer()
        return QuickSort()

    def schedule(self, ctx: RankContext) -> Schedule:
        return (yield from self.choose(ctx).schedule(ctx))
