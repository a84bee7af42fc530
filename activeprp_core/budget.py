"""The hard per-query cap on LLM calls."""

from __future__ import annotations


class CallBudget:
    """A hard cap ``limit`` on LLM calls for one query (``None`` = unlimited).

    Calls are reserved *before* they are sent (``take``), so batched or concurrent execution can never
    overshoot: a reservation that does not fit is refused whole and nothing is charged.

    Raises:
        TypeError: ``limit`` is not an int (bools are rejected) or None.
        ValueError: ``limit`` is negative.
    """

    def __init__(self, limit: int | None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"budget must be an int >= 0 or None, got {type(limit).__name__}")
        if limit is not None and limit < 0:
            raise ValueError(f"budget must be >= 0 or None, got {limit}")
        self.limit = limit
        self.spent = 0

    @property
    def remaining(self) -> int | None:
        """Calls still allowed (None when unlimited)."""
        return None if self.limit is None else self.limit - self.spent

    def take(self, n: int) -> bool:
        """Reserve ``n`` calls; return False (reserving nothing) when they do not fit."""
        if self.limit is not None and self.spent + n > self.limit:
            return False
        self.spent += n
        return True
