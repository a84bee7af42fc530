"""The per-query hard caps and the checkers of counts and seconds.

- ``check_count``: the one checker of every integer setting (numpy integers accepted, bools refused).
- ``check_flag``: the one checker of a bool (no other type is read as one).
- ``check_real``: the one checker of a finite real number, >= 0 unless ``signed`` (a weight, a share of CPUs, a
  simulator knob); ``check_seconds``, the one checker of every duration, is ``check_real`` in seconds.
- ``Cap``: one named hard cap (``budget`` calls, ``max_rounds`` rounds, ``token_budget`` tokens): units are
  reserved *before* they are used (``take``), so batched or concurrent execution never overshoots, and what a
  reservation did not use is given back afterwards (``refund``, e.g. the reported tokens of a call against the
  upper bound reserved for it).
- ``Deadline``: the cap on time (``time_budget`` seconds): it reserves nothing and refuses every question once
  its clock has passed the deadline.
- ``BudgetView``: the live, read-only view of a query's caps a ranker gets as ``RankContext.caps``.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

from .errors import InvalidAnswer


def check_count(value: object, name: str, *, minimum: int | None = 0, allow_none: bool = False) -> int | None:
    """``value`` as an int when it is an integer >= ``minimum`` (any ``numbers.Integral``, e.g. a numpy integer;
    never a bool; ``minimum=None``: any integer), or None when ``allow_none``.

    Raises:
        TypeError: not an integer (bools included), or None where it is not allowed.
        ValueError: below ``minimum``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        allowed = "an int" + ("" if minimum is None else f" >= {minimum}") + (" or None" if allow_none else "")
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}" + (" or None" if allow_none else "") + f", got {value}")
    return int(value)


def check_flag(value: object, name: str) -> bool:
    """``value`` when it is a bool: no other type is read as one (``"no"`` and ``0`` are refused, not read as true
    or false by their truthiness).

    Raises:
        TypeError: not a bool.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def check_real(value: object, name: str, *, unit: str = "", positive: bool = False,
               allow_none: bool = False, signed: bool = False) -> float | None:
    """``value`` as a float when it is a finite real number >= 0 (> 0 when ``positive``; of either sign when
    ``signed``; ints and numpy numbers accepted, bools refused), or None when ``allow_none``. ``unit`` names what
    it counts in the messages (``"seconds"``: "must be a number of seconds >= 0"; ``""``: "must be a number >= 0").

    Raises:
        TypeError: not a real number (bools and strings included), or None where it is not allowed.
        ValueError: NaN, infinite, negative (or 0 when ``positive``) unless ``signed``.
    """
    if value is None and allow_none:
        return None
    of = f" of {unit}" if unit else ""
    sign = "" if signed else " > 0" if positive else " >= 0"
    wanted = f"a number{of}{sign}" + (" or None" if allow_none else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {wanted}, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be {wanted.replace('a number', 'a finite number')}, got {value}")
    if not signed and (value < 0 or (positive and value == 0)):
        raise ValueError(f"{name} must be {wanted}, got {value}")
    return float(value)


def check_seconds(value: object, name: str, positive: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as float seconds when it is a finite real number >= 0 (> 0 when ``positive``; ints and numpy
    floats accepted, bools refused), or None when ``allow_none``: ``check_real`` in seconds.

    Raises:
        TypeError: not a real number (bools and strings included), or None where it is not allowed.
        ValueError: NaN, infinite, negative (or 0 when ``positive``).
    """
    return check_real(value, name, unit="seconds", positive=positive, allow_none=allow_none)


class Cap:
    """A hard cap ``limit`` on a count of units for one query (``None`` = unlimited), named like its setting.

    Raises:
        TypeError: ``limit`` is not an integer (bools are rejected) or None. ValueError: ``limit`` is negative.
    """

    def __init__(self, limit: int | None, name: str = "budget") -> None:
        self.name = name
        self.limit = check_count(limit, name, allow_none=True)
        self.spent = 0

    @classmethod
    def of_setting(cls, limit: int | None, name: str) -> Cap:
        """A cap whose ``limit`` is a ``RerankSettings`` value, checked there already (not again)."""
        cap = cls.__new__(cls)
        cap.name, cap.limit, cap.spent = name, limit, 0
        return cap

    @property
    def remaining(self) -> int | None:
        """Units still available (None = unlimited)."""
        return None if self.limit is None else self.limit - self.spent

    def fits(self, n: int) -> bool:
        """Whether ``n`` more units fit."""
        return self.limit is None or self.spent + n <= self.limit

    def take(self, n: int) -> bool:
        """Reserve ``n`` units; return False (reserving nothing) when they do not fit."""
        if not self.fits(n):
            return False
        self.spent += n
        return True

    def refund(self, n: int) -> None:
        """Give back ``n`` reserved units that were never used (calls never sent, tokens not reported)."""
        self.spent -= min(n, self.spent)

    def settle(self, reserved: int, used: int) -> None:
        """Replace a reservation of ``reserved`` units by the ``used`` units reported afterwards."""
        self.spent = max(0, self.spent + used - reserved)

    def __repr__(self) -> str:
        return f"Cap({self.name}: {self.spent}/{self.limit})"


class Deadline:
    """A hard cap of ``limit`` seconds (None = unlimited) on a clock, from ``started``: ``spent`` is the time
    elapsed, ``remaining`` the time left (never below 0), and a question fits while time is left. Nothing is
    reserved, so ``take`` / ``refund`` / ``settle`` do nothing. ``limit`` is a ``RerankSettings`` value (checked
    there).

    Args:
        limit: seconds (>= 0; 0: nothing fits) or None. name: its setting (``time_budget``).
        clock: seconds on a monotonic clock (e.g. ``time.monotonic``, an event loop's ``time``); started: its
            reading when the rerank started.
    """

    def __init__(self, limit: float | None, name: str, clock: Callable[[], float], started: float) -> None:
        self.name, self.limit, self.clock, self.started = name, limit, clock, started

    @property
    def at(self) -> float | None:
        """The deadline on the clock (None = none)."""
        return None if self.limit is None else self.started + self.limit

    @property
    def spent(self) -> float:
        """Seconds since the start."""
        return self.clock() - self.started

    @property
    def remaining(self) -> float | None:
        """Seconds left (None = unlimited; 0 once past)."""
        return None if self.limit is None else max(0.0, self.limit - self.spent)

    def fits(self, n: int = 0) -> bool:
        """Whether time is left."""
        return self.limit is None or self.spent < self.limit

    def take(self, n: int) -> bool:
        """Whether time is left (nothing is reserved)."""
        return self.fits()

    def refund(self, n: float) -> None:
        """Nothing to give back: time is not reserved."""

    def settle(self, reserved: float, used: float) -> None:
        """Nothing to reconcile: time is not reserved."""

    def __repr__(self) -> str:
        return f"Deadline({self.name}: {self.spent:.3f}/{self.limit} s)"


@dataclass(frozen=True)
class Rule:
    """How the engine charges one cap.

    Attributes:
        per: ``"prompt"`` (each ordered prompt reserves its price before it is sent), ``"round"`` (each round
            that sends calls reserves 1) or ``"time"`` (a ``Deadline``: seconds from the start of the rerank,
            nothing reserved; every question is refused once it has passed).
        price: ``price(comparator, query, pairs) -> list[int]``, the units each prompt reserves, read from the
            comparator that will answer (never called to judge), only while the cap is set. None: 1 per prompt.
        usage: what an answered call (a ``Judgment``) reports it used, or None when it reports nothing (then
            the reservation stands); None = never reconciled.
    """

    per: Literal["prompt", "round", "time"]
    price: Callable[[Any, str, Sequence[Any]], list[int]] | None = None
    usage: Callable[[Any], int | None] | None = None


#: The caps the engine enforces, by ``RerankSettings`` field. A new cap is one entry here (and its field).
RULES: dict[str, Rule] = {
    "budget": Rule("prompt"),
    "max_rounds": Rule("round"),
    "token_budget": Rule("prompt", price=lambda comparator, query, pairs: comparator.estimate_tokens(query, pairs),
                         usage=lambda j: (j.prompt_tokens + j.completion_tokens) or None),
    "time_budget": Rule("time"),
}


def _prices(prices: Any, n: int, name: str) -> list[int]:
    """A rule's ``price`` of ``n`` prompts, checked: one int >= 0 per prompt (``check_count``).

    Raises:
        InvalidAnswer: anything else (e.g. a comparator's ``estimate_tokens`` of the wrong length, or a negative
            estimate, which would let prompts past the cap).
    """
    prices = list(prices)
    try:
        if len(prices) == n:
            return [check_count(p, f"a price for {name}") for p in prices]
    except (TypeError, ValueError):
        pass
    raise InvalidAnswer(f"the comparator priced {n} prompts for {name} as {prices[:5]!r}"
                        f"{' ...' if len(prices) > 5 else ''}: one int >= 0 per prompt is needed")


class Caps:
    """One query's caps (a ``Cap`` per ``RULES`` entry, a ``Deadline`` per time rule, from ``limits``, e.g. a
    ``RerankSettings``' values, checked there; a cap missing from ``limits`` is unlimited): reserve before sending,
    reconcile after the answer. A prompt's cost: ``{cap name: units}`` over the per-prompt rules (uncapped ones
    count spending). ``clock`` and ``started`` (its reading at the start of the rerank; default: now) time the
    deadlines."""

    def __init__(self, limits: Mapping[str, float | None], clock: Callable[[], float] = time.monotonic,
                 started: float | None = None) -> None:
        started = clock() if started is None else started
        self.caps: dict[str, Cap | Deadline] = {
            name: Deadline(limits.get(name), name, clock, started) if rule.per == "time" else
            Cap.of_setting(limits.get(name), name) for name, rule in RULES.items()}
        self._deadlines = [self.caps[name] for name, rule in RULES.items()
                           if rule.per == "time" and limits.get(name) is not None]
        self._per_prompt = {name: rule.price for name, rule in RULES.items() if rule.per == "prompt"}
        self._rounds = [self.caps[name] for name, rule in RULES.items() if rule.per == "round"]
        self._capped_rounds = [cap for cap in self._rounds if cap.limit is not None]
        self._capped_prompt = [self.caps[name] for name in self._per_prompt if self.caps[name].limit is not None]
        self._priced = {c.name: self._per_prompt[c.name] for c in self._capped_prompt if self._per_prompt[c.name]}
        self._unit = {name: int(price is None) for name, price in self._per_prompt.items()}  # priced, uncapped: 0
        self._usage = {name: rule.usage for name, rule in RULES.items() if rule.usage is not None}

    def __getitem__(self, name: str) -> Cap:
        return self.caps[name]

    def reconciled(self, name: str) -> bool:
        """Whether cap ``name`` is reconciled with reported usage after the answers (its reservations shrink)."""
        return name in self._usage

    def prompt_costs(self, comparator: Any, query: str, pairs: Sequence[Any]) -> list[dict[str, int]]:
        """What each prompt of ``pairs`` (``(Candidate, Candidate)``, in order) reserves in each per-prompt cap,
        priced by ``comparator`` (see ``Rule.price``)."""
        if not self._priced:
            return [self._unit] * len(pairs)  # one shared dict: costs are never changed
        columns = {name: _prices(price(comparator, query, pairs), len(pairs), name)
                   for name, price in self._priced.items()}
        return [{**self._unit, **{name: c[i] for name, c in columns.items()}} for i in range(len(pairs))]

    def refusal(self, costs: Sequence[dict[str, int]], extra: Mapping[str, int] | None = None) -> str | None:
        """The first cap that a question of prompts ``costs`` (in a round, on top of ``extra``) does not fit: the
        deadlines first, then the round caps, then the per-prompt caps in ``RULES`` order."""
        for deadline in self._deadlines:
            if not deadline.fits():
                return deadline.name
        for cap in self._capped_rounds:
            if not cap.fits(1):
                return cap.name
        for cap in self._capped_prompt:
            if not cap.fits((extra or {}).get(cap.name, 0) + sum(c[cap.name] for c in costs)):
                return cap.name
        return None

    def take(self, costs: Sequence[dict[str, int]]) -> None:
        """Reserve prompts ``costs`` in their caps (``refusal`` said they fit)."""
        for cost in costs:
            for name, n in cost.items():
                self.caps[name].spent += n  # refusal() said it fits

    def take_round(self) -> None:
        """Reserve one round in the round caps (a batch that sends calls)."""
        for cap in self._rounds:
            cap.spent += 1

    def refund(self, costs: Sequence[Mapping[str, int]], round_too: bool = False) -> None:
        """Give back what prompts never sent reserved (and their round): one refund per cap, of the sum (a round
        cut at the deadline may leave a million prompts unsent)."""
        for name in self._per_prompt:  # every prompt's cost names them all (prompt_costs)
            self.caps[name].refund(sum(map(itemgetter(name), costs)))
        for cap in self._rounds if round_too else ():
            cap.refund(1)

    def reconcile(self, cost: Mapping[str, int], judgment: Any) -> None:
        """Replace one prompt's reservations by the usage its answer reports."""
        for name, usage in self._usage.items():
            used = usage(judgment) if name in cost else None
            if used is not None:
                self.caps[name].settle(cost[name], used)


Budget = Cap  # the names under which the call cap was first exported
CallBudget = Cap


class BudgetView:
    """A ranker's live, read-only view of its query's caps (``RankContext.caps``), kept by the engine.

    Attributes (read at any time; they change as the rerank spends):
        calls_left, tokens_left, time_left: what the ``budget``, ``token_budget`` and ``time_budget`` caps still
            allow (None = no cap; seconds for time).
        rounds_left: the rounds the query can still send: what the ``max_rounds`` cap allows, and, with a
            ``time_budget``, at most the rounds that fit in the time left at the estimated latency of a round (see
            ``Ledger.rounds_left``); None = no limit. A round answered wholly from the pair cache costs no round.
        exhausted: a cap has refused a question (or a failure stopped the calls), and every ranker here stops
            scheduling and returns its best-effort order. A later question that still fits the caps is still sent
            (a shorter prompt after a ``token_budget`` refusal, one call after a two-call question was refused);
            after a failure only cached answers arrive.

    ``affordable(pairs)`` says how many of ``pairs``, in order, the caps pay for now (cached answers are free):
    a ranker plans with it instead of asking more than fits. A view made without an engine (a ranker run by
    hand, e.g. in tests) is unlimited.
    """

    def __init__(self, caps: Mapping[str, Cap | Deadline] | None = None, exhausted: Callable[[], bool] = lambda: False,
                 affordable: Callable[[Sequence[tuple[int, int]]], int] | None = None,
                 rounds_left: Callable[[], int | None] | None = None) -> None:
        self._caps = dict(caps or {})
        self._exhausted, self._affordable = exhausted, affordable
        self._rounds_left = rounds_left

    def left(self, name: str) -> int | float | None:
        """What cap ``name`` (a ``RULES`` key) still allows (None = no cap)."""
        cap = self._caps.get(name)
        return None if cap is None else cap.remaining

    @property
    def calls_left(self) -> int | None:
        """LLM calls the ``budget`` cap still allows (None = no cap)."""
        return self.left("budget")

    @property
    def rounds_left(self) -> int | None:
        """Sequential rounds the query can still send (None = no limit; see the class docstring)."""
        return self.left("max_rounds") if self._rounds_left is None else self._rounds_left()

    @property
    def tokens_left(self) -> int | None:
        """Prompt + completion tokens the ``token_budget`` cap still allows (None = no cap)."""
        return self.left("token_budget")

    @property
    def time_left(self) -> float | None:
        """Seconds until the ``time_budget`` deadline (None = no cap; 0 once past)."""
        return self.left("time_budget")

    @property
    def exhausted(self) -> bool:
        """Whether a cap has refused a question or a failure stopped the calls."""
        return self._exhausted()

    def affordable(self, pairs: Sequence[tuple[int, int]]) -> int:
        """How many of ``pairs`` (questions, in order; ``BothOrders`` allowed) the caps pay for now."""
        return len(pairs) if self._affordable is None else self._affordable(pairs)

    def __repr__(self) -> str:
        left = ", ".join(f"{name}: {self.left(name)}" for name in RULES)
        return f"BudgetView(left={{{left}}}, exhausted={self.exhausted})"
