"""``Ledger``: one query's spending in one place: its caps, the reservations of the batch in flight, what it asked
and the accounting (see ``Reranking``, which plans the questions and drives the ranker and oracle through it).

The life of a batch: each question's prompts are priced (``costs``) and, when every cap has room (``refusal``),
reserved (``reserve``) before anything is sent; a batch that sends calls opens a round (``open_round``). Then
either its answers come back and each prompt's reservation is replaced by the usage its answer reports
(``reconcile``), or the batch fails and what its prompts never sent had reserved is given back
(``refund_unsent``) before the sent ones are settled as failed calls. ``settle`` ends the batch in flight. A batch
whose planning raised or was stopped by a failure is never sent: what it reserved is given back (``drop_planned``).

A call the ``time_budget`` deadline kept from being sent (``Judgment.cut == "unsent"``) is refunded like an unsent
prompt of a failed batch; one cut in flight (``"in_flight"``) is a call spent without an answer (``cut_calls``).
One cut before its retry (``Judgment.cut_before_retry``: a judge error the deadline kept from being retried) is a
cut call that keeps its error: among ``errors``, and counted in ``errored_cuts`` (read by ``judge_failure``).

The ledger reads only what its driver hands it: the settings, the comparator whose ``estimate_tokens`` prices a
prompt (``budget.Rule.price``; never called to judge), the clock (the deadline, the round latencies,
``wall_time_s``) and the record of round latencies carried across queries.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .budget import Caps, Deadline
from .judging import CallFloor, RoundLatency
from .settings import RerankSettings
from .types import IN_FLIGHT, UNSENT, Accounting, Judgment, Pair

Cost = Mapping[str, int]
"""What one prompt reserves: ``{cap name: units}`` over the per-prompt caps (``Caps.prompt_costs``)."""
MAX_ERRORS_KEPT = 5
"""The distinct reasons of failed calls a result keeps (``RerankResult.errors``)."""


def unsent_tail(judgments: Sequence[Judgment]) -> int:
    """Where the trailing run of ``judgments`` that the deadline kept from being sent (``UNSENT``) starts (their
    length when there is none): a round cut at the deadline leaves its later chunks unsent, handled in bulk."""
    first = len(judgments)
    while first and judgments[first - 1].cut == UNSENT:
        first -= 1
    return first


class Ledger:
    """The spending of one query's rerank.

    Args:
        settings: the query's ``RerankSettings`` (its caps are read from it, checked there).
        query: the query text, and pricing: the comparator whose ``estimate_tokens`` prices a prompt (a class or
            an instance; see ``budget.Rule.price``).
        clock: seconds on a monotonic clock (default ``time.monotonic``); ``started``: its reading when the rerank
            started (default: now): the ``time_budget`` deadline counts from it.
        latency: the record of round latencies to read and add to (``judging.RoundLatency``; default: this
            query's own).

    Attributes:
        caps: the ``Caps`` (read live by the ranker's ``BudgetView``). counts: the ``Accounting`` of what was asked
            and answered (``calls`` and ``rounds`` are the caps' spending, see ``accounting``).
        exhausted_by: the caps that refused a question, in order. failure: the error that stopped the calls
            (``on_failure="prior"``), else None. errors: the distinct reasons of failed calls and of calls cut
            before their retries (at most 5). errored_cuts: the calls cut before their retries. floor: what this
            query's calls read of ``latency`` (``judging.CallFloor``, lifted for a probe): the drivers hand it to
            the comparator's guard as ``CallGuard.latency``.
    """

    def __init__(self, settings: RerankSettings, query: str, pricing: Any,
                 clock: Callable[[], float] = time.monotonic, started: float | None = None,
                 latency: RoundLatency | None = None) -> None:
        self.query, self.pricing, self.clock = query, pricing, clock
        self.started = clock() if started is None else started
        self.caps = Caps(settings.as_dict(), clock, self.started)
        self.deadline: Deadline = self.caps["time_budget"]
        self.latency = RoundLatency(clock) if latency is None else latency
        self._opened: float | None = None  # when the round in flight went out
        self.floor = CallFloor(self.latency)  # what this query's calls read (CallGuard.latency): lifted for a probe
        self.counts = Accounting()
        self.exhausted_by: list[str] = []
        self.failure: str | None = None
        self.errors: list[str] = []
        self.errored_cuts = 0
        self.last_status: int | None = None  # of the last failed call (or cut before its retry) with an HTTP status
        self._held: list[Cost | None] = []  # per prompt of the batch in flight: its reservation (None: never sent)
        self._questions: list[int] = []  # per question of the batch in flight: its number of prompts

    # ---- state --------------------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """Whether a failure stopped the calls: nothing more is reserved."""
        return self.failure is not None

    @property
    def exhausted(self) -> bool:
        """Whether a cap has refused a question."""
        return bool(self.exhausted_by)

    @property
    def in_flight(self) -> int:
        """Prompts of the batch in flight (reserved, not yet reconciled or refunded)."""
        return len(self._held)

    def rounds_left(self) -> int | None:
        """Rounds the query can still send (None = no limit): what the round cap allows, and with a time budget at
        most the rounds that fit in the time left at the estimated round latency (``RoundLatency.estimate``;
        none known yet: the round cap alone). So a ranker that plans its rounds plans a shallow plan that
        completes rather than a deep one the deadline cuts off. When none fits but the record is stale
        (``RoundLatency.probe``: no round observed for ``max(estimate, call_floor)``), one round: the round sent
        then is the probe that tests it (``open_round``), so a stale record cannot shut a judge that answers fast
        again out."""
        left, time_left = self.caps["max_rounds"].remaining, self.deadline.remaining
        if time_left is None:  # checked first: rankers ask this once per round, cache-answered ones included
            return left
        per_round = self.latency.estimate()
        if not per_round:
            return left
        fit = time_left // per_round
        if fit == math.inf:  # a deadline too far to count in rounds (e.g. a time budget of 1e308 s)
            return left
        if fit == 0 and left != 0 and self.latency.probe(time_left):
            fit = 1
        return int(fit) if left is None else min(left, int(fit))

    def time_left(self) -> float | None:
        """Seconds until the deadline (None = no time budget; 0 once past)."""
        return self.deadline.remaining

    # ---- planning a batch ---------------------------------------------------------------------------------
    def costs(self, pairs: Sequence[Pair]) -> list[Cost]:
        """What each prompt of ``pairs`` (``(Candidate, Candidate)``, in order) would reserve in each cap."""
        return self.caps.prompt_costs(self.pricing, self.query, pairs)

    def refusal(self, costs: Sequence[Cost], extra: Mapping[str, int] | None = None) -> str | None:
        """The first cap that a question of prompts ``costs`` (on top of ``extra`` units) does not fit, else None."""
        return self.caps.refusal(costs, extra)

    def open_batch(self) -> None:
        """Start planning the next batch (the previous one is settled)."""
        self._held, self._questions = [], []

    def reserve(self, costs: Sequence[Cost], question: bool = True) -> None:
        """Reserve one question's prompts (``refusal`` said they fit); ``question=False`` for an oracle's re-asks,
        which are no comparison."""
        self.caps.take(costs)
        self._held.extend(costs)
        if question:
            self._questions.append(len(costs))
            self.counts.comparisons += 1

    def waits(self, cap: str) -> bool:
        """Whether a question refused by ``cap`` may wait for the batch in flight: ``cap`` is reconciled with
        reported usage and the batch holds some of it (its answers may give units back)."""
        return self.caps.reconciled(cap) and any(h and h.get(cap) for h in self._held)

    def refuse(self, cap: str) -> None:
        """Note that ``cap`` refused a question (``exhausted_by``)."""
        if cap not in self.exhausted_by:
            self.exhausted_by.append(cap)

    def open_round(self) -> None:
        """The batch planned sends calls: it takes a round (timed from now; the probe of a stale record of round
        latencies when the record refuses the query's calls, by its estimate or its call floor,
        ``RoundLatency.probe``)."""
        self.caps.take_round()
        self._opened = self.clock()
        time_left = self.deadline.remaining
        self.floor.first_sent, self.floor.out = None, 0
        self.floor.probing = time_left is not None and self.latency.probe(time_left)
        if self.floor.probing:
            self.latency.probe_sent()

    # ---- after the batch ----------------------------------------------------------------------------------
    def reconcile(self, judgments: Sequence[Judgment], timed: bool = True) -> None:
        """Account the batch in flight's answers (one ``Judgment`` per prompt, in order): each prompt's
        reservation becomes the usage its answer reports; failed calls, retries and tokens are counted. A prompt
        refunded as never sent counts nothing; one the deadline kept from being sent is refunded now; one cut in
        flight keeps its reservation and counts as a cut call. With ``timed``, the round's latency is recorded (as
        unanswered when every call sent was cut in flight with nothing back: ``RoundLatency.call_floor``; not for
        a batch whose failure ends the rerank). Settles the batch."""
        tail = unsent_tail(judgments)
        head = judgments[:tail]  # the prompts after it were never sent: refunded in bulk, nothing more to count
        unsent = [i for i, j in enumerate(head) if j.cut == UNSENT]
        cut = tail < len(judgments) or any(j.cut for j in head)
        if cut:
            self.refuse(self.deadline.name)
        if unsent:
            self._refund(unsent)
        if tail < len(judgments):
            self.refund_unsent(tail)
        sent = [j for j, held in zip(head, self._held) if held is not None]
        if timed and self._opened is not None and sent:  # calls went out
            back = any(j.cut != IN_FLIGHT or j.cut_before_retry for j in sent)  # an answer, or a judge error
            waited = 0.0 if self.floor.first_sent is None else max(0.0, self.floor.first_sent - self._opened)
            self.latency.record(self.clock() - self._opened, answered=not cut, probe=self.floor.probing,
                                unanswered=cut and not back, waited=waited)
        for j, held in zip(head, self._held):
            if held is None:
                continue
            self.counts.retries += j.retries  # a cut call's retries too: they went out
            if j.cut:
                self.counts.cut_calls += 1
                if j.cut_before_retry:
                    self.errored_cuts += 1
                    self.note_error(j.error)
                    self.last_status = self.last_status if j.status_code is None else j.status_code
                continue
            self.counts.failed_calls += j.prob is None
            self.counts.prompt_tokens += j.prompt_tokens
            self.counts.completion_tokens += j.completion_tokens
            self.caps.reconcile(held, j)
            if j.prob is None and j.error:
                self.note_error(j.error)
            if j.prob is None and j.status_code is not None:
                self.last_status = j.status_code
        self.settle()

    def refund_unsent(self, sent: int) -> None:
        """The prompts of the batch in flight from ``sent`` on were never sent (it failed after its first ``sent``
        went out, or the deadline kept the rest from going out): what they reserved is given back (their round too
        when none went out) and the questions wholly among them are no comparisons. In bulk: a round the deadline
        cut may leave a million prompts unsent."""
        held = self._held
        self.caps.refund(list(filter(None, held[sent:])), round_too=bool(held) and sent == 0)
        starts = list(itertools.accumulate(self._questions, initial=0))
        self.counts.comparisons -= len(starts) - 1 - bisect.bisect_left(starts, sent)
        held[sent:] = [None] * (len(held) - sent)

    def _refund(self, unsent: Sequence[int]) -> None:
        """Give back what the prompts ``unsent`` (positions in the batch in flight) reserved: they were never sent.
        A question all of whose prompts are among them is no comparison; a batch none of whose prompts went out
        takes no round."""
        gone = set(unsent)
        self.caps.refund([self._held[i] for i in sorted(gone) if self._held[i]],
                         round_too=bool(self._held) and len(gone) == len(self._held))
        starts = list(itertools.accumulate(self._questions, initial=0))
        self.counts.comparisons -= sum(gone.issuperset(range(a, b)) for a, b in zip(starts, starts[1:]))
        self._held = [None if i in gone else held for i, held in enumerate(self._held)]

    def drop_planned(self) -> None:
        """The batch being planned (before ``open_round``) is never sent: a failure stopped the calls, or planning
        it raised. What its questions reserved is given back; they are no comparisons."""
        self.caps.refund([held for held in self._held if held])
        self.counts.comparisons -= len(self._questions)
        self.settle()

    def settle(self) -> None:
        """End the batch in flight: its reservations are final."""
        self._held, self._questions = [], []

    def stop(self, reason: str) -> None:
        """No call after this one: ``reason`` (a failure) is reported as ``failure`` and among the errors."""
        self.failure = reason
        self.note_error(reason)

    def note_error(self, message: str) -> None:
        """Keep ``message`` among the distinct reasons of failed calls (at most ``MAX_ERRORS_KEPT``)."""
        if message not in self.errors and len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

    def judge_failure(self) -> str | None:
        """Why the rerank so far is a judge failure, else None: no call was answered, and at least one was stopped
        by a judge error (failed, or cut before its retry). Calls cut in flight by slowness alone are no judge
        error: a rerank whose every call was cut so is best-effort."""
        counts = self.accounting
        errored = counts.failed_calls + self.errored_cuts
        if not errored or counts.calls - counts.failed_calls - counts.cut_calls > 0:
            return None
        reasons = "; ".join(self.errors)
        if counts.failed_calls == counts.calls:
            return f"every one of the {counts.calls} calls failed: {reasons}"
        slow = counts.cut_calls - self.errored_cuts
        return (f"no call of {counts.calls} was answered: {counts.failed_calls} failed, {self.errored_cuts} were "
                f"cut at the deadline before their retries, {slow} cut in flight: {reasons}")

    # ---- what was spent -----------------------------------------------------------------------------------
    @property
    def accounting(self) -> Accounting:
        """What was spent so far (the calls and round of the batch in flight included; ``wall_time_s`` from the
        start on the clock)."""
        counts = Accounting(**self.counts.counts())
        counts.calls, counts.rounds = self.caps["budget"].spent, self.caps["max_rounds"].spent
        counts.wall_time_s = self.clock() - self.started
        return counts

    @property
    def settled(self) -> Accounting:
        """``accounting`` less the batch in flight's reservation (its calls, questions and round)."""
        counts = self.accounting
        if self._held:
            counts.calls -= len(self._held)
            counts.comparisons -= len(self._questions)
            counts.rounds -= 1
        return counts
