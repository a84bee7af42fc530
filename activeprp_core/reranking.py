"""``Reranking``: one query's reranking as a sans-I/O state machine (see ``activeprp_core.engine`` for the
protocol, the caps and the failure policy; ``rerank`` / ``rerank_many`` drive it)."""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .budget import BudgetView, Caps
from .closing import fail_batch, finish
from .comparators.base import Comparator, as_comparator
from .errors import RankerError
from .judging import Answers, JudgeTally
from .oracles import Oracle, Prompt, get_oracle
from .rankers import RankContext, Ranker, get_ranker, relay
from .rankers.auto import choose
from .settings import RerankSettings
from .types import Accounting, Candidate, Judgment, RerankResult, check_candidates, to_judgments

log = logging.getLogger("activeprp.engine")
MAX_ERRORS_KEPT = 5


class _Done:
    def __repr__(self) -> str:
        return "DONE"


DONE = _Done()
"""What ``Reranking.next_batch()`` returns once the ranker has finished: call ``result()``."""


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


class Reranking:
    """One query's reranking as a sans-I/O state machine (see ``activeprp_core.engine``).

    Args:
        query, candidates: as for ``rerank``. settings: a ``RerankSettings``; ``**options`` set or replace its
            fields (``Reranking(q, c, budget=50)``). comparator: the comparator that will answer, only read to price
            prompts (``budget.Rule.price``), never called to judge; default: the ``Comparator`` class's bounds.
        prior_answers: a running ``JudgeTally`` of the same comparator's answers to other queries (``rerank_many``
            passes one): this query's answers are added to it, and the confidence gate and the ``adaptive``
            oracle read it; ``RerankResult.judge`` still counts this query's answers only.

    Protocol: ``next_batch()`` returns the pending ``Batch`` (the same one until it is answered) or ``DONE``;
    ``send(judgments)`` answers it (``Judgment`` objects, or floats / None, one per prompt, in order);
    ``fail(error)`` reports that it could not be answered; ``result()`` once ``DONE``.

    Raises:
        TypeError / ValueError: bad arguments (as ``RerankSettings`` and ``rerank``). ``RuntimeError``:
        ``send`` with no batch pending, ``result`` before ``DONE`` (``fail`` then raises ``error`` itself).
    """

    def __init__(self, query: str, candidates: Sequence[Candidate], settings: RerankSettings | None = None, *,
                 comparator: Comparator | None = None, prior_answers: JudgeTally | None = None,
                 **options: Any) -> None:
        self.started = time.perf_counter()
        self.settings = s = RerankSettings.of(settings, **options)
        self.query, self.candidates = query, check_candidates(query, candidates)
        self.top_k, self.on_failure, self.cache = s.top_k, s.on_failure, s.cache
        self.caps = Caps(s.as_dict())
        self.comparator = Comparator if comparator is None else as_comparator(comparator)
        ranker, oracle = choose(len(self.candidates), self.top_k, s.budget, s.max_rounds, s.ranker, s.oracle)
        self.ranker: Ranker = get_ranker(ranker)
        self.oracle: Oracle = get_oracle(oracle)
        streams = random.Random(s.seed)
        self._oracle_rng, ranker_rng = random.Random(streams.getrandbits(64)), random.Random(streams.getrandbits(64))
        view = BudgetView(self.caps.caps, lambda: self.exhausted or self.failure is not None,
                          lambda pairs: _affordable(self, pairs))
        ctx = RankContext(len(self.candidates), self.top_k, ranker_rng, calls_per_pair=self.oracle.calls_per_pair,
                          caps=view)
        self.answers = Answers(prior_answers)  # the pair cache, with the judge's running record
        self.counts = Accounting()
        self.exhausted_by: list[str] = []  # the caps that refused a question
        self.failure: str | None = None  # the error that stopped the calls (on_failure="prior")
        self.errors: list[str] = []
        self._pending: Batch | None = None
        self._held: list[dict[str, int]] = []  # per prompt of the pending batch: what it reserved in each cap
        self._questions: list[int] = []  # per question of the pending batch: its number of prompts
        self._order: list[int] | None = None
        self._steps = relay(self.ranker.schedule(ctx), self._round)
        self._advance(None)

    @property
    def exhausted(self) -> bool:
        """Whether a cap has refused a question."""
        return bool(self.exhausted_by)

    def next_batch(self) -> Batch | _Done:
        """The batch to answer now, or ``DONE``."""
        return DONE if self._pending is None else self._pending

    def send(self, judgments: Sequence[Judgment | float | None]) -> None:
        """Answer the pending batch: one answer per prompt, in order.

        Raises:
            InvalidAnswer: the wrong number of answers, or a probability outside [0, 1].
        """
        if self._pending is None:
            raise RuntimeError("send() with no batch pending: call next_batch() first (or result() when DONE)")
        self._advance(to_judgments(judgments, len(self._pending.prompts)))

    def fail(self, error: BaseException, sent: int | None = None) -> None:
        """Report that the pending batch could not be answered because of ``error``; ``sent`` = how many of its
        calls reached the backend (None = unknown: all of them; taken as its first ``sent`` prompts). What the
        prompts never sent reserved is refunded (the round too, when none went out); the sent ones are failed
        calls.

        With ``on_failure="prior"`` and a ``ComparatorError``, no further call is asked for and the ranker
        finishes on what it knows. Otherwise ``error`` is raised again, with this reranking's partial
        accounting attached as ``error.accounting``.
        """
        fail_batch(self, error, sent)

    @property
    def done(self) -> bool:
        """Whether the ranker has finished (``next_batch()`` is ``DONE``)."""
        return self._pending is None

    @property
    def accounting(self) -> Accounting:
        """What this reranking has spent so far (calls of a batch in flight included)."""
        counts = Accounting(**self.counts.counts())
        counts.calls, counts.rounds = self.caps["budget"].spent, self.caps["max_rounds"].spent
        counts.wall_time_s = time.perf_counter() - self.started
        return counts

    @property
    def settled(self) -> Accounting:
        """What this reranking has spent on answered (or failed) calls: ``accounting`` less the pending batch's
        reservation (its calls, questions and round)."""
        counts = self.accounting
        if self._pending is not None:
            counts.calls -= len(self._pending.prompts)
            counts.comparisons -= len(self._questions)
            counts.rounds -= 1
        return counts

    def result(self) -> RerankResult:
        """The finished reranking.

        Raises:
            ComparatorUnavailable: every call failed (with ``on_failure="raise"``; the accounting attached).
            RankerError: the ranker returned something that is not a permutation.
        """
        if self._order is None:
            raise RuntimeError("result() before the reranking is done: answer next_batch() until it is DONE")
        return finish(self, self._order)

    def _advance(self, judgments: list[Judgment] | None) -> None:
        try:
            prompts = self._steps.send(judgments)
            while not prompts:  # a round the cache (or the caps) answered wholly: nothing to send
                prompts = self._steps.send([])
        except StopIteration as stop:
            self._pending, self._order = None, stop.value
            return
        pairs = [(self.candidates[a], self.candidates[b]) for a, b in prompts]
        self._pending = Batch(self.query, prompts, pairs)

    def _round(self, pairs: Iterable[tuple[int, int]]) -> Generator[list[Prompt], list[Judgment], list]:
        """One round of the ranker: plan it, yield the prompts to send, record the answers; returns the round's
        outcomes (P(i beats j) per pair read, None when unknown). A round given as a list is read whole; one
        given as an iterator is read up to and including the first question a cap refuses (so a ranker may
        offer every pair it wants, e.g. ``allpairs``, and the work stays bounded by the caps). Questions that a
        reconciled cap (tokens) cannot pay for only because of this batch's reservations wait for its answers
        and go out in a further batch (a further round of calls) once the usage is known."""
        asked: list[tuple[int, int]] = []
        fresh: set[Prompt] = set()
        source = _questions_of(self, _tee(iter(pairs), asked), self._oracle_rng, fresh)
        waiting: list[list[Prompt]] = []
        while True:
            prompts, waiting = _plan(self, waiting, source, fresh, lazy=not isinstance(pairs, Sequence))
            self._record(prompts, (yield prompts))
            if not waiting:
                break
        reasks = _reasks(self, asked, fresh)
        first = next(reasks, None)  # most rounds have none: skip planning an empty batch
        prompts = first and _plan(self, [], itertools.chain([first], reasks), fresh, lazy=False, optional=True)[0]
        if prompts:
            self._record(prompts, (yield prompts), sample=False)
        outs = [self.oracle.outcome(i, j, self.answers) for i, j in asked]
        self.counts.ties += sum(o == 0.5 for (i, j), o in zip(asked, outs) if (i, j) in fresh or (j, i) in fresh)
        if not self.cache:
            self.answers.clear()
        return outs

    def _record(self, prompts: Sequence[Prompt], judgments: Sequence[Judgment], sample: bool = True) -> None:
        for prompt, j, held in zip(prompts, judgments, self._held):
            self.answers.record(prompt, j.prob, sample)
            self.counts.failed_calls += j.prob is None
            self.counts.retries += j.retries
            self.counts.prompt_tokens += j.prompt_tokens
            self.counts.completion_tokens += j.completion_tokens
            self.caps.reconcile(held, j)
            if j.prob is None and j.error:
                self.note_error(j.error)
        self._held = []

    def note_error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)


def _questions_of(r: Reranking, pairs: Iterable[tuple[int, int]], rng: random.Random, planned: set[Prompt]):
    """Per question of a round: ``(need, costs)``, the ordered prompts still to ask and what each would
    reserve (None for an answer from the pair cache); ``planned``: the prompts taken so far in the round (the
    caller adds those it takes, so that a pair asked twice in a round is asked once)."""
    def known(p: Prompt) -> bool:
        return p in r.answers or p in planned

    for pair in pairs:
        if pair[0] == pair[1]:
            raise RankerError(f"ranker {r.ranker.name} asked to compare candidate {pair[0]} with itself")
        need = r.oracle.question(pair, known, rng)
        yield need, (_costs(r, need) if need else None)


def _plan(r: Reranking, waiting: list[list[Prompt]], source: Iterator, planned: set[Prompt], lazy: bool,
          optional: bool = False):
    """The ordered prompts of the next batch and the questions left waiting: first the ``waiting`` ones, then
    the round's further questions from ``source`` (``_questions_of`` over ``planned``), deduplicated, skipping
    what the cache answers, each reserving its cost in every cap. A question that does not fit is refused
    whole, unless a reconciled cap refused it while this batch holds reservations of that cap: then it waits.
    Nothing is sent once a failure stopped the calls; a lazy source is read no further after a refusal or a
    wait. ``optional`` questions (an oracle's re-asks) are no comparisons; one that does not fit is dropped."""
    prompts: list[Prompt] = []
    later: list[list[Prompt]] = []
    r._held, r._questions = [], []
    again = ([p for p in need if p not in r.answers] for need in waiting)  # answered meanwhile: cached
    for need, costs in itertools.chain(((need, need and _costs(r, need)) for need in again), source):
        if not need:
            r.counts.cache_hits += 1
            continue
        if r.failure is not None:
            continue
        refused = r.caps.refusal(costs)
        if refused is None:
            r.caps.take(costs)
            prompts.extend(need)
            planned.update(need)
            r._held.extend(costs)
            if not optional:
                r._questions.append(len(need))
                r.counts.comparisons += 1
            continue
        if optional:
            continue
        if r.caps.reconciled(refused) and any(h.get(refused) for h in r._held):
            later.append(need)
        elif refused not in r.exhausted_by:
            r.exhausted_by.append(refused)
        if lazy:
            break
    if prompts:
        r.caps.take_round()
        log.debug("round %d: %d calls (%s calls left)", r.caps["max_rounds"].spent, len(prompts),
                  r.caps["budget"].remaining)
    return prompts, later


def _reasks(r: Reranking, asked: Sequence[tuple[int, int]], planned: set[Prompt]):
    """``(need, costs)`` per question of a round whose answers the oracle wants completed (``Oracle.reask``), as
    ``_questions_of``; none once a failure stopped the calls, when only the last round of the cap is left, or
    under a round cap for a ranker that plans every round of it (``Ranker.plans_rounds``)."""
    rounds = r.caps["max_rounds"].remaining
    if r.failure is not None or rounds in (0, 1) or (rounds is not None and r.ranker.plans_rounds):
        return
    for i, j in dict.fromkeys(asked):
        need = [p for p in r.oracle.reask(i, j, r.answers) if p not in r.answers and p not in planned]
        if need:
            yield need, _costs(r, need)


def _costs(r: Reranking, need: list[Prompt]) -> list[dict[str, int]]:
    return r.caps.prompt_costs(r.comparator, r.query, [(r.candidates[a], r.candidates[b]) for a, b in need])


def _tee(pairs: Iterable[tuple[int, int]], read: list) -> Iterator[tuple[int, int]]:
    """``pairs``, appending each to ``read`` as it is taken."""
    return (read.append(pair) or pair for pair in pairs)


def _affordable(r: Reranking, pairs: Sequence[tuple[int, int]]) -> int:
    """How many of ``pairs``, in order, the caps pay for now (``BudgetView.affordable``): nothing is
    reserved, and no oracle draw is consumed (a scratch stream chooses the slot orders)."""
    extra: dict[str, int] = {}
    planned: set[Prompt] = set()
    for count, (need, costs) in enumerate(_questions_of(r, pairs, random.Random(0), planned)):
        if costs is not None:
            if r.failure is not None or r.caps.refusal(costs, extra) is not None:
                return count
            for cost in costs:
                for name, n in cost.items():
                    extra[name] = extra.get(name, 0) + n
            planned.update(need)
    return len(pairs)
