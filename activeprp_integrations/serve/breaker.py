"""``Breaker``: the judge's circuit breaker for a whole service, which closes again (no framework)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from activeprp_core.comparators.base import CallGuard
from activeprp_core.errors import ComparatorError, ComparatorUnavailable


class Breaker(CallGuard):
    """The ``CallGuard`` every request of a service shares: the cap on calls in flight, and one circuit breaker
    that opens for all requests and closes again.

    It opens when ``threshold`` calls in a row fail (after their retries) or on an error that refuses every call
    (``trip``, e.g. a 401). While it is open ``check`` raises (no call is sent) and ``retry_after()`` says when
    the next probe decides. ``watch()`` (a task the service runs) probes ``cool_down`` seconds after it opened
    (or as long as the judge's failed calls asked with Retry-After, if longer: ``asked``): one call through
    ``probe`` (True when the judge answered); the breaker closes on success, else waits as long again. So it
    recovers on a timer, with no request traffic.

    A streak that ends in an unusable answer (the judge replied, but neither A nor B) opens it only when a probe
    at once gets no answer either (nor any other call while the probe was out: the probe may be stuck in a hang
    the judge has since left): a caller's documents can make a judge answer off the point (a planted instruction),
    and one caller must not take the judge away from all. If the probe is answered that streak is forgiven
    (failures recorded while the probe was out still count), so such a caller costs one probe per ``threshold``
    failed calls of its own.

    A call whose retry its request's time budget kept from going out (an attempt failed, and the retry would have
    started past the deadline: ``record(False, reason, unusable=True)``), or that was cut in flight after such an
    attempt (``record(None, reason)``), counts in that streak as such a suspect failure, so a streak of them
    is checked with a probe (which has no deadline, so it gets every retry) before it opens: a judge with a
    transient fault (a 500 once, then an answer) answers the probe and stays in service; a dead one (every
    attempt refused or failed) does not, and the breaker opens. For metrics (``on_call``) the first is failed, the
    second cut (``ok=None``).

    A judge that takes calls and never answers fails none of them when every request's time budget (or client)
    gives up before the judge's own timeout would: each is cut, outcome unknown. So with ``silence`` the breaker
    also sums the time during which calls were out to the judge with no answer since its last one (each cut call
    tells how long its last attempt was out, ``record(None, seconds=...)``; overlapping calls count once): once
    that sum reaches ``silence`` seconds (the judge's own timeout: as long as one attempt may take), the judge is
    checked with a probe as above. A hung judge does not answer it and the breaker opens; a judge merely slower
    than the requests' time budgets does, and the sum starts afresh (about one probe per ``silence`` seconds of
    such calls). An answer, or a probe's, starts it afresh too.

    Args:
        max_concurrency: the most calls in flight across requests (None = no cap).
        threshold: failed calls in a row that open it (int >= 1; None = only ``trip`` opens it).
        cool_down: seconds between opening (or a failed probe) and the next probe (> 0).
        probe: an async callable making one judge call; returns whether it was answered (raising = not).
        on_call: called with ``ok`` (True, False, or None for a call cancelled in flight) and ``retries`` (its
            transport retries, int >= 0) for every call that reached the judge, whatever became of its request,
            probes included (for metrics).
        silence: seconds of calls out with no answer after which the judge is probed (above; > 0); None: never
            (nor without ``threshold``).

    The probe call is to be sent on ``probe_guard`` (a fresh ``ProbeGuard`` for each probe), whose retries the
    probe's ``on_call`` reports.
    """

    def __init__(self, max_concurrency: int | None, threshold: int | None, cool_down: float,
                 probe: Callable[[], Awaitable[bool]],
                 on_call: Callable[[bool | None, int], None] | None = None, silence: float | None = None) -> None:
        super().__init__(max_concurrency, threshold)
        self.cool_down, self.probe, self.on_call, self.silence = cool_down, probe, on_call, silence
        self.silent = 0.0  # seconds with calls out and no answer since the judge's last one (see the class)
        self._heard_at = self._silent_to = -math.inf  # the last answer; the end of the time summed in ``silent``
        self._hearings = 0  # answers heard (``_heard``), so that a probe sees whether one came while it was out
        self.opened_at: float | None = None
        self.asked: float | None = None  # the longest Retry-After of the failed calls since the last answer
        self.probes = 0  # the probes made, each counted once it ended
        self._suspect = False  # a streak ended in an unusable answer: watch() probes before it opens
        self._streaks = 0  # streaks started (so that a probe's answer forgives only the streak it was sent for)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.probe_guard = ProbeGuard()

    @property
    def open(self) -> bool:
        return self.error is not None

    @property
    def checking(self) -> bool:
        """Whether a streak of suspect failures (or silence) waits for the probe that decides whether it opens."""
        return self._suspect

    def record(self, ok: bool | None, reason: str | None = None, retry_after: float | None = None,
               unusable: bool = False, source: Any = None, retries: int = 0, seconds: float | None = None,
               status_code: int | None = None) -> None:
        if ok:
            self.asked = None
        elif retry_after is not None and ok is False:
            self.asked = max(self.asked or 0.0, retry_after)
        if ok is None and reason is not None:  # its retry cut in flight after a failed attempt: suspect (the class)
            super().record(False, reason, retry_after, True, source, retries, status_code=status_code)
        else:
            super().record(ok, reason, retry_after, unusable, source, retries, seconds, status_code)
        if ok:
            self._heard()
        elif ok is None and seconds is not None:
            self._unanswered(seconds)
        if self.on_call is not None:
            self.on_call(ok, retries)
        self._noticed()

    def trip(self, error: ComparatorError) -> None:
        super().trip(error)
        self._noticed()

    def _streak(self) -> int:
        # every failed call in a row counts, one request's too: /ready must follow a dead judge at once, and this
        # breaker probes and closes again; a caller's unusable answers are checked with a probe first (the class)
        return self._failures

    def _streak_full(self, unusable: bool) -> None:
        if unusable:
            self._suspect = True  # _noticed wakes watch() to probe first
        else:
            super()._streak_full(unusable)

    def _new_streak(self) -> None:
        super()._new_streak()
        self._streaks += 1

    def _heard(self) -> None:
        """The judge answered: its silence starts afresh."""
        with self._lock:
            self.silent, self._heard_at = 0.0, self.clock()
            self._hearings += 1

    def _unanswered(self, seconds: float) -> None:
        """A call was cut after ``seconds`` out with no answer: add what it adds to the time with calls out since
        the last answer (``silent``), and have ``watch`` probe the judge once that reaches ``silence``."""
        with self._lock:
            now = self.clock()
            self.silent += max(0.0, now - max(now - seconds, self._heard_at, self._silent_to))
            self._silent_to = now
            if self._silence_full() and self._error is None:
                self._suspect = True

    def _silence_full(self) -> bool:
        return self.silence is not None and self.max_consecutive_failures is not None and \
            self.silent >= self.silence

    def pause(self) -> float:
        """Seconds from opening (or a failed probe) to the next probe: ``cool_down``, or what the judge asked."""
        return self.cool_down if self.asked is None else max(self.cool_down, self.asked)

    def retry_after(self) -> int:
        """Whole seconds until the next probe decides (at least 1)."""
        opened = self.opened_at
        wait = self.pause() if opened is None else opened + self.pause() - time.monotonic()
        return max(1, math.ceil(wait))

    def close(self) -> None:
        """Close the breaker: calls go out again (the count of failures in a row starts afresh)."""
        with self._lock:
            self._error, self.opened_at, self.asked, self._suspect = None, None, None, False
            self._new_streak()
        self._heard()  # a probe was answered

    def _noticed(self) -> None:
        """Wake ``watch`` when the breaker has just opened (starting the cool-down) or a streak awaits its probe."""
        if self._error is None:
            if self._suspect:
                self._wake_watch()
            return
        if self.opened_at is not None:
            return
        with self._lock:
            if self.opened_at is not None:
                return
            self.opened_at = time.monotonic()
        self._wake_watch()

    def _wake_watch(self) -> None:
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def watch(self) -> None:
        """Probe while the breaker is open, every ``cool_down`` seconds, until one call is answered, and once when
        a streak ends in an unusable answer; runs until cancelled."""
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        self._noticed()
        if self.open or self._suspect:
            self._wake.set()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._suspect and not self.open:
                await self._check_judge()
            while self.open:
                opened = self.opened_at or time.monotonic()  # None only for a moment, while another thread opens it
                await asyncio.sleep(max(0.0, opened + self.pause() - time.monotonic()))
                if await self._probe_once():
                    self.close()
                else:
                    self.opened_at = time.monotonic()

    async def _check_judge(self) -> None:
        """Probe after a streak that ended in an unusable answer, or ``silence`` seconds of calls with no answer:
        open the breaker only if the judge does not answer the probe either, nor any other call while the probe was
        out (the probe may be stuck in a hang the judge has since left), else forgive that streak (the failures
        recorded while the probe was out count on; after a silence, the failed calls so far count on too) and start
        the silence afresh."""
        with self._lock:
            streak, failed, silent, hearings = self._streaks, self._failures, self.silent, self._hearings
            streak_full = self.max_consecutive_failures is not None and failed >= self.max_consecutive_failures
        answered = await self._probe_once()
        if answered:
            self._heard()
        with self._lock:
            self._suspect = False
            if answered and self._streaks == streak and streak_full:  # a silence's probe forgives no failure
                self._failures -= failed
            elif not answered and self._error is None and self._hearings == hearings:
                self._error = self._unavailable(", and the breaker's probe got no answer either") if streak_full \
                    else ComparatorUnavailable(f"circuit breaker open: the judge answered none of the calls it had "
                                               f"for {silent:.3g} s (each cut before its answer came: no answer in "
                                               "time), and the breaker's probe got no answer either",
                                               breaker="shared")
        self._noticed()

    async def _probe_once(self) -> bool:
        ok, guard = False, ProbeGuard()
        self.probe_guard = guard
        with contextlib.suppress(Exception):
            ok = bool(await self.probe())
        self.probes += 1
        if self.on_call is not None:
            self.on_call(ok, guard.retries)
        return ok


class ProbeGuard(CallGuard):
    """The ``CallGuard`` of one probe call: one call in flight and no breaker (the probe must not count in the
    judge's streak of failed calls); ``retries`` (``CallGuard.retries``) sums the transport retries the comparator
    records on it."""

    def __init__(self) -> None:
        super().__init__(1, None)
