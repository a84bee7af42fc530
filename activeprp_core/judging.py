"""What the judge's own answers say about it: ``JudgeStats`` (diagnostics on every ``RerankResult``), the running
``JudgeTally`` behind them, the confidence gate that turns low-confidence answers into ties, and the record of round
latencies (``RoundLatency``) that plans the rounds fitting a ``time_budget``.

The confidence gate. A comparator answers P(first slot preferred) = p; its confidence is |p - 0.5|. Hard answers
(0 or 1) have confidence 0.5 and always count as clear. A soft answer (0 < p < 1) whose confidence is below the
*margin* is read as a tie (outcome 0.5, resolved by prior rank as every tie), one above it as a whole win (see
``gate``); two consistent answers of a bidirectional pair are gated on their mean confidence. The margin is the
``GATE_QUANTILE`` quantile of the confidences of the soft answers this judge gave so far (in this rerank, or
across the queries of one ``rerank_many``; the last ``MARGIN_WINDOW`` of them), so about that share of a soft
judge's answers become ties whatever its temperature (a quantile, unlike a fixed margin, does not depend on it);
before ``MIN_ANSWERS`` soft answers it is 0 and nothing is gated. Why 0.3, and the mean of a pair's two
confidences: docs/judge-diagnostics.md.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from .budget import check_count

Prompt = tuple[int, int]

GATE_QUANTILE = 0.3
"""The share of a soft judge's answers (the least confident ones) read as ties (see the module docstring)."""
MIN_ANSWERS = 20
"""Soft answers needed before the gate margin counts (``JudgeTally.margin``); answers needed before a judge can
count as positional (``JudgeTally.positional``)."""
SAME_CONFIDENCE = 1e-9
"""Confidences closer than this are equal for the gate: a judge's P(A) and P(B) often come from different float
operations (e.g. two logprobs), so one confidence level arrives as values an ulp apart (``gate``)."""
CONSISTENT_PAIRS = 20
"""Pairs asked both ways after which a judge that flipped on under 5% of them counts as order-consistent."""
MARGIN_WINDOW = 1 << 15
"""The soft answers whose confidences the gate margin reads: a judge's last 32,768 (``JudgeTally(window=...)``), in
one rerank or across the queries of one ``rerank_many`` (its carried record); older ones age out. So the record's
memory (about 1.3 MB full) and the cost of an answer (an insert into and a removal from a sorted list of this size:
about 5 us) stay bounded: kept whole, both grew with every answer (review s68j: ``rerank_many`` went from 9 to 24 ms
per query over 5,000 queries, and one allpairs rerank of 244,650 soft answers spent 3.5 s of CPU inserting). Why this
size: above the soft answers of every committed benchmark's rerank (under 10,000: N=100, every pair both ways) and
budgeted ``rerank_many`` (54 DL20 queries x budget 500 = 27,000), so their figures are those of the whole record;
and a quantile over 32,768 answers is as steady as over all of them (its rank share's standard error is 0.0025)."""
POSITIONAL_SHARE = 0.5
"""The share of a judge's answers decided by the slot, not the passages, above which it counts as positional
(``JudgeTally.positional``): past it a single answer tells the slot more often than the passages."""


@dataclass(frozen=True)
class JudgeStats:
    """Diagnostics of the judge from its own answers (``RerankResult.judge``; counts only new answers, never
    cache hits or failed calls).

    Attributes:
        answers: prompts answered (calls that returned a probability).
        first_slot_rate: share of answers with p > 0.5 (preferring slot A); 0.5 = no position bias visible;
            None when ``answers == 0``.
        flip_rate: share of the pairs answered in both slot orders whose two answers preferred the same slot (the
            winner flipped with the order); None when no pair was asked both ways. Only those pairs count, so the
            figure is the judge's rate on the pairs its oracle and ranker chose to ask both ways: every pair asked
            with ``bidirectional``; with ``adaptive`` the re-asked upsets (and any ``BothOrders`` question), no more
            once the judge looks order-consistent: a sample that can read far below the judge's rate (see
            ``oracles.AdaptiveOracle``). How many pairs it counts is not reported.
        soft_rate: share of answers strictly between 0 and 1; None when ``answers == 0``.
        mean_confidence: mean |p - 0.5| over answers (0.5 for hard answers); None when ``answers == 0``.
    """

    answers: int = 0
    first_slot_rate: float | None = None
    flip_rate: float | None = None
    soft_rate: float | None = None
    mean_confidence: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for ``RerankResult.stats()``, logs and JSON)."""
        return asdict(self)

    def summary(self) -> str:
        """One printable line: ``answers=.. first_slot_rate=.. flip_rate=.. soft_rate=.. mean_confidence=..``
        (rates to 3 decimals; ``-`` where None)."""
        return " ".join(f"{k}={'-' if v is None else round(v, 3)}" for k, v in self.as_dict().items())


def pooled(stats: Iterable[JudgeStats | None]) -> JudgeStats:
    """The ``JudgeStats`` of several queries' answers together (None entries skipped): answers summed, rates
    weighted by answers; ``flip_rate`` is the answer-weighted mean over the queries that measured one (the pair
    counts behind it are not in ``JudgeStats``)."""
    stats = [s for s in stats if s is not None and s.answers]
    total = sum(s.answers for s in stats)

    def mean(name: str) -> float | None:
        known = [(getattr(s, name), s.answers) for s in stats if getattr(s, name) is not None]
        weight = sum(w for _, w in known)
        return sum(v * w for v, w in known) / weight if weight else None

    return JudgeStats(total, *(mean(f.name) for f in fields(JudgeStats)[1:]))  # every field after ``answers``


def _share(part: int | float, whole: int) -> float | None:
    return part / whole if whole else None


class JudgeTally:
    """Running counts of one judge's answers: what ``JudgeStats`` reports and what the gate and the adaptive
    oracle read. One per query (``RerankResult.judge``); ``rerank_many`` also keeps one across its queries.

    Args:
        window: the margin reads the confidences of the last ``window`` soft answers (an int >= 1; default
            ``MARGIN_WINDOW``); None: of every one. The counts behind ``stats`` are over every answer either way.

    Raises:
        TypeError / ValueError: ``window`` is not an int >= 1 or None.
    """

    def __init__(self, window: int | None = MARGIN_WINDOW) -> None:
        self.answers = self.first = self.soft = self.pairs = self.flips = 0
        self.confidence = 0.0
        self.window = check_count(window, "window", minimum=1, allow_none=True)
        self.soft_confidences: list[float] = []  # sorted, of the soft answers to first asks (no re-asks)
        self._arrived: deque[float] = deque()  # the same confidences in the order they came (with a window)

    def record(self, p: float | None, other: float | None = None, sample: bool = True) -> None:
        """Count the answer ``p`` of one prompt (None = a failed call: not an answer); ``other``: this query's
        answer in the other slot order, if any (the pair then counts for the flip rate: flipped when both answers
        preferred the same slot). ``sample=False`` for a re-ask (``Oracle.reask``): counted in the stats, left out
        of the margin, which such a selected sample would skew."""
        if p is None:
            return
        self.answers += 1
        self.first += p > 0.5
        confidence = abs(p - 0.5)
        self.confidence += confidence
        self.soft += 0.0 < p < 1.0
        if sample and 0.0 < p < 1.0:
            self._sample(confidence)
        if other is not None:
            self.pairs += 1
            self.flips += (p > 0.5 and other > 0.5) or (p < 0.5 and other < 0.5)

    def _sample(self, confidence: float) -> None:
        """Add a soft answer's confidence to the margin's sample; with a ``window``, drop the oldest past it."""
        bisect.insort(self.soft_confidences, confidence)
        if self.window is None:
            return
        self._arrived.append(confidence)
        if len(self._arrived) > self.window:
            oldest = self._arrived.popleft()
            del self.soft_confidences[bisect.bisect_left(self.soft_confidences, oldest)]

    def stats(self) -> JudgeStats:
        """The ``JudgeStats`` of the answers counted so far."""
        return JudgeStats(self.answers, _share(self.first, self.answers), _share(self.flips, self.pairs),
                          _share(self.soft, self.answers), _share(self.confidence, self.answers))

    def margin(self, quantile: float | None = None) -> float:
        """The gate margin: the ``quantile`` (default ``GATE_QUANTILE``) quantile (lower) of the soft answers'
        confidences (the last ``window`` of them); 0 (no gate) before ``MIN_ANSWERS`` soft answers, whose quantile
        would be mostly noise. Always < 0.5, so hard answers are never gated."""
        quantile = GATE_QUANTILE if quantile is None else quantile
        confs = self.soft_confidences
        return confs[min(len(confs) - 1, int(quantile * len(confs)))] if len(confs) >= MIN_ANSWERS else 0.0

    @property
    def positional(self) -> bool:
        """Whether most of the judge's answers look decided by the slot, not the passages: the share of answers
        that prefer one slot, s, over at least ``MIN_ANSWERS`` answers, has |2s - 1| above ``POSITIONAL_SHARE``.
        Why |2s - 1|: with the slot orders drawn at random (``randomized``, ``adaptive``), answers that read the
        passages prefer either slot equally often, so at least that share of the answers followed the slot (a
        flip rate above one half: 0.64 for a judge with first-slot rate 0.82; the family's most biased judge,
        flip rate 0.37, has 0.69). A point estimate over one query's first rounds: near the threshold both slot
        orders and one cost about the same quality (docs/judge-diagnostics.md)."""
        return self.answers >= MIN_ANSWERS and abs(2 * self.first - self.answers) > POSITIONAL_SHARE * self.answers

    @property
    def consistent(self) -> bool:
        """Whether the judge looks order-consistent: under 5% flips over at least ``CONSISTENT_PAIRS`` pairs asked
        both ways. Under ``adaptive`` those are the re-asked upsets, not a sample of the pairs asked: under a weak
        first stage most are real preferences that a judge answers the same way in both orders, so this can hold
        for a judge that flips often (``oracles.AdaptiveOracle``)."""
        return self.pairs >= CONSISTENT_PAIRS and self.flips < 0.05 * self.pairs


def gate(p: float | None, margin: float) -> float | None:
    """The outcome of answer ``p``: 0.5 (a tie) when its confidence |p - 0.5| is below ``margin`` by more than
    ``SAME_CONFIDENCE`` (or p = 0.5), else a win for the preferred slot, 1.0 or 0.0. Hard answers and None are
    returned as they are. The tolerance is for a judge with one confidence level whose P(A) and P(B) come from
    different float operations (0.909 for "A", 1 - 0.909 for "B", one ulp apart): without it, every answer for
    one slot would be gated into a tie.

    A confident soft answer counts as a whole win, not as p, so the rankers that add outcomes up (allpairs, PAC,
    bubble passes) read the judge's probabilities only through their rank among its own confidences, whatever its
    calibration (the measurements behind this: docs/judge-diagnostics.md).

    Args:
        p: P(first slot preferred) in [0, 1], or None (unknown). margin: the gate margin, in [0, 0.5).

    Returns:
        0.5, 0.0 or 1.0 (p itself when hard), or None."""
    if p is None or p in (0.0, 1.0):
        return p
    return 0.5 if p == 0.5 or abs(p - 0.5) < margin - SAME_CONFIDENCE else float(p > 0.5)


class Answers(dict):
    """One query's pair cache ``{(first, second): P(first slot preferred) or None}`` with the judge's running
    record: ``own`` (this query's answers: ``RerankResult.judge``) and ``pool`` (what the gate and the adaptive
    oracle read: a ``JudgeTally`` shared across the queries of one ``rerank_many``, else ``own``)."""

    def __init__(self, pool: JudgeTally | None = None) -> None:
        super().__init__()
        self.own = JudgeTally()
        self.pool = self.own if pool is None else pool
        self._tallies = (self.own,) if pool is None else (self.own, pool)
        self.margin = self.pool.margin()

    def record(self, prompt: Prompt, p: float | None, sample: bool = True) -> None:
        """Store a new answer (a call's, never a cache hit) and count it (``JudgeTally.record``)."""
        other = None if p is None else self.get((prompt[1], prompt[0]))
        for tally in self._tallies:
            tally.record(p, other, sample)
        self[prompt] = p
        self.margin = self.pool.margin()


LATENCY_QUANTILE = 0.75
"""The quantile of the observed round latencies that ``RoundLatency.estimate`` takes as one round's latency: above
the median, so the rounds planned to fit a time budget fit it more often than not (see docs/latency.md)."""
LATENCY_WINDOW = 256
"""The most recent round latencies a ``RoundLatency`` keeps (older ones age out as the judge's latency drifts)."""
LATENCY_HORIZON = 60.0
"""Seconds a round latency counts for ``RoundLatency``; once they are this old the estimate starts again from the
rounds sent since (none: the round cap alone), as on a fresh start. An estimate that plans no round is not left to
age out: a stale one is tested sooner (``RoundLatency.probe``)."""


class RoundLatency:
    """The comparator's observed round latencies (seconds from a batch's send to its answers, a cut round's
    time to the deadline as a lower bound), carried across the queries of a ``rerank_many`` (and the requests of
    ``activeprp serve``) like the judge's record; one per rerank otherwise. ``estimate`` plans the rounds that fit a
    ``time_budget``, ``call_floor`` is the least time left a call is sent with (``CallGuard.too_late``): the
    answered calls' latency (``record_call``: a comparator that guards its calls times each one), else the fastest
    answered round, or the longest round cut with no call back since the newest answer where that is longer (a
    judge slower than the time budgets, or one that turned slower). Only the last ``LATENCY_WINDOW`` rounds (and
    calls) observed within ``LATENCY_HORIZON`` seconds count (on ``clock``). Thread-safe: a sync comparator's
    worker threads read it.

    A record that refuses a query's calls is never refreshed by them: with less time left than the ``estimate``
    no round fits (``Ledger.rounds_left``), with no more than ``call_floor`` every call is too late
    (``CallGuard.too_late``), so no call is sent to observe a faster round. A stale one (a slow spell of the
    judge, or a burst whose rounds waited for the judge's slots) would shut a judge that answers fast again out for
    the horizon. So it is tested: a round sent when the record refuses its calls, by either floor, and no round
    has been observed (nor probe sent) for that floor's length (``max(estimate, call_floor)``) is a probe
    (``probe``): its calls are not held back by ``call_floor`` (its query's ``CallFloor``; a merged call's, per
    query text, ``CallGuard.floors``), and answered in less than that floor, it replaces the rounds before it
    (``record(probe=True)``). Rounds observed within that length keep the record in force (no call it says cannot
    finish is sent), and at most one probe goes out per that length.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seconds: deque[tuple[float, float]] = deque(maxlen=LATENCY_WINDOW)  # (when observed, seconds)
        self.answered: deque[tuple[float, float]] = deque(maxlen=LATENCY_WINDOW)
        # cut with no call back, since the newest answer (an answered round or call clears it)
        self.unanswered: deque[tuple[float, float]] = deque(maxlen=LATENCY_WINDOW)
        self.calls: deque[tuple[float, float]] = deque(maxlen=LATENCY_WINDOW)  # answered calls (record_call)
        self._touched: float | None = None  # when a round was last observed or a probe sent (on clock)
        self._lock = threading.Lock()

    def record(self, seconds: float, answered: bool = True, probe: bool = False, unanswered: bool = False,
               waited: float = 0.0) -> None:
        """Note one round that took ``seconds`` (``answered``: every call came back, none cut at a deadline).
        ``unanswered`` (only with ``answered=False``): no call of the round came back before it was cut (every call
        sent was cut in flight, none answered nor failed): the seconds its first call was in flight, ``seconds``
        less ``waited`` (the round's wait for the judge's slots before its first call went out: ``CallFloor.sent``),
        are then a lower bound of the judge's latency, and ``call_floor`` is at least that until the next answered
        round or call. ``probe``: the round was a probe
        (``probe``); answered in less than the floor it tested (``max(estimate, call_floor)``), it shows the rounds
        before it no longer hold: they are dropped, with the calls timed before it went out (the estimate starts
        again from it, as once they are ``LATENCY_HORIZON`` old). Cut, or slower, it is one round among the others.

        Raises:
            ValueError: ``unanswered`` with ``answered``."""
        if unanswered and answered:
            raise ValueError("RoundLatency.record: a round is either answered or unanswered; pass answered=False "
                             "with unanswered=True")
        refuted = probe and answered and seconds < (self._floor() or math.inf)
        now = self.clock()
        entry = (now, max(0.0, seconds))
        with self._lock:
            if refuted:
                self.seconds.clear()
                self.answered.clear()
                fresh = [(at, s) for at, s in self.calls if at >= now - seconds]  # answered while the probe was out
                self.calls.clear()
                self.calls.extend(fresh)
            self.seconds.append(entry)
            if answered:
                self.answered.append(entry)
                self.unanswered.clear()
            if unanswered:
                self.unanswered.append((now, max(0.0, seconds - waited)))
            self._touched = now

    def record_call(self, seconds: float) -> None:
        """Note one answered call that took ``seconds`` (from its first attempt's send to its answer, not its wait
        for a slot; ``CallGuard.record(seconds=...)``): they set ``call_floor``. A round of many calls
        through few slots takes several calls' time, and each call is held back by ``call_floor`` as it goes out:
        a round's latency as the floor would refuse every call after the round's first wave."""
        entry = (self.clock(), max(0.0, seconds))
        with self._lock:
            self.calls.append(entry)
            self.unanswered.clear()

    def _recent(self, rounds: deque[tuple[float, float]]) -> list[float]:
        oldest = self.clock() - LATENCY_HORIZON
        with self._lock:
            return [seconds for at, seconds in rounds if at >= oldest]

    def fastest(self) -> float | None:
        """The fastest answered round observed (seconds; None before the first); what ``call_floor`` is while
        there is one and no call is timed (``record_call``)."""
        return min(self._recent(self.answered), default=None)

    def call_floor(self) -> float | None:
        """The least time left (seconds) a call must have to be sent: one with no more is not answered before its
        deadline (``CallGuard.too_late``, through a query's ``CallFloor``; ``probe`` tests it). The
        ``LATENCY_QUANTILE`` quantile (lower) of the answered calls observed (``record_call``), as ``estimate`` of
        the rounds: the fastest call would let calls go out that the judge answers in time only at its best, to be
        cut at the deadline (docs/latency.md); while none is in the record (a comparator that times no calls), the
        fastest answered round (``fastest``). Raised to the longest round cut with no call back
        (``record(unanswered=True)``) since the newest answered round or call: its seconds are a lower bound of
        the judge's latency now, so a call sent with no more time left would be cut too, however fast the calls
        answered before it (a judge that turned slower than the time budgets gets one probe per floor, not a round
        from every query). None while the record holds none of them (only ``comparators.base.DEADLINE_SLACK`` holds
        calls back)."""
        calls = _quantile(self._recent(self.calls))
        answered = calls if calls is not None else self.fastest()
        late = max(self._recent(self.unanswered), default=None)
        return max((s for s in (answered, late) if s is not None), default=None)

    def estimate(self) -> float | None:
        """One round's latency in seconds: the ``LATENCY_QUANTILE`` quantile (lower) of the rounds observed;
        None before the first."""
        return _quantile(self._recent(self.seconds))

    def _floor(self) -> float | None:
        """The longer of ``estimate`` and ``call_floor`` (seconds; None before the first round): the least time
        left with which the record lets a query's round be planned and its calls be sent."""
        estimate, floor = self.estimate(), self.call_floor()
        return None if estimate is None else max(estimate, floor or 0.0)

    def probe(self, seconds: float) -> bool:
        """Whether a round sent now with ``seconds`` (> 0) left tests a stale record: the record refuses its calls
        (less than the ``estimate``: no round fits; no more than ``call_floor``: every call is too late) and no
        round has been observed, nor probe sent, for that floor's length (``max(estimate, call_floor)`` seconds:
        nothing else will refresh the record). ``Ledger.rounds_left`` then allows that one round, and
        ``Ledger.open_round`` sends it as the probe (``probe_sent``; its calls pass the ``call_floor``,
        ``CallFloor``). False with no estimate (nothing to test)."""
        estimate, floor = self.estimate(), self.call_floor()
        if estimate is None or seconds <= 0:
            return False
        if not (seconds < estimate or (floor is not None and seconds <= floor)):
            return False
        with self._lock:
            touched = self._touched
        return touched is None or self.clock() - touched >= max(estimate, floor or 0.0)

    def probe_sent(self) -> None:
        """Note a probe sent now (``Ledger.open_round``): the next may go out ``max(estimate, call_floor)`` seconds
        after it (or after the last round observed) at the earliest."""
        now = self.clock()
        with self._lock:
            self._touched = now


class CallFloor:
    """One query's view of a ``RoundLatency`` for its calls (``CallGuard.latency``, read by ``too_late``):
    ``call_floor`` is the record's, except while the query's round in flight is a probe (``probing``, set by
    ``Ledger.open_round``): none then (only ``comparators.base.DEADLINE_SLACK`` holds its calls back), since the
    floor is as old as the record the probe tests. The other queries' calls keep the floor meanwhile. Plus
    ``reserve()``: the seconds the query's rerank will need, once its round in flight is back, to record the calls
    of it sent so far (``per_call`` each: set by ``Reranking._plan`` for a round planned lazily under a time
    budget, which may hold a million prompts; 0 otherwise), so its calls stop going out in time for that. A call
    made for several queries at once (a comparator that ``batches_queries``) reads each query's through
    ``CallGuard.floors`` (``floors_by_query``)."""

    def __init__(self, latency: RoundLatency) -> None:
        self.latency, self.probing = latency, False
        self.first_sent: float | None = None  # when the round in flight's first call went out (on the clock)
        self.per_call = 0.0
        self.out = 0  # the round in flight's calls sent so far (``sent``; cleared by ``Ledger.open_round``)

    def call_floor(self) -> float | None:
        """``RoundLatency.call_floor``, or None while this query's probe is out; plus ``reserve()``."""
        floor = None if self.probing else self.latency.call_floor()
        reserve = self.reserve()
        return (floor or 0.0) + reserve if reserve else floor

    def reserve(self) -> float:
        """Seconds to record the calls of the round in flight sent so far: ``per_call`` x ``out``."""
        return self.per_call * self.out

    def sent(self, at: float, calls: int = 1) -> None:
        """Note that ``calls`` calls of this query go out at ``at`` (its rerank's clock), after their wait for slots
        (``CallGuard.sending``): the first of its round's (``first_sent``, cleared by ``Ledger.open_round``) ends the
        round's wait, which a round cut with no call back does not count as the judge's latency
        (``RoundLatency.record(waited=...)``); they count in ``out``."""
        if self.first_sent is None:
            self.first_sent = at
        self.out += calls

    def record_call(self, seconds: float) -> None:
        """``RoundLatency.record_call`` (a probe's calls too: they are answered calls of the judge)."""
        self.latency.record_call(seconds)


def _quantile(seconds: list[float]) -> float | None:
    """The ``LATENCY_QUANTILE`` quantile (lower) of ``seconds``; None when empty."""
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(LATENCY_QUANTILE * len(ordered)))] if ordered else None


def floors_by_query(floors: Iterable[tuple[str, CallFloor]]) -> dict[str, CallFloor]:
    """What each query text's calls read in a call made for several queries at once (``CallGuard.floors``, set by
    ``RerankPool``'s merged calls and ``rerank_many``'s): from ``(query text, that query's CallFloor)`` pairs, in
    order, each text's floor; for a text of several queries, one ``_SameText`` of them all (the comparator tells
    their calls apart by text only)."""
    groups: dict[str, list[CallFloor]] = {}
    for query, floor in floors:
        groups.setdefault(query, []).append(floor)
    return {query: group[0] if len(group) == 1 else _SameText(group) for query, group in groups.items()}


class _SameText(CallFloor):
    """The ``CallFloor`` of several queries with one text in a merged call: their calls read a probing one's floor
    (none: the probe's calls must go out, and the others' of that text go with them). Which query a call that goes
    out is for is not told, so each call marks all of them with its time, the latest winning (``sent``): a round's
    wait for slots is then never taken for the judge's latency, at worst a little of its calls' time in flight is
    not (review s65i: only one query was marked, and the other's wait raised the call floor to its whole budget)."""

    def __init__(self, floors: list[CallFloor]) -> None:
        super().__init__(floors[0].latency)
        self.floors, self.probing = floors, any(floor.probing for floor in floors)

    def reserve(self) -> float:
        return max(floor.reserve() for floor in self.floors)

    def sent(self, at: float, calls: int = 1) -> None:
        for floor in self.floors:
            floor.first_sent = at
            floor.out += calls  # which query's they are is not told: each is charged, as none is left short


def margin_of(answers: object) -> float:
    """The gate margin of a pair cache (0 for a plain mapping: no gate)."""
    return answers.margin if isinstance(answers, Answers) else 0.0
