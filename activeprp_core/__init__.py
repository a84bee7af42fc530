"""ActivePRP core: budgeted pairwise LLM reranking with active-learning rankers.

Implements "Active Learners as Efficient PRP Rerankers": oracles (section 3), the Mohajer / PAC active rankers
and sorting baselines (section 4) as round-based schedulers, a hard per-query call budget, and evaluation.
Imports no LLM or RAG framework.
"""

from .budget import Budget, CallBudget
from .engine import Session, arerank, rerank
from .errors import (
    ActivePRPError,
    ComparatorAuthError,
    ComparatorError,
    ComparatorRequestError,
    ComparatorUnavailable,
    InvalidAnswer,
    RankerError,
)
from .oracles import (
    ORACLES,
    BidirectionalOracle,
    Oracle,
    RandomizedDirectionOracle,
    SingleDirectionOracle,
    get_oracle,
)
from .rankers import RANKERS, Limits, Outcomes, RankContext, Ranker, get_ranker
from .simulated import SimulatedComparator
from .types import Accounting, Candidate, Comparator, Judgment, RerankResult

__all__ = [
    "ActivePRPError", "ComparatorAuthError", "ComparatorError", "ComparatorRequestError", "ComparatorUnavailable",
    "InvalidAnswer", "RankerError",
    "ORACLES", "RANKERS", "Accounting", "BidirectionalOracle", "Budget", "CallBudget", "Candidate", "Comparator",
    "Judgment", "Limits", "Oracle", "Outcomes", "RandomizedDirectionOracle", "RankContext", "Ranker",
    "RerankResult", "Session", "SimulatedComparator", "SingleDirectionOracle", "arerank", "get_oracle",
    "get_ranker", "rerank"
]
