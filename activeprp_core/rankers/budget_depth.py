"""A rerank depth planned from the budget: ``BudgetDepth``."""

from __future__ import annotations

from dataclasses import replace

from .base import RankContext, Ranker, Schedule, beats, complete
from .mohajer import MohajerBubble
from .parallel import Evidence, ParallelMohajer, confirm

#: The calls a planned question costs with a one-call oracle: one call, and the other slot order for at most
#: half of the questions (``adaptive`` re-asks the upsets, answers that prefer the worse first-stage rank, at most
#: half of them for a judge that agrees with the first stage at least as often as not; under a round cap
#: ``parallel_mohajer`` spends its spare calls on both orders of the pairs that decide the top-K instead).
CALLS_PER_QUESTION = 1.5
#: The shallowest plan has this many candidates per group of Mohajer's tournaments (K groups, so ``4 * K``
#: candidates): two bracket levels per group. See ``BudgetDepth``.
MIN_GROUP = 4

_SIZES: dict[tuple[str, int, int], tuple[int, int]] = {}


def plan_size(ranker: Ranker, n: int, k: int) -> tuple[int, int]:
    """``(questions, rounds)`` of ``ranker``'s whole plan over ``n`` candidates for the top ``k`` when every answer
    agrees with the first stage (the lower candidate index wins), with no cap: the distinct unordered pairs it
    asks, and the rounds that ask at least one of them. Computed once per (ranker, n, k) by running the ranker's
    schedule; a judge that disagrees with the first stage makes the plan ask more."""
    key = (repr(ranker), n, k)
    if key not in _SIZES:
        schedule, asked, rounds = ranker.schedule(RankContext(n, k)), set(), 0
        try:
            pairs = next(schedule)
            while True:
                new = {(min(p), max(p)) for p in pairs} - asked
                asked |= new
                rounds += bool(new)
                pairs = schedule.send([float(beats(i, j, None)) for i, j in pairs])
        except StopIteration:
            pass
        _SIZES[key] = (len(asked), rounds)
    return _SIZES[key]


class BudgetDepth(Ranker):
    """Rerank the first stage's top ``d`` candidates, ``d`` planned from the budget, K, N and the round cap; the
    other candidates keep their prior order.

    The plan:

    1. **Plan.** ``mohajer_bubble`` (Mohajer's group tournaments and heap, then BubbleSort over the top 2K; paper
       sec. 4), the *sequential* plan: of the rankers here it asks the fewest questions for a top-K, so it
       reaches the deepest rerank on a budget; or ``parallel_mohajer`` (the same tournaments in parallel rounds,
       a round-robin and placements), the *parallel* plan, where a round cap leaves the sequential plan (40-60
       rounds at N=100) a shallower depth. The plan that reaches the larger depth runs; at the same depth (also
       when no plan fits and both run over the least depth), the one whose questions the budget pays a larger
       share of, the sequential one on a tie.
    2. **Depth.** For each plan, the largest ``d <= N`` whose questions (``plan_size``: the distinct pairs it
       asks when the judge agrees with the first stage) cost at most the budget at ``CALLS_PER_QUESTION`` calls
       per question (the oracle's ``calls_per_pair`` when larger: 2 for ``bidirectional``) and whose rounds fit
       the round cap; at least ``min(N, MIN_GROUP * K)``, since a shallower plan saves few calls (the top-K merge,
       about K**2 / 2 questions, does not shrink with the depth). Depths are whole strides of the K groups
       (multiples of K) for the sequential plan and whole bracket levels (``K * 2**L``) for the parallel one: a
       level takes one round whatever its size. No budget: all N.
    3. **Calls left** once the plan is complete (the judge agreed with the first stage more often than planned,
       or the plan covers all N): pairs answered in one slot order are asked in both orders, those of a top-K
       item first, then the others by their better rank, and the top-K is re-decided over the evidence
       (``parallel.confirm``); ``parallel_mohajer`` confirms the pairs of its top-K itself.

    So the depth grows with the budget up to N, and the budget beyond the complete plan over N confirms the
    top-K. Why a budget-planned depth: a plan the budget cuts short leaves its later candidates in prior order,
    and a deeper rerank than the budget completes spends calls on candidates it cannot place; a fixed depth fits
    one first stage only. The evidence (judges of several strengths, biases and first stages) is in
    docs/judges.md.

    Args:
        sequential: the plan without a round cap (default ``MohajerBubble()``).
        parallel: the plan under a round cap (default ``ParallelMohajer()``; it confirms the top-K itself).

    Output: a permutation of ``range(N)``: the plan's order of the top ``d``, then the rest in prior order.
    ``plan(ctx)`` says which ranker and depth a query gets.

    Raises:
        TypeError: ``sequential`` or ``parallel`` not a ``Ranker``.
    """

    name = "budget_depth"
    plans_rounds = True  # under a round cap the parallel plan fills the cap (no re-asks)

    def __init__(self, sequential: Ranker | None = None, parallel: Ranker | None = None) -> None:
        for name, inner in (("sequential", sequential), ("parallel", parallel)):
            if inner is not None and not isinstance(inner, Ranker):
                raise TypeError(f"{name} must be a Ranker instance (e.g. get_ranker('mohajer')), "
                                f"got {type(inner).__name__}")
        self.sequential = sequential or MohajerBubble()
        self.parallel = parallel or ParallelMohajer()

    def plan(self, ctx: RankContext) -> tuple[Ranker, int]:
        """``(ranker, depth)`` for this query, from ``ctx.caps`` (calls and rounds left) at the start (see the class
        docstring)."""
        n, k = ctx.n, max(ctx.top, 1)
        calls, rounds = ctx.caps.calls_left, ctx.caps.rounds_left
        cost = max(CALLS_PER_QUESTION, ctx.calls_per_pair)
        least = min(n, MIN_GROUP * k)
        options = []
        for rank, (inner, depths) in enumerate(((self.sequential, [*range(k, n, k), n]),
                                               (self.parallel, [*(k << lv for lv in range(n.bit_length())), n]))):
            size = {d: plan_size(inner, d, k) for d in depths if least <= d <= n}
            if rounds is not None and size[least][1] > rounds and rank == 0:
                continue  # the round cap leaves the sequential plan no depth at all
            fits = [d for d, (questions, steps) in size.items() if (calls is None or questions * cost <= calls)
                    and (rounds is None or steps <= rounds)]
            depth = max(fits, default=least)
            paid = 1.0 if calls is None else min(1.0, calls / (size[depth][0] * cost or 1))
            options.append((depth, paid, -rank, inner))
        depth, _, _, inner = max(options, key=lambda o: o[:3])
        return inner, depth

    def schedule(self, ctx: RankContext) -> Schedule:
        inner, depth = self.plan(ctx)
        sub = replace(ctx, n=depth)
        if inner is self.parallel:
            order = yield from inner.schedule(sub)
        else:
            ev = Evidence()
            order = yield from ev.record(inner.schedule(sub))
            if ctx.calls_per_pair == 1:  # the top-K's pairs first, then the others by their better rank
                order = yield from confirm(sub, ev, order, lambda: ev.record(inner.schedule(sub)), reach=depth)
        return complete(order, ctx.n)
