"""``Reranking``: one query's reranking as a sans-I/O state machine (see ``activeprp_core.engine`` for the
protocol, the caps and the failure policy; ``rerank`` / ``rerank_many`` drive it). Its spending (caps,
reservations, accounting) is kept by a ``ledger.Ledger``; the ``Reranking`` plans each round's questions through
the oracle and the pair cache, and drives the ranker."""

from __future__ import annotations

import bisect
import contextlib
import enum
import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .budget import BudgetView, check_count
from .comparators.base import Comparator, as_comparator
from .errors import ComparatorError, ComparatorUnavailable, InvalidAnswer, RankerError, describe
from .judging import Answers, JudgeTally, RoundLatency
from .ledger import Cost, Ledger, unsent_tail
from .oracles import BothOrders, Oracle, Prompt, get_oracle
from .rankers import RankContext, Ranker, get_ranker, relay
from .rankers.auto import choose
from .settings import RerankSettings
from .types import Accounting, Candidate, Judgment, RerankResult, check_candidates, to_judgments

log = logging.getLogger("activeprp.engine")
Question = tuple[list[Prompt], list[Cost] | None]
"""One question of a round: the ordered prompts still to ask and what each would reserve (None: the pair cache
answers it)."""


class Done(enum.Enum):
    """The type of ``DONE``: what ``Reranking.next_batch()`` returns once the ranker has finished."""

    DONE = "DONE"

    def __repr__(self) -> str:
        return "DONE"


DONE = Done.DONE
"""What ``Reranking.next_batch()`` returns once the ranker has finished: call ``result()``."""
PLAN_SHARE = 0.125
"""Under a ``time_budget``, the share of the time left that planning a round offered lazily (``allpairs`` with no
call cap: every pair) may take; then the time budget refuses its next question (``Reranking._plan``). Planned up to
the deadline (review s68j), such a round went out with no time left. Why an eighth: planning a prompt costs the
engine about 3 us, sending, recording and reading it 5 to 34 us more, so the round is answered and recorded in time
by a judge costing the engine up to 7 times the planning; only a nearly free one (``ZeroCostComparator``) may see a
round stopped that it would have answered in time."""
RECORD_RATIO = 2.0
"""Seconds to record a call of a lazy round once it is back, per second it took to plan one of its questions
(allpairs, N=300, every call answered: 0.8 with hard answers to 2.1 bidirectional): ``judging.CallFloor.per_call``
of such a round under a time budget. A round is recorded only once it is all back, so its calls stop going out in
time to record those sent."""


@dataclass(frozen=True)
class Batch:
    """The ordered prompts one round of a reranking needs answered, in the order answers must come back.

    Attributes:
        query: the query text.
        prompts: ``(first, second)`` candidate indices per prompt (first = slot A).
        pairs: the same prompts as ``(Candidate, Candidate)`` tuples, ready for ``Comparator.judge``.
    """

    query: str
    prompts: list[Prompt]
    pairs: list[tuple[Candidate, Candidate]]


def check_pair(pair: tuple[Any, Any], n: int, ranker: str) -> None:
    """Raises ``RankerError`` unless ``pair`` is two candidate indices in ``range(n)`` (``check_count``: a numpy
    integer is one, a bool is not)."""
    try:
        if all(check_count(i, "a candidate index") < n for i in pair):
            return
    except (TypeError, ValueError):
        pass
    raise RankerError(f"ranker {ranker} asked for the pair {pair!r}, not two candidate indices in range({n})")


class Reranking:
    """One query's reranking as a sans-I/O state machine (see ``activeprp_core.engine``).

    Args:
        query, candidates: as for ``rerank``. settings: a ``RerankSettings``; ``**options`` set or replace its
            fields (``Reranking(q, c, budget=50)``). comparator: the comparator that will answer, only read to price
            prompts (``budget.Rule.price``), never called to judge; default: the ``Comparator`` class's bounds.
        prior_answers: a running ``JudgeTally`` of the same comparator's answers to other queries (``rerank_many``
            passes one): this query's answers are added to it, and the confidence gate and the ``adaptive``
            oracle read it; ``RerankResult.judge`` still counts this query's answers only.
        clock: seconds on a monotonic clock (default ``time.monotonic``; the async drivers pass their event loop's
            ``time``); started: its reading when the query's rerank started (default: now). The ``time_budget``
            deadline is ``started + time_budget``: past it, every question is refused.
        latency: the record of round latencies (``judging.RoundLatency``) to plan the rounds that fit a
            ``time_budget`` with; ``rerank_many`` carries one across its queries (default: this query's own).

    Protocol: ``next_batch()`` returns the pending ``Batch`` (the same one until it is answered) or ``DONE``;
    ``send(judgments)`` answers it (``Judgment`` objects, or floats / None, one per prompt, in order; a
    ``Judgment`` with ``cut`` set says the deadline kept that call from being sent or cut it in flight);
    ``fail(error)`` reports that it could not be answered; ``result()`` once ``DONE``. A driver bounds its I/O by
    ``time_left()`` (None = no time budget).

    Failures: ``fail`` is for the pending batch only (its calls, see ``fail``). An error raised while planning the
    next round, after ``send`` recorded the answers (the ranker's, e.g. a ``RankerError``, or the comparator's
    ``estimate_tokens`` pricing prompts for ``token_budget``), is no failure of that batch: it propagates from
    ``send`` (or ``fail``, or the constructor) as itself, with ``error.accounting`` (no failed call, the questions
    it had reserved given back), and the reranking is over (``DONE``; ``result`` raises). With
    ``on_failure="prior"`` a ``ComparatorError`` raised pricing prompts degrades instead: no further call is sent
    and the ranker finishes on what it knows (``failure`` set), as for a failed batch.

    Raises:
        TypeError / ValueError: bad arguments (as ``RerankSettings`` and ``rerank``). ``RuntimeError``:
        ``send`` with no batch pending, ``result`` before ``DONE`` or after a planning error (``fail`` then raises
        ``error`` itself).
    """

    def __init__(self, query: str, candidates: Sequence[Candidate], settings: RerankSettings | None = None, *,
                 comparator: Comparator | None = None, prior_answers: JudgeTally | None = None,
                 clock: Callable[[], float] = time.monotonic, started: float | None = None,
                 latency: RoundLatency | None = None, **options: Any) -> None:
        self.settings = s = RerankSettings.of(settings, **options)
        self.query, self.candidates = query, check_candidates(query, candidates)
        pricing = Comparator if comparator is None else as_comparator(comparator)
        self.ledger = ledger = Ledger(s, query, pricing, clock, started, latency)
        ranker, oracle = choose(len(self.candidates), s.top_k, s.budget, ledger.rounds_left(), s.ranker, s.oracle)
        self.ranker: Ranker = get_ranker(ranker)
        self.oracle: Oracle = get_oracle(oracle)
        streams = random.Random(s.seed)
        self._oracle_rng, ranker_rng = random.Random(streams.getrandbits(64)), random.Random(streams.getrandbits(64))
        view = BudgetView(ledger.caps.caps, lambda: ledger.exhausted or ledger.stopped, self._affordable,
                          ledger.rounds_left)
        self.answers = Answers(prior_answers)  # the pair cache, with the judge's running record
        ctx = RankContext(len(self.candidates), s.top_k, ranker_rng, caps=view, judge=self.answers.pool.stats,
                          calls_per_pair=self.oracle.calls_per_pair, cache=s.cache)
        self._plans = False  # asked once, of the context a one-call oracle plans with (both orders at once: 2)
        self._plans = self.ranker.plans_rounds_for(ctx)
        if self._both_at_once():
            ctx = replace(ctx, calls_per_pair=2)
        self._tied: set[tuple[int, int]] = set()  # the pairs read as a tie (RerankResult.ties)
        self._planned = self.ranker.planned_rounds(ctx) if self._planned_cap() else None
        self._repaired = False
        self._pending: Batch | None = None
        self._order: list[int] | None = None
        self._broken: BaseException | None = None  # the error raised planning a round: no result
        self._steps = relay(self.ranker.schedule(ctx), self._round)
        self._advance(None)

    # ---- the protocol -------------------------------------------------------------------------------------
    def next_batch(self) -> Batch | Done:
        """The batch to answer now, or ``DONE``."""
        return DONE if self._pending is None else self._pending

    def send(self, judgments: Sequence[Judgment | float | None]) -> None:
        """Answer the pending batch: one answer per prompt, in order; then the next round is planned.

        Raises:
            InvalidAnswer: the wrong number of answers, or an answer that is not a number in [0, 1] (nothing
                changed: the batch is still pending, report it with ``fail``).
            Any error raised planning the next round (see the class): the answers are recorded, the reranking is
                over, ``error.accounting`` attached.
        """
        if self._pending is None:
            raise RuntimeError("send() with no batch pending: call next_batch() first (or result() when DONE)")
        self._advance(to_judgments(judgments, len(self._pending.prompts)))

    def fail(self, error: BaseException, sent: int | None = None,
             answered: Sequence[Judgment | float | None] = (), retries: int = 0) -> None:
        """Report that the pending batch could not be answered because of ``error``; ``sent`` = how many of its
        calls reached the backend (None = unknown: all of them; taken as its first ``sent`` prompts);
        ``answered`` = the answers of its first prompts that came back before ``error`` (a later chunk of the
        batch raised: ``comparators.base.answered_before``); ``retries`` = the transport retries of its sent calls,
        the answered ones' included (what its guard saw: ``CallGuard.retries``). What the prompts never sent
        reserved is refunded (the round too, when none went out); the answered ones are answers, the other sent
        ones failed calls, billed with the retries beyond the answered ones'.

        With ``on_failure="prior"`` and a ``ComparatorError``, no further call is asked for and the ranker
        finishes on what it knows, the answered prompts included. Otherwise ``error`` is raised again, with this
        reranking's partial accounting attached as ``error.accounting``.

        Raises:
            TypeError / ValueError: ``sent`` is not None or an int >= 0, ``retries`` is not an int >= 0, or
                ``answered`` is not answers of at most the batch's prompts (``InvalidAnswer``) (nothing changed).
        """
        ledger, batch = self.ledger, self._pending
        n = 0 if batch is None else len(batch.prompts)
        sent = n if sent is None else min(check_count(sent, "sent"), n)
        check_count(retries, "retries")
        answered = list(answered)
        if len(answered) > n:
            raise InvalidAnswer(f"fail() got {len(answered)} answers for a batch of {n} prompts")
        answered = to_judgments(answered, len(answered))
        sent = max(sent, len(answered))
        if batch is None:
            raise self._accounted(error)
        ledger.refund_unsent(sent)
        failed = Judgment(None, error=describe(error))
        judgments = answered + [failed] * (n - len(answered))
        if len(answered) < sent:  # the retries beyond the answered calls': billed on the first failed one
            judgments[len(answered)] = replace(failed, retries=max(0, retries - sum(j.retries for j in answered)))
        if not self._degrades(error):
            ledger.reconcile(judgments, timed=False)
            raise self._accounted(error)
        ledger.stop(describe(error))
        self._advance(judgments)

    def _degrades(self, error: BaseException) -> bool:
        """Whether ``error`` stops the calls and the ranker finishes on what it knows (``on_failure="prior"`` and a
        ``ComparatorError``) rather than raising."""
        return self.settings.on_failure == "prior" and isinstance(error, ComparatorError)

    def _accounted(self, error: BaseException) -> BaseException:
        """``error`` with this reranking's accounting attached (also on foreign exceptions, where they take
        attributes), logged when it is a ``ComparatorError``: to raise."""
        with contextlib.suppress(AttributeError):
            error.accounting = self.accounting  # type: ignore[attr-defined]
        if isinstance(error, ComparatorError):
            log.warning("rerank of %d candidates failed after %d calls: %s", len(self.candidates),
                        self.ledger.caps["budget"].spent, describe(error))
        return error

    @property
    def done(self) -> bool:
        """Whether the ranker has finished (``next_batch()`` is ``DONE``)."""
        return self._pending is None

    def result(self) -> RerankResult:
        """The finished reranking.

        Raises:
            ComparatorUnavailable: no call was answered and at least one was stopped by a judge error: every call
                failed, or some were cut at the deadline before their retries (``Ledger.judge_failure``; with
                ``on_failure="raise"``; the accounting attached). With ``on_failure="prior"`` the result reports
                that error as its ``failure`` instead.
            RankerError: the ranker returned something that is not a permutation (the accounting attached).
        """
        order, n = self._order, len(self.candidates)
        if self._broken is not None:
            raise RuntimeError(f"no result: the reranking stopped on {describe(self._broken)} (raised planning a "
                               "round)") from self._broken
        if order is None:
            raise RuntimeError("result() before the reranking is done: answer next_batch() until it is DONE")
        if sorted(order) != list(range(n)):
            raise self._accounted(RankerError(f"ranker {self.ranker.name} returned a non-permutation of {n} "
                                              f"candidates: {order[:20]}"))
        ledger, counts = self.ledger, self.accounting
        reasons = f" ({'; '.join(ledger.errors)})" if ledger.errors else ""
        why = ledger.judge_failure()
        if why is not None:
            error = ComparatorUnavailable(why, status_code=ledger.last_status)
            if self.settings.on_failure == "raise":
                error.accounting = counts
                log.warning("rerank of %d candidates failed: %s", n, error)
                raise error
            if ledger.failure is None:  # degraded all the same, reported as failure: the ranker finished on
                # no answers, so its order need not be the prior one (mohajer's can differ)
                ledger.stop(describe(error))
        if counts.failed_calls or ledger.errored_cuts or ledger.failure:
            log.warning("rerank of %d candidates %s: %d of %d calls failed, %d cut at the deadline before their "
                        "retries%s", n,
                        "degraded to the prior order for what was unknown" if ledger.failure else "finished",
                        counts.failed_calls, counts.calls, ledger.errored_cuts, reasons)
        rank = {i: r for r, i in enumerate(order)}
        return RerankResult(
            candidates=self.candidates, order=order, scores=[(n - rank[i]) / n for i in range(n)],
            **{**self.settings.as_dict(), "ranker": self.ranker.name, "oracle": self.oracle.name},
            exhausted=ledger.exhausted, exhausted_by=list(ledger.exhausted_by), failure=ledger.failure,
            errors=list(ledger.errors), judge=self.answers.own.stats(), **counts.counts(),
            converged=not ledger.exhausted and counts.failed_calls == 0 and ledger.failure is None)

    # ---- time ---------------------------------------------------------------------------------------------
    @property
    def clock(self) -> Callable[[], float]:
        """The clock this reranking reads (seconds, monotonic)."""
        return self.ledger.clock

    @property
    def deadline(self) -> float | None:
        """The ``time_budget`` deadline on ``clock`` (None = no time budget)."""
        return self.ledger.deadline.at

    def time_left(self) -> float | None:
        """Seconds until the deadline (None = no time budget; 0 once past): what a driver may still wait."""
        return self.ledger.time_left()

    # ---- what was spent -----------------------------------------------------------------------------------
    @property
    def exhausted(self) -> bool:
        """Whether a cap has refused a question."""
        return self.ledger.exhausted

    @property
    def accounting(self) -> Accounting:
        """What this reranking has spent so far (calls of a batch in flight included)."""
        return self.ledger.accounting

    @property
    def settled(self) -> Accounting:
        """What this reranking has spent on answered (or failed) calls: ``accounting`` less the pending batch's
        reservation (its calls, questions and round)."""
        return self.ledger.settled

    # ---- driving the ranker -------------------------------------------------------------------------------
    def _advance(self, judgments: list[Judgment] | None) -> None:
        """Hand the pending batch's answers (None: start) to the ranker and plan the next batch. An error raised
        meanwhile (after the answers were recorded) ends the reranking: what the batch being planned reserved is
        given back, and it propagates with the accounting (see the class)."""
        try:
            prompts = self._steps.send(judgments)  # never empty: _round answers a round with nothing to send
        except StopIteration as stop:
            self._pending, self._order = None, stop.value
            return
        except Exception as error:  # the ranker's schedule is dead: no further batch
            self._pending, self._broken = None, error
            self.ledger.drop_planned()
            self._accounted(error)
            raise
        self._pending = Batch(self.query, prompts, self._pairs(prompts))

    def _pairs(self, prompts: Iterable[Prompt]) -> list[tuple[Candidate, Candidate]]:
        return [(self.candidates[a], self.candidates[b]) for a, b in prompts]

    def _round(self, pairs: Iterable[tuple[int, int]]) -> Generator[list[Prompt], list[Judgment], list]:
        """One round of the ranker: plan it, yield the prompts to send, record the answers; returns the round's
        outcomes (P(i beats j) per pair read, None when unknown). A round given as a list is read whole; one
        given as an iterator is read up to and including the first question a cap refuses (so a ranker may
        offer every pair it wants, e.g. ``allpairs``, and the work stays bounded by the caps; under a time budget,
        planning it stops at ``PLAN_SHARE`` of the time left, and the questions whose calls the deadline kept from
        going out, from the first one on, count as refused then: read up to and including that one). Questions
        that a reconciled cap (tokens) cannot pay for only because of this batch's reservations wait for its
        answers and go out in a further batch (a further round of calls) once the usage is known."""
        asked: list[tuple[int, int]] = []
        fresh: set[Prompt] = set()
        single = self._planned_cap() and not self._both_at_once()
        source = self._questions(_tee(iter(pairs), asked), self._oracle_rng, fresh)
        lazy = not isinstance(pairs, Sequence)
        owners: list[tuple[int, int]] | None = [] if lazy else None  # per question planned: (first prompt, read as)
        waiting: list[list[Prompt]] = []
        while True:
            prompts, waiting = self._plan(waiting, source, fresh, lazy=lazy, owners=owners)
            # a round the cache (or the caps) answered wholly sends nothing: its empty answer is taken here
            judgments = (yield prompts) if prompts else []
            self._record(prompts, judgments)
            if not waiting:
                if owners:  # one batch read the whole round: what the deadline kept unsent is read no further
                    _unread(asked, judgments, owners)
                break
            owners = None  # a further batch: its questions waited, read before
        reasks = self._reasks(asked, fresh, repair=single and self._repairs())
        first = next(reasks, None)  # most rounds have none: skip planning an empty batch
        prompts = first and self._plan([], itertools.chain([first], reasks), fresh, lazy=False, optional=True)[0]
        if prompts:
            self._record(prompts, (yield prompts), sample=False)
        outs = [self.oracle.outcome(i, j, self.answers) for i, j in asked]
        self._tied.update((min(i, j), max(i, j)) for (i, j), o in zip(asked, outs)
                          if o == 0.5 and ((i, j) in fresh or (j, i) in fresh))
        self.ledger.counts.ties = len(self._tied)
        if not self.settings.cache:
            self.answers.clear()
        return outs

    def _record(self, prompts: Sequence[Prompt], judgments: Sequence[Judgment], sample: bool = True) -> None:
        for prompt, j in zip(prompts, judgments):
            if not j.cut:  # a call cut by the deadline leaves its pair unknown
                self.answers.record(prompt, j.prob, sample)
        self.ledger.reconcile(judgments)

    def _questions(self, pairs: Iterable[tuple[int, int]], rng: random.Random,
                   planned: set[Prompt]) -> Iterator[Question]:
        """Per question of a round: the ordered prompts still to ask and what each would reserve (None for an
        answer from the pair cache); ``planned``: the prompts taken so far in the round (the caller adds those it
        takes, so that a pair asked twice in a round is asked once). Every pair is a ``BothOrders`` question when
        ``_both_at_once`` holds as the round's questions start."""
        def known(p: Prompt) -> bool:
            return p in self.answers or p in planned

        both, n = self._both_at_once(), len(self.candidates)
        for pair in pairs:
            if pair[0] == pair[1]:
                raise RankerError(f"ranker {self.ranker.name} asked to compare candidate {pair[0]} with itself")
            a, b = pair
            if not (type(a) is int and type(b) is int and 0 <= a < n and 0 <= b < n):  # the fast path: plain ints
                check_pair(pair, n, self.ranker.name)
            need = self.oracle.question(BothOrders(*pair) if both else pair, known, rng)
            yield need, (self._costs(need) if need else None)

    def _plan(self, waiting: list[list[Prompt]], source: Iterator[Question], planned: set[Prompt], lazy: bool,
              optional: bool = False, owners: list[tuple[int, int]] | None = None
              ) -> tuple[list[Prompt], list[list[Prompt]]]:
        """The ordered prompts of the next batch and the questions left waiting: first the ``waiting`` ones, then
        the round's further questions from ``source`` (``_questions`` over ``planned``), deduplicated, skipping
        what the cache answers, each reserving its cost in every cap. A question that does not fit is refused
        whole, unless a reconciled cap refused it while this batch holds reservations of that cap: then it waits.
        Nothing is sent once a failure stopped the calls; a lazy source is read no further after a refusal or a
        wait, nor once planning took ``PLAN_SHARE`` of the time left. ``optional`` questions (an oracle's re-asks)
        are no comparisons; one that does not fit is dropped. ``owners`` (with no ``waiting``): filled with the
        first prompt of each question planned and its position among those read from ``source``."""
        ledger = self.ledger
        prompts: list[Prompt] = []
        later: list[list[Prompt]] = []
        ledger.open_batch()
        time_left = ledger.time_left() if lazy else None
        began = 0.0 if time_left is None else ledger.clock()
        until = None if time_left is None else began + PLAN_SHARE * time_left
        taken = 0
        again = ([p for p in need if p not in self.answers] for need in waiting)  # answered meanwhile: cached
        questions = itertools.chain(((need, need and self._costs(need)) for need in again), source)
        for read, (need, costs) in enumerate(questions):
            if not need:
                ledger.counts.cache_hits += 1
                continue
            if ledger.stopped:
                continue
            refused = ledger.refusal(costs)
            if refused is None:
                ledger.reserve(costs, question=not optional)
                if owners is not None:
                    owners.append((len(prompts), read))
                taken += 1
                prompts.extend(need)
                planned.update(need)
                if until is not None and ledger.clock() >= until:
                    ledger.refuse(ledger.deadline.name)
                    break
                continue
            if optional:
                continue
            if ledger.waits(refused):
                later.append(need)
            else:
                ledger.refuse(refused)
            if lazy:
                break
        if prompts and ledger.stopped:  # pricing a question failed and stopped the calls: nothing goes out
            ledger.drop_planned()
            prompts, later = [], []
        if prompts:
            ledger.open_round()
            ledger.floor.per_call = 0.0 if until is None else RECORD_RATIO * (ledger.clock() - began) / taken
            log.debug("round %d: %d calls (%s calls left)", ledger.caps["max_rounds"].spent, len(prompts),
                      ledger.caps["budget"].remaining)
        return prompts, later

    def _costs(self, prompts: list[Prompt]) -> list[Cost]:
        """What each of ``prompts`` would reserve (``Ledger.costs``; nothing to price once the calls stopped: [],
        never read then). A ``ComparatorError`` pricing them (the comparator's ``estimate_tokens``) stops the calls
        when it degrades (``on_failure="prior"``), else propagates."""
        if self.ledger.stopped:
            return []
        try:
            return self.ledger.costs(self._pairs(prompts))
        except ComparatorError as error:
            if not self._degrades(error):
                raise
            self.ledger.stop(describe(error))
            return []

    def _planned_cap(self) -> bool:
        """Whether rounds are limited (a round cap, or a time budget once a round latency is known:
        ``Ledger.rounds_left``) and the ranker's plan for this query fills them (``Ranker.plans_rounds_for``, asked
        once at the start): no re-ask can be sent."""
        return self._plans and self.ledger.rounds_left() is not None

    def _both_at_once(self) -> bool:
        """Whether this round's questions go out in both slot orders at once (``Oracle.both_at_once``)."""
        return self._planned_cap() and self.oracle.both_at_once(self.answers)

    def _repairs(self) -> bool:
        """Whether a round just asked one slot order at a time under a planned cap is completed after all (once per
        query): the judge turned out positional in it (``_both_at_once`` holds now), and the ranker's plan
        (``Ranker.planned_rounds``) leaves the cap a round to spare for the re-asks."""
        if self._repaired or self._planned is None or not self._both_at_once():
            return False
        spent = self.ledger.caps["max_rounds"].spent
        self._repaired = self.ledger.rounds_left() - 1 >= self._planned - spent
        return self._repaired

    def _reasks(self, asked: Sequence[tuple[int, int]], planned: set[Prompt],
                repair: bool = False) -> Iterator[Question]:
        """The questions of a round whose answers the oracle wants completed (``Oracle.reask``), as
        ``_questions``; none once a failure stopped the calls, when only the last round of the cap is left, or
        under a round cap for a ranker that plans every round of it (``_planned_cap``) unless this is a
        ``repair`` (``_repairs``)."""
        if (self.ledger.stopped or self.ledger.rounds_left() in (0, 1) or self.ledger.time_left() == 0
                or (self._planned_cap() and not repair)):
            return
        for i, j in dict.fromkeys(asked):
            need = [p for p in self.oracle.reask(i, j, self.answers) if p not in self.answers and p not in planned]
            if need:
                yield need, self._costs(need)

    def _affordable(self, pairs: Sequence[tuple[int, int]]) -> int:
        """How many of ``pairs``, in order, the caps pay for now (``BudgetView.affordable``): nothing is
        reserved, and no oracle draw is consumed (a scratch stream chooses the slot orders)."""
        ledger = self.ledger
        extra: dict[str, int] = {}
        planned: set[Prompt] = set()
        for count, (need, costs) in enumerate(self._questions(pairs, random.Random(0), planned)):
            if costs is not None:
                if ledger.stopped or ledger.refusal(costs, extra) is not None:
                    return count
                for cost in costs:
                    for name, n in cost.items():
                        extra[name] = extra.get(name, 0) + n
                planned.update(need)
        return len(pairs)


def _unread(asked: list[tuple[int, int]], judgments: Sequence[Judgment], owners: list[tuple[int, int]]) -> None:
    """Cut ``asked`` (a lazy round's pairs read, in order) after the question of the first prompt of the unsent
    tail of ``judgments`` (the calls the deadline kept from going out, from the first one on to the last prompt),
    as a cap refusing it while the round was planned would have; ``owners``: ``Reranking._plan``'s. The ranker gets
    no outcome for the questions after it, so reading them costs nothing past the deadline."""
    first = unsent_tail(judgments)
    if first < len(judgments):
        del asked[owners[bisect.bisect_right(owners, (first, math.inf)) - 1][1] + 1:]


def _tee(pairs: Iterable[tuple[int, int]], read: list) -> Iterator[tuple[int, int]]:
    """``pairs``, appending each to ``read`` as it is taken."""
    return (read.append(pair) or pair for pair in pairs)
