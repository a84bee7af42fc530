"""A family of pairwise judges for the bench, beyond ``SimulatedComparator``'s one calibrated setting.

Every judge is an ``activeprp_core.Comparator``: ``compare(query, pairs)`` answers P(first slot preferred) in
[0, 1] per ordered pair. Simulated judges are built from graded qrels (TREC grades 0-3) and are deterministic per
``seed``: each random draw is a pure function of the seed and the draw's key (query, document ids, slot order;
see ``_uniform``), so the same (query, ordered pair) gets the same answer whenever and however often it is asked,
as a real LLM at temperature 0 would, and independently of the order in which questions come.

The simulated judges share one latent model (Thurstone-style, as ``SimulatedComparator``; knobs in ``Knobs``):

    g'(d)     = grade(d), or max_grade - grade(d) for a share ``doc_error_rate`` of (query, document)s
    u(d)      = strength * g'(d) + doc_noise * e(d)                e(d) ~ N(0, 1), fixed per (query, document)
    z(a, b)   = u(a) - u(b) + position_bias + pair_noise * n(a, b)  n(a, b) ~ N(0, 1) per ORDERED prompt
    answer    = 1.0 if z > 0 else 0.0                               (hard)
              = sigmoid(z / temperature)                            (soft)

The ``embedding-error`` judges (outside the family) take e(d) from a real embedding model instead of the noise
draw: what all-MiniLM-L6-v2's similarity of query and passage says beyond the grade (``EmbeddingErrorJudge``).
``weak`` (outside the family too) weighs the grade ``WEAK_STRENGTH`` instead of 1.

``bundled-ql`` is not simulated: it answers from the bundled SmolLM2-135M's real query-likelihood scores, cached
in ``activeprp_bench/data/`` (see ``CachedScoreJudge``).

Use ``build_judge(name, qrels, seed)`` (names in ``JUDGES``; the family the bench sweeps is ``FAMILY``;
``INFO[name]`` gives the declared answer kind, the flip-rate target and the published figure it is calibrated
against). Calibration figures: ``benchmarks/results/judges/README.md`` (made by
``python benchmarks/judge_calibration.py``).
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from activeprp_core import Comparator
from activeprp_core.comparators.simulated import keyed_gauss, keyed_uniform
from activeprp_core.types import Pair

Grades = Mapping[str, float]
"""One query's graded qrels: ``{docid: grade}``."""
Qrels = Mapping[str, Grades] | Grades
"""One query's grades, or ``{qid: {docid: grade}}`` for many queries (then the judge needs ``queries``)."""

DATA_DIR = Path(__file__).with_name("data")
BUNDLED_QL_CACHE = DATA_DIR / "bundled_ql_dl1920_top20.json.gz"
#: all-MiniLM-L6-v2's cosine of query and passage, DL19 + DL20 BM25 top-100 (``benchmarks/embedding_cache.py``).
MINILM_CACHE = DATA_DIR / "minilm_dl1920_top100.json.gz"


# The keyed draws are SimulatedComparator's (a counter-based generator, 5x faster than seeding a ``random.Random``
# per draw, which matters in the bench's grids of millions of prompts), so that the two stay one model.
_uniform, _gauss = keyed_uniform, keyed_gauss


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class _QueryGrades:
    """Resolves the grades of the query a prompt belongs to: one query's grades, or nested qrels plus
    ``queries`` (``{qid: query text}``: the text the rankers pass to ``compare``)."""

    def __init__(self, qrels: Qrels, queries: Mapping[str, str] | None) -> None:
        nested = any(isinstance(v, Mapping) for v in qrels.values())
        if nested and queries is None:
            raise ValueError("qrels of many queries ({qid: {docid: grade}}) need queries={qid: query text}, so "
                             "that the judge knows which query a prompt belongs to; or pass one query's grades")
        if not nested and queries is not None:
            raise ValueError("queries= goes with nested qrels {qid: {docid: grade}}, got one query's grades")
        self.single = None if nested else {str(d): float(g) for d, g in qrels.items()}
        self.by_text = {} if not nested else {text: {str(d): float(g) for d, g in qrels.get(qid, {}).items()}
                                              for qid, text in queries.items()}  # type: ignore[union-attr]

    def __call__(self, query: str) -> dict[str, float]:
        if self.single is not None:
            return self.single
        grades = self.by_text.get(query)
        if grades is None:
            raise ValueError(f"query {query[:60]!r} is not among this judge's queries")
        return grades


@dataclass(frozen=True)
class Knobs:
    """The latent model's knobs (see the module docstring); grades and noise in units of one relevance grade.

    Raises (``check``): ValueError for a negative noise or error rate, a rate above 1, or temperature <= 0.
    """

    strength: float = 1.0
    doc_noise: float = 0.0
    pair_noise: float = 0.0
    position_bias: float = 0.0
    doc_error_rate: float = 0.0
    max_grade: float = 3.0
    hard: bool = True
    temperature: float = 1.0

    def check(self) -> Knobs:
        if min(self.doc_noise, self.pair_noise, self.doc_error_rate) < 0 or self.doc_error_rate > 1:
            raise ValueError("doc_noise, pair_noise must be >= 0 and doc_error_rate in [0, 1]")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        return self


class GradedJudge(Comparator):
    """A simulated pairwise judge built from graded qrels (the latent model of the module docstring).

    Args:
        qrels: one query's grades ``{docid: grade}`` (unjudged documents count as 0), or ``{qid: {docid:
            grade}}`` together with ``queries``.
        knobs: the error model. seed: the noise realisation (each draw is a pure function of the seed, the
            query text and the document ids). queries: ``{qid: query text}`` for nested qrels.
        name: the registry name (shown in reports).

    ``calls`` counts the ordered prompts answered. ``score(query, doc_id)`` is the judge's persistent view
    u(d) of a document, ``margin`` the z of an ordered pair.

    Raises:
        ValueError: bad knobs; nested qrels without ``queries``; a prompt of a query it does not know.
    """

    def __init__(self, qrels: Qrels, knobs: Knobs, *, seed: int = 0, queries: Mapping[str, str] | None = None,
                 name: str = "graded") -> None:
        self.knobs, self.seed, self.name, self.model_name = knobs.check(), seed, name, name
        self._grades = _QueryGrades(qrels, queries)
        self._score: dict[tuple[str, str], float] = {}
        self.calls = 0

    def score(self, query: str, doc_id: str) -> float:
        """u(d) for one query: the grade (possibly mis-read, see ``doc_error_rate``) plus the document noise."""
        key = (query, doc_id)
        u = self._score.get(key)
        if u is None:
            k = self.knobs
            grade = self._grades(query).get(doc_id, 0.0)
            if k.doc_error_rate and _uniform(self.seed, "doc-error", query, doc_id) < k.doc_error_rate:
                grade = k.max_grade - grade
            u = k.strength * grade
            if k.doc_noise:
                u += k.doc_noise * self.doc_error(query, doc_id)
            self._score[key] = u
        return u

    def doc_error(self, query: str, doc_id: str) -> float:
        """e(d), the judge's persistent error on a document in units of ``doc_noise``: a standard normal draw."""
        return _gauss(self.seed, "doc", query, doc_id)

    def margin(self, query: str, first: str, second: str) -> float:
        """z(first, second): > 0 means the first slot is preferred."""
        k = self.knobs
        z = self.score(query, first) - self.score(query, second) + k.position_bias
        if k.pair_noise:
            z += k.pair_noise * _gauss(self.seed, "pair", query, first, second)
        return z

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        self.calls += len(pairs)
        zs = (self.margin(query, a.id, b.id) for a, b in pairs)
        if self.knobs.hard:
            return [float(z > 0) for z in zs]
        return [_sigmoid(z / self.knobs.temperature) for z in zs]

    def __repr__(self) -> str:
        return f"GradedJudge({self.name!r}, seed={self.seed}, {asdict(self.knobs)})"


class EmbeddingErrorJudge(GradedJudge):
    """A ``GradedJudge`` whose document error e(d) comes from a real embedding model instead of a noise draw:
    the cosine of query and passage (``MINILM_CACHE``: all-MiniLM-L6-v2) less what the passage's grade explains
    of it (the residual of a least-squares line of cosine on grade over the query's cached passages), standardised
    to mean 0 and standard deviation 1 per query. So its errors are the embedding model's: a passage that is more
    (or less) similar to the query than its grade says is over- (or under-) rated, and they are no extra signal
    about the grade. ``seed`` draws only the per-prompt noise.

    Raises:
        ValueError: a prompt whose query or passage is not in the cache (DL19 + DL20, BM25 top-100).
    """

    def __init__(self, qrels: Qrels, knobs: Knobs, *, seed: int = 0, queries: Mapping[str, str] | None = None,
                 name: str = "embedding-error", path: str | Path = MINILM_CACHE) -> None:
        super().__init__(qrels, knobs, seed=seed, queries=queries, name=name)
        self._cosine = similarities(str(path))
        self._errors: dict[str, dict[str, float]] = {}

    def doc_error(self, query: str, doc_id: str) -> float:
        if query not in self._errors:
            cosine = self._cosine.get(query, {})
            grades = self._grades(query)
            self._errors[query] = _residuals({d: (grades.get(d, 0.0), c) for d, c in cosine.items()})
        try:
            return self._errors[query][doc_id]
        except KeyError:
            raise ValueError(f"{self.name}: no cached similarity for passage {doc_id!r} of query {query[:60]!r} "
                             f"(the cache holds DL19 + DL20, BM25 top-100)") from None


@functools.cache
def similarities(path: str) -> dict[str, dict[str, float]]:
    """``{query text: {docid: cosine}}`` of a similarity cache, read once per process (the grid builds one judge per
    query)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return {text: data["scores"][qid] for qid, text in data["queries"].items()}


def _residuals(points: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """``{key: (x, y)}`` -> ``{key: r}``: the residuals of the least-squares line of y on x, standardised (mean 0,
    standard deviation 1; all 0 when they do not vary)."""
    if not points:
        return {}
    n = len(points)
    mx, my = (sum(p[i] for p in points.values()) / n for i in (0, 1))
    sxx = sum((x - mx) ** 2 for x, _ in points.values())
    slope = sum((x - mx) * (y - my) for x, y in points.values()) / sxx if sxx else 0.0
    res = {k: y - my - slope * (x - mx) for k, (x, y) in points.items()}
    sd = math.sqrt(sum(r * r for r in res.values()) / n)
    return {k: r / sd if sd else 0.0 for k, r in res.items()}


class CachedScoreJudge(Comparator):
    """An order-consistent judge answering from cached real per-passage scores (no model is run).

    P(first preferred) = sigmoid((s(first) - s(second)) / temperature), s = the cached score of (query, docid).
    With the bundled cache (``BUNDLED_QL_CACHE``: SmolLM2-135M query likelihood, mean log P(query | passage)
    in nats/token) and ``temperature=1`` this is exactly what ``TransformersComparator(mode="query_likelihood")``
    answers for these passages. No position effect (P(a, b) = 1 - P(b, a)), no per-prompt noise.

    Args:
        path: gzipped JSON ``{"queries": {qid: text}, "scores": {qid: {docid: score}}, ...}``.
        temperature: in score units (nats/token for the bundled cache).

    Raises:
        FileNotFoundError: no cache at ``path``. ValueError: temperature <= 0; a prompt whose query or passage
        is not in the cache (the bundled cache covers DL19 + DL20, BM25 top-20 per query).
    """

    def __init__(self, path: str | Path = BUNDLED_QL_CACHE, *, temperature: float = 1.0,
                 name: str = "bundled-ql") -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
        self.temperature, self.name, self.model_name, self.path = temperature, name, name, Path(path)
        self.meta = {k: v for k, v in data.items() if k not in ("queries", "scores")}
        self.scores: dict[str, dict[str, float]] = {
            text: data["scores"][qid] for qid, text in data["queries"].items() if qid in data["scores"]}
        self.calls = 0

    def score(self, query: str, doc_id: str) -> float:
        """The cached score of (query, passage)."""
        try:
            return self.scores[query][doc_id]
        except KeyError:
            raise ValueError(f"{self.name}: no cached score for passage {doc_id!r} of query {query[:60]!r} "
                             f"(the cache {self.path.name} holds {len(self.scores)} queries, BM25 top-"
                             f"{self.meta.get('depth')} each)") from None

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        out = [_sigmoid((self.score(query, a.id) - self.score(query, b.id)) / self.temperature) for a, b in pairs]
        self.calls += len(pairs)
        return out

    def __repr__(self) -> str:
        return f"CachedScoreJudge({self.name!r}, {self.path.name}, temperature={self.temperature})"


# ---- the family ---------------------------------------------------------------------------------------------
#: ``SimulatedComparator``'s calibrated knobs (``CALIBRATED_PARAMS``, fitted by ``activeprp bench calibrate`` on
#: DL19 + DL20: flip rate 20.6% of Flan-T5-XL, mean converged nDCG@10 of its paper Table 2 rows, 66.3).
CALIBRATED = Knobs(strength=1.0, doc_noise=1.172, position_bias=0.484, pair_noise=0.5)
#: Fitted temperature (grade units) at which soft answers of ``CALIBRATED`` are calibrated probabilities of
#: "the first passage has the higher grade" (log loss over DL19 + DL20 pairs of distinct grades).
SOFT_TEMPERATURE = 1.138
#: Position biases fitted (``benchmarks/judge_calibration.py --fit``) to flip rates of 0.10 (pair_noise 0.25: at 0.5 the
#: noise alone flips 10%), 0.40 (pair_noise 0.5) and 0.206 (pair_noise 0.15; and with ``doc-error``'s knobs).
MILD_NOISE = 0.25
MILD_BIAS, STRONG_BIAS, LOW_NOISE_BIAS, DOC_ERROR_BIAS = 0.223, 1.043, 0.504, 0.223
#: ``positional``'s position bias: ``CALIBRATED``'s with the bias raised until most answers follow the slot (flip
#: rate 0.64 and first-slot rate 0.82 on DL19 + DL20; not fitted to a model).
POSITIONAL_BIAS = 2.0
#: Qwen3-4B knobs fitted to the paper's appendix tables (mean of the DL19/DL20 converged rows; the bias fit to
#: "randomized as good as bidirectional" ends at ~0, see ``qwen3_4b``).
QWEN_KNOBS = Knobs(strength=1.0, doc_noise=1.078, position_bias=0.023, pair_noise=0.5)
#: Flan-T5-XL knobs fitted to Setwise's pairwise heapsort (70.5 / 69.2 nDCG@10) at the paper's flip rate.
SETWISE_KNOBS = Knobs(strength=1.0, doc_noise=1.09, position_bias=0.457, pair_noise=0.5)
#: ``ql-like``: per-document noise and temperature fitted to the bundled model's cached QL answers.
QL_LIKE_KNOBS = Knobs(strength=1.0, doc_noise=2.086, hard=False, temperature=3.683)
#: ``bundled-ql`` answers with TransformersComparator's own temperature (sigmoid of the score difference).
BUNDLED_TEMPERATURE = 1.0

Factory = Callable[..., Comparator]


@dataclass(frozen=True)
class JudgeInfo:
    """What the registry declares about a judge: ``kind`` ("hard": answers in {0, 1}; "soft": in (0, 1)),
    ``flip_target`` (the flip rate it is built for, share of pairs; None = not set), ``calibrated_against``
    (the published or measured figure, or None: not calibrated), ``max_depth`` (candidates per query its
    answers cover; None = any), ``collections`` (the collections it can judge; None = any with qrels),
    ``family`` (whether it belongs to ``FAMILY``, the judges ``auto``'s table is built on; False: a judge for
    checks outside it, named with ``--judge``)."""

    kind: str
    flip_target: float | None
    calibrated_against: str | None
    max_depth: int | None = None
    collections: tuple[str, ...] | None = None
    family: bool = True


JUDGES: dict[str, Factory] = {}
INFO: dict[str, JudgeInfo] = {}


def _register(name: str, info: JudgeInfo):
    def deco(fn: Factory) -> Factory:
        JUDGES[name], INFO[name] = fn, info
        return fn
    return deco


def _graded(name: str, knobs: Knobs, judge: type[GradedJudge] = GradedJudge) -> Factory:
    def make(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
        return judge(qrels, knobs, seed=seed, queries=queries, name=name)
    return make


_XL = "paper flip-rate table (Flan-T5-XL, 20.6% of pairs) and Table 2 Flan-T5-XL converged mean (66.3)"


@_register("calibrated", JudgeInfo("hard", 0.206, _XL))
def calibrated(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``SimulatedComparator``'s calibrated model (``CALIBRATED``), hard answers: a Flan-T5-XL-like judge with
    persistent per-document error, position bias and per-prompt noise. Calibrated against the paper's flip-rate
    table (20.6%) and the mean converged nDCG@10 of the Flan-T5-XL rows of its Table 2 (66.3)."""
    return _graded("calibrated", CALIBRATED)(qrels, seed, queries=queries)


@_register("soft-calibrated", JudgeInfo("soft", 0.206, _XL + "; probabilities fitted by log loss to qrels"))
def soft_calibrated(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """The calibrated model answering a probability (logprob-style) ``sigmoid(z / SOFT_TEMPERATURE)``, the
    temperature fitted so that P matches the frequency of "first has the higher grade" (log loss over DL19 +
    DL20 pairs). Same flips as ``calibrated`` (a flip depends only on the signs)."""
    return _graded("soft-calibrated", replace(CALIBRATED, hard=False, temperature=SOFT_TEMPERATURE))(
        qrels, seed, queries=queries)


@_register("overconfident", JudgeInfo("soft", 0.206, None))
def overconfident(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``soft-calibrated`` with a temperature 4x smaller: same decisions, probabilities pushed toward 0/1 (wrong
    answers come with high confidence). Not calibrated (a design point; its calibration error is reported)."""
    return _graded("overconfident", replace(CALIBRATED, hard=False, temperature=SOFT_TEMPERATURE / 4))(
        qrels, seed, queries=queries)


@_register("underconfident", JudgeInfo("soft", 0.206, None))
def underconfident(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``soft-calibrated`` with a temperature 4x larger: same decisions, probabilities squeezed toward 0.5 (a
    judge that hedges). Not calibrated (a design point)."""
    return _graded("underconfident", replace(CALIBRATED, hard=False, temperature=SOFT_TEMPERATURE * 4))(
        qrels, seed, queries=queries)


@_register("mild-bias", JudgeInfo("hard", 0.10, None))
def mild_bias(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``calibrated`` with half its per-prompt noise (``MILD_NOISE``) and a smaller position bias
    (``MILD_BIAS``, fitted to flip 10% of pairs). Not calibrated to a published judge (between the
    order-consistent judges and Flan-T5-XL)."""
    return _graded("mild-bias", replace(CALIBRATED, pair_noise=MILD_NOISE, position_bias=MILD_BIAS))(
        qrels, seed, queries=queries)


@_register("strong-bias", JudgeInfo("hard", 0.40, None))
def strong_bias(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``calibrated`` with a strong position bias (``STRONG_BIAS``, fitted to flip 40% of pairs, the top of the
    family's 0-40% range of flip rates; the bundled model under the A/B prompt is the extreme, 100%). Not calibrated
    to a published judge."""
    return _graded("strong-bias", replace(CALIBRATED, position_bias=STRONG_BIAS))(qrels, seed, queries=queries)


@_register("no-bias-noisy", JudgeInfo("hard", None, None))
def no_bias_noisy(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """No position bias, high per-prompt noise (pair_noise 1.0, twice ``calibrated``'s): its flips come only
    from noise, symmetric in the slots (first-slot rate 0.5), and cycles are frequent. Not calibrated."""
    return _graded("no-bias-noisy", replace(CALIBRATED, position_bias=0.0, pair_noise=1.0))(
        qrels, seed, queries=queries)


@_register("low-noise", JudgeInfo("hard", 0.206, "paper flip-rate table (20.6%)"))
def low_noise(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Low per-prompt noise (pair_noise 0.15): its errors are systematic (per document) and its flips
    deterministic (pairs closer than the bias flip). Position bias ``LOW_NOISE_BIAS`` fitted to the paper's 20.6%
    flip rate; quality not fitted."""
    return _graded("low-noise", replace(CALIBRATED, pair_noise=0.15, position_bias=LOW_NOISE_BIAS))(
        qrels, seed, queries=queries)


@_register("consistent", JudgeInfo("hard", 0.0, None))
def consistent(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Order-consistent hard judge: per-document error only (no bias, no per-prompt noise), so it never flips
    and never cycles; a transitive but wrong order. Not calibrated."""
    return _graded("consistent", replace(CALIBRATED, position_bias=0.0, pair_noise=0.0))(
        qrels, seed, queries=queries)


@_register("doc-error", JudgeInfo("hard", 0.206, "paper flip-rate table (20.6%)"))
def doc_error(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Systematically mis-judged documents: 3% of (query, document)s are read with the grade reversed
    (3 - grade: a keyword-stuffed non-answer judged perfect, an answer judged off-topic), over smaller
    Gaussian document noise (0.6) and ``calibrated``'s per-prompt noise; its errors are few and large instead
    of many and small. Position bias ``DOC_ERROR_BIAS`` fitted to the paper's 20.6% flip rate; quality not
    fitted (it lands at the Flan-T5-XL Table 2 level, see the results)."""
    return _graded("doc-error", replace(CALIBRATED, doc_noise=0.6, doc_error_rate=0.03,
                                                    position_bias=DOC_ERROR_BIAS))(
        qrels, seed, queries=queries)


@_register("qwen3-4b", JudgeInfo("hard", None, "paper appendix Qwen3-4B DL19/DL20 tables (converged rows)"))
def qwen3_4b(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """A Qwen3-4B-like judge (``QWEN_KNOBS``), calibrated against the paper's appendix Qwen3-4B-Instruct
    tables: ``doc_noise`` fitted to the mean converged nDCG@10 of its nine ranker x oracle rows on DL19 + DL20
    (68.1), the position bias to its randomized rows being as good as its bidirectional ones (-0.46 points).
    The bias fit ends at ~0 (0.023): even without bias this model's randomized rows trail by ~1.4 points, so
    the judge is nearly unbiased (first-slot rate ~50%) and flips ~12% of pairs from per-prompt noise alone."""
    return _graded("qwen3-4b", QWEN_KNOBS)(qrels, seed, queries=queries)


@_register("setwise-xl", JudgeInfo("hard", 0.206, "Setwise (Zhuang et al. 2024) Flan-T5-XL pairwise heapsort "
                                   "70.5 / 69.2 and the paper's flip rate 20.6%"))
def setwise_xl(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """A Flan-T5-XL judge as Setwise measured it (``SETWISE_KNOBS``): flip rate 20.6% (paper), ``doc_noise``
    fitted to Setwise's pairwise heapsort nDCG@10 (DL19 70.5, DL20 69.2; both orders per comparison, i.e. our
    bidirectional heapsort run to completion)."""
    return _graded("setwise-xl", SETWISE_KNOBS)(qrels, seed, queries=queries)


@_register("ql-like", JudgeInfo("soft", 0.0, "the bundled model's cached QL answers (measured, not published)"))
def ql_like(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Query-likelihood-like: a noisy per-document score, P = sigmoid(score difference / T), no position
    effect and no per-prompt noise (perfectly order-consistent, transitive). ``doc_noise`` and T
    (``QL_LIKE_KNOBS``) fitted to the bundled SmolLM2-135M's real QL answers on DL19 + DL20 top-20 (the
    nDCG@10 of sorting by its score, and its mean confidence). No published figure."""
    return _graded("ql-like", QL_LIKE_KNOBS)(qrels, seed, queries=queries)


@_register("positional", JudgeInfo("hard", None, None, family=False))
def positional(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Outside the family: ``calibrated`` with a position bias (``POSITIONAL_BIAS``) under which most answers
    follow the slot, not the passages (flip rate 0.64, first-slot rate 0.82), beyond the family's most biased
    judge (``strong-bias``, 0.37). The check of ``adaptive``'s positional rule under a round cap
    (``JudgeTally.positional``). Not calibrated."""
    return _graded("positional", replace(CALIBRATED, position_bias=POSITIONAL_BIAS))(qrels, seed, queries=queries)


_DL = ("dl19", "dl20")


@_register("embedding-error", JudgeInfo("hard", None, None, collections=_DL, family=False))
def embedding_error(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Outside the family: ``calibrated`` with its document noise replaced, at the same scale, by the part of
    all-MiniLM-L6-v2's similarity of query and passage that the grade does not explain (``EmbeddingErrorJudge``):
    errors from a real embedding model. A held-out check of ``auto``, not tuned on. Not calibrated."""
    return _graded("embedding-error", CALIBRATED, EmbeddingErrorJudge)(qrels, seed, queries=queries)


@_register("embedding-error-soft", JudgeInfo("soft", None, None, collections=_DL, family=False))
def embedding_error_soft(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """``embedding-error`` answering soft probabilities at ``soft-calibrated``'s temperature. Not calibrated."""
    return _graded("embedding-error-soft", replace(CALIBRATED, hard=False, temperature=SOFT_TEMPERATURE),
                   EmbeddingErrorJudge)(qrels, seed, queries=queries)


#: ``weak``'s strength: ``CALIBRATED``'s grade weight cut to 0.75 (the document and per-prompt noise kept), a
#: judge that still beats the first stage by a few points.
WEAK_STRENGTH = 0.75


@_register("weak", JudgeInfo("hard", None, None, family=False))
def weak(qrels: Qrels, seed: int = 0, *, queries: Mapping[str, str] | None = None) -> Comparator:
    """Outside the family: ``calibrated`` with the grade's weight cut to ``WEAK_STRENGTH``, a weak judge (e.g. a
    small model) that still beats the first stage. A held-out check of ``auto``, not tuned on. Not calibrated."""
    return _graded("weak", replace(CALIBRATED, strength=WEAK_STRENGTH))(qrels, seed, queries=queries)


_REAL = "real answers of the bundled SmolLM2-135M (query likelihood)"


@_register("bundled-ql", JudgeInfo("soft", 0.0, _REAL, max_depth=20, collections=("dl19", "dl20")))
def bundled_ql(qrels: Qrels | None = None, seed: int = 0, *, queries: Mapping[str, str] | None = None
               ) -> Comparator:
    """The bundled SmolLM2-135M-Instruct's real answers under query likelihood, from the cache
    ``BUNDLED_QL_CACHE`` (DL19 + DL20, BM25 top-20 per query; built by ``benchmarks/bundled_ql_cache.py``);
    temperature 1 (``BUNDLED_TEMPERATURE``), as ``TransformersComparator`` answers. ``qrels`` and ``seed`` are
    ignored (a real model's answers); a passage outside the cache raises ValueError. Not a simulation."""
    return CachedScoreJudge(BUNDLED_QL_CACHE, temperature=BUNDLED_TEMPERATURE, name="bundled-ql")


FAMILY: tuple[str, ...] = tuple(n for n in JUDGES if INFO[n].family)
"""The judges the bench sweeps with ``--judges family`` (every registered judge but the checks outside it:
``positional``, ``embedding-error``, ``embedding-error-soft`` and ``weak``)."""


def covers(name: str, depth: int, collection: str | None = None) -> bool:
    """Whether judge ``name``'s answers cover ``depth`` candidates per query of ``collection`` (``dl19``,
    ``dl20``; None = any collection): ``bundled-ql`` covers 20 candidates of DL19 and DL20."""
    info = INFO[name]
    in_coll = info.collections is None or (collection is not None and collection in info.collections)
    return in_coll and (info.max_depth is None or depth <= info.max_depth)


def family_for_depth(depth: int, collection: str | None = None) -> tuple[str, ...]:
    """The ``FAMILY`` judges that ``covers`` ``depth`` candidates per query of ``collection``."""
    return tuple(n for n in FAMILY if covers(n, depth, collection))


def build_judge(name: str, qrels: Qrels | None, seed: int = 0, *, queries: Mapping[str, str] | None = None
                ) -> Comparator:
    """The judge ``name`` of ``JUDGES`` for ``qrels`` (one query's ``{docid: grade}``, or ``{qid: {docid:
    grade}}`` with ``queries={qid: query text}``) and noise realisation ``seed``.

    Raises:
        ValueError: an unknown name (the message lists the known ones), or qrels/queries that do not fit.
    """
    factory = JUDGES.get(name)
    if factory is None:
        raise ValueError(f"unknown judge {name!r}; choose one of {', '.join(JUDGES)}")
    if qrels is None and not name.startswith("bundled-"):
        raise ValueError(f"judge {name!r} is simulated from qrels: pass the graded qrels")
    return factory(qrels, seed, queries=queries)


def resolve_judges(names: Sequence[str], depth: int | None = None, collection: str | None = None
                   ) -> list[str]:
    """Judge names from a command line (``--judge NAME`` repeated, ``--judges family``): ``"family"`` expands to
    ``FAMILY`` (only the judges covering ``depth`` candidates of ``collection`` when ``depth`` is given), a
    judge outside it (``positional``) is taken by its name;
    duplicates are dropped, order kept.

    Raises:
        ValueError: an unknown name, or an explicitly named judge that does not cover ``depth``/``collection``.
    """
    out: list[str] = []
    for name in names:
        if name == "family":
            out.extend(family_for_depth(depth, collection) if depth is not None else FAMILY)
        elif name not in JUDGES:
            raise ValueError(f"unknown judge {name!r}; choose one of {', '.join(JUDGES)} or 'family'")
        elif depth is not None and not covers(name, depth, collection):
            raise ValueError(f"judge {name!r} has no answers for {depth} candidates of {collection or 'any'} "
                             f"collection (it covers {INFO[name].max_depth} of {INFO[name].collections})")
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def comparator_for(name: str, seed: int = 0) -> Callable[[Any], Callable[[str], Comparator]]:
    """The bench grid's judge factory for ``name``: ``collection -> (qid -> judge)``, one judge per query built
    from ``collection.qrels[qid]`` (any object with a ``qrels`` mapping ``{qid: {docid: grade}}``).

    Raises:
        ValueError: an unknown name.
    """
    if name not in JUDGES:
        raise ValueError(f"unknown judge {name!r}; choose one of {', '.join(JUDGES)}")
    return lambda collection: lambda qid: build_judge(name, collection.qrels.get(qid, {}), seed)


__all__ = ["BUNDLED_QL_CACHE", "FAMILY", "INFO", "JUDGES", "CachedScoreJudge", "GradedJudge", "JudgeInfo", "Knobs",
           "build_judge", "comparator_for", "covers", "family_for_depth",
           "resolve_judges"]
