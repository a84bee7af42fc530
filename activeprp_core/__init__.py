"""ActivePRP core: budgeted pairwise LLM reranking with active-learning rankers.

Implements "Active Learners as Efficient PRP Rerankers": oracles (section 3), the Mohajer / PAC active rankers
and sorting baselines (section 4) as round-based schedulers, and a hard per-query call budget. Imports no LLM or
RAG framework; the benchmark harness is the separate ``activeprp_bench`` package.
"""

from .budget import Budget, CallBudget
from .comparators.base import CallGuard, Comparator, SupportsCompare, as_comparator
from .comparators.simulated import SimulatedComparator
from .engine import DONE, Batch, Reranking, arerank, rerank
from .errors import (
    ActivePRPError,
    ComparatorAuthError,
    ComparatorError,
    ComparatorRequestError,
    ComparatorUnavailable,
    InvalidAnswer,
    RankerError,
)
from .judging import JudgeStats
from .many import RerankFailure, arerank_many, rerank_many
from .oracles import (
    ORACLES,
    BidirectionalOracle,
    BothOrders,
    Oracle,
    RandomizedDirectionOracle,
    SingleDirectionOracle,
    get_oracle,
)
from .rankers import RANKERS, RankContext, Ranker, get_ranker
from .settings import RerankSettings
from .types import Accounting, Candidate, Judgment, RerankResult

__all__ = [
    "DONE", "ORACLES", "RANKERS", "Accounting", "ActivePRPError", "Batch", "BidirectionalOracle", "BothOrders",
    "Budget", "CallBudget", "CallGuard", "Candidate", "Comparator", "ComparatorAuthError", "ComparatorError",
    "ComparatorRequestError", "ComparatorUnavailable", "InvalidAnswer", "Judgment", "Oracle",
    "RandomizedDirectionOracle", "RankContext", "Ranker", "RankerError", "RerankFailure", "RerankResult",
    "RerankSettings",
    "JudgeStats",
    "Reranking", "SimulatedComparator", "SingleDirectionOracle", "SupportsCompare", "arerank", "arerank_many",
    "as_comparator", "get_oracle", "get_ranker", "rerank", "rerank_many"
]
