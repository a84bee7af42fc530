"""Pairwise oracles: how one question "does i beat j?" becomes LLM calls on ordered prompts.

Source: Active Learners as Efficient PRP Rerankers, section 3 ("Oracles"). An oracle is a stateless strategy; the
answers it reads live in the per-query session (the pair cache), keyed by ordered prompt ``(first, second)`` of
candidate indices. An outcome is P(i beats j): 1.0 / 0.0 for a clear answer (soft answers are gated, see
``judging.gate``), 0.5 for a tie, ``None`` when unknown (refused by a cap, or the call failed); rankers resolve
0.5 and ``None`` by prior rank (``rankers.base.beats``). A ranker may also ask a ``BothOrders`` question."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

from .judging import Answers, gate, margin_of
from .registry import resolve

Prompt = tuple[int, int]
Known = Callable[[Prompt], bool]


class BothOrders(tuple):
    """A pair question ``(i, j)`` to be asked in both slot orders, LLM(i, j) and LLM(j, i), whatever the oracle.

    It is the tuple ``(i, j)`` (rankers yield it in a round like a plain pair; the outcome sent back is P(i beats
    j) as usual), e.g. to re-check a match that decides the top-K. The engine asks only the orders the pair cache
    lacks, one call each: nothing more with the bidirectional oracle, the other slot order of a pair asked before
    with a one-call oracle. Every oracle reads a pair answered in both orders by the bidirectional rule. Source:
    the bidirectional PRP oracle (Qin et al. 2024), asked only where a ranker chooses to.
    """

    __slots__ = ()

    def __new__(cls, i: int, j: int) -> BothOrders:
        return super().__new__(cls, (i, j))


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

    def reask(self, i: int, j: int, answers: Mapping[Prompt, float | None]) -> list[Prompt]:
        """Ordered prompts to ask after this round's answers, before its outcome is read (none by default; the
        ``adaptive`` oracle asks the other slot order of an unreliable single answer). The engine sends them as a
        further batch when the caps allow it, never as a new comparison."""
        return []

    def both_at_once(self, answers: Mapping[Prompt, float | None]) -> bool:
        """Whether, where no re-ask can follow (a round cap that the ranker plans in full), every question is to
        be asked in both slot orders in its own batch (False by default; see ``AdaptiveOracle``)."""
        return False

    def question(self, pair: tuple[int, int], known: Known, rng: random.Random) -> list[Prompt]:
        """The ordered prompts still to be asked for one question of a round: ``prompts(i, j, ...)`` for a plain
        pair, the slot orders not yet ``known`` for a ``BothOrders`` pair."""
        i, j = pair
        if isinstance(pair, BothOrders):
            return [p for p in ((i, j), (j, i)) if not known(p)]
        return self.prompts(i, j, known, rng)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _both_orders(p1: float, p2: float, margin: float = 0.0) -> float:
    """P(i beats j) from LLM(i, j) = ``p1`` and LLM(j, i) = ``p2`` (each P(first slot preferred)): i wins iff
    both prefer i; inconsistent answers or an exact 0.5 are a tie, 0.5 (the bidirectional rule). Consistent
    answers give their mean, (p1 + 1 - p2) / 2 (1.0 / 0.0 for hard answers), gated by ``margin`` (see
    ``judging``)."""
    if (p1 > 0.5 and p2 < 0.5) or (p1 < 0.5 and p2 > 0.5):
        return gate((p1 + 1.0 - p2) / 2, margin)
    return 0.5


def _either_order(i: int, j: int, answers: Mapping[Prompt, float | None]) -> float | None:
    """P(i beats j) from what is recorded: both slot orders by the bidirectional rule (after a ``BothOrders``
    question), else the one answered order mapped back to "i beats j"; None when nothing usable is known. Soft
    answers below the pair cache's gate margin are ties (``judging.gate``)."""
    p1, p2 = answers.get((i, j)), answers.get((j, i))
    margin = margin_of(answers)
    if p1 is not None and p2 is not None:
        return _both_orders(p1, p2, margin)
    if p1 is not None:
        return gate(p1, margin)
    return None if p2 is None else gate(1.0 - p2, margin)


class SingleDirectionOracle(Oracle):
    """One call per pair in the order the ranker asked: LLM(i, j). The naive baseline: position bias of the
    comparator goes straight into the ranking. A cached answer in either order is reused."""

    name = "single"
    calls_per_pair = 1

    def prompts(self, i, j, known, rng):
        return [] if known((i, j)) or known((j, i)) else [(i, j)]

    def outcome(self, i, j, answers):
        return _either_order(i, j, answers)


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
        return _either_order(i, j, answers)


class BidirectionalOracle(Oracle):
    """Two calls per pair, LLM(i, j) and LLM(j, i) (Qin et al. 2024, PRP). i beats j iff the first prompt
    prefers its first slot (i) and the second prompt prefers its second slot (i). Inconsistent answers (both
    prefer the same slot) or an exact 0.5 are an explicit tie, outcome 0.5; rankers here resolve ties by prior
    rank and the engine counts them (``RerankResult.ties``). This differs from the paper's rule (section 3: V_ij =
    1 iff LLM(d_i, d_j) = 1 and LLM(d_j, d_i) = 0, else 0, so d_i, the first document, loses an inconsistent
    pair) and from the reference code's (its first argument wins): under either, who gets the pair depends on the
    order in which an algorithm passes the two candidates, which prior rank does not."""

    name = "bidirectional"
    calls_per_pair = 2

    def prompts(self, i, j, known, rng):
        return [p for p in ((i, j), (j, i)) if not known(p)]

    def outcome(self, i, j, answers):
        p1, p2 = answers.get((i, j)), answers.get((j, i))
        return None if p1 is None or p2 is None else _both_orders(p1, p2, margin_of(answers))


class AdaptiveOracle(RandomizedDirectionOracle):
    """One call per pair in a random slot order (as ``randomized``); the other order is asked, in a further
    batch of the same ranker round, only where the first answer prefers the candidate with the worse prior rank
    (an *upset*). The pair is then read by the bidirectional rule, gated.

    Why upsets only: every ranker resolves a tie by prior rank (``rankers.base.beats``), and the bidirectional
    rule can only keep a single answer's winner or turn it into a tie. An answer that already prefers the better
    prior rank therefore gets the same ``beats`` decision whether or not the other order is asked; an upset is
    the one answer that a second order can overturn. So while every upset is re-asked and both oracles gate with
    the same margin, the decisions of ``beats`` equal ``bidirectional``'s pair by pair, at 1 + (share of upsets)
    calls per pair instead of 2. Two things break that, so a ranker's order can differ from ``bidirectional``'s:
    once the judge looks order-consistent (below) an upset is read from its one answer, as ``randomized`` reads
    it, where ``bidirectional`` may read a tie; and a soft judge's gate margin is the quantile of each oracle's own
    answers (here the first asks, there both orders), so an answer near it can be a tie under one and a win under
    the other. Measured (``benchmarks/results/adaptive_sample/``: 5 rankers that read outcomes only through
    ``beats``, 6 synthetic queries, N=100, K=10, the paper-calibrated judge): the order differs in 6 of 30 hard
    reranks (0 without the shortcut) and 18 of 30 soft ones (0 without the shortcut and with one fixed margin).
    Rankers that add outcomes up (allpairs, PAC) read an un-asked agreeing answer as a whole win where
    ``bidirectional`` may read a tie.

    No answer is asked again once the judge looks order-consistent (``JudgeTally.consistent``, carried across
    ``rerank_many``): its other order would then mostly say the same. The pairs behind that test, and behind
    ``JudgeStats.flip_rate`` here, are the re-asked upsets (and any ``BothOrders`` question), not a sample of the
    pairs asked: under a weak first stage most upsets are real preferences that the judge answers the same way in
    both orders, so the rate can read low and the test pass for a judge that flips often (bubblesort on the
    synthetic queries: 0.03, against 0.11 with ``bidirectional``; docs/judge-diagnostics.md). A pair costs 1 or 2
    calls; a re-ask is charged to every cap like any call and is dropped, never waited for, when a cap refuses it.
    Each re-ask batch takes a round, so none takes the last round of a ``max_rounds`` cap, and a query whose plan
    fills the rounds left
    (``Ranker.plans_rounds_for``: ``parallel_mohajer``; ``budget_depth`` when it runs its parallel plan, or a
    sequential one that would not fit them with re-asks) gets none while rounds are limited (a round cap, or a
    ``time_budget`` once a round's latency is known, at the query's start: a query that starts before any is
    known keeps its re-asks): there it equals ``randomized``. Plans as
    a one-call oracle (``calls_per_pair = 1``). Its calls per pair, and why re-asks stay out of a planned round
    cap: docs/judge-diagnostics.md.

    Under such a cap a *positional* judge (``JudgeTally.positional``: most of its answers follow the slot, not the
    passages) is asked every question in both slot orders in the same batch (``both_at_once``), so that its
    answers are read by the bidirectional rule (a tie, resolved by prior rank, where the two orders disagree)
    instead of as a coin the slot order tossed. The tally is this query's or, in ``rerank_many``, carried across
    its queries; when it says so at the start the ranker plans with two calls per pair
    (``RankContext.calls_per_pair``). The round in which the judge shows (asked one order at a time) is completed
    once: its upsets are re-asked in one further batch, before the ranker reads it, when the ranker's plan
    (``Ranker.planned_rounds``) leaves the cap a round to spare."""

    name = "adaptive"

    def both_at_once(self, answers):
        return isinstance(answers, Answers) and answers.pool.positional

    def reask(self, i, j, answers):
        p1, p2 = answers.get((i, j)), answers.get((j, i))
        if (p1 is None) == (p2 is None):  # nothing usable, or both orders known
            return []
        (a, b), p = ((i, j), p1) if p1 is not None else ((j, i), p2)
        if isinstance(answers, Answers) and answers.pool.consistent:
            return []
        upset = b < a if p > 0.5 else a < b if p < 0.5 else False  # the preferred slot holds the worse prior rank
        return [(b, a)] if upset else []


ORACLES: dict[str, type[Oracle]] = {
    cls.name: cls for cls in (BidirectionalOracle, RandomizedDirectionOracle, SingleDirectionOracle, AdaptiveOracle)
}


def get_oracle(oracle: str | Oracle) -> Oracle:
    """Resolve an oracle name (``bidirectional``, ``randomized``, ``single``, ``adaptive``) or pass an instance through.

    Raises:
        ValueError: unknown name. TypeError: neither a str nor an Oracle.
    """
    return resolve(oracle, ORACLES, Oracle, "oracle")
