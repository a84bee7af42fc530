"""Mohajer: group tournaments + a heap of champions (Mohajer, Suh, Elmahdy, ICML 2017, "Active learning for
top-K rank aggregation from noisy comparisons"; as used in Active Learners as Efficient PRP Rerankers, sec. 4)."""

from __future__ import annotations

from .base import Bracket, Heap, RankContext, Ranker, Schedule, bubble_passes, complete, parallel


class Mohajer(Ranker):
    """Top-K by group tournaments and a heap of group champions.

    1. K groups strided by prior rank (group g = ranks g, g+K, g+2K, ...), so every group holds a spread of
       prior quality (the 2017 paper splits at random; the paper's reference code strides).
    2. A single-elimination bracket per group; the brackets of all groups run level by level in parallel
       rounds (N=100, K=10: 90 matches in 4 rounds of 50/20/10/10).
    3. A max-heap of the K champions (heapify by parallel levels). K times: output the root; delete it
       bottom-up (the better child moves up, one comparison per level; Wegener 1993) while, in the same
       rounds, the popped champion's group re-selects; the new champion fills the hole and sifts up.
    4. Output: the K popped items in order, then the rest in prior order. When the budget runs out, the
       tournament or heap step under way finishes with unknown matches going to the better prior rank, and
       popping stops: the output is the items popped so far, the current champions in heap order (each won
       its bracket), then the rest in prior order. Never loses a candidate.

    Args:
        reselect: ``"path"`` (default) replays only the matches on the removed champion's path in the fixed
            bracket (<= ceil(log2 Q) matches, the rest from the pair cache); ``"rerun"`` re-runs a fresh
            tournament on the group's remaining members, as the paper's reference code does.
        skip_last_refill: skip the re-selection after the K-th pop, which cannot change the top-K (the
            reference code spends ~9 calls there). Default True.

    Raises:
        ValueError: ``reselect`` neither ``"path"`` nor ``"rerun"``.
    """

    name = "mohajer"

    def __init__(self, reselect: str = "path", skip_last_refill: bool = True) -> None:
        if reselect not in ("path", "rerun"):
            raise ValueError(f"reselect must be 'path' or 'rerun', got {reselect!r}")
        self.reselect = reselect
        self.skip_last_refill = skip_last_refill

    def schedule(self, ctx: RankContext) -> Schedule:
        n, k = ctx.n, ctx.top
        if n == 0:
            return []
        groups = [list(range(g, n, k)) for g in range(k)]
        brackets = [Bracket(members) for members in groups]
        champions = yield from parallel(b.play() for b in brackets)
        group_of = {i: g for g, members in enumerate(groups) for i in members}
        heap = Heap(champions)
        yield from heap.heapify()
        popped: list[int] = []
        for t in range(k):
            if ctx.caps.exhausted:  # further pops would rank by prior alone: the champions' evidence ranks higher
                return complete(popped + heap.items, n)
            top = heap.items[0]
            popped.append(top)
            if t == k - 1 and self.skip_last_refill:
                break
            g = group_of[top]
            groups[g].remove(top)
            hole, new_champion = yield from parallel(
                [heap.promote_hole(), self._reselect(brackets, groups, g, top)]
            )
            yield from heap.fill(hole, new_champion)
        return complete(popped, n)

    def _reselect(self, brackets: list[Bracket], groups: list[list[int]], g: int, removed: int) -> Schedule:
        if self.reselect == "path":
            return (yield from brackets[g].remove(removed))
        brackets[g] = Bracket(groups[g])
        return (yield from brackets[g].play())


class MohajerBubble(Ranker):
    """Mohajer, then BubbleSort polishing of the top-2K prefix (K passes, window 2). The paper (section 4,
    "Ordered outputs") says only that the polish is optional and negligible; the top-2K prefix and K passes follow
    its reference code. The polish costs at most sum_{p<K}(2K-1-p) comparisons (145 for K=10), fewer with the pair
    cache (Mohajer's own matches are reused)."""

    name = "mohajer_bubble"

    def __init__(self, **mohajer_options) -> None:
        self.mohajer = Mohajer(**mohajer_options)

    def schedule(self, ctx: RankContext) -> Schedule:
        order = yield from self.mohajer.schedule(ctx)
        prefix = order[: 2 * ctx.top]
        yield from bubble_passes(prefix, ctx.top, ctx.caps)
        return prefix + order[len(prefix):]
