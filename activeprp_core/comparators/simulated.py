"""A simulated LLM comparator with graded relevance, persistent per-document error and position bias."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from ..types import Pair
from .base import Comparator

_STD_NORMAL = NormalDist()


def _gauss(*key: object) -> float:
    """A standard normal draw that is a pure function of ``key`` (stable across runs and processes)."""
    digest = hashlib.blake2b("\x1f".join(map(str, key)).encode(), digest_size=8).digest()
    u = (int.from_bytes(digest, "big") + 0.5) / 2.0**64
    return _STD_NORMAL.inv_cdf(u)


class SimulatedComparator(Comparator):
    """A deterministic stand-in for a pairwise LLM judge, for tests and benchmarks.

    Model (Thurstone-style, all noise a pure function of ``seed`` and the candidate ids):

        u(d)      = strength * label(d) + doc_noise * e(d)           e(d) ~ N(0, 1), fixed per document
        z(a, b)   = u(a) - u(b) + position_bias + pair_noise * n(a, b)   n(a, b) ~ N(0, 1) per ORDERED pair
        answer    = 1.0 if z > 0 else 0.0                            (hard, the default)
                  = sigmoid(z / temperature)                         (``hard=False``)

    - ``strength``: weight of the graded label (e.g. TREC 0-3) - the relevance signal.
    - ``doc_noise``: persistent per-document error: the judge consistently over/under-rates a passage, so
      repeated questions do not average it out (a systematic, transitive error).
    - ``position_bias``: a push toward the first slot. Together with ``pair_noise`` it makes
      LLM(a, b) and LLM(b, a) disagree on some pairs (order effects, measured by ``flip_rate``).
    - ``pair_noise``: independent noise per ordered prompt: intransitive cycles (a > b > c > a) appear.
    With ``doc_noise = pair_noise = position_bias = 0`` and distinct labels it is a perfect judge.

    Args:
        labels: graded relevance per candidate id (missing ids count as 0).
        seed: selects the noise realisation (deterministic per ordered pair).

    ``calls`` counts the ordered pairs judged so far (one per LLM call).
    """

    def __init__(
        self,
        labels: Mapping[str, float],
        *,
        strength: float = 1.0,
        doc_noise: float = 0.0,
        position_bias: float = 0.0,
        pair_noise: float = 0.0,
        hard: bool = True,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        if min(doc_noise, pair_noise) < 0 or temperature <= 0:
            raise ValueError("doc_noise and pair_noise must be >= 0 and temperature > 0")
        self.labels = dict(labels)
        self.strength, self.doc_noise, self.position_bias = strength, doc_noise, position_bias
        self.pair_noise, self.hard, self.temperature, self.seed = pair_noise, hard, temperature, seed
        self.calls = 0
        self._utility: dict[str, float] = {}

    def utility(self, doc_id: str) -> float:
        """u(d): the judge's persistent view of a document's relevance."""
        u = self._utility.get(doc_id)
        if u is None:
            u = self.strength * float(self.labels.get(doc_id, 0.0))
            if self.doc_noise:
                u += self.doc_noise * _gauss(self.seed, "doc", doc_id)
            self._utility[doc_id] = u
        return u

    def margin(self, first: str, second: str) -> float:
        """z(first, second) for two candidate ids (> 0: the first is preferred)."""
        z = self.utility(first) - self.utility(second) + self.position_bias
        if self.pair_noise:
            z += self.pair_noise * _gauss(self.seed, "pair", first, second)
        return z

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        self.calls += len(pairs)
        out = []
        for first, second in pairs:
            z = self.margin(first.id, second.id)
            out.append(float(z > 0) if self.hard else 1.0 / (1.0 + math.exp(-z / self.temperature)))
        return out

    async def acompare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        return self.compare(query, pairs)

    def flip_rate(self, doc_ids: Sequence[str]) -> float:
        """Share of unordered pairs of ``doc_ids`` whose preferred document changes with the slot order
        (the paper's "order effect": 20.6% for Flan-T5-XL on DL19/20). Costs no calls."""
        flips = total = 0
        for b in range(1, len(doc_ids)):
            for a in range(b):
                x, y = doc_ids[a], doc_ids[b]
                flips += (self.margin(x, y) > 0) == (self.margin(y, x) > 0)
                total += 1
        return flips / total if total else 0.0
