"""A comparator that costs nothing: answers from a fixed hidden permutation, to measure the engine's own cost."""

from __future__ import annotations

import random
from collections.abc import Sequence

from activeprp_core.comparators.base import Comparator
from activeprp_core.types import Pair


class ZeroCostComparator(Comparator):
    """Answers from a fixed hidden permutation by dict look-up (no model): isolates the engine's own cost."""

    def __init__(self, ids: Sequence[str], seed: int = 0) -> None:
        order = list(ids)
        random.Random(seed).shuffle(order)
        self.rank = {d: r for r, d in enumerate(order)}

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        """1.0 when the first candidate ranks higher in the hidden permutation, else 0.0."""
        return [1.0 if self.rank[a.id] < self.rank[b.id] else 0.0 for a, b in pairs]
