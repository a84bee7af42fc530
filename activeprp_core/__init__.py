"""ActivePRP core: budgeted pairwise LLM reranking with active-learning rankers.

Implements "Active Learners as Efficient PRP Rerankers": oracles (section 3), the Mohajer / PAC active rankers
(section 4) and the sorting baselines (section 5's setup and tables) as round-based schedulers, and a hard per-query
call budget. Imports no LLM or RAG framework; the benchmark harness is the separate ``activeprp_bench`` package.
"""

import logging

from .comparators.base import Comparator
from .comparators.clients import ComparatorClosed
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
from .oracles import Oracle
from .rankers import Ranker
from .settings import RerankSettings
from .types import Accounting, Candidate, RerankResult

# The public contract (docs/contract.md); everything else is imported from its submodule.
__all__ = [
    "DONE", "Accounting", "ActivePRPError", "Batch", "Candidate", "Comparator", "ComparatorAuthError",
    "ComparatorClosed", "ComparatorError", "ComparatorRequestError", "ComparatorUnavailable", "InvalidAnswer",
    "JudgeStats", "Oracle", "Ranker", "RankerError", "RerankFailure", "RerankResult", "RerankSettings", "Reranking",
    "SimulatedComparator", "arerank", "arerank_many", "rerank", "rerank_many",
]

# A library's loggers print nothing until the application configures logging (Python's logging HOWTO): without
# this, Python's last-resort handler printed each WARNING on stderr, beside the error the caller already gets.
logging.getLogger("activeprp").addHandler(logging.NullHandler())
