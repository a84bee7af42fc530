"""The parts the LangChain and LlamaIndex rerankers share (imports no framework).

Both wrappers hold the same public fields (``comparator``, ``ranker``, ``oracle``, ``budget``, ``top_n``,
``seed``, ``max_concurrency``, ``max_rounds``, ``on_failure``); the functions here validate them and turn them
plus one query's documents into an ``activeprp_core.rerank``/``arerank`` call, so the two wrappers order
documents identically to the core API for the same inputs, seed and comparator. The comparator object the user
passes in is never changed: per-call settings (the cap on calls in flight) go to the rerank as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from activeprp_core import Candidate, RerankResult, arerank, as_comparator, get_oracle, get_ranker, rerank
from activeprp_core.budget import check_count
from activeprp_core.rankers.auto import AUTO, ONLINE_MAX_ROUNDS

SCORE_KEY = "relevance_score"
"""Metadata key of the score: ``RerankResult.scores``, ``(n - rank) / n`` for ``n`` input documents (rank
0-based), so in (0, 1], higher is better, strictly decreasing along the reranked order. It is a rank-derived
score, not a calibrated probability of relevance."""
RANK_KEY = "rerank_rank"
"""Metadata key of the 1-based position in the reranked order (1 = best)."""

DEFAULT_RANKER = "auto"
DEFAULT_ORACLE = "auto"
DEFAULT_BUDGET = 50
DEFAULT_MAX_ROUNDS: int | None = ONLINE_MAX_ROUNDS
"""The wrappers' ``max_rounds`` default: sequential rounds of LLM calls per query (None = no cap)."""

COUNT_FIELDS: dict[str, dict[str, Any]] = {
    "budget": {"allow_none": True}, "max_rounds": {"allow_none": True}, "seed": {"minimum": None},
    "top_n": {"minimum": 1, "allow_none": True}, "max_concurrency": {"minimum": 1, "allow_none": True},
}
"""The integer fields of both wrappers and their bounds (``check_count``: numpy integers pass, bools do not)."""


def check_count_field(value: Any, name: str) -> int | None:
    """A wrapper's integer field checked like the core checks it (ValueError / TypeError that say what to change)."""
    return check_count(value, name, **COUNT_FIELDS[name])


def check_comparator(comparator: Any) -> Any:
    """``comparator`` unchanged when it can judge pairs (a ``Comparator`` or an object with ``compare``).

    Raises:
        TypeError: None or an object without ``compare`` (so a wrapper fails at construction, not at first use).
    """
    as_comparator(comparator)
    return comparator


def missing_extra(package: str, extra: str) -> str:
    """The ImportError message for a missing optional framework."""
    return f"{package} is not installed; install it with: pip install 'activeprp[{extra}]'"


def check_choices(ranker: Any, oracle: Any) -> None:
    """Fail early on an unknown ranker or oracle name (ValueError) or a wrong type (TypeError); ``"auto"`` is
    resolved per query (``activeprp_core.rankers.auto.choose``)."""
    get_ranker(ranker)
    if oracle != AUTO:
        get_oracle(oracle)


def make_candidates(items: Iterable[tuple[str | None, str, dict]]) -> list[Candidate]:
    """``Candidate`` objects from ``(id, text, metadata)`` triples in prior order; a missing id becomes the
    position as a string. The metadata dict is copied (shallow), so the caller's document is never touched."""
    return [Candidate(id=str(i) if doc_id is None else str(doc_id), text=text, metadata=dict(meta))
            for i, (doc_id, text, meta) in enumerate(items)]


def _core_args(settings: Any, n: int) -> dict[str, Any]:
    top_n = getattr(settings, "top_n", None)
    return dict(ranker=settings.ranker, oracle=settings.oracle, budget=settings.budget, seed=settings.seed,
                comparator=settings.comparator, max_concurrency=settings.max_concurrency,
                max_rounds=settings.max_rounds, on_failure=settings.on_failure,
                top_k=max(1, n if top_n is None else top_n))


def run_rerank(settings: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.rerank`` with a wrapper's fields (``top_n`` becomes ``top_k``; None = all)."""
    return rerank(query, candidates, **_core_args(settings, len(candidates)))


async def arun_rerank(settings: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.arerank`` (each round's calls go to the comparator concurrently) with a wrapper's
    fields."""
    return await arerank(query, candidates, **_core_args(settings, len(candidates)))


def picked(result: RerankResult, top_n: int | None) -> list[tuple[int, float, int]]:
    """``(input index, score, 1-based rank)`` of the documents to return, best first (all when top_n is None)."""
    order = result.order if top_n is None else result.order[:top_n]
    return [(i, result.scores[i], rank) for rank, i in enumerate(order, start=1)]



class ComparatorFactories:
    """Convenience constructors shared by both wrappers: build the comparator, pass every other field on."""

    @classmethod
    def from_local_model(cls, model: str | None = None, *, comparator_kwargs: dict | None = None, **fields: Any):
        """Rerank with a local Hugging Face model (``pip install 'activeprp[hf]'``).

        Args:
            model: a model path or name for ``activeprp_core.comparators.TransformersComparator``; None = the
                bundled SmolLM2-135M (query-likelihood mode, runs offline on CPU).
            comparator_kwargs: extra arguments for the comparator.
            **fields: the reranker's own fields (``ranker``, ``budget``, ``top_n``, ...).
        """
        from activeprp_core.comparators import TransformersComparator

        kwargs = comparator_kwargs or {}
        comparator = (TransformersComparator.from_bundled(**kwargs) if model is None
                      else TransformersComparator(model, **kwargs))
        return cls(comparator=comparator, **fields)

    @classmethod
    def from_openai(cls, model: str, *, base_url: str | None = None, api_key: str | None = None,
                    comparator_kwargs: dict | None = None, **fields: Any):
        """Rerank through any OpenAI-compatible chat endpoint (``pip install 'activeprp[openai]'``).

        Args:
            model: the served model name; base_url: the endpoint (None = OpenAI's); api_key: None reads
                ``OPENAI_API_KEY``.
            comparator_kwargs: extra arguments for ``activeprp_core.comparators.OpenAIChatComparator``.
            **fields: the reranker's own fields (``ranker``, ``budget``, ``top_n``, ``max_concurrency``, ...).
        """
        from activeprp_core.comparators import OpenAIChatComparator

        comparator = OpenAIChatComparator(model=model, base_url=base_url, api_key=api_key,
                                          **(comparator_kwargs or {}))
        return cls(comparator=comparator, **fields)
