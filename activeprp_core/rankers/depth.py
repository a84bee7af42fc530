"""A fixed rerank depth: another ranker sees only the first-stage top of the candidates (``Depth``,
``ParallelMohajerDepth``). ``BudgetDepth`` plans the depth from the budget instead."""

from __future__ import annotations

from dataclasses import replace

from ..budget import check_count
from .base import RankContext, Ranker, Schedule, complete
from .parallel import ParallelMohajer

#: The default rerank depth: the prior top 40 candidates (K of them when K is larger).
DEFAULT_DEPTH = 40


class Depth(Ranker):
    """Rank the prior (first-stage) top ``depth`` candidates with ``inner``; the others follow in prior order.

    Why (the rerank depth of RankGPT's ``rank_end``): a judge's false wins lift documents the first stage put
    deep, where few are relevant, into the top-K, and a deeper rerank spends calls on them; rerankers lose quality
    past some depth (Jacob et al., "Drowning in Documents: Consequences of Scaling Reranker Inference", 2024:
    "phantom hits"). The right depth is a property of the first stage and of the budget: ``BudgetDepth`` (what
    ``auto`` runs) plans it from the budget; pass a fixed one when you know where your first stage's relevant
    documents sit, or when your judge does not beat your first stage by much (docs/judges.md).

    Args:
        inner: the ranker of the top (an instance; stateless rankers may be shared).
        depth: candidates to rerank, >= 1; None = ``max(DEFAULT_DEPTH, K)`` (at most N).

    Output: ``inner``'s permutation of the top ``min(depth, N)``, then the rest in prior order. Budget, round
    cap and oracle apply as to ``inner`` (it is scheduled with ``n`` = the depth).

    Raises:
        TypeError: ``inner`` not a ``Ranker``, or ``depth`` not an int (any integer type) or None.
        ValueError: ``depth`` < 1.
    """

    name = "depth"

    def __init__(self, inner: Ranker, depth: int | None = None) -> None:
        if not isinstance(inner, Ranker):
            raise TypeError(f"inner must be a Ranker instance (e.g. get_ranker('mohajer')), got {type(inner).__name__}")
        self.inner, self.depth = inner, check_count(depth, "depth", minimum=1, allow_none=True)
        self.plans_rounds = inner.plans_rounds

    def depth_for(self, ctx: RankContext) -> int:
        """The candidates reranked for this query: ``min(N, depth)``, by default ``min(N, max(DEFAULT_DEPTH, K))``."""
        return min(ctx.n, max(DEFAULT_DEPTH, ctx.k) if self.depth is None else self.depth)

    def plans_rounds_for(self, ctx: RankContext) -> bool:
        return self.inner.plans_rounds_for(replace(ctx, n=self.depth_for(ctx)))

    def planned_rounds(self, ctx: RankContext) -> int | None:
        return self.inner.planned_rounds(replace(ctx, n=self.depth_for(ctx)))

    def schedule(self, ctx: RankContext) -> Schedule:
        order = yield from self.inner.schedule(replace(ctx, n=self.depth_for(ctx)))
        return complete(order, ctx.n)


class ParallelMohajerDepth(Depth):
    """``ParallelMohajer`` over the prior top ``depth`` candidates (``Depth``; default ``DEFAULT_DEPTH``, at least
    K)."""

    name = "parallel_mohajer_depth"

    def __init__(self, depth: int | None = None) -> None:
        super().__init__(ParallelMohajer(), depth)
