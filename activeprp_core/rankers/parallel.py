"""Parallel Mohajer: Mohajer's group tournaments in few rounds, planned to the caps (see ``ParallelMohajer``)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

from ..oracles import BothOrders
from .base import Bracket, Outcome, RankContext, Ranker, Schedule, beats, complete, parallel, plan_size, relay


class Evidence:
    """The outcomes a ranker has seen, per unordered pair: ``outcomes[(a, b)]`` = P(a beats b) for a < b (None
    when refused or failed); ``both`` holds the pairs answered in both slot orders. ``wins`` reads the outcomes
    like ``beats``: unknowns and ties go to the better prior rank."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[int, int], Outcome] = {}
        self.both: set[tuple[int, int]] = set()

    def note(self, pair: tuple[int, int], outcome: Outcome) -> None:
        a, b = pair
        key = (min(a, b), max(a, b))
        self.outcomes[key] = outcome if a < b or outcome is None else 1.0 - outcome
        if isinstance(pair, BothOrders) and outcome is not None:
            self.both.add(key)

    def known(self, a: int, b: int) -> bool:
        return self.outcomes.get((min(a, b), max(a, b))) is not None

    def wins(self, a: int, b: int) -> bool:
        """Whether a beats b on the evidence."""
        if a < b:
            return beats(a, b, self.outcomes.get((a, b)))
        return not beats(b, a, self.outcomes.get((b, a)))

    def answered(self, question: tuple[int, int]) -> bool:
        """Whether the evidence answers ``question``: a plain pair known, a ``BothOrders`` one in both orders."""
        a, b = question
        return (min(a, b), max(a, b)) in self.both if isinstance(question, BothOrders) else self.known(a, b)

    def outcome(self, a: int, b: int) -> Outcome:
        """P(a beats b) on the evidence (None when unknown)."""
        o = self.outcomes.get((min(a, b), max(a, b)))
        return o if a < b or o is None else 1.0 - o

    def record(self, schedule: Generator, questions=list,
               known: Callable[[tuple[int, int]], bool] | None = None) -> Schedule:
        """Run ``schedule``, asking each of its rounds as ``questions(pairs)`` (the same pairs, some possibly as
        ``BothOrders``) and noting every outcome; returns the schedule's value. The questions for which
        ``known(question)`` holds are answered from the evidence instead (``outcome``; a round all of whose
        questions are known asks nothing): for a re-run of a plan when the engine's pair cache is off
        (``RankContext.cache``), which would otherwise ask those pairs again."""
        def step(pairs: list[tuple[int, int]]) -> Schedule:
            asked = questions(pairs)
            if known is None:
                outcomes = yield asked
            else:
                fresh = [p for p in asked if not known(p)]
                got = iter((yield fresh) if fresh else [])
                outcomes = [self.outcome(*p) if known(p) else next(got) for p in asked]
            for pair, o in zip(asked, outcomes):
                self.note(pair, o)
            return outcomes

        return (yield from relay(schedule, step))


def copeland(items: Iterable[int], evidence: Evidence) -> list[int]:
    """``items`` by wins over the other items on the evidence (pairs never asked count for the better prior
    rank, as unknowns do everywhere), ties by prior rank."""
    items = list(items)
    wins = {x: sum(evidence.wins(x, y) for y in items if y != x) for x in items}
    return sorted(items, key=lambda x: (-wins[x], x))


class ParallelMohajer(Ranker):
    """Top-K in few rounds: Mohajer's group tournaments, every group's next member selected in the same rounds,
    merged by a round-robin and placement rounds instead of a sequential heap.

    1. K groups strided by prior rank, a single-elimination bracket per group, all groups' levels in parallel
       rounds (Mohajer, Suh, Elmahdy, ICML 2017; Active Learners as Efficient PRP Rerankers, sec. 4): N - K
       matches in ceil(log2(N/K)) rounds.
    2. The K champions are ranked by one round-robin round (Copeland: wins, ties by prior rank). In the same
       rounds each group selects its runner-up by a bracket over the players its champion beat directly (the
       second best of a knockout lost to the winner: "tournament selection", Knuth, TAOCP vol. 3, sec. 5.3.3).
    3. Placement: each new member is compared, in one round, with the ranked items between its group's previous
       member and position K (it cannot rank above that member); its place is after the ones that beat it; new
       members landing in the same gap are compared in one more round. Groups whose new member made the top-K
       select their next member (a bracket over the players eliminated by the group's selected members) and are
       placed the same way, until no group's newest member is in the top-K: with a consistent comparator, the
       exact top-K in order, as Mohajer's heap pops give it, in far fewer rounds than Mohajer's sequential heap
       and with more calls (calls and rounds measured: docs/rankers.md).
    4. With a one-call oracle (randomized, single), calls the plan will not need buy the other slot order of a
       pair (a ``BothOrders`` question, read by the bidirectional rule): a round upgrades its first pairs with the
       calls left after its own, the rest of the plan's and the upgrades reserved for the steps that decide the
       top-K more directly (the merge first, then bracket levels from the final down). Calls still left once the
       top-K is settled confirm, in both orders, the pairs that involve a top-K item (best ranks first, a third of
       the calls left per round), and the selection is re-decided over the evidence (the whole plan, since the
       pairs already answered cost no round; new pairs in both orders); a re-decision that a cap cuts short is
       not adopted. So quality grows with the budget towards the bidirectional oracle's (Qin et al. 2024) where
       that is better, as in the calibrated simulator.

    Planning with ``ctx.caps`` (rounds and calls left, ``affordable``): when fewer rounds are left than a step
    needs, a group's candidates are cut to the 2^r most promising (eliminated latest) so that the step still ends with a
    placement; with one round left after the brackets the round-robin takes each group's bracket finalist too;
    when even the brackets cannot finish, the survivors of the levels played (with none played: all candidates)
    are ranked by one round-robin, pairs of the best prior ranks first, cut to the budget. Every round lists its
    pairs best first, so a cut budget refuses the least useful ones.

    Output: a permutation of ``range(N)``: the ranked selected items, then the rest in prior order (also when a
    cap stops it after the brackets). When the calls run out inside the brackets, every candidate is ranked by
    the bracket matches it won with an answer, ties by prior rank. Asks nothing for N = 0.
    """

    name = "parallel_mohajer"
    plans_rounds = True

    def planned_rounds(self, ctx: RankContext) -> int:
        return plan_size(self, ctx.n, ctx.top)[1]

    def schedule(self, ctx: RankContext) -> Schedule:
        ev = Evidence()
        order = yield from _Run(ctx, ev).select()
        if ctx.calls_per_pair > 1:  # every answer already has both slot orders
            return order
        return (yield from confirm(ctx, ev, order, lambda: _Run(ctx, ev, rerun=True).select()))


def select(ctx: RankContext, ev: Evidence) -> Schedule:
    """``ParallelMohajer``'s selection (steps 1-3) over the evidence ``ev``, noting its outcomes there: pairs already
    answered cost nothing, new pairs one question each (no other slot orders, no confirmations). Returns the
    order."""
    return (yield from _Run(ctx, ev, upgrades=False).select())


def decisive(ev: Evidence, order: list[int], k: int) -> list[tuple[int, int]]:
    """Pairs of ``ev`` answered in one slot order only that involve a top-``k`` item of ``order``, best ranks
    first (by the better rank of the pair, then the other)."""
    rank = {x: r for r, x in enumerate(order)}
    pairs = [p for p, o in ev.outcomes.items()
             if o is not None and p not in ev.both and min(rank[p[0]], rank[p[1]]) < k]
    return sorted(pairs, key=lambda p: sorted((rank[p[0]], rank[p[1]])))


def confirm(ctx: RankContext, ev: Evidence, order: list[int], rerun: Callable[[], Schedule],
            reach: int | None = None) -> Schedule:
    """Spend the calls left once a plan is complete where they can still change the top-K: ask the ``decisive``
    pairs of ``order`` (those with an item in its top ``reach``, default K) in both slot orders (best ranks first, a
    third of the calls left per round: two calls per confirmed pair stay for the re-decision), then re-decide with
    ``rerun()`` (a schedule over the same evidence; pairs already answered cost nothing), until no such pair is
    left, a cap is exhausted or no round is left. A re-decision the caps cut short is not adopted. Returns the
    order (``order`` when nothing was confirmed)."""
    caps = ctx.caps
    while not caps.exhausted and caps.rounds_left != 0:
        todo = decisive(ev, order, ctx.top if reach is None else reach)
        if not todo:
            break
        if caps.calls_left is not None:
            todo = todo[: max(1, caps.calls_left // 3)]
        yield from ev.record(_one_round([BothOrders(a, b) for a, b in todo]))
        again = yield from rerun()
        if caps.exhausted:
            break
        order = again
    return order


def _one_round(pairs: list[tuple[int, int]]) -> Schedule:
    return (yield pairs)


class _Run:
    """One pass of ``ParallelMohajer`` over a query (the ranker object itself stays stateless). Every round goes
    through ``questions``, which chooses the slot orders, counts the pass's rounds and (via ``Evidence.record``)
    notes the outcomes."""

    def __init__(self, ctx: RankContext, ev: Evidence, rerun: bool = False, upgrades: bool = True) -> None:
        self.n, self.k, self.cost, self.caps, self.ev = ctx.n, ctx.top, ctx.calls_per_pair, ctx.caps, ev
        self.rerun, self.upgrades, self.cache = rerun, upgrades, ctx.cache
        self.eliminated: dict[int, tuple[int, int]] = {}
        self.planned = 0  # pairs the plan still expects to ask (an estimate)
        self.reserved: list[int] = []  # per bracket round: upgrades kept for the merge and the higher levels

    def questions(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """A round's pairs as asked: the first ones as ``BothOrders`` while spare calls last (see step 4 of
        ``ParallelMohajer``); on a re-run, every pair never asked before."""
        ev, caps = self.ev, self.caps
        fresh = [not ev.known(a, b) for a, b in pairs]
        self.planned -= sum(fresh)
        reserved = self.reserved.pop(0) if self.reserved else 0
        if self.cost > 1 or not self.upgrades:
            return list(pairs)
        future = 0 if caps.rounds_left == 1 else max(0, self.planned)
        spare = None if caps.calls_left is None else caps.calls_left - sum(fresh) - future - min(future, reserved)
        out = []
        for (a, b), new in zip(pairs, fresh):
            upgrade = (min(a, b), max(a, b)) not in ev.both and (
                self.rerun and new or spare is None or spare > 0)
            if upgrade and spare is not None:
                spare -= 1
            out.append(BothOrders(a, b) if upgrade else (a, b))
        return out

    def rounds_after(self, reserved: int) -> int | None:
        """Rounds a step may use when ``reserved`` rounds must follow it (None = unlimited). A re-run plans the
        whole selection: most of its pairs are answered already and cost no round, and a pair past the caps is
        refused, which makes the re-run not adopted (a plan cut to the rounds left would be adopted, and with
        none left it is the prior order)."""
        left = None if self.rerun else self.caps.rounds_left
        return None if left is None else left - reserved

    def ask(self, pairs: list[tuple[int, int]]) -> Schedule:
        """One round of the ``pairs`` (best first) not known yet (the engine refuses those past the caps);
        nothing once a cap has refused."""
        pairs = [p for p in pairs if not self.ev.known(*p)]
        if pairs and not self.caps.exhausted:
            yield pairs

    def select(self) -> Schedule:
        """The whole selection; returns the order (a permutation of ``range(n)``)."""
        return (yield from self.ev.record(self._select(), self.questions, None if self.cache else self.ev.answered))

    def _select(self) -> Schedule:
        n, k, ev, caps = self.n, self.k, self.ev, self.caps
        if n == 0:
            return []
        brackets = [Bracket(list(range(g, n, k))) for g in range(k)]
        depth = max(b.depth for b in brackets)
        rounds = self.rounds_after(1)
        levels = depth if rounds is None else max(0, min(depth, rounds))
        per_level = [sum(b.matches(level + 1) - b.matches(level) for b in brackets) for level in range(levels)]
        # the merge: round-robin and runner-ups' placement (k(k-1)/2 each at most), runner-ups' brackets; a last
        # round-robin (too few rounds for a merge) takes what the brackets leave
        merge = k * (k - 1) + k * (depth - 1) if rounds is None or rounds > depth else 0
        self.planned = sum(per_level) + merge
        self.reserved = [merge + sum(per_level[level + 1:]) for level in range(levels)]
        yield from parallel(b.play(levels) for b in brackets)
        for b in brackets:
            self.eliminated.update(b.eliminated())
        survivors = sorted(x for b in brackets for x in b.levels[min(levels, b.depth)] if x is not None)
        if caps.exhausted:  # a cap cut the brackets short: rank by the matches answered
            return self.by_wins(n)
        if levels < depth:  # the brackets cannot finish: one round-robin over what survives
            return complete((yield from self.last_round_robin(survivors)), n)
        champions = [b.champion for b in brackets]
        selected = [[c] for c in champions]
        left = self.rounds_after(1)
        if left == 0:  # one round left: the round-robin takes each group's bracket finalist too
            finalists = [x for s in selected for x in self.candidates(s)[:1]]
            return complete((yield from self.last_round_robin(sorted(champions) + sorted(finalists))), n)
        # the champions' round-robin and, in the same rounds, every group's runner-up
        found = yield from parallel([self.round_robin(sorted(champions))]
                                    + [self.next_member(s, left) for s in selected])
        ranked = copeland(champions, ev)
        new = {g: x for g, x in enumerate(found[1:]) if x is not None}
        while new:
            ranked = yield from self.place(ranked, new, selected)
            for g, x in new.items():
                selected[g].append(x)
            refill = [g for g in new if ranked.index(new[g]) < k]
            left = self.rounds_after(1)
            if not refill or caps.exhausted or (left is not None and left < 0):
                break
            picks = yield from parallel(self.next_member(selected[g], left) for g in refill)
            new = {g: x for g, x in zip(refill, picks) if x is not None}
        return complete(ranked, n)

    def by_wins(self, n: int) -> list[int]:
        """All candidates by the bracket matches they won with an answer (a refused match proves nothing), ties
        by prior rank: with every group's first level answered, each group's winners lead."""
        wins = [0] * n
        for loser, (winner, _) in self.eliminated.items():
            wins[winner] += self.ev.known(winner, loser)
        return sorted(range(n), key=lambda x: (-wins[x], x))

    def candidates(self, members: list[int]) -> list[int]:
        """A group's possible next members: players eliminated in its bracket by one of its selected
        ``members``, most promising (eliminated at a later level) first, then by prior rank."""
        chosen = set(members)
        cands = [x for x, (winner, _) in self.eliminated.items() if winner in chosen and x not in chosen]
        return sorted(cands, key=lambda x: (-self.eliminated[x][1], x))

    def next_member(self, members: list[int], rounds: int | None) -> Schedule:
        """A group's next member: a bracket over its candidates, cut to 2^rounds of them to fit ``rounds``; None
        when there is none, or when a cap refused every match of the bracket (a guess is not a selection)."""
        cands = self.candidates(members)
        if rounds is not None and rounds < len(cands).bit_length():  # else 2^rounds > len(cands): no cut to compute
            cands = cands[: 2 ** max(rounds, 0)]
        bracket = Bracket(cands)
        winner = yield from bracket.play()  # None, asking nothing, for no candidates
        played = bracket.eliminated().items()
        return winner if not played or any(self.ev.known(w, x) for x, (w, _) in played) else None

    def round_robin(self, items: list[int]) -> Schedule:
        """One round of every pair of ``items`` (sorted), best prior ranks first, cut to the budget."""
        yield from self.ask(sorted(((a, b) for i, b in enumerate(items) for a in items[:i]),
                                   key=lambda p: (p[1], p[0])))

    def last_round_robin(self, contenders: list[int]) -> Schedule:
        """The last round: a round-robin over the longest prefix of ``contenders`` (best first, at least two) whose
        pairs the caps pay for in full; returns that prefix by Copeland, then the other contenders as given."""
        new = [[(a, b) for a in contenders[:i] if not self.ev.known(a, b)] for i, b in enumerate(contenders)]
        affordable = self.caps.affordable([p for pairs in new for p in pairs])
        m, need = 0, 0
        for i, pairs in enumerate(new):
            need += len(pairs)
            if i >= 2 and need > affordable:
                break
            m = i + 1
        yield from self.round_robin(sorted(contenders[:m]))
        return copeland(contenders[:m], self.ev) + contenders[m:]

    def place(self, ranked: list[int], new: dict[int, int], selected: list[list[int]]) -> Schedule:
        """Place each group's ``new`` member into ``ranked`` (step 3 of ``ParallelMohajer``); returns the ranking."""
        ev, k = self.ev, self.k
        where = {x: r for r, x in enumerate(ranked)}
        after = {x: where[selected[g][-1]] + 1 for g, x in new.items()}
        windows = {x: ranked[after[x]:k] for x in sorted(new.values(), key=after.get)}
        yield from self.ask([(x, y) for x, window in windows.items() for y in window])
        slot = {x: after[x] + sum(ev.wins(y, x) for y in window) for x, window in windows.items()}
        if self.caps.rounds_left is None or self.caps.rounds_left >= 1:
            yield from self.ask([(a, b) for a in slot for b in slot if a < b and slot[a] == slot[b] < k])
        key = {x: (2 * r + 1, 0) for r, x in enumerate(ranked)}
        for x, s in slot.items():
            key[x] = (2 * s, -sum(ev.wins(x, y) for y in slot if y != x and slot[y] == s))
        return sorted(key, key=lambda x: (key[x], x))
