"""A rerank depth planned from the budget: ``BudgetDepth``."""

from __future__ import annotations

from dataclasses import replace

from ..budget import check_real
from ..oracles import BothOrders
from .base import RankContext, Ranker, Schedule, bubble_passes, complete, plan_size, schedule_size
from .mohajer import MohajerBubble
from .parallel import Evidence, ParallelMohajer, confirm, select

#: The calls a planned question costs with a one-call oracle: one call, and the other slot order for at most
#: half of the questions (``adaptive`` re-asks the upsets, answers that prefer the worse first-stage rank, at most
#: half of them for a judge that agrees with the first stage at least as often as not; under a round cap
#: ``parallel_mohajer`` spends its spare calls on both orders of the pairs that decide the top-K instead).
CALLS_PER_QUESTION = 1.5
#: The calls of a question asked in both slot orders.
BOTH_ORDERS = 2
#: The weight of the first stage's order in ``BudgetDepth``'s final order (its default ``prior_weight``, step 5)
#: for a judge whose winner never flips with the slot order: a candidate's place in the plan's order plus this
#: times its first-stage rank, so 20 first-stage places weigh one place of the plan. Measured:
#: benchmarks/results/budget_depth/prior_weight.md.
PRIOR_WEIGHT = 0.05
#: The shallowest plan has this many candidates per group of Mohajer's tournaments (K groups, so ``4 * K``
#: candidates): two bracket levels per group. See ``BudgetDepth``.
MIN_GROUP = 4


def second_plan_size(sequential: Ranker, n: int, k: int) -> tuple[int, int]:
    """``(questions, rounds)`` that ``parallel.select`` adds after ``sequential``'s whole plan over the same
    evidence, counted as ``plan_size`` counts (every answer agrees with the first stage, no cap)."""
    def both() -> Schedule:
        ctx, ev = RankContext(n, k), Evidence()
        yield from ev.record(sequential.schedule(ctx))
        return (yield from select(ctx, ev))

    total, first = schedule_size(("then parallel", repr(sequential), n, k), both), plan_size(sequential, n, k)
    return total[0] - first[0], total[1] - first[1]


def parallel_depths(plan: Ranker, n: int, k: int, least: int, calls: float | None) -> list[int]:
    """The depths the parallel ``plan`` may take over ``n`` candidates for the top ``k`` with ``calls`` to spend
    (None: no budget): whole bracket levels (``k * 2**L <= n``), and ``n`` itself (a partial level past the
    deepest whole level ``d``) when it is ``least``, when the candidates it adds are at least half of ``d``
    (``2 * n >= 3 * d``), or when ``calls`` pay every question of the plan over all ``n`` in both slot orders.
    Why: a partial level costs a whole round and its questions for a few candidates from the bottom of the first
    stage; below that budget the plan over ``d``, asked in both orders and confirmed, spends most of it (measured:
    benchmarks/results/budget_depth/depth_step.md). See ``BudgetDepth``, step 2."""
    levels = [k << lv for lv in range(n.bit_length()) if k << lv <= n]
    d = levels[-1] if levels else n
    partial = n <= least or 2 * n >= 3 * d or calls is None or pays(plan, n, k, calls, BOTH_ORDERS)
    return levels + ([n] if n not in levels and partial else [])


def pays(plan: Ranker, d: int, k: int, calls: float, cost: float) -> bool:
    """Whether ``calls`` pay every question of ``plan`` over ``d`` candidates for the top ``k`` (``plan_size``) at
    ``cost`` calls each. A budget short of ``d - k`` questions is refused without running the plan: a plan that
    finds the top ``k`` of ``d`` asks at least ``d - k`` questions (each has one loser, and every candidate left
    out of the top ``k`` has lost once), which keeps the first rerank at large N from simulating plans over
    thousands of candidates that no budget pays."""
    return (d - k) * cost <= calls and plan_size(plan, d, k)[0] * cost <= calls


def deepest(plan: Ranker, depths: list[int], k: int, calls: float | None, rounds: int | None,
            cost: float) -> int | None:
    """The largest of ``depths`` whose ``plan`` the ``calls`` pay at ``cost`` calls per question (``pays``; None:
    no budget) and whose rounds fit ``rounds`` (None: no cap); None when none does. Scanned from the deepest, so
    only the depths above the answer are sized."""
    for d in sorted(depths, reverse=True):
        if (calls is None or pays(plan, d, k, calls, cost)) and (rounds is None or plan_size(plan, d, k)[1] <= rounds):
            return d
    return None


def question_cost(ctx: RankContext) -> float:
    """The calls a planned question costs: ``CALLS_PER_QUESTION``, or the oracle's calls per pair when larger."""
    return max(CALLS_PER_QUESTION, ctx.calls_per_pair)


def borda(first: list[int], second: list[int], weight: float = 1.0) -> list[int]:
    """``first`` re-ordered by each item's place in ``first`` plus ``weight`` times its place in ``second`` (the
    Borda count of two rankings of the same items, ``second`` weighed by ``weight``), ties in ``first``'s order."""
    score = {x: weight * r for r, x in enumerate(second)}
    for r, x in enumerate(first):
        score[x] += r
    return sorted(first, key=score.__getitem__)  # stable: ties keep first's order


class BudgetDepth(Ranker):
    """Rerank the first stage's top ``d`` candidates, ``d`` planned from the budget, K, N and the round cap; the
    other candidates keep their prior order.

    The plan (the figures behind each step: docs/judges.md, "The rerank depth at each budget" and "Weighing the
    first stage"; benchmarks/results/budget_depth/):

    1. **Plan.** ``mohajer_bubble`` (Mohajer's group tournaments and heap, then BubbleSort over the top 2K; paper
       sec. 4), the *sequential* plan: of the rankers here it asks the fewest questions for a top-K, so it reaches
       the deepest rerank on a budget; or ``parallel_mohajer``, the *parallel* plan (the same tournaments in
       parallel rounds), for a round cap that the sequential plan's 40-60 rounds at N=100 do not fit. The plan
       that reaches the larger depth runs; at the same depth (also when no plan fits and both run over the least
       depth), the one whose questions the budget pays a larger share of, the sequential one on a tie.
    2. **Depth.** For each plan, the largest ``d <= N`` whose questions (``plan_size``: the distinct pairs it asks
       when the judge agrees with the first stage) cost at most the budget at ``question_cost`` calls per question
       and whose rounds fit the round cap; at least ``min(N, MIN_GROUP * K)``, since a shallower plan saves few
       calls (the top-K merge, about ``K**2 / 2`` questions, does not shrink with the depth); all N without a budget.
       Depths are multiples of K (whole groups) for the sequential plan and the depths ``parallel_depths`` allows
       (whole bracket levels ``K * 2**L``, a level takes one round whatever its size) for the parallel one. The cost
       per question undercounts a little (a judge that disagrees with the first stage makes the plan ask more), so
       the deepest plan may run a few calls past the budget and be cut there.
    3. **A second decision** once the sequential plan covers all N and the calls left pay, in both slot orders
       (``BOTH_ORDERS``), the questions ``second_plan_size`` counts, its rounds within the cap: ``parallel.select``
       runs over the same evidence (pairs already answered cost nothing, one question per new pair) and the order is
       the ``borda`` count of the two orders. A selection the caps cut short is not counted. Why: the two plans
       decide differently from mostly the same answers, and each is the better one on some judges; in both slot
       orders because a second decision that leaves few calls for step 4 costs quality.
    4. **Calls left** once the plan is complete go first to new pairs that can still change the top-K
       (``challenge``), then to the pairs answered in one slot order, asked in both (those of a top-K item first),
       with the decision (steps 1, 3 and the challenge) re-made over the evidence (``parallel.confirm``). Why new
       pairs first: with ``adaptive`` the other slot order of an answer that agrees with the first stage cannot
       change a hard answer's decision, while a new pair of a challenger and a top-K item can. ``parallel_mohajer``
       spends its calls left on both orders of its own pairs.
    5. **The first stage's word** (``prior_weight``). The final order of the top d is the ``borda`` count of the
       plan's order and the first stage's, the first stage weighed ``weight(flip_rate)``: ``prior_weight`` times
       ``1 - flip_rate`` of the judge's answers so far (``ctx.judge()``, read when the plan ends). It asks nothing,
       and at the default weight changes nothing at N <= 20 (19 x 0.05 < 1). Why: the judge's errors and the first
       stage's are independent and the first stage is better than chance, so where the answers place two candidates
       close together the one the first stage ranked far higher is more often the relevant one, and a deeper rerank
       brings more candidates that only the judge's errors lift (Jacob et al., 2024, "phantom hits"). Why
       ``1 - flip_rate``: a pair whose winner flips with the slot is a tie, which already goes to the first stage
       (``beats``), so a whole weight would count the first stage twice on such a judge.

    So the depth grows with the budget up to N, and the budget beyond the complete plan over N buys a second
    decision, the challengers, then confirmations. Why a budget-planned depth: a plan the budget cuts short leaves
    its later candidates in prior order, a rerank deeper than the budget completes spends calls on candidates it
    cannot place, and a fixed depth fits one first stage only.

    Args:
        sequential: the plan without a round cap (default ``MohajerBubble()``).
        parallel: the plan under a round cap (default ``ParallelMohajer()``; it confirms the top-K itself).
        prior_weight: the first stage's weight in the final order (step 5), >= 0 (default ``PRIOR_WEIGHT``);
            0 = the plan's order alone.

    Output: a permutation of ``range(N)``: the top ``d`` in the plan's order weighed with the first stage's, then
    the rest in prior order.
    ``plan(ctx)`` says which ranker and depth a query gets.

    Raises:
        TypeError: ``sequential`` or ``parallel`` not a ``Ranker``, ``prior_weight`` not a number.
        ValueError: ``prior_weight`` negative, infinite or NaN.
    """

    name = "budget_depth"
    plans_rounds = True  # for some queries: plans_rounds_for

    def __init__(self, sequential: Ranker | None = None, parallel: Ranker | None = None, *,
                 prior_weight: float = PRIOR_WEIGHT) -> None:
        for name, inner in (("sequential", sequential), ("parallel", parallel)):
            if inner is not None and not isinstance(inner, Ranker):
                raise TypeError(f"{name} must be a Ranker instance (e.g. get_ranker('mohajer')), "
                                f"got {type(inner).__name__}")
        self.sequential = sequential or MohajerBubble()
        self.parallel = parallel or ParallelMohajer()
        self.prior_weight = check_real(prior_weight, "prior_weight")  # 0: the plan's order alone

    def plan(self, ctx: RankContext) -> tuple[Ranker, int]:
        """``(ranker, depth)`` for this query, from ``ctx.caps`` (calls and rounds left) at the start (see the class
        docstring)."""
        n, k = ctx.n, max(ctx.top, 1)
        calls, rounds = ctx.caps.calls_left, ctx.caps.rounds_left
        cost = question_cost(ctx)
        least = min(n, MIN_GROUP * k)
        options = []
        for rank, (inner, depths) in enumerate(((self.sequential, [*range(k, n, k), n]),
                                               (self.parallel, parallel_depths(self.parallel, n, k, least, calls)))):
            if rank == 0 and rounds is not None and plan_size(inner, least, k)[1] > rounds:
                continue  # the round cap leaves the sequential plan no depth at all
            depth = deepest(inner, [d for d in depths if least <= d <= n], k, calls, rounds, cost) or least
            paid = 1.0 if calls is None else min(1.0, calls / (plan_size(inner, depth, k)[0] * cost or 1))
            options.append((depth, paid, -rank, inner))
        depth, _, _, inner = max(options, key=lambda o: o[:3])
        return inner, depth

    def plans_rounds_for(self, ctx: RankContext) -> bool:
        """Whether this query's plan (``plan(ctx)``) fills the rounds left, so that an oracle's re-asks would take
        its rounds: the parallel plan always (it plans its steps to the rounds left); the sequential one when
        rounds are limited (``ctx.caps.rounds_left``: a round cap, or what a time budget fits) and fewer than
        twice its rounds (``plan_size``) are left, since a re-ask batch after each of its rounds could then cut
        it short. Why not only the parallel plan: at N=20, K=3 the sequential plan under caps 10 and 20 takes
        10-20 of their rounds, and with ``adaptive``'s re-asks it lost 0.3-3.4 nDCG@3 points on the mean over the
        family's judges (benchmarks/results/budget_depth/README.md, history)."""
        inner, depth = self.plan(ctx)
        if inner is self.parallel:
            return True
        left = ctx.caps.rounds_left
        return left is not None and 2 * plan_size(inner, depth, max(ctx.top, 1))[1] > left

    def planned_rounds(self, ctx: RankContext) -> int:
        inner, depth = self.plan(ctx)
        return plan_size(inner, depth, max(ctx.top, 1))[1]

    def schedule(self, ctx: RankContext) -> Schedule:
        inner, depth = self.plan(ctx)
        sub = replace(ctx, n=depth)
        if inner is self.parallel:
            order = yield from inner.schedule(sub)
            return self.finish(order, ctx)
        ev, caps = Evidence(), sub.caps
        second = None  # whether the second decision counts: fixed by the first decision, re-decisions follow it

        def affords_second() -> bool:
            if depth < ctx.n or caps.exhausted:
                return False
            extra, extra_rounds = second_plan_size(inner, depth, sub.top)
            return ((caps.calls_left is None or caps.calls_left >= extra * BOTH_ORDERS)
                    and (caps.rounds_left is None or caps.rounds_left >= extra_rounds))

        def decide() -> Schedule:  # the plan(s), then the challengers (pairs already answered cost nothing)
            # (from the pair cache; with the cache off, Evidence.record answers them from ev)
            nonlocal second
            order = yield from ev.record(inner.schedule(sub), known=None if sub.cache else ev.answered)
            if second is None:
                second = affords_second()
            if second:
                other = yield from select(sub, ev)
                if caps.exhausted:  # a selection the caps cut short is not counted
                    second = False
                else:
                    order = borda(order, other)
            return (yield from challenge(sub, ev, order))

        order = yield from decide()
        if ctx.calls_per_pair == 1:  # the top-K's pairs first, then the others by their better rank
            order = yield from confirm(sub, ev, order, decide, reach=depth)
        return self.finish(order, ctx)

    def weight(self, flip_rate: float | None) -> float:
        """The first stage's weight in the final order (step 5): ``prior_weight`` times the share of the pairs
        asked in both slot orders whose winner did not flip, ``1 - flip_rate`` (``JudgeStats.flip_rate``; None, when
        no pair was asked both ways, gives the whole ``prior_weight``). Under ``adaptive`` those pairs are the
        re-asked upsets and the challenge's ``BothOrders`` pairs, not a sample of the pairs asked (what that rate
        reads: docs/judge-diagnostics.md)."""
        return self.prior_weight * (1 - (flip_rate or 0.0))

    def finish(self, order: list[int], ctx: RankContext) -> list[int]:
        """The plan's ``order`` of the top d (a permutation of ``range(d)``) weighed with the first stage's
        (``borda``, the first stage at ``weight`` of the judge's flip rate now, ``ctx.judge()``; step 5), then the
        other candidates of ``range(ctx.n)`` in prior order."""
        return complete(borda(order, sorted(order), self.weight(ctx.judge().flip_rate)), ctx.n)


def challengers(ev: Evidence, order: list[int], k: int) -> list[int]:
    """The candidates outside the top ``k`` of ``order`` that no other candidate outside it has beaten on the
    evidence (an answered pair, not a tie): the ones a wrong answer may have kept out of the top-K. Fewest losses
    to the top ``k`` first, then by their place in ``order``."""
    top, rank = set(order[:k]), {x: r for r, x in enumerate(order)}
    beaten, losses = set(), dict.fromkeys(order[k:], 0)
    for (a, b), outcome in ev.outcomes.items():
        if outcome is None or outcome == 0.5:
            continue
        winner, loser = (a, b) if outcome > 0.5 else (b, a)
        if loser in top:
            continue
        if winner in top:
            losses[loser] += 1
        else:
            beaten.add(loser)
    return sorted((x for x in order[k:] if x not in beaten), key=lambda x: (losses[x], rank[x]))


def challenge(ctx: RankContext, ev: Evidence, order: list[int]) -> Schedule:
    """BubbleSort@K (``bubble_passes``, K passes from the bottom) over the top-K of ``order`` followed by its
    ``challengers``, the strongest next to the boundary, noting every outcome in ``ev``: a challenger enters the
    top-K by beating the items above it, one new pair at a time, and a pass that moves nothing ends it. Each pair
    is asked in both slot orders (``BothOrders``, read by the bidirectional rule): these are the answers that
    change the top-K, where a position-biased single answer costs most. Pairs already answered in both orders cost
    nothing. Returns the order: the passes' window, then the other candidates of ``order``."""
    window = order[: ctx.top] + challengers(ev, order, ctx.top)
    yield from ev.record(bubble_passes(window, ctx.top, ctx.caps), lambda pairs: [BothOrders(*p) for p in pairs],
                         None if ctx.cache else ev.answered)
    inside = set(window)
    return window + [x for x in order if x not in inside]
