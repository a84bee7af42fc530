"""Sorting baselines for PRP: BubbleSort@k, sliding window, HeapSort, QuickSort (top-k) and all-pairs."""

from __future__ import annotations

from .base import Heap, RankContext, Ranker, Schedule, beats, bubble_passes, complete, parallel


class BubbleSort(Ranker):
    """BubbleSort@k, window 2, as in llm-rankers / Setwise (Zhuang et al. SIGIR 2024) with the pair cache
    of Wisznia et al. (ACL 2025): K bottom-up passes, each starting just below the lowest swap of the previous
    one; a pass without swaps ends the sort. Bound sum_{p<K}(N-1-p) comparisons (945 at N=100, K=10).
    Strictly sequential: one comparison per round. Exhausted budget: the current array."""

    name = "bubblesort"

    def schedule(self, ctx: RankContext) -> Schedule:
        arr = list(range(ctx.n))
        yield from bubble_passes(arr, ctx.top, ctx.caps)
        return arr


class SlidingWindow(Ranker):
    """PRP-Sliding-k (Qin et al., NAACL Findings 2024): K bottom-up passes of adjacent comparisons, each from
    the bottom of the list. With the pair cache on it asks the same calls as ``bubblesort`` (the repeated
    comparisons are cache hits); with the cache off it pays for every repetition, as the original does.
    Exhausted budget: the current array."""

    name = "sliding_window"

    def schedule(self, ctx: RankContext) -> Schedule:
        arr = list(range(ctx.n))
        yield from bubble_passes(arr, ctx.top, ctx.caps, skip_settled=False)
        return arr


class HeapSort(Ranker):
    """HeapSort top-k extraction (Qin et al. 2024): a max-heap over the prior order (heapify by parallel
    levels), then K extractions (root out, last leaf up, sift-down). Output: the extracted items, then the
    rest in prior order (the paper's reference returned a reversed partial heap when the budget ran out).
    Exhausted budget: the heap step under way finishes (unknowns by prior rank), then extraction stops."""

    name = "heapsort"

    def schedule(self, ctx: RankContext) -> Schedule:
        heap = Heap(list(range(ctx.n)))
        yield from heap.heapify()
        extracted = []
        for t in range(ctx.top):
            if ctx.caps.exhausted:
                break
            extracted.append(heap.pop_top())
            if t < ctx.top - 1:
                yield from heap.sift_down(0)
        return complete(extracted, ctx.n)


class QuickSort(Ranker):
    """Partial QuickSort for the top-k: partition around a pivot (drawn from the seeded ranker RNG) in one
    parallel round, then recurse into the side that holds the top-k; when the better side is smaller than k,
    sort it completely and the worse side for the remaining places, both in parallel. Output: the sorted
    top-k, then the partitions in their current order (also when the budget runs out: no further partition
    is started)."""

    name = "quicksort"

    def schedule(self, ctx: RankContext) -> Schedule:
        return (yield from self._top(list(range(ctx.n)), ctx.top, ctx))

    def _top(self, items: list[int], k: int, ctx: RankContext) -> Schedule:
        if len(items) <= 1 or k <= 0 or ctx.caps.exhausted:
            return items
        pivot = items[ctx.rng.randrange(len(items))]
        others = [x for x in items if x != pivot]
        outcomes = yield [(x, pivot) for x in others]
        better = [x for x, o in zip(others, outcomes) if beats(x, pivot, o)]
        worse = [x for x, o in zip(others, outcomes) if not beats(x, pivot, o)]
        if len(better) >= k:
            better = yield from self._top(better, k, ctx)
        else:
            better, worse = yield from parallel(
                [self._top(better, len(better), ctx), self._top(worse, k - len(better) - 1, ctx)]
            )
        return better + [pivot] + worse


class AllPairs(Ranker):
    """PRP-Allpair (Qin et al. 2024): every unordered pair once, in one round (bidirectional oracle: both
    orders, N(N-1) calls); score = sum of P(i beats j) over the pairs read, 0.5 for ties and unknowns; order
    by score, ties by prior rank. The pairs are offered lazily, best-prior first: the engine reads them up to the
    first one a cap refuses, so the work is O(N + B) and a cut round covers the top first. With no call cap, a
    ``time_budget`` bounds it: planning stops at an eighth of the time left (``reranking.PLAN_SHARE``), and the
    pairs whose calls the deadline kept from going out are read no further (``Reranking._round``)."""

    name = "allpairs"

    def schedule(self, ctx: RankContext) -> Schedule:
        n = ctx.n
        def every():
            return ((i, j) for j in range(1, n) for i in range(j))

        outcomes = yield every()
        wins = [0.0] * n
        for (i, j), o in zip(every(), outcomes):
            p = 0.5 if o is None else o
            wins[i] += p
            wins[j] += 1.0 - p
        return sorted(range(n), key=lambda i: (-wins[i], i))
