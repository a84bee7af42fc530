"""Pairwise oracles: how one question "does i beat j?" becomes LLM calls on ordered prompts.

Source: Active Learners as Efficient PRP Rerankers, section 3 ("Oracles"). An oracle is a stateless strategy;
the answers it reads live in the per-query session (the pair cache), keyed by ordered prompt ``(first, second)``
of candidate indices. An outcome is P(i beats j): 1.0 / 0.0 for a clear answer, 0.5 for an explicit tie,
a soft value when the comparator returns probabilities, ``None`` when unknown (refused by the budget, or the
call failed). Rankers resolve 0.5 and ``None`` by prior rank (see ``rankers.base.beats``).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from .registry import resolve

Prompt = tuple[int, int]
Known = Callable[[Prompt], bool]


class Oracle(ABC):
    """Turns an unordered pair question into ordered prompts and reads the outcome back."""

    name: str
    calls_per_pair: int

    @abstractmethod
    def prompts(self, i: int, j: int, known: Known, rng: random.Random) -> list[Prompt]:
        """Ordered prompts still to be asked to answer "does i beat j?" (empty when ``known`` answers it)."""

    @abstractmethod
    def outcome(self, i: int, j: int, answers: Mapping[Prompt, float | None]) -> float | None:
        """P(i beats j) from the recorded answers, or None when unknown."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _one_direction(i: int, j: int, answers: Mapping[Prompt, float | None]) -> float | None:
    if (i, j) in answers:
        return answers[(i, j)]
    p = answers.get((j, i))
    return None if p is None else 1.0 - p


class SingleDirectionOracle(Oracle):
    """One call per pair in the order the ranker asked: LLM(i, j). The naive baseline: position bias of the
    comparator goes straight into the ranking. A cached answer in either order is reused."""

    name = "single"
    calls_per_pair = 1

    def prompts(self, i, j, known, rng):
        return [] if known((i, j)) or known((j, i)) else [(i, j)]

    def outcome(self, i, j, answers):
        return _one_direction(i, j, answers)


class RandomizedDirectionOracle(Oracle):
    """One call per pair with the slot order drawn from the seeded RNG (p = 1/2 each way), the answer mapped
    back to "i beats j". Position bias becomes zero-mean noise (paper section 3 and its appendix proof).
    A pair answered before in either order is not asked again."""

    name = "randomized"
    calls_per_pair = 1

    def prompts(self, i, j, known, rng):
        if known((i, j)) or known((j, i)):
            return []
        return [(i, j)] if rng.random() < 0.5 else [(j, i)]

    def outcome(self, i, j, answers):
        return _one_direction(i, j, answers)


class BidirectionalOracle(Oracle):
    """Two calls per pair, LLM(i, j) and LLM(j, i) (Qin et al. 2024, PRP). i beats j iff the first prompt
    prefers its first slot (i) and the second prompt prefers its second slot (i). Inconsistent answers (both
    prefer the same slot) or an exact 0.5 are an explicit tie, outcome 0.5: the reference code let the first
    argument win; rankers here resolve ties by prior rank and the engine counts them (``RerankResult.ties``)."""

    name = "bidirectional"
    calls_per_pair = 2

    def prompts(self, i, j, known, rng):
        return [p for p in ((i, j), (j, i)) if not known(p)]

    def outcome(self, i, j, answers):
        p1, p2 = answers.get((i, j)), answers.get((j, i))
        if p1 is None or p2 is None:
            return None
        if p1 > 0.5 and p2 < 0.5:
            return 1.0
        if p1 < 0.5 and p2 > 0.5:
            return 0.0
        return 0.5


ORACLES: dict[str, type[Oracle]] = {
    cls.name: cls for cls in (BidirectionalOracle, RandomizedDirectionOracle, SingleDirectionOracle)
}


def get_oracle(oracle: str | Oracle) -> Oracle:
    """Resolve an oracle name (``bidirectional``, ``randomized``, ``single``) or pass an instance through.

    Raises:
        ValueError: unknown name. TypeError: neither a str nor an Oracle.
    """
    return resolve(oracle, ORACLES, Oracle, "oracle")
