"""PAC+Bubble: anchor-based best-K selection (Agarwal, Khanna, Patil, AISTATS 2022, "PAC top-k identification
under SST in limited rounds"), as adapted in Active Learners as Efficient PRP Rerankers (section 4): anchors
and a candidate pool from the zero-cost prior, then BubbleSort of the selected K."""

from __future__ import annotations

from ..budget import check_count
from .base import RankContext, Ranker, Schedule, beats, bubble_passes, complete


class PACBubble(Ranker):
    """Best-K by winner sets against prior anchors, then BubbleSort.

    1. A = max(3, K // 2) anchors at prior ranks 0, N/A, 2N/A, ...; pool = the top K*m by prior (m = 3).
    2. One parallel round: every pool member against every anchor. W[a] = pool members that beat anchor a,
       plus a itself when a is in the pool (N=100, K=10: 5 x 30 - overlap = 148 comparisons).
    3. Anchors by |W[a]| ascending (strongest anchor first); union their winner sets until >= K members;
       keep the K best by prior rank (if the union stays short, fill from the pool by prior rank).
    4. BubbleSort the K (K passes). Output: those K, then everything else in prior order.

    Known limits (kept on purpose): only the top K*m by prior can be selected (the paper's pool); with an
    exhausted budget the winner sets follow the prior and the output is the prior order. And the cut of step 3
    to the K best prior ranks is the reference code's, not the paper's (section 4 and appendix A describe the
    anchors, the winner sets and their greedy union, no cut): it can keep an anchor, or any member, that a
    dropped member beat. With a perfect judge, no budget, N=100, K=10 and the true top 10 inside the pool, the
    top 10 is exact in 35 of 200 trials (``benchmarks/results/pac_trim/``).

    Args:
        pool_multiplier: m, the pool is the prior top K*m (default 3).

    Raises:
        TypeError: ``pool_multiplier`` not an int (any integer type; bools refused). ValueError: it is < 1.
    """

    name = "pac_bubble"

    def __init__(self, pool_multiplier: int = 3) -> None:
        self.pool_multiplier = check_count(pool_multiplier, "pool_multiplier", minimum=1)

    def schedule(self, ctx: RankContext) -> Schedule:
        n, k = ctx.n, ctx.top
        if n == 0:
            return []
        n_anchors = min(n, max(3, k // 2))
        anchors = sorted({(t * n) // n_anchors for t in range(n_anchors)})
        pool = list(range(min(n, k * self.pool_multiplier)))
        pairs = [(x, a) for a in anchors for x in pool if x != a]
        outcomes = yield pairs
        won = {pair: beats(*pair, o) for pair, o in zip(pairs, outcomes)}
        winners = {a: {x for x in pool if x == a or won.get((x, a), False)} for a in anchors}
        selected: set[int] = set()
        for a in sorted(anchors, key=lambda a: (len(winners[a]), a)):
            selected |= winners[a]
            if len(selected) >= k:
                break
        chosen = sorted(selected)[:k]
        chosen += [x for x in pool if x not in selected][: k - len(chosen)]
        chosen.sort()
        yield from bubble_passes(chosen, k, ctx.caps)
        return complete(chosen, n)
