"""A simulated LLM comparator with graded relevance, persistent per-document error and position bias."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from ..budget import check_count, check_flag, check_real
from ..types import Pair
from .base import Comparator

_STD_NORMAL = NormalDist()

#: The noise knobs fitted to the paper's Flan-T5-XL judge on TREC DL19 + DL20 (its order effect, 20.6% of pairs
#: flipping with the slot order: Active Learners as Efficient PRP Rerankers, Results, "Order effects and
#: comparisons"; and its converged nDCG@10; ``pair_noise`` fixed at 0.5) by ``activeprp bench calibrate``
#: (docs/bench-judges.md).
CALIBRATED_PARAMS: dict[str, float] = {"strength": 1.0, "doc_noise": 1.172, "position_bias": 0.484, "pair_noise": 0.5}


def keyed_uniform(*key: object) -> float:
    """A uniform draw in (0, 1) that is a pure function of ``key`` (BLAKE2b of the key's parts: stable across runs,
    processes and asking orders; a text with a lone surrogate, e.g. a query cut inside a pair, hashes too). The
    one keyed draw of the simulated judges, this one's and the bench's (``activeprp_bench.judges``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, key)).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def keyed_gauss(*key: object) -> float:
    """A standard normal draw that is a pure function of ``key`` (inverse CDF of ``keyed_uniform``)."""
    return _STD_NORMAL.inv_cdf(keyed_uniform(*key))


_gauss = keyed_gauss  # its name here before the bench shared it


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
    - ``position_bias``: a push toward the first slot. Together with ``pair_noise`` it makes LLM(a, b) and
      LLM(b, a) disagree on some pairs (order effects, measured by ``flip_rate``).
    - ``pair_noise``: independent noise per ordered prompt: intransitive cycles (a > b > c > a) appear.
    With ``doc_noise = pair_noise = position_bias = 0`` and distinct labels it is a perfect judge.

    The noise depends on ``seed`` and the ids only, never on the query: the judge of many queries built by
    ``from_qrels`` answers each query exactly as a ``SimulatedComparator`` of that query's labels would.

    Args:
        labels: graded relevance per candidate id (missing ids count as 0), for whatever query is asked.
        seed: selects the noise realisation (deterministic per ordered pair).

    ``calls`` counts the ordered pairs judged so far (one per LLM call).

    Raises:
        TypeError: a knob of the wrong type: ``strength``, ``doc_noise``, ``position_bias``, ``pair_noise`` or
            ``temperature`` not a real number (``budget.check_real``: a bool is not one), ``hard`` not a bool,
            ``seed`` not an integer; ``labels`` not a mapping of str ids to real numbers.
        ValueError: a label or a number knob not finite, ``doc_noise`` or ``pair_noise`` negative, or
            ``temperature`` <= 0; ``compare`` for a query that a judge built by ``from_qrels`` has no labels for.
    """

    def __init__(self, labels: Mapping[str, float], *, strength: float = 1.0, doc_noise: float = 0.0,
                 position_bias: float = 0.0, pair_noise: float = 0.0, hard: bool = True, temperature: float = 1.0,
                 seed: int = 0) -> None:
        # Checked here, not where read: a string ``hard`` ran as True, a NaN knob answered every pair 0, a string
        # ``strength`` failed only in ``compare``.
        knob = "SimulatedComparator: "
        strength = check_real(strength, knob + "strength", signed=True)
        position_bias = check_real(position_bias, knob + "position_bias", signed=True)
        doc_noise, pair_noise = check_real(doc_noise, knob + "doc_noise"), check_real(pair_noise, knob + "pair_noise")
        temperature = check_real(temperature, knob + "temperature", positive=True)
        seed = check_count(seed, knob + "seed", minimum=None)
        hard = check_flag(hard, knob + "hard")
        self.labels = _checked_labels(labels, knob + "labels")
        self.strength, self.doc_noise, self.position_bias = strength, doc_noise, position_bias
        self.pair_noise, self.hard, self.temperature, self.seed = pair_noise, hard, temperature, seed
        self.calls = 0
        self.labels_by_query: dict[str, dict[str, float]] | None = None  # set by from_qrels
        self._doc_error: dict[str, float] = {}

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={getattr(self, k)!r}" for k in ("strength", "doc_noise", "position_bias",
                                                                "pair_noise", "hard", "temperature", "seed"))
        return f"SimulatedComparator({knobs})"

    @classmethod
    def from_qrels(cls, qrels: Mapping[str, Mapping[str, float]], queries: Mapping[str, str] | None = None, *,
                   seed: int = 0, **knobs: float) -> SimulatedComparator:
        """The simulated judge of many queries: ``compare(query, pairs)`` takes its graded labels from the qrels of
        the query with that text (negative grades and unjudged ids count as 0).

        Args:
            qrels: ``{qid: {docid: grade}}``.
            queries: ``{qid: query text}``; None: the keys of ``qrels`` are the query texts.
            seed: the noise realisation. knobs: the other keyword arguments of ``SimulatedComparator`` (none:
                a noiseless judge; ``**CALIBRATED_PARAMS``: the judge calibrated to the paper's).

        Raises:
            ValueError: two queries with the same text but different labels, or a bad knob; ``compare`` for a
                query text it was not built with.
        """
        judge = cls({}, seed=seed, **knobs)
        judge.labels_by_query, qid_of = {}, {}
        for qid, text in (queries if queries is not None else {q: q for q in qrels}).items():
            labels = {d: max(0.0, g) for d, g in _checked_labels(qrels.get(qid, {}), f"qrels[{qid!r}]").items()}
            if judge.labels_by_query.setdefault(text, labels) != labels:
                raise ValueError(f"queries {qid_of[text]} and {qid} have the same text but different qrels: the "
                                 "simulated judge finds a query's labels by its text")
            qid_of.setdefault(text, qid)
        return judge

    def labels_of(self, query: str | None) -> Mapping[str, float]:
        """The graded labels the judge uses for ``query`` (``labels`` unless built by ``from_qrels``)."""
        if self.labels_by_query is None:
            return self.labels
        labels = self.labels_by_query.get(query) if query is not None else None
        if labels is None:
            raise ValueError(f"no simulated judge for query {(query or '')[:60]!r}")
        return labels

    def utility(self, doc_id: str, query: str | None = None) -> float:
        """u(d): the judge's persistent view of a document's relevance (for ``query``, see ``labels_of``)."""
        u = self.strength * float(self.labels_of(query).get(doc_id, 0.0))
        if self.doc_noise:
            if doc_id not in self._doc_error:
                self._doc_error[doc_id] = _gauss(self.seed, "doc", doc_id)
            u += self.doc_noise * self._doc_error[doc_id]
        return u

    def margin(self, first: str, second: str, query: str | None = None) -> float:
        """z(first, second) for two candidate ids (> 0: the first is preferred)."""
        z = self.utility(first, query) - self.utility(second, query) + self.position_bias
        if self.pair_noise:
            z += self.pair_noise * _gauss(self.seed, "pair", first, second)
        return z

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        self.labels_of(query)  # an unknown query fails before anything is counted
        self.calls += len(pairs)
        zs = [self.margin(first.id, second.id, query) for first, second in pairs]
        return [float(z > 0) if self.hard else 1.0 / (1.0 + math.exp(-z / self.temperature)) for z in zs]

    async def acompare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        return self.compare(query, pairs)

    def flip_rate(self, doc_ids: Sequence[str], query: str | None = None) -> float:
        """Share of unordered pairs of ``doc_ids`` whose preferred document changes with the slot order (the
        paper's "order effect", its flip rate; Active Learners as Efficient PRP Rerankers, Results), in [0, 1]
        (0 for fewer than two ids). Costs no calls."""
        pairs = list(itertools.combinations(doc_ids, 2))
        flips = sum((self.margin(x, y, query) > 0) == (self.margin(y, x, query) > 0) for x, y in pairs)
        return flips / len(pairs) if pairs else 0.0


def _checked_labels(labels: object, name: str) -> dict[str, float]:
    """``labels`` as ``{id: float grade}``: checked here, not in the rerank (a str grade failed there with a bare
    "could not convert string to float", a list of grades with "dictionary update sequence", NaN was taken)."""
    if not isinstance(labels, Mapping):
        raise TypeError(f"{name} must be a mapping {{candidate id: grade}}, got {type(labels).__name__}")
    for key in labels:
        if not isinstance(key, str):
            raise TypeError(f"{name} must have str candidate ids as keys, got {type(key).__name__}")
    return {key: check_real(grade, f"{name}[{key!r}]", signed=True) for key, grade in labels.items()}
