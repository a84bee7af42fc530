"""``RerankSettings``: the one declaration of the per-query settings of a rerank, validated once.

Every entry point (``rerank``, ``arerank``, ``rerank_many``, ``arerank_many``, ``Reranking``, the LangChain and
LlamaIndex wrappers, ``activeprp rerank`` / ``rerank-run``, Ray's ``rerank_dataset``) builds one and passes it
on; their keyword arguments are these fields.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any, Literal

from .budget import check_count
from .oracles import Oracle, get_oracle
from .rankers import Ranker, get_ranker
from .rankers.auto import AUTO

OnFailure = Literal["raise", "prior"]
ON_FAILURE = ("raise", "prior")
MAX_CONSECUTIVE_FAILURES = 5
"""The circuit breaker's default: calls in a row that may fail (after their retries) before a rerank stops."""

#: The integer settings and their bounds, checked by ``check_count`` (numpy integers pass, bools do not).
COUNTS: dict[str, dict[str, Any]] = {
    "budget": {"allow_none": True}, "max_rounds": {"allow_none": True}, "token_budget": {"allow_none": True},
    "top_k": {"minimum": 1}, "seed": {"minimum": None}, "max_concurrency": {"minimum": 1, "allow_none": True},
    "max_consecutive_failures": {"minimum": 1, "allow_none": True},
}


#: The caps, as the command line offers them (``--budget``, ``--max-rounds``, ``--token-budget``): field -> help.
CAP_HELP: dict[str, str] = {
    "budget": "most LLM calls per query",
    "max_rounds": "most sequential rounds of LLM calls per query",
    "token_budget": "most prompt + completion tokens per query (estimates reserved, reported usage kept)",
}


@dataclass(frozen=True, kw_only=True)
class RerankSettings:
    """The settings of one query's rerank (the same for every query of a ``rerank_many``).

    Attributes:
        ranker: a name (see ``activeprp_core.rankers.RANKERS``, ``"auto"`` included) or a ``Ranker`` instance.
        oracle: ``randomized``, ``bidirectional``, ``single``, ``auto``, or an ``Oracle`` instance.
        budget: the most LLM calls per query (int >= 0; None = no cap). Required: spend is always stated.
        max_rounds: the most sequential rounds that send calls (int >= 0; None = no cap; 0 = the prior order).
        token_budget: the most prompt + completion tokens per query (int >= 0; None = no cap): each prompt's
            upper-bound estimate (``Comparator.estimate_tokens``) is reserved before it is sent, the difference
            to the usage the comparator reports is refunded after (a call reporting no usage keeps its estimate).
        top_k: K, the length of the reranked prefix (int >= 1). seed: seeds the oracle and ranker draws (any int).
        cache: reuse answers to repeated pair questions at no cost. on_failure: ``"raise"`` or ``"prior"``.
        max_concurrency: the most calls in flight (int >= 1; None = the comparator's own).
        max_consecutive_failures: the circuit breaker (int >= 1; None = never).

    Raises:
        TypeError: an integer setting that is not an int (numpy integers accepted, bools refused), a ranker or
            oracle of the wrong type, a non-bool ``cache``. ValueError: a value out of range, an unknown ranker,
            oracle or ``on_failure``.
    """

    ranker: str | Ranker = "mohajer"
    oracle: str | Oracle = "randomized"
    budget: int | None
    max_rounds: int | None = None
    token_budget: int | None = None
    top_k: int = 10
    seed: int = 0
    cache: bool = True
    on_failure: OnFailure = "raise"
    max_concurrency: int | None = None
    max_consecutive_failures: int | None = MAX_CONSECUTIVE_FAILURES

    def __post_init__(self) -> None:
        for name, bounds in COUNTS.items():
            object.__setattr__(self, name, check_count(getattr(self, name), name, **bounds))
        get_ranker(self.ranker)
        if self.oracle != AUTO:
            get_oracle(self.oracle)
        if not isinstance(self.cache, bool):
            raise TypeError(f"cache must be a bool, got {type(self.cache).__name__}")
        if self.on_failure not in ON_FAILURE:
            raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {self.on_failure!r}")

    @classmethod
    def of(cls, settings: RerankSettings | None = None, **options: Any) -> RerankSettings:
        """``settings`` with ``options`` replacing its fields, or new settings from ``options`` alone.

        Raises:
            TypeError: ``settings`` is not a ``RerankSettings``, or an unknown option. As the class otherwise.
        """
        if settings is None:
            return cls(**options)
        if not isinstance(settings, RerankSettings):
            raise TypeError(f"settings must be a RerankSettings, got {type(settings).__name__}")
        return replace(settings, **options) if options else settings

    def as_dict(self) -> dict[str, Any]:
        """The fields as keyword arguments (for ``rerank`` & co.)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def takes_settings(func):
    """Decorator: ``func`` takes the ``RerankSettings`` fields as ``**options``; its ``inspect.signature`` (what
    IDEs, ``help()`` and ``inspect`` show) lists them as keyword-only parameters with their defaults instead, so
    ``rerank(..., token_budget=...)`` is visible without declaring the fields again. Calls are unchanged."""
    signature = inspect.signature(func)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    settings = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                                  default=inspect.Parameter.empty if f.default is MISSING else f.default)
                for f in fields(RerankSettings)]
    func.__signature__ = signature.replace(parameters=own + settings)
    return func
