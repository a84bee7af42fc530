"""Rankers: round-based schedulers of pair comparisons (see ``base`` for the protocol)."""

from __future__ import annotations

from .auto import Auto
from .base import Bracket, Heap, RankContext, Ranker, Schedule, beats, bubble_passes, match, parallel
from .mohajer import Mohajer, MohajerBubble
from .pac import PACBubble
from .sorting import AllPairs, BubbleSort, HeapSort, QuickSort, SlidingWindow

RANKERS: dict[str, type[Ranker]] = {
    cls.name: cls
    for cls in (Mohajer, MohajerBubble, PACBubble, BubbleSort, HeapSort, QuickSort, AllPairs, SlidingWindow, Auto)
}


def get_ranker(ranker: str | Ranker) -> Ranker:
    """Resolve a ranker name (see ``RANKERS``) or pass a configured instance through.

    Raises:
        ValueError: unknown name. TypeError: neither a str nor a Ranker.
    """
    if isinstance(ranker, Ranker):
        return ranker
    if not isinstance(ranker, str):
        raise TypeError(f"ranker must be a name or a Ranker, got {type(ranker).__name__}")
    try:
        return RANKERS[ranker]()
    except KeyError:
        raise ValueError(f"unknown ranker {ranker!r}; choose one of {sorted(RANKERS)}") from None


__all__ = [
    "RANKERS", "AllPairs", "Auto", "Bracket", "BubbleSort", "Heap", "HeapSort", "Mohajer", "MohajerBubble",
    "PACBubble", "QuickSort", "RankContext", "Ranker", "Schedule", "SlidingWindow", "beats", "bubble_passes",
    "get_ranker", "match", "parallel",
]
