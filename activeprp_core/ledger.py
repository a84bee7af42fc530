"""``Ledger``: one query's spending in one place: its caps, the reservations of the batch in flight, what it asked
and the accounting (see ``Reranking``, which plans the questions and drives the ranker and oracle through it).

The life of a batch: each question's prompts are priced (``costs``) and, when every cap has room (``refusal``),
reserved (``reserve``) before anything is sent; a batch that sends calls opens a round (``open_round``). Then
either its answers come back and each prompt's reservation is replaced by the usage its answer reports
(``reconcile``), or the batch fails and what its prompts never sent had reserved is given back
(``refund_unsent``) before the sent ones are settled as failed calls. ``settle`` ends the batch in flight.

The ledger reads only what its driver hands it: the settings, the comparator whose ``estimate_tokens`` prices a
prompt (``budget.Rule.price``; never called to judge) and the clock (``wall_time_s``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .budget import Caps
from .settings import RerankSettings
from .types import Accounting, Judgment, Pair

Cost = Mapping[str, int]
"""What one prompt reserves: ``{cap name: units}`` over the per-prompt caps (``Caps.prompt_costs``)."""
MAX_ERRORS_KEPT = 5
"""The distinct reasons of failed calls a result keeps (``RerankResult.errors``)."""


class Ledger:
    """The spending of one query's rerank.

    Args:
        settings: the query's ``RerankSettings`` (its caps are read from it, checked there).
        query: the query text, and pricing: the comparator whose ``estimate_tokens`` prices a prompt (a class or
            an instance; see ``budget.Rule.price``).
        clock: seconds on a monotonic clock (default ``time.monotonic``); ``started``: its reading when the rerank
            started (default: now).

    Attributes:
        caps: the ``Caps`` (read live by the ranker's ``BudgetView``). counts: the ``Accounting`` of what was asked
            and answered (``calls`` and ``rounds`` are the caps' spending, see ``accounting``).
        exhausted_by: the caps that refused a question, in order. failure: the error that stopped the calls
            (``on_failure="prior"``), else None. errors: the distinct reasons of failed calls (at most 5).
    """

    def __init__(self, settings: RerankSettings, query: str, pricing: Any,
                 clock: Callable[[], float] = time.monotonic, started: float | None = None) -> None:
        self.caps = Caps(settings.as_dict())
        self.query, self.pricing, self.clock = query, pricing, clock
        self.started = clock() if started is None else started
        self.counts = Accounting()
        self.exhausted_by: list[str] = []
        self.failure: str | None = None
        self.errors: list[str] = []
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
        """Rounds the round cap still allows (None = no cap)."""
        return self.caps["max_rounds"].remaining

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
        """The batch planned sends calls: it takes a round."""
        self.caps.take_round()

    # ---- after the batch ----------------------------------------------------------------------------------
    def reconcile(self, judgments: Sequence[Judgment]) -> None:
        """Account the batch in flight's answers (one ``Judgment`` per prompt, in order): each prompt's
        reservation becomes the usage its answer reports; failed calls, retries and tokens are counted. A prompt
        refunded as never sent counts nothing. Settles the batch."""
        for j, held in zip(judgments, self._held):
            if held is None:
                continue
            self.counts.failed_calls += j.prob is None
            self.counts.retries += j.retries
            self.counts.prompt_tokens += j.prompt_tokens
            self.counts.completion_tokens += j.completion_tokens
            self.caps.reconcile(held, j)
            if j.prob is None and j.error:
                self.note_error(j.error)
        self.settle()

    def refund_unsent(self, sent: int) -> None:
        """The batch in flight failed after its first ``sent`` prompts went out: what the others reserved is given
        back (their round too when none went out) and the questions wholly among them are no comparisons."""
        unsent = self._held[sent:]
        self.caps.refund([c for c in unsent if c], round_too=sent == 0 and bool(self._held))
        starts = list(itertools.accumulate(self._questions, initial=0))[:-1]
        self.counts.comparisons -= sum(start >= sent for start in starts)
        self._held = self._held[:sent] + [None] * len(unsent)

    def settle(self) -> None:
        """End the batch in flight: its reservations are final."""
        self._held, self._questions = [], []

    def stop(self, reason: str) -> None:
        """No call after this one: ``reason`` (a failure) is reported as ``failure`` and among the errors."""
        self.failure = reason
        self.note_error(reason)

    def note_error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

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
