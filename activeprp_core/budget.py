"""Hard caps the engine enforces per query: LLM calls (``budget``) and sequential rounds (``max_rounds``)."""

from __future__ import annotations

import numbers


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


class Budget:
    """A hard cap ``limit`` on a count of units for one query (``None`` = unlimited): LLM calls, or rounds.

    Units are reserved *before* they are used (``take``), so batched or concurrent execution can never
    overshoot: a reservation that does not fit is refused whole and nothing is charged.

    Raises:
        TypeError: ``limit`` is not an integer (bools are rejected) or None.
        ValueError: ``limit`` is negative.
    """

    def __init__(self, limit: int | None, name: str = "budget") -> None:
        self.limit = check_count(limit, name, allow_none=True)
        self.spent = 0

    @property
    def remaining(self) -> int | None:
        """Units still allowed (None when unlimited)."""
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
        """Give back ``n`` reserved units that were never used (e.g. calls of a failed batch never sent)."""
        self.spent -= min(n, self.spent)


CallBudget = Budget  # the name under which the call cap was first exported
