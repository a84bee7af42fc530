"""The parts the LangChain and LlamaIndex rerankers share (imports no framework).

Both wrappers hold the same public fields (``comparator``, ``ranker``, ``oracle``, ``budget``, ``top_n``,
``seed``, ``max_concurrency``, ``max_rounds``, ``token_budget``, ``on_failure``); the functions here validate
them (by building the ``RerankSettings`` they stand for) and turn them plus one query's documents into an
``activeprp_core.rerank``/``arerank`` call, so the two wrappers order
documents identically to the core API for the same inputs, seed and comparator. The comparator object the user
passes in is never changed: per-call settings (the cap on calls in flight) go to the rerank as arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from activeprp_core import Candidate, RerankResult, RerankSettings, arerank, rerank
from activeprp_core.budget import check_count
from activeprp_core.comparators import as_comparator
from activeprp_core.rankers.auto import ONLINE_MAX_ROUNDS
from activeprp_core.settings import COUNTS

SCORE_KEY = "relevance_score"
"""Metadata key of the score: ``RerankResult.scores``, ``(n - rank) / n`` for ``n`` input documents (rank
0-based), so in (0, 1], higher is better, strictly decreasing along the reranked order. It is a rank-derived
score, not a calibrated probability of relevance."""
RANK_KEY = "rerank_rank"
"""Metadata key of the 1-based position in the reranked order (1 = best)."""

DEFAULT_RANKER = "auto"
DEFAULT_ORACLE = "auto"
DEFAULT_BUDGET = 50
DEFAULT_TOP_N = 3
"""Both wrappers' ``top_n`` default: documents returned per query (the ONLINE_MAX_ROUNDS setting was measured
at top_n 3)."""
DEFAULT_MAX_ROUNDS: int | None = ONLINE_MAX_ROUNDS
"""The wrappers' ``max_rounds`` default: sequential rounds of LLM calls per query (None = no cap)."""

SETTINGS = ("ranker", "oracle", "budget", "seed", "max_concurrency", "max_rounds", "token_budget", "on_failure")
"""The wrapper fields that are ``RerankSettings`` fields (``top_n`` becomes ``top_k``)."""
COUNT_FIELDS: dict[str, dict[str, Any]] = {
    **{name: COUNTS[name] for name in SETTINGS if name in COUNTS}, "top_n": {"minimum": 1, "allow_none": True},
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


def settings_of(fields: Any, n: int = 1) -> RerankSettings:
    """The ``RerankSettings`` a wrapper's fields stand for, for ``n`` documents (``top_n`` None = all); built at
    construction too, so that a bad field fails there (ValueError / TypeError), never at first use."""
    top_n = fields.top_n
    return RerankSettings(**{name: getattr(fields, name) for name in SETTINGS},
                          top_k=max(1, n if top_n is None else top_n))


def make_candidates(items: Iterable[tuple[str | None, str, dict]]) -> list[Candidate]:
    """``Candidate`` objects from ``(id, text, metadata)`` triples in prior order; a missing id becomes the
    position as a string. The metadata dict is copied (shallow), so the caller's document is never touched."""
    return [Candidate(id=str(i) if doc_id is None else str(doc_id), text=text, metadata=dict(meta))
            for i, (doc_id, text, meta) in enumerate(items)]


def rerank_fields(fields: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.rerank`` with a wrapper's fields (``top_n`` becomes ``top_k``; None = all)."""
    return rerank(query, candidates, settings_of(fields, len(candidates)), comparator=fields.comparator)


async def arerank_fields(fields: Any, query: str, candidates: list[Candidate]) -> RerankResult:
    """``activeprp_core.arerank`` (each round's calls go to the comparator concurrently) with a wrapper's
    fields."""
    return await arerank(query, candidates, settings_of(fields, len(candidates)), comparator=fields.comparator)


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
