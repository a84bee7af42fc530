"""The ranker protocol and the building blocks every ranker shares.

A ranker is a *sans-I/O scheduler*: ``schedule(ctx)`` returns a generator that yields rounds (lists of index
pairs ``(i, j)`` whose comparisons are independent of each other), receives one outcome per pair, in order
(P(i beats j), see ``activeprp_core.oracles``), and returns the ordering of all candidates as a list of indices.
Indices are prior ranks: candidate 0 is the first-stage (e.g. BM25) best. The engine executes and prices the
rounds; the ranker never calls an LLM. It reads its query's caps through ``ctx.caps``, a live read-only
``BudgetView`` (calls, rounds and tokens left, ``exhausted``, ``affordable(pairs)``); once ``exhausted`` is set
only cached answers arrive, and every ranker here stops scheduling and returns its best-effort order (the engine
refuses a question that does not fit and reports the cut).

Unknown outcomes (a cap refused the question, a failed call) and ties are resolved by prior rank (``beats``),
so every ranker's output is "what is known, then the prior order" without special cases.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..budget import BudgetView
from ..judging import JudgeStats

Outcome = float | None
Round = list[tuple[int, int]]
Schedule = Generator[Round, list[Outcome], Any]


@dataclass(frozen=True)
class RankContext:
    """What a ranker knows about one query's reranking before its first round (never changed afterwards).

    Attributes:
        n: number of candidates; k: requested top-K (``top_k``; may exceed n).
        rng: the ranker's own seeded stream (e.g. quicksort pivots).
        calls_per_pair: the oracle's cost of one comparison (keyword-only).
        caps: the live, read-only view of the query's caps (``BudgetView``: calls, rounds, tokens and time left;
            unlimited when made by hand; keyword-only).
        judge: returns the ``JudgeStats`` of the judge's answers so far when called (live: the running record
            that the confidence gate and the ``adaptive`` oracle read, across the queries of one ``rerank_many``);
            no answers when made by hand (keyword-only).
        cache: whether the engine answers a question asked before in the query from its pair cache at no cost
            (``RerankSettings.cache``; keyword-only, default True). Without it a ranker that re-runs its plan over
            the outcomes it has seen answers those pairs itself (``Evidence.record``'s ``known``).
    """

    n: int
    k: int
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    _: KW_ONLY
    calls_per_pair: int = 1
    caps: BudgetView = field(default_factory=BudgetView)
    judge: Callable[[], JudgeStats] = JudgeStats
    cache: bool = True

    @property
    def top(self) -> int:
        """The effective K: ``min(k, n)``."""
        return min(self.k, self.n)


class Ranker(ABC):
    """A round-based scheduler of pair comparisons (see module docstring)."""

    name: str
    #: True for a ranker that plans its steps to fill a ``max_rounds`` cap (``parallel_mohajer``), or may for some
    #: queries (``budget_depth``); ``plans_rounds_for`` answers per query.
    plans_rounds: bool = False

    @abstractmethod
    def schedule(self, ctx: RankContext) -> Schedule:
        """Yield rounds of pairs, receive their outcomes, return a permutation of ``range(ctx.n)``."""

    def plans_rounds_for(self, ctx: RankContext) -> bool:
        """Whether this query's plan, from ``ctx`` at the start, fills the rounds left (``ctx.caps.rounds_left``:
        a ``max_rounds`` cap, or the rounds a ``time_budget`` fits) with its own steps. The engine asks once per
        query; where it holds and rounds are limited, it sends no re-asks (``Oracle.reask``), since each re-ask
        batch would take a round of the plan. Default: ``plans_rounds``."""
        return self.plans_rounds

    def planned_rounds(self, ctx: RankContext) -> int | None:
        """The rounds this query's plan takes, from ``ctx`` at the start, when every answer agrees with the first
        stage (``plan_size``); None (the default) = not planned. Under a round cap the engine may take a round
        the plan leaves over for an oracle's repair of an earlier round (``Oracle.both_at_once``)."""
        return None

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


_SIZES: dict[tuple, tuple[int, int]] = {}


def plan_size(ranker: Ranker, n: int, k: int) -> tuple[int, int]:
    """``(questions, rounds)`` of ``ranker``'s whole plan over ``n`` candidates for the top ``k`` when every answer
    agrees with the first stage (the lower candidate index wins), with no cap: the distinct unordered pairs it
    asks, and the rounds that ask at least one of them. Computed once per (ranker, n, k) by running the ranker's
    schedule; a judge that disagrees with the first stage makes the plan ask more."""
    return schedule_size((repr(ranker), n, k), lambda: ranker.schedule(RankContext(n, k)))


def schedule_size(key: tuple, make: Callable[[], Schedule]) -> tuple[int, int]:
    """``plan_size`` of the schedule ``make()`` makes, cached under ``key``."""
    if key not in _SIZES:
        schedule, asked, rounds = make(), set(), 0
        try:
            pairs = next(schedule)
            while True:
                new = {(min(p), max(p)) for p in pairs} - asked
                asked |= new
                rounds += bool(new)
                pairs = schedule.send([float(beats(i, j, None)) for i, j in pairs])
        except StopIteration:
            pass
        _SIZES[key] = (len(asked), rounds)
    return _SIZES[key]


def beats(i: int, j: int, outcome: Outcome) -> bool:
    """Whether i beats j given P(i beats j); a tie (0.5) or unknown (None) goes to the better prior rank."""
    if outcome is None or outcome == 0.5:
        return i < j
    return outcome > 0.5


def relay(schedule: Generator, step: Callable[[Any], Generator]) -> Generator:
    """Run ``schedule`` through ``step``: each round it yields is handed to the sub-generator ``step(round)``,
    whose yields go out and whose return value is sent back into ``schedule``; returns the schedule's value.
    The one generator proxy of the code base (the engine's rounds, ``Evidence.record``)."""
    try:
        pairs = next(schedule)
        while True:
            pairs = schedule.send((yield from step(pairs)))
    except StopIteration as stop:
        return stop.value


def match(i: int, j: int) -> Generator[Round, list[Outcome], bool]:
    """One comparison as its own round; returns True when i beats j."""
    (outcome,) = yield [(i, j)]
    return beats(i, j, outcome)


def parallel(schedules: Iterable[Generator]) -> Generator[Round, list[Outcome], list]:
    """Run independent sub-schedules in lock-step, each step merging their pending rounds into one round;
    returns the list of their return values, in input order."""
    gens = list(schedules)
    results: list = [None] * len(gens)
    pending: dict[int, Round] = {}

    def advance(idx: int, outcomes: list[Outcome] | None) -> None:
        try:
            pending[idx] = gens[idx].send(outcomes)  # send(None) starts a generator, as next() does
        except StopIteration as stop:
            results[idx] = stop.value
            pending.pop(idx, None)

    for idx in range(len(gens)):
        advance(idx, None)
    while pending:
        spans = list(pending.items())
        outcomes = yield [pair for _, pairs in spans for pair in pairs]
        start = 0
        for idx, pairs in spans:
            advance(idx, outcomes[start:start + len(pairs)])
            start += len(pairs)
    return results


def complete(head: Iterable[int], n: int) -> list[int]:
    """``head`` followed by every other index of ``range(n)`` in prior order (never loses a candidate)."""
    order = list(dict.fromkeys(head))
    seen = set(order)
    return order + [i for i in range(n) if i not in seen]


def bubble_passes(arr: list[int], passes: int, caps: BudgetView, skip_settled: bool = True) -> Schedule:
    """BubbleSort@k on ``arr`` in place: ``passes`` bottom-up passes of adjacent comparisons (window 2);
    pass p stops at position p, so after ``passes`` passes the top ``passes`` positions are settled.

    With ``skip_settled`` (the llm-rankers / Setwise BubbleSort): the next pass starts just below the lowest
    swap of the previous one (pairs further down were compared and are unchanged), and a pass without swaps
    ends the sort. Without it: plain PRP-Sliding-k passes (Qin et al. 2024) from the bottom every time.
    Stops as soon as ``caps`` says a cap is exhausted: ``arr`` stays as it is.
    """
    start = len(arr) - 2
    for p in range(passes):
        lowest_swap = None
        for j in range(start, p - 1, -1):
            if caps.exhausted:
                return
            if not (yield from match(arr[j], arr[j + 1])):
                arr[j], arr[j + 1] = arr[j + 1], arr[j]
                if lowest_swap is None:
                    lowest_swap = j
        if skip_settled:
            if lowest_swap is None:
                return
            start = min(lowest_swap + 1, len(arr) - 2)


class Bracket:
    """A fixed single-elimination bracket over ``members`` (in the given order): adjacent entries meet, an
    odd one out gets a bye. ``levels[0]`` holds the leaves; ``levels[l][t]`` the winner of the subtree of
    leaves ``2^l * t ...``; ``None`` marks an empty subtree.
    """

    def __init__(self, members: list[int]) -> None:
        self.levels: list[list[int | None]] = [list(members)]
        while len(self.levels[-1]) > 1:
            self.levels.append([None] * ((len(self.levels[-1]) + 1) // 2))

    @property
    def champion(self) -> int | None:
        return self.levels[-1][0] if self.levels[0] else None

    def _slot(self, level: int, t: int) -> tuple[int | None, int | None]:
        below = self.levels[level - 1]
        return below[2 * t], (below[2 * t + 1] if 2 * t + 1 < len(below) else None)

    @property
    def depth(self) -> int:
        """Rounds a full ``play`` takes: ceil(log2 Q) for Q members."""
        return len(self.levels) - 1

    def matches(self, levels: int | None = None) -> int:
        """Matches a ``play`` of ``levels`` levels (all when None) will ask, byes excluded."""
        return sum(len(level) // 2 for level in self.levels[:(self.depth if levels is None else levels)])

    def _decide(self, level: int, t: int) -> Schedule:
        """Fill ``levels[level][t]``: a bye passes its player up at once, a match is one round."""
        a, b = self._slot(level, t)
        if a is None or b is None:
            self.levels[level][t] = a if b is None else b
        else:
            self.levels[level][t] = a if (yield from match(a, b)) else b

    def play(self, levels: int | None = None) -> Schedule:
        """Play every match, one round per level (all matches of a level are independent); with ``levels``,
        only the first ``levels`` levels (``self.levels[levels]`` then holds the survivors)."""
        for level in range(1, 1 + (self.depth if levels is None else min(levels, self.depth))):
            yield from parallel(self._decide(level, t) for t in range(len(self.levels[level])))
        return self.champion

    def eliminated(self) -> dict[int, tuple[int, int]]:
        """``{loser: (winner, level)}`` for every match played so far (byes are no matches)."""
        out = {}
        for level in range(1, len(self.levels)):
            for t, winner in enumerate(self.levels[level]):
                a, b = self._slot(level, t)
                if winner is not None and a is not None and b is not None:
                    out[b if winner == a else a] = (winner, level)
        return out

    def remove(self, member: int) -> Schedule:
        """Take ``member`` out and replay only the matches on its path to the root (<= ceil(log2 Q) matches,
        one per round; matches played before come from the pair cache). Returns the new champion."""
        t = self.levels[0].index(member)
        self.levels[0][t] = None
        for level in range(1, len(self.levels)):
            t //= 2
            yield from self._decide(level, t)
        return self.champion


class Heap:
    """A binary max-heap of candidate indices ordered by pair comparisons (the parent beats its children)."""

    def __init__(self, items: list[int]) -> None:
        self.items = list(items)

    def sift_down(self, pos: int) -> Schedule:
        h = self.items
        while True:
            child = 2 * pos + 1
            if child >= len(h):
                return
            if child + 1 < len(h) and not (yield from match(h[child], h[child + 1])):
                child += 1
            if (yield from match(h[pos], h[child])):
                return
            h[pos], h[child] = h[child], h[pos]
            pos = child

    def sift_up(self, pos: int) -> Schedule:
        h = self.items
        while pos > 0:
            parent = (pos - 1) // 2
            if not (yield from match(h[pos], h[parent])):
                return
            h[pos], h[parent] = h[parent], h[pos]
            pos = parent

    def heapify(self) -> Schedule:
        """Bottom-up heap construction; the sift-downs of one tree level touch disjoint subtrees, so each
        level runs as parallel sub-schedules (depth O(log^2 n) rounds instead of O(n))."""
        last_parent = len(self.items) // 2 - 1
        depth = (last_parent + 1).bit_length() - 1  # -1 (nothing to do) below two items
        for d in range(depth, -1, -1):
            lo, hi = 2**d - 1, min(2 ** (d + 1) - 2, last_parent)
            yield from parallel(self.sift_down(p) for p in range(lo, hi + 1))

    def promote_hole(self) -> Schedule:
        """Bottom-up deletion of the root (Wegener 1993, "bottom-up heapsort"): the better child moves up,
        one comparison per level, until the hole reaches a leaf. Returns the hole's position; call ``fill``."""
        h, pos = self.items, 0
        h[0] = None
        while 2 * pos + 1 < len(h):
            child = 2 * pos + 1
            if child + 1 < len(h) and not (yield from match(h[child], h[child + 1])):
                child += 1
            h[pos], h[child] = h[child], None
            pos = child
        return pos

    def fill(self, hole: int, item: int | None) -> Schedule:
        """Put ``item`` (or, when None, the last leaf) into the hole left by ``promote_hole`` and sift it up."""
        h = self.items
        if item is None:
            item = h.pop()
            if hole == len(h):
                return
        h[hole] = item
        yield from self.sift_up(hole)

    def pop_top(self) -> int:
        """Remove and return the root, moving the last leaf up (call ``sift_down(0)`` afterwards)."""
        top, last = self.items[0], self.items.pop()
        if self.items:
            self.items[0] = last
        return top
