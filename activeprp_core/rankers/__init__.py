"""Rankers: round-based schedulers of pair comparisons (see ``base`` for the protocol)."""

from __future__ import annotations

from ..registry import resolve
from .auto import Auto
from .base import RankContext, Ranker, Schedule, relay  # noqa: F401 (relay: for the engine; the rest lives in .base)
from .budget_depth import BudgetDepth
from .depth import Depth, ParallelMohajerDepth
from .mohajer import Mohajer, MohajerBubble
from .pac import PACBubble
from .parallel import ParallelMohajer
from .sorting import AllPairs, BubbleSort, HeapSort, QuickSort, SlidingWindow

RANKERS: dict[str, type[Ranker]] = {
    cls.name: cls
    for cls in (Mohajer, MohajerBubble, ParallelMohajer, ParallelMohajerDepth, BudgetDepth, PACBubble, BubbleSort,
                HeapSort, QuickSort, AllPairs, SlidingWindow, Auto)
}


def get_ranker(ranker: str | Ranker) -> Ranker:
    """Resolve a ranker name (see ``RANKERS``) or pass a configured instance through.

    Raises:
        ValueError: unknown name. TypeError: neither a str nor a Ranker.
    """
    return resolve(ranker, RANKERS, Ranker, "ranker")


__all__ = [
    "RANKERS", "AllPairs", "Auto", "BubbleSort", "BudgetDepth", "Depth", "HeapSort", "Mohajer", "MohajerBubble",
    "PACBubble", "ParallelMohajer", "ParallelMohajerDepth", "QuickSort", "RankContext", "Ranker", "Schedule",
    "SlidingWindow", "get_ranker",
]
