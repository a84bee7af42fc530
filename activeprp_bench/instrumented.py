"""Comparators for benchmarks: one that notes the calls of each round, and a hosted-LLM stand-in that sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from activeprp_core.comparators.base import CallGuard, Comparator, as_comparator
from activeprp_core.types import Judgment, Pair

CALL_LATENCY_S = 0.5
"""The hosted judge the bench models: seconds per call (``SleepingComparator``, ``report.modelled_wall_s``, the grid
report's wall-time table, ``activeprp bench walltime --latency``)."""
CALLS_IN_FLIGHT = 16
"""The hosted judge the bench models: calls in flight at once (``--in-flight``, and the same readers)."""


class RoundRecorder(Comparator):
    """Wraps a comparator and notes in ``batches`` how many calls each batch (one round of the engine) holds;
    the answers are ``inner``'s."""

    guards_calls = True  # its judge / ajudge apply the guard (passed on to the inner comparator)

    def __init__(self, inner: Any) -> None:
        self.inner, self.batches = as_comparator(inner), []

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        self.batches.append(len(pairs))
        return self.inner.judge(query, pairs, guard=guard)


class SleepingComparator(RoundRecorder):
    """A hosted-LLM stand-in: every call takes ``latency_s`` seconds (``asyncio.sleep``), at most ``in_flight``
    calls run at once; the answers come from ``inner`` (any comparator). ``arerank`` awaits one round at a time,
    so a query's wall time is the sum over rounds of its waves of calls; ``batches`` notes the calls per round."""

    def __init__(self, inner: Any, latency_s: float = CALL_LATENCY_S, in_flight: int = CALLS_IN_FLIGHT) -> None:
        super().__init__(inner)
        self.latency_s, self.in_flight = latency_s, in_flight

    async def ajudge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        self.batches.append(len(pairs))
        gate = asyncio.Semaphore(self.in_flight)

        async def call(pair: Pair) -> Judgment:
            async with gate:
                await asyncio.sleep(self.latency_s)
                return self.inner.judge(query, [pair], guard=guard)[0]

        return list(await asyncio.gather(*(call(p) for p in pairs)))

    def judge(self, query: str, pairs: Sequence[Pair], *, guard: CallGuard | None = None) -> list[Judgment]:
        return asyncio.run(self.ajudge(query, pairs, guard=guard))
