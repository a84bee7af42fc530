"""Data types shared by every part of the core: candidates, comparator answers and results."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .budget import check_count
from .errors import MAX_CONSECUTIVE_FAILURES, InvalidAnswer
from .judging import JudgeStats


@dataclass
class Candidate:
    """One retrieved document to be reranked.

    Attributes:
        id: the document id (str). Ids need not be unique; the core identifies candidates by position.
        text: the passage text shown to the comparator (str; may be empty).
        metadata: free-form data carried through untouched (never read or mutated by the core).

    Raises:
        TypeError: when ``id`` or ``text`` is not a ``str`` or ``metadata`` is not a dict.
    """

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, kind in (("id", str), ("text", str), ("metadata", dict)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"Candidate.{name} must be {kind.__name__}, got {type(getattr(self, name)).__name__}")


Pair = tuple[Candidate, Candidate]


UNSENT, IN_FLIGHT = "unsent", "in_flight"
CUTS = (UNSENT, IN_FLIGHT)
"""The values of ``Judgment.cut``: a call the deadline kept from being sent, or one it cut in flight."""


@dataclass
class Judgment:
    """The answer to one LLM call on an ordered pair (first, second).

    Attributes:
        prob: P(first is preferred) in [0, 1] (a float; hard answers are 0.0 / 1.0); ``None`` means the call
            failed (it was issued and counts against the budget, but gave no usable answer). NaN becomes None.
        retries: transport retries spent on this call (``Accounting.retries`` sums them).
        prompt_tokens / completion_tokens: token usage where the backend reports it, else 0.
        error: a short reason when ``prob`` is None.
        cut: what the time budget did to this call, else None: ``"unsent"`` (the deadline came before it was
            sent: no call, nothing spent) or ``"in_flight"`` (sent, but its answer did not come before the
            deadline: cancelled, its late answer discarded, or its retry stopped by the deadline; a call spent, not
            a failed one). ``prob`` is None.
        cut_before_retry: with ``cut="in_flight"``: whether a judge error stopped the call rather than slowness
            alone: an attempt failed before the deadline (``error`` names it), and the deadline kept its retry
            from going out or cut the retry (a dead judge slower than the time left). A rerank
            in which no call was answered and such a call or a failed one was seen is a judge failure
            (docs/errors.md).
        status_code: the HTTP status of the failed call's last response (a 429, a 5xx), None when it got none (a
            refused connection, a timeout) or did not fail: what ``ComparatorUnavailable`` reports when every call
            failed.

    Raises:
        InvalidAnswer (a ValueError): ``prob`` is not a number (a str or a bool is not one), or lies outside
            [0, 1] (a comparator bug, never silently parsed or clipped); ``retries`` or a token count is not an
            int >= 0 (a negative count would let calls past ``token_budget``); a ``status_code`` other than None
            is not an int HTTP status (100-599). A ``Judgment`` is valid once made: nothing downstream checks it
            again.
    """

    prob: float | None
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    cut: str | None = None
    cut_before_retry: bool = False
    status_code: int | None = None

    def __post_init__(self) -> None:
        for name in COUNTS:
            count = getattr(self, name)
            if type(count) is not int or count < 0:  # the fast path: an int >= 0
                setattr(self, name, _count(name, count))
        if self.cut is not None and (self.cut not in CUTS or self.prob is not None):
            raise ValueError(f"Judgment.cut must be one of {CUTS} with prob None, got cut={self.cut!r}, "
                             f"prob={self.prob!r}")
        if self.cut_before_retry is not False and (self.cut_before_retry is not True or self.cut != IN_FLIGHT):
            raise ValueError(f"Judgment.cut_before_retry must be a bool, True only with cut={IN_FLIGHT!r}, got "
                             f"cut_before_retry={self.cut_before_retry!r}, cut={self.cut!r}")
        if self.status_code is not None:
            self.status_code = _status(self.status_code)
        if self.prob is None:
            return
        try:
            # float() would parse "0.9", True and numpy's True: a comparator bug
            if isinstance(self.prob, (str, bytes, bool)) or type(self.prob).__name__ in ("bool", "bool_"):
                raise TypeError
            prob = float(self.prob)
        except (TypeError, ValueError):
            raise InvalidAnswer(f"comparator returned {type(self.prob).__name__} {self.prob!r}, not a probability "
                                "in [0, 1] (a number) or None") from None
        if math.isnan(prob):
            self.prob, self.error = None, self.error or "NaN answer"
        elif not 0.0 <= prob <= 1.0:
            raise InvalidAnswer(f"comparator returned probability {prob} outside [0, 1]")
        else:
            self.prob = prob


HTTP_STATUSES = range(100, 600)
"""The values a ``Judgment.status_code`` may take (None aside)."""
COUNTS = ("retries", "prompt_tokens", "completion_tokens")
"""The counts a ``Judgment`` reports: ints >= 0."""


def _count(name: str, value: Any) -> int:
    """``value`` of a ``Judgment`` count as an int (``check_count``: a numpy integer is one).

    Raises:
        InvalidAnswer: not an integer >= 0 (a bool or a str is not one).
    """
    try:
        return check_count(value, name)
    except (TypeError, ValueError) as error:
        raise InvalidAnswer(f"comparator reported {name}={value!r}: {error}") from None


def _status(value: Any) -> int:
    """``value`` of ``Judgment.status_code`` as an int HTTP status (100-599; a numpy integer is one).

    Raises:
        InvalidAnswer: not an integer in 100-599 (a bool or a str is not one).
    """
    try:
        status = check_count(value, "status_code", minimum=None)
    except TypeError as error:
        raise InvalidAnswer(f"comparator reported status_code={value!r}: {error}") from None
    if status not in HTTP_STATUSES:
        raise InvalidAnswer(f"comparator reported status_code={value!r}: not an HTTP status (100-599)")
    return status


def check_candidates(query: Any, candidates: Any) -> list[Candidate]:
    """``candidates`` as a list after checking the types of ``query`` and of every candidate.

    Raises:
        TypeError: a non-str query, candidates that are not a sequence of ``Candidate``.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be str, got {type(query).__name__}")
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise TypeError("candidates must be a list of Candidate")
    for c in candidates:
        if not isinstance(c, Candidate):
            raise TypeError(f"candidates must be Candidate objects, got {type(c).__name__}")
    return list(candidates)


def to_judgments(answers: Sequence[Any], expected: int) -> list[Judgment]:
    """A comparator's answers (floats, None, or ``Judgment`` objects, which are valid once made) as ``Judgment``
    objects: the one place raw answers become judgments.

    Raises:
        InvalidAnswer (a ValueError): ``answers`` is not an iterable of answers (None, a number, a str, a dict),
            their number differs from the number of pairs, or an answer is not a probability in [0, 1] or None (a
            comparator bug, never silently clipped).
    """
    if isinstance(answers, (str, bytes, Mapping)) or not isinstance(answers, Iterable):
        raise InvalidAnswer(f"comparator returned {type(answers).__name__} {repr(answers)[:60]}, not one answer "
                            f"per pair (a list of {expected} probabilities, None or Judgment objects)")
    answers = list(answers)  # any iterable: a tuple, a numpy array, a generator
    if len(answers) != expected:
        raise InvalidAnswer(f"comparator returned {len(answers)} answers for {expected} pairs")
    return [a if isinstance(a, Judgment) else Judgment(None, error="no answer") if a is None else Judgment(a)
            for a in answers]


@dataclass
class Accounting:
    """What one query's reranking spent: the one declaration of the accounting fields, read by
    ``RerankResult``, ``RerankResult.stats()``, the errors that carry partial accounting and the bench rows.

    Attributes:
        calls: LLM calls issued (the budgeted unit; bidirectional = 2 per pair).
        comparisons: pair comparisons that needed new calls.
        rounds: sequential batches of calls (latency ~ rounds x call latency; the unit of ``max_rounds``).
        cache_hits: pair questions answered from the pair cache at no cost.
        ties: distinct pairs read as a tie when asked (outcome 0.5, resolved by prior rank): two slot orders that
            disagree, an answer of exactly 0.5, or a soft answer below the gate margin (``judging.gate``).
        failed_calls: calls that returned no usable answer (counted in ``calls``).
        cut_calls: calls sent whose answer did not come before the ``time_budget`` deadline (cancelled, or their
            late answers discarded): counted in ``calls``, not in ``failed_calls``.
        retries: transport retries (a remote judge's requests beyond the first of a call; never counted against
            the budget) of every call counted in ``calls``, whatever became of it: answered, failed, cut, or sent
            in a batch that raised (an error's ``accounting`` too). Where the comparator reports them. A call sent
            in a merged call that failed and sent again on its own (``rerank_many``, ``RerankPool``) counts the
            merged sending as one.
        prompt_tokens, completion_tokens: summed over calls, where the comparator reports them.
        wall_time_s: wall-clock seconds of the whole rerank.
    """

    calls: int = 0
    comparisons: int = 0
    rounds: int = 0
    cache_hits: int = 0
    ties: int = 0
    failed_calls: int = 0
    cut_calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_time_s: float = 0.0

    def counts(self) -> dict[str, Any]:
        """The accounting fields as a plain dict, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(Accounting)}


SETTING = {"setting": True}
"""The metadata of the ``RerankResult`` fields that echo a ``RerankSettings`` field."""


@dataclass(kw_only=True)
class RerankResult(Accounting):
    """What one reranking of one query produced (the ``Accounting`` fields plus the order and its settings).

    Attributes:
        order: indices into the input ``candidates``; always a permutation of ``range(len(candidates))``,
            best first (the first ``top_k`` are the reranked top-K, the rest best-effort).
        scores: one float per input candidate (aligned with ``candidates``, not with ``order``); higher is
            better and strictly decreasing along ``order``: ``(n - rank) / n``, so in (0, 1].
        ranker, oracle, budget, max_rounds, token_budget, time_budget, top_k, seed, cache, on_failure,
            max_concurrency, max_consecutive_failures: the settings used, every ``RerankSettings`` field (the
            names of the resolved ranker/oracle).
        exhausted: a cap (``budget`` calls, ``max_rounds`` rounds, ``token_budget`` tokens or ``time_budget``
            seconds) refused at least one question; ``exhausted_by`` names the caps that did (``RerankSettings``
            field names, in order).
        converged: the ranker ran its whole schedule with every comparison answered.
        failure: with ``on_failure="prior"``, the comparator error that stopped the calls (the rest of the order
            is best-effort), else None.
        errors: the distinct reasons of failed calls (at most 5), e.g. ``"APITimeoutError: ..."``.
        judge: ``JudgeStats`` of this query's answers (position bias, flips, soft answers, confidence).
    """

    candidates: list[Candidate]
    order: list[int]
    scores: list[float]
    # the settings, in ``RerankSettings``' order (``SETTING`` marks them for ``stats()``)
    ranker: str = field(metadata=SETTING)
    oracle: str = field(metadata=SETTING)
    budget: int | None = field(metadata=SETTING)
    max_rounds: int | None = field(default=None, metadata=SETTING)
    token_budget: int | None = field(default=None, metadata=SETTING)
    time_budget: float | None = field(default=None, metadata=SETTING)
    top_k: int = field(metadata=SETTING)
    seed: int = field(default=0, metadata=SETTING)
    cache: bool = field(default=True, metadata=SETTING)
    on_failure: str = field(default="raise", metadata=SETTING)
    max_concurrency: int | None = field(default=None, metadata=SETTING)
    max_consecutive_failures: int | None = field(default=MAX_CONSECUTIVE_FAILURES, metadata=SETTING)
    exhausted: bool = False
    exhausted_by: list[str] = field(default_factory=list)
    converged: bool = False
    failure: str | None = None
    errors: list[str] = field(default_factory=list)
    judge: JudgeStats = field(default_factory=JudgeStats)

    @property
    def ranked(self) -> list[Candidate]:
        """All candidates in reranked order (the input objects, untouched)."""
        return [self.candidates[i] for i in self.order]

    @property
    def top(self) -> list[Candidate]:
        """The reranked top-K candidates."""
        return self.ranked[: self.top_k]

    def stats(self) -> dict[str, Any]:
        """The settings (every ``RerankSettings`` field, in declaration order), the accounting fields, the status
        and ``judge`` (``JudgeStats.as_dict``) as one plain dict."""
        settings = {f.name: getattr(self, f.name) for f in fields(self) if f.metadata.get("setting")}
        status = {k: getattr(self, k) for k in ("exhausted", "exhausted_by", "converged", "failure", "errors")}
        return {**settings, **self.counts(), **status, "judge": self.judge.as_dict()}
