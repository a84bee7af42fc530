"""``time_budget``: the cap on seconds per query. The machine refuses every question past the deadline and plans
the rounds that fit (a fake clock here); the drivers and comparators send nothing past it, cancel async calls in
flight, discard late answers and hand remote calls the time left as their timeout (real time, generous bounds:
the benchmark benchmarks/deadline_holds.py measures the 0.3 s goal)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from activeprp_core import (
    DONE,
    Candidate,
    ComparatorUnavailable,
    Reranking,
    SimulatedComparator,
    arerank,
    arerank_many,
    rerank,
    rerank_many,
)
from activeprp_core.judging import RoundLatency
from activeprp_core.rankers.auto import choose
from activeprp_core.types import IN_FLIGHT, UNSENT, Judgment
from tests.conftest import FakeRemote, make_case

SLOW = 5.0  # seconds a hanging judge waits: far beyond every time budget here


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(reranking: Reranking, clock: FakeClock, judge, seconds_per_round: float = 1.0):
    """Answer every batch with ``judge``; each round takes ``seconds_per_round`` on ``clock``; the calls of a round
    still running at the deadline are cut. Returns the times the batches were handed out."""
    handed = []
    while (batch := reranking.next_batch()) is not DONE:
        handed.append(clock.now)
        clock.now += seconds_per_round
        if reranking.deadline is not None and clock.now > reranking.deadline:
            reranking.send([Judgment(None, cut=IN_FLIGHT)] * len(batch.prompts))
        else:
            reranking.send(judge.compare(batch.query, batch.pairs))
    return handed


def test_no_question_past_the_deadline_and_the_result_says_so():
    cands, labels = make_case(30, seed=2)
    clock = FakeClock()
    reranking = Reranking("q", cands, ranker="mohajer", budget=None, top_k=5, time_budget=3.5, clock=clock)
    handed = drive(reranking, clock, SimulatedComparator(labels))
    res = reranking.result()
    assert handed and all(t < 3.5 for t in handed)  # no batch handed out past the deadline
    assert res.rounds == len(handed) == 4 and res.cut_calls > 0 and res.calls > res.cut_calls
    assert res.exhausted and res.exhausted_by == ["time_budget"] and not res.converged
    assert res.time_budget == 3.5 and res.stats()["time_budget"] == 3.5 and res.failed_calls == 0
    assert sorted(res.order) == list(range(30))


def test_a_zero_time_budget_sends_nothing():
    cands, labels = make_case(12, seed=1)
    res = rerank("q", cands, comparator=SimulatedComparator(labels), budget=50, time_budget=0)
    assert (res.calls, res.rounds, res.order, res.exhausted_by) == (0, 0, list(range(12)), ["time_budget"])


def test_unsent_calls_are_refunded_and_in_flight_ones_are_spent_not_failed():
    cands, labels = make_case(16, seed=3)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    reranking = Reranking("q", cands, ranker="quicksort", budget=40, top_k=5, time_budget=10, clock=clock)
    batch = reranking.next_batch()
    n = len(batch.prompts)
    answers = judge.compare(batch.query, batch.pairs)
    clock.now = 11.0  # the deadline passes while the first round is out: 2 answered, 2 cut, the rest never sent
    reranking.send(answers[:2] + [Judgment(None, cut=IN_FLIGHT)] * 2 + [Judgment(None, cut=UNSENT)] * (n - 4))
    assert reranking.next_batch() is DONE
    res = reranking.result()
    assert (res.calls, res.cut_calls, res.failed_calls, res.rounds) == (4, 2, 0, 1)
    assert res.exhausted_by == ["time_budget"] and sorted(res.order) == list(range(16))


def test_a_known_round_latency_buys_a_plan_that_fits():
    """With a round latency known from earlier queries, ``rounds_left`` is the rounds that fit in the time left:
    ``auto`` is chosen for that round cap, and ``parallel_mohajer`` plans a shallow selection that completes where
    it plans a deep one, cut off by the deadline, without the estimate."""
    cands, labels = make_case(40, seed=4)
    judge = SimulatedComparator(labels)
    known = RoundLatency()
    for _ in range(5):
        known.record(1.0)
    clock = FakeClock()
    auto = Reranking("q", cands, ranker="auto", budget=80, top_k=5, time_budget=3.5, clock=clock, latency=known)
    assert auto.ranker.name == choose(40, 5, 80, 3)[0]
    results = {}
    for name, latency in (("known", known), ("unknown", RoundLatency())):
        clock = FakeClock()
        reranking = Reranking("q", cands, ranker="parallel_mohajer", budget=120, top_k=5, time_budget=3.5,
                              clock=clock, latency=latency)
        drive(reranking, clock, judge)
        results[name] = reranking.result()
    assert results["known"].rounds <= 3 and results["known"].cut_calls == 0
    assert "time_budget" not in results["known"].exhausted_by
    assert results["unknown"].cut_calls > 0 and "time_budget" in results["unknown"].exhausted_by


@pytest.mark.parametrize("time_budget", [1e308, 1e20])
def test_a_time_budget_too_far_to_count_in_rounds_leaves_the_round_cap(time_budget):
    """A known round latency and a time budget whose rounds do not fit in a float (1e308 s / 1 µs) or dwarf any
    round cap: the round cap alone (it raised OverflowError)."""
    known = RoundLatency()
    known.record(1e-6)
    cands, _ = make_case(10, seed=4)
    timed, untimed = (Reranking("q", cands, ranker="mohajer", budget=30, max_rounds=7, clock=FakeClock(),
                                latency=known, **caps) for caps in ({"time_budget": time_budget}, {}))
    assert timed.ledger.rounds_left() == untimed.ledger.rounds_left() > 0


def test_the_round_latency_estimate_is_a_high_quantile_of_the_rounds_seen():
    latency = RoundLatency()
    assert latency.estimate() is None
    for seconds in (0.1, 0.2, 0.3, 0.4, 4.0):
        latency.record(seconds)
    assert 0.3 <= latency.estimate() <= 0.4  # above the median, below the outlier


def _after_a_burst(clock: FakeClock) -> RoundLatency:
    """A shared record after a burst whose 20 rounds took 2.5 s each (their calls waited for the judge's slots and
    were retried), observed at 0 on ``clock``."""
    latency = RoundLatency(clock)
    for _ in range(20):
        latency.record(2.5)
    return latency


def _queries(cands, clock: FakeClock, latency: RoundLatency, time_budget: float):
    """A new ``auto`` rerank of ``cands`` (budget 50, top 3) on ``clock`` and the shared ``latency``, per call."""
    return lambda: Reranking("q", cands, ranker="auto", budget=50, top_k=3, time_budget=time_budget, clock=clock,
                             latency=latency)


def _guarded(clock: FakeClock, reranking: Reranking):
    """The ``CallGuard`` a comparator asks before each call of ``reranking`` (``too_late``), as the drivers set it."""
    from activeprp_core.comparators.base import CallGuard

    guard = CallGuard()
    guard.clock, guard.deadline, guard.latency = clock, reranking.deadline, reranking.ledger.floor
    return guard


def test_a_stale_round_latency_does_not_shut_a_judge_that_answers_fast_again_out():
    """Review 1129u, finding 2: after the burst a 2 s time budget fits no round of 2.5 s, and its calls are too late
    (less time left than the fastest round, 2.5 s): every such query got its prior order with no call until the
    burst's rounds were ``LATENCY_HORIZON`` old, since no round was sent to observe a faster one, though the judge
    now answers in 20 ms. Once no round has been sent or observed for the estimate's length, a query's round is
    a probe: its calls go out, and answered in less than the estimate, it replaces the burst's rounds, so this
    query and the next plan the rounds that fit again."""
    cands, labels = make_case(20, seed=4)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    latency = _after_a_burst(clock)
    clock.now = 5.0  # 5 s after the burst, well within the horizon; nothing sent since
    first = Reranking("q", cands, ranker="auto", budget=50, top_k=3, time_budget=2.0, clock=clock, latency=latency)
    assert first.next_batch() is not DONE and not _guarded(clock, first).too_late()
    drive(first, clock, judge, seconds_per_round=0.02)
    res = first.result()
    assert res.calls > 0 and res.cut_calls == 0 and "time_budget" not in res.exhausted_by
    assert latency.estimate() == pytest.approx(0.02) and latency.fastest() == pytest.approx(0.02)
    second = Reranking("q", cands, ranker="auto", budget=50, top_k=3, time_budget=2.0, clock=clock,
                       latency=latency)
    assert second.ledger.rounds_left() > 1 and not _guarded(clock, second).too_late()


def test_a_fresh_round_latency_still_holds_calls_back_and_a_cut_probe_keeps_it():
    """What the record is for stays: a round observed within the estimate's length keeps it in force (no round
    planned, no call sent that it says cannot finish); a probe the deadline cuts (the judge is slow indeed)
    replaces nothing and makes the record fresh again: the query right after it sends nothing either (one probe
    per floor's length; the cut probe's seconds, with nothing back, raise the call floor)."""
    cands, labels = make_case(20, seed=4)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    latency = _after_a_burst(clock)
    query = _queries(cands, clock, latency, 2.0)
    clock.now = 2.0  # the burst's last round was observed 2 s ago: under its 2.5 s
    fresh = query()
    assert fresh.ledger.rounds_left() == 0 and _guarded(clock, fresh).too_late()
    clock.now = 10.0
    probe = query()
    assert not _guarded(clock, probe).too_late()
    drive(probe, clock, judge, seconds_per_round=3.0)  # still slow: cut at the deadline
    res = probe.result()
    assert res.rounds == 1 and res.calls == res.cut_calls > 0
    assert latency.estimate() == latency.fastest() == 2.5  # the burst's rounds still count
    assert latency.call_floor() == 3.0  # the probe's 3 s, with no call back since the burst's answers
    after = query()
    assert after.ledger.rounds_left() == 0 and _guarded(clock, after).too_late()
    clock.now += 2.5
    assert _guarded(clock, query()).too_late()
    clock.now += 0.5  # stale again for the floor's 3 s: the next query's round is a probe
    assert not _guarded(clock, query()).too_late()


def test_a_probe_is_a_round_that_fits_no_time_left_on_a_stale_record_and_only_its_calls_pass_the_floor():
    """``RoundLatency.probe``: only when no round fits at the estimate and nothing was observed (nor probe sent)
    for its length; the probe's own calls pass the ``fastest`` floor (its ``CallFloor``), another query's calls
    meanwhile do not."""
    cands, _ = make_case(20, seed=4)
    clock = FakeClock()
    latency = _after_a_burst(clock)
    assert RoundLatency(clock).probe(1.0) is False  # no estimate: nothing to test (the round cap alone plans)
    clock.now = 2.0
    assert not latency.probe(2.0)  # fresh
    clock.now = 10.0
    assert latency.probe(2.0) and not latency.probe(2.6) and not latency.probe(0.0)  # 2.6 s: a round fits
    probe = Reranking("q", cands, ranker="auto", budget=50, top_k=3, time_budget=2.0, clock=clock, latency=latency)
    other = Reranking("q", cands, ranker="auto", budget=50, top_k=3, time_budget=2.0, clock=clock, latency=latency)
    assert not latency.probe(2.0)  # one probe per estimate's length
    assert not _guarded(clock, probe).too_late() and _guarded(clock, other).too_late()
    assert latency.fastest() == 2.5
    latency.record(1.0, probe=True)  # faster than the estimate: replaces the rounds before it
    assert latency.fastest() == latency.estimate() == 1.0


def test_a_stale_record_whose_fastest_round_refuses_the_calls_is_probed_though_a_round_fits_the_estimate():
    """Review 1129ab, finding 1: a slow spell with mixed budgets (short ones' rounds cut at 1 s, recorded as lower
    bounds; long ones' answered in 2.5 s) leaves an estimate of 1 s under a 2 s time budget, so a round is planned
    (``rounds_left``), but the fastest answered round, 2.5 s, is over it, so every call is too late: nothing is
    observed and the record never changes (a probe fired only under the estimate). The probe is taken whenever
    the record refuses the calls, by either floor, and it is stale for that floor (max(estimate, fastest))."""
    cands, labels = make_case(20, seed=4)
    clock = FakeClock()
    latency = RoundLatency(clock)
    for _ in range(30):
        latency.record(1.0, answered=False)
    for _ in range(4):
        latency.record(2.5)
    assert latency.estimate() == 1.0 and latency.fastest() == 2.5
    query = _queries(cands, clock, latency, 2.0)
    clock.now = 2.0  # fresh for the fastest round's 2.5 s: the floor holds, no probe
    assert not latency.probe(2.0)
    fresh = query()
    assert fresh.ledger.rounds_left() == 2 and _guarded(clock, fresh).too_late()
    clock.now = 3.0  # stale: nothing observed for 2.5 s
    assert latency.probe(2.0) and latency.probe(2.5) and not latency.probe(2.6)
    probe = query()
    assert not _guarded(clock, probe).too_late()
    drive(probe, clock, judge=SimulatedComparator(labels), seconds_per_round=0.02)
    res = probe.result()
    assert res.calls > 0 and res.cut_calls == 0 and "time_budget" not in res.exhausted_by
    assert latency.estimate() == latency.fastest() == pytest.approx(0.02)  # the probe replaced the slow spell
    assert not _guarded(clock, query()).too_late()


class Hanging:
    """A judge whose calls do not come back for ``SLOW`` seconds (then answer by ``labels``)."""

    def __init__(self, labels, delay: float = SLOW) -> None:
        self.inner, self.delay, self.started = SimulatedComparator(labels), delay, []

    def compare(self, query, pairs):
        self.started.append(time.monotonic())
        time.sleep(self.delay)
        return self.inner.compare(query, pairs)

    async def acompare(self, query, pairs):
        self.started.append(time.monotonic())
        await asyncio.sleep(self.delay)
        return self.inner.compare(query, pairs)

def test_a_judge_slower_than_the_time_budget_gets_one_probe_per_floor_not_a_round_from_every_query():
    """Review 1129ae, finding 1: a judge slower than the time budget (3 s) never answers a round, so the record
    held no answered round and the call floor (the fastest answered one) was none: every query on the shared
    record sent a whole round of calls, each cut at its deadline (``activeprp serve``: 192 calls sent under load,
    none answered). A round cut with no call back took longer than its seconds, so while no answered round is in
    the record the longest such round is the floor (``RoundLatency.call_floor``): a query with no more time left
    sends nothing, and once the record is that old, one query's round is the probe, as for any stale record."""
    cands, labels = make_case(20, seed=4)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    latency = RoundLatency(clock)
    query = _queries(cands, clock, latency, 3.0)
    def refused(reranking: Reranking) -> None:
        """What the comparator does with calls ``too_late``: none is sent (``Judgment.cut == "unsent"``)."""
        while (batch := reranking.next_batch()) is not DONE:
            assert _guarded(clock, reranking).too_late()
            reranking.send([Judgment(None, cut=UNSENT)] * len(batch.prompts))

    first = query()  # a fresh record: nothing holds its calls back
    assert not _guarded(clock, first).too_late()
    drive(first, clock, judge, seconds_per_round=3.05)  # cut at the deadline, nothing back
    assert first.result().calls == first.result().cut_calls > 0
    second = query()  # 3 s left: no more than the 3.05 s the judge was given and did not answer in
    assert second.ledger.rounds_left() == 0 and _guarded(clock, second).too_late()
    assert latency.fastest() is None and latency.call_floor() == latency.estimate() == 3.05
    refused(second)
    res = second.result()
    assert res.calls == res.rounds == 0 and res.order == list(range(20)) and "time_budget" in res.exhausted_by
    clock.now += 3.05  # nothing observed for the floor's length: the next query's round is the probe
    probe = query()
    assert not _guarded(clock, probe).too_late()
    drive(probe, clock, judge, seconds_per_round=3.05)  # still slower than the budget: cut, the record stays
    assert probe.result().rounds == 1 and probe.result().calls == probe.result().cut_calls > 0
    after = query()
    assert _guarded(clock, after).too_late()  # one probe per floor's length
    clock.now += 3.05
    fast = query()  # the judge answers in 20 ms again: the probe refutes the record
    drive(fast, clock, judge, seconds_per_round=0.02)
    assert fast.result().cut_calls == 0 and latency.call_floor() == latency.fastest() == pytest.approx(0.02)
    assert not _guarded(clock, query()).too_late()


def test_a_judge_that_turns_slower_than_the_time_budget_gets_one_probe_per_floor_not_a_round_from_every_query():
    """Review 1129ag (left alone then): a judge that answered within the last ``LATENCY_HORIZON`` and then turned
    slower than the time budget kept its fast answered round as the call floor, so every query on the shared record
    sent a whole round, all cut (``activeprp serve``: two fast requests, then a 4 s judge: 192 calls sent, none
    answered). A round cut with no call back since the newest answer raises the floor to its seconds: the next
    query sends nothing, one probe goes out per floor, and the first answer brings the answered calls' floor back."""
    cands, labels = make_case(20, seed=4)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    latency = RoundLatency(clock)
    query = _queries(cands, clock, latency, 3.0)
    drive(query(), clock, judge, seconds_per_round=0.02)  # fast: answered
    assert latency.call_floor() == pytest.approx(0.02)
    slow = query()
    drive(slow, clock, judge, seconds_per_round=3.05)  # turned slow: cut at the deadline, nothing back
    assert slow.result().calls == slow.result().cut_calls > 0
    assert latency.fastest() == pytest.approx(0.02) and latency.call_floor() == 3.05
    refused = query()
    assert _guarded(clock, refused).too_late()  # 3 s left: no more than the 3.05 s the judge did not answer in
    clock.now += 3.05  # nothing observed for the floor's length: the next query's round is the probe
    probe = query()
    assert not _guarded(clock, probe).too_late()
    drive(probe, clock, judge, seconds_per_round=3.05)  # still slow: cut, the floor stays
    assert _guarded(clock, query()).too_late()
    latency.record_call(0.5)  # an answer (another query's call): the judge answers in time again
    assert latency.call_floor() == 0.5 and not _guarded(clock, query()).too_late()


def test_a_cut_round_s_wait_for_slots_is_not_taken_for_the_judge_s_latency():
    """Review s65d, finding 1: an unanswered round's seconds ran from its opening, its wait for the judge's slots
    included, so a round of one request whose calls queued behind a burst, went out 0.2 s before its deadline and
    were cut raised the call floor to its whole 1.5 s time budget: the requests after it sent no call until a
    probe, though the judge answered in 0.3 s (``activeprp serve``: 14 of 30 requests). Its calls were in flight
    for 0.25 s, and that is all the round says of the judge (``CallGuard.sending``, ``CallFloor.sent``)."""
    cands, labels = make_case(20, seed=4)
    clock = FakeClock()
    latency = RoundLatency(clock)
    query = _queries(cands, clock, latency, 1.5)
    drive(query(), clock, SimulatedComparator(labels), seconds_per_round=0.3)
    queued = query()
    batch = queued.next_batch()
    clock.now += 1.3  # its calls wait for slots that other requests hold
    _guarded(clock, queued).sending("q")
    clock.now += 0.25  # cut at the deadline, nothing back
    queued.send([Judgment(None, cut=IN_FLIGHT)] * len(batch.prompts))
    assert queued.result().cut_calls == len(batch.prompts)
    assert latency.call_floor() == pytest.approx(0.3) and not _guarded(clock, query()).too_late()
    unqueued = query()  # a round whose calls went out as it opened: its whole seconds, as before
    batch = unqueued.next_batch()
    clock.now += 1.55
    unqueued.send([Judgment(None, cut=IN_FLIGHT)] * len(batch.prompts))
    assert latency.call_floor() == pytest.approx(1.55) and _guarded(clock, query()).too_late()


def test_a_merged_call_marks_every_query_of_a_text_as_sent_with_its_latest_call():
    """Review s65i, finding 1: in a call merged across queries the floors are per query text
    (``floors_by_query``), so of two requests with one text only one was marked as sent; the other's round, cut
    with no call back, took its wait for the slot for the judge's latency (the floor its whole 1.6 s budget, and a
    later request sent no call). Each call marks all of that text's queries, the latest call winning."""
    from activeprp_core.comparators.base import CallGuard
    from activeprp_core.judging import CallFloor, floors_by_query

    clock = FakeClock()
    latency = RoundLatency(clock)
    first, second, other = CallFloor(latency), CallFloor(latency), CallFloor(latency)
    second.probing = True
    guard = CallGuard()
    guard.clock, guard.floors = clock, floors_by_query([("alpha", first), ("alpha", second), ("beta", other)])
    assert guard.floors["beta"] is other and guard.floors["alpha"].call_floor() is None  # a probing one's: none
    clock.now = 1.0
    guard.sending("alpha")
    clock.now = 2.0
    guard.sending("alpha")  # the second call of that text: for either query
    assert (first.first_sent, second.first_sent, other.first_sent) == (2.0, 2.0, None)
    guard.sending("beta")
    assert other.first_sent == 2.0


def test_only_a_round_cut_with_no_call_back_sets_the_call_floor_and_an_answered_round_wins():
    """``RoundLatency.call_floor``: a cut round some of whose calls came back (answered, or failed with a judge
    error before the retry the deadline cut) shows calls can come back in its seconds: no floor from it; a round
    cut with none back, while no answered round is in the record, is the floor (the longest of them); with an
    answered round in the record, the fastest answered one."""
    cands, labels = make_case(8, seed=4)
    judge = SimulatedComparator(labels)
    clock = FakeClock()
    latency = RoundLatency(clock)
    cut = Judgment(None, cut=IN_FLIGHT)
    for first in (lambda answer: answer, lambda answer: Judgment(None, error="500", cut=IN_FLIGHT,
                                                                  cut_before_retry=True)):
        reranking = Reranking("q", cands, ranker="allpairs", budget=50, time_budget=3.0, clock=clock,
                              latency=latency)
        batch = reranking.next_batch()
        clock.now += 3.05
        reranking.send([first(judge.compare(batch.query, batch.pairs[:1])[0])] + [cut] * (len(batch.prompts) - 1))
        assert latency.call_floor() is None
    for seconds in (2.0, 3.05, 1.0):
        latency.record(seconds, answered=False, unanswered=True)
    assert latency.call_floor() == 3.05 and latency.fastest() is None
    latency.record(4.0)
    assert latency.call_floor() == latency.fastest() == 4.0
    with pytest.raises(ValueError, match="answered=False"):
        latency.record(1.0, unanswered=True)


def _timed_judge(clock: FakeClock, seconds: float, max_concurrency: int):
    """A ``RemoteComparator`` each of whose calls takes ``seconds`` on ``clock`` (moved forward as it is sent) and
    answers 0.75; ``sent`` counts the calls."""
    pytest.importorskip("tenacity")

    class Timed(FakeRemote):
        def send(self, client, request):
            clock.now += seconds
            return super().send(client, request)

    return Timed(max_concurrency=max_concurrency)


@pytest.mark.parametrize("use_async", [False, True])
def test_the_call_floor_is_a_call_s_latency_not_a_round_s(use_async):
    """Finding callfloor (slowjudge's report): ``too_late`` is asked as each call goes out, but the floor it read
    was the fastest answered ROUND's. A round of 8 calls through one slot, each answered in 0.5 s, takes 4 s: with
    that round in the record and 4.2 s left, every call after the first was refused (3.7 s left, then 2 s and
    less: "too late" for a 4 s round), though each would be answered in 0.5 s (time_budget_quality.py at 6 s with
    8 in flight: 21.9 calls a query, not 49.7). The comparator times each answered call (from its send, not its
    wait for a slot) and the floor is the fastest answered call: all 8 go out and are answered in time."""
    from activeprp_core.comparators import CallGuard

    clock = FakeClock()
    judge = _timed_judge(clock, 0.5, 1)
    guard = CallGuard(1, None)
    guard.clock, guard.deadline = clock, 4.2
    guard.latency = RoundLatency(clock)
    guard.latency.record(4.0)  # the last round: 8 calls of 0.5 s through the one slot
    pairs = [(Candidate(f"a{i}", "a"), Candidate(f"b{i}", "b")) for i in range(8)]
    out = asyncio.run(judge.ajudge("q", pairs, guard=guard)) if use_async else judge.judge("q", pairs, guard=guard)
    assert [j.cut for j in out] == [None] * 8 and all(j.prob == 0.75 for j in out) and judge.sent == 8
    assert clock.now == pytest.approx(4.0) and guard.latency.call_floor() == pytest.approx(0.5)
    assert guard.latency.fastest() == 4.0  # the rounds' record is the estimate's; the floor is the calls'


def test_the_call_floor_is_the_fastest_answered_call_then_round_then_unanswered_round():
    """``RoundLatency.call_floor``'s order: the calls timed (``record_call``; their ``LATENCY_QUANTILE`` quantile,
    not the fastest: a call sent with the fastest call's time left is cut whenever the judge is not at its best),
    else the fastest answered round (a comparator that times no calls), raised to the longest round cut with no
    call back since the newest answer. A probe answered faster than the floor it tested drops the calls timed
    before it went out, and keeps those timed while it was out."""
    clock = FakeClock()
    latency = RoundLatency(clock)
    latency.record(3.0, answered=False, unanswered=True)
    assert latency.call_floor() == 3.0
    latency.record(2.0)
    assert latency.call_floor() == 2.0
    latency.record_call(0.4)
    latency.record_call(0.3)
    assert latency.call_floor() == 0.4 and latency.fastest() == 2.0  # the 0.75 quantile (lower) of [0.3, 0.4]
    for seconds in (0.2, 0.3, 0.3):
        latency.record_call(seconds)
    assert latency.call_floor() == 0.3  # of [0.2, 0.3, 0.3, 0.3, 0.4]
    latency.record(1.5, answered=False, unanswered=True)  # cut with nothing back, after those answers
    latency.record(1.2, answered=False, unanswered=True)
    assert latency.call_floor() == 1.5
    latency.record(0.9, answered=False)  # cut with a call back (not timed): says nothing new
    assert latency.call_floor() == 1.5
    latency.record_call(0.3)  # the next answer: the cut rounds before it no longer raise the floor
    assert latency.call_floor() == 0.3
    clock.now = 10.0
    latency.record_call(0.35)  # answered while the probe below was out
    clock.now = 10.5
    latency.record(0.5, probe=True)  # faster than the floor it tested (the 2 s estimate): the rounds before drop
    assert latency.call_floor() == 0.35 and latency.fastest() == 0.5
    clock.now += 61.0  # older than the horizon: nothing counts
    assert latency.call_floor() is None


def test_an_async_comparator_that_hangs_is_cancelled_at_the_deadline():
    cands, labels = make_case(20, seed=5)
    judge = Hanging(labels)
    began = time.monotonic()
    res = asyncio.run(arerank("q", cands, comparator=judge, budget=50, top_k=3, time_budget=0.3))
    took = time.monotonic() - began
    assert took < 0.3 + 1.0  # generous (the benchmark measures the 0.3 s goal)
    assert res.order == list(range(20)) and res.calls == res.cut_calls > 0 and res.exhausted_by == ["time_budget"]
    assert all(t - began < 0.3 for t in judge.started)  # nothing started past the deadline


class SlowToCancel:
    """An async judge whose calls hang, and which honours a cancellation only after a cleanup of ``SLOW`` seconds
    (a graceful close), cut short by a second cancellation; notes the pairs it was handed."""

    def __init__(self) -> None:
        self.handed = 0

    def compare(self, query, pairs):  # not called: arerank awaits acompare
        raise AssertionError("the sync path")

    async def acompare(self, query, pairs):
        self.handed += len(pairs)
        try:
            await asyncio.sleep(SLOW)
        except asyncio.CancelledError:
            await asyncio.sleep(SLOW)
            raise
        return [0.6] * len(pairs)


def test_a_batch_cancelled_past_the_grace_counts_only_the_calls_it_sent():
    """Its chunk in flight did not stop at the deadline, so the round was cancelled ``DEADLINE_GRACE`` after it:
    every call of the round counted as sent and cut (9 for 4 sent), the chunks waiting for slots included, and
    those sent were recorded twice on the guard. Now the calls not sent cost nothing. Such a judge is what
    ``bounded``'s grace is for: the rerank still returns within ``time_budget`` + ``DEADLINE_GOAL`` (0.3 s)."""
    from activeprp_core.comparators.base import CallGuard, as_comparator
    from activeprp_core.engine import bounded

    cands, _ = make_case(20, seed=5)
    judge = SlowToCancel()
    began = time.monotonic()
    res = asyncio.run(arerank("q", cands, comparator=judge, budget=50, top_k=3, time_budget=0.3, max_concurrency=4))
    took = time.monotonic() - began
    assert took < 0.3 + 0.6  # the goal (0.3 + 0.3) with room for load; about 0.4 s measured idle
    assert res.calls == res.cut_calls == judge.handed == 4 and res.rounds == 1 and res.failed_calls == 0
    assert res.exhausted_by == ["time_budget"] and sorted(res.order) == list(range(20))

    async def one_batch():
        guard = CallGuard(4, None)
        guard.deadline = guard.clock() + 0.3
        pairs = list(zip(cands, cands[1:]))[:10]
        return await bounded(as_comparator(judge).aguarded_judge("q", pairs, guard), 0.3, len(pairs), guard), guard

    judge.handed = 0
    out, guard = asyncio.run(one_batch())
    assert [j.cut for j in out] == [IN_FLIGHT] * 4 + [UNSENT] * 6 and guard.completed == judge.handed == 4


def test_late_answers_of_a_blocking_comparator_are_discarded():
    """A blocking ``compare`` cannot be interrupted: ``rerank`` stops waiting for it at the deadline and discards
    what it returns later, so the result holds only what was known in time (here nothing: the prior order)."""
    cands, labels = make_case(20, seed=6)
    judge = Hanging(labels, delay=1.0)
    began = time.monotonic()
    res = rerank("q", cands, comparator=judge, budget=50, top_k=3, time_budget=0.2)
    assert time.monotonic() - began < 0.9  # it returned while the call was still running
    assert res.order == list(range(20)) and res.cut_calls == res.calls > 0 and res.judge.answers == 0
    time.sleep(1.0)  # the abandoned call ends; nothing it returns reaches a result


class BlockingOnly:
    """A compare-only judge whose calls take ``delay`` seconds; notes the calls sent and its peak of calls in
    flight."""

    def __init__(self, delay: float) -> None:
        self.delay, self.sent, self.in_flight, self.peak, self.lock = delay, 0, 0, 0, threading.Lock()

    def compare(self, query, pairs):
        with self.lock:
            self.sent += len(pairs)
            self.in_flight += len(pairs)
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.delay)
        with self.lock:
            self.in_flight -= len(pairs)
        return [0.6] * len(pairs)


def test_a_blocking_call_cut_in_arerank_holds_neither_the_exit_nor_the_loop_s_executor():
    """Its thread ran in the loop's default executor: ``asyncio.run`` waited for it at the exit (1.5 s here, for a
    0.2 s time budget), and enough hung calls left other ``to_thread`` users of the app waiting behind them."""
    cands, _ = make_case(10, seed=2)

    async def main():
        await asyncio.gather(*(arerank("q", cands, comparator=BlockingOnly(1.5), budget=20, time_budget=0.2,
                                       max_concurrency=1) for _ in range(8)))
        began = time.monotonic()
        await asyncio.to_thread(lambda: None)
        return time.monotonic() - began

    began = time.monotonic()
    waited = asyncio.run(main())
    assert waited < 0.5 and time.monotonic() - began < 1.0


@pytest.mark.parametrize("use_async", [False, True])
def test_a_blocking_call_cut_at_its_deadline_keeps_its_slot_until_it_returns(use_async):
    """``max_concurrency`` caps the calls the endpoint has, across queries, sync and async: the slot of a call cut
    at a query's deadline went to the next query's call while the endpoint still ran the cut one (3 in flight with
    a cap of 1; the sync path had no slots at all). A query whose deadline passes before the slot frees sends
    nothing and spends nothing."""
    before = set(threading.enumerate())
    reqs = [(f"q{i}", make_case(6, seed=i)[0]) for i in range(4)]
    judge = BlockingOnly(0.5)
    kw = dict(comparator=judge, budget=20, max_concurrency=1, time_budget=0.2, carry_judge=False, max_active=1)

    async def run():
        return [r async for r in arerank_many(reqs, **kw)]

    out = asyncio.run(run()) if use_async else list(rerank_many(reqs, **kw))
    for thread in set(threading.enumerate()) - before:  # the cut calls: their count at the judge is final
        thread.join(5.0)
    assert judge.peak == 1 and judge.in_flight == 0 and out[0].cut_calls == 1
    assert all(sorted(r.order) == list(range(len(cands))) and r.candidates == list(cands)
               for r, (_, cands) in zip(out, reqs))
    assert sum(r.calls for r in out) == sum(r.cut_calls for r in out) == judge.sent  # every call took 0.5 s
    assert all(r.failed_calls == 0 and r.exhausted_by == ["time_budget"] for r in out)


def test_each_query_of_rerank_many_has_its_own_deadline():
    """A query past its deadline finishes best-effort while the others go on; a request may carry its own
    time_budget; each query's clock starts when the query starts."""
    cands, labels = make_case(12, seed=7)
    fast = SimulatedComparator(labels)

    class PerQuery:
        def compare(self, query, pairs):
            if query == "slow":
                time.sleep(1.0)
            return fast.compare(query, pairs)

    out = list(rerank_many([("slow", cands, {"time_budget": 0.2}), ("fast", cands, {"time_budget": 30})],
                           comparator=PerQuery(), budget=None, top_k=3, max_active=2))
    slow, quick = out
    assert slow.exhausted_by == ["time_budget"] and slow.order == list(range(12)) and slow.time_budget == 0.2
    assert quick.converged and quick.time_budget == 30 and quick.calls > 0
    walls = [r.wall_time_s for r in rerank_many([(f"q{i}", cands) for i in range(3)], comparator=Hanging(
        labels, delay=0.15), budget=None, top_k=3, time_budget=0.4, max_active=1)]
    assert all(0.3 < w < 0.4 + 0.5 for w in walls)  # each from its own start, not from the first query's


def test_a_compare_only_judge_in_sync_rerank_many_serves_the_queries_in_progress_in_turn():
    """docs/many-queries.md: the queries in progress are judged one after another while all their clocks run, so
    with ``max_active=2`` the second query's time is spent during the first one's round (a round of 0.35 s, a
    time budget of 0.6 s): its calls are cut, or not sent, and it gets no answer; ``max_active=1`` or
    ``arerank_many`` (the calls in worker threads) gives each query its own time, so every query gets answers. (A
    round longer than the time budget is not for this test: the record of a round cut with no answer keeps the
    later queries' calls from being sent, ``RoundLatency.call_floor``.)"""
    from activeprp_core import arerank_many

    cands, labels = make_case(12, seed=7)

    class Serial:
        def compare(self, query, pairs):
            time.sleep(0.35)
            return SimulatedComparator(labels).compare(query, pairs)

    reqs = [(f"q{i}", cands) for i in range(4)]
    kw = dict(budget=None, top_k=3, time_budget=0.6)

    async def concurrently():
        return [r async for r in arerank_many(reqs, comparator=Serial(), max_active=2, **kw)]

    def answered(results):
        return [r.calls - r.cut_calls - r.failed_calls for r in results]

    paired = answered(rerank_many(reqs, comparator=Serial(), max_active=2, **kw))
    assert paired[1] == paired[3] == 0 < paired[0]
    for out in (list(rerank_many(reqs, comparator=Serial(), max_active=1, **kw)), asyncio.run(concurrently())):
        assert all(n > 0 for n in answered(out))


@pytest.fixture
def openai_timeouts(monkeypatch):
    """The timeout of every request of the openai SDK's chat-completions ``create`` (sync and async): its
    ``timeout`` keyword, else its client's own (``with_options(timeout=...)``; the SDK's default is an
    ``httpx.Timeout``)."""
    openai = pytest.importorskip("openai")
    from openai.resources.chat import completions

    seen = []
    for cls in (completions.Completions, completions.AsyncCompletions):
        original = cls.create

        def create(self, *args, _original=original, **kwargs):
            timeout = kwargs.get("timeout", openai.NOT_GIVEN)
            seen.append(self._client.timeout if timeout is openai.NOT_GIVEN else timeout)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "create", create)
    return seen


def _remote_judges(url: str) -> dict:
    """The shipped remote comparators on ``url``: OpenAI-compatible, and the framework judges (where installed)."""
    from activeprp_core.comparators import OpenAIChatComparator

    judges = {"openai": lambda: OpenAIChatComparator("m", base_url=url, api_key="k", timeout=60)}
    try:
        from langchain_openai import ChatOpenAI

        from activeprp_integrations.langchain import ChatModelComparator

        judges["langchain"] = lambda: ChatModelComparator(ChatOpenAI(model="m", base_url=url, api_key="k"))
    except ImportError:
        pass
    try:
        from llama_index.llms.openai_like import OpenAILike

        from activeprp_integrations.llama_index import LLMComparator

        judges["llama_index"] = lambda: LLMComparator(OpenAILike(model="m", api_base=url, api_key="k",
                                                                 is_chat_model=True))
    except ImportError:
        pass
    return judges


@pytest.mark.parametrize("use_async", [False, True])
def test_remote_comparators_get_the_time_left_as_their_timeout(openai_timeouts, use_async):
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply

    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
    with FaultServer(lambda r: Reply(delay_s=0.01), max_requests=400) as server:
        for name, make in _remote_judges(server.url).items():
            openai_timeouts.clear()
            judge = make()
            kw = {"comparator": judge, "budget": 8, "top_k": 2, "time_budget": 20}
            res = asyncio.run(arerank("q", cands, **kw)) if use_async else rerank("q", cands, **kw)
            judge.close()
            assert res.calls == len(openai_timeouts) > 0, name
            assert all(isinstance(t, float) and 0 < t <= 20 for t in openai_timeouts), (name, openai_timeouts)


@pytest.mark.parametrize("use_async", [False, True])
def test_remote_comparators_return_at_the_deadline_when_the_endpoint_hangs(use_async):
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply

    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(8)]
    with FaultServer(lambda r: Reply(delay_s=3.0), max_requests=400, max_seconds=30) as server:
        for name, make in _remote_judges(server.url).items():
            judge = make()
            kw = {"comparator": judge, "budget": 20, "top_k": 2, "time_budget": 0.3}
            began = time.monotonic()
            res = asyncio.run(arerank("q", cands, **kw)) if use_async else rerank("q", cands, **kw)
            took = time.monotonic() - began
            judge.close()
            assert took < 0.3 + 1.0, (name, took)  # generous; benchmarks/deadline_holds.py measures the goal
            assert res.cut_calls == res.calls > 0 and res.exhausted_by == ["time_budget"], name
    assert threading.active_count() < 200  # abandoned calls end with their (time-left) timeouts


@pytest.mark.parametrize("use_async", [False, True])
def test_a_transient_fault_whose_retries_the_deadline_stopped_neither_fails_the_rerank_nor_opens_the_breaker(
        use_async):
    """A judge that answers, then fails 5 prompts' first attempts in a row with a 500 (a healthy judge with a
    transient fault), and a retry wait that runs past the deadline: those calls fail at once (billed, their error
    kept), but a streak of such failures (the deadline, not the endpoint, kept the retry from going out) opens the
    breaker only while the judge has not answered on the rerank (``CallGuard.record``'s ``unusable``): here it
    had, so the rerank goes on and returns its best-effort order. Before they opened the breaker (5 in a row), so
    the rerank raised ``ComparatorUnavailable`` (and ``activeprp serve`` refused everyone); then they were cut
    (outcome unknown), which a dead endpoint's calls were too, so its breaker never opened (the next tests)."""
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply, completion, error_body

    from activeprp_core.comparators import OpenAIChatComparator

    seen: set[str] = set()

    def plan(request):
        first = "needle" in request.text and request.text not in seen and 0 < len(seen) < 6
        if "needle" in request.text:
            seen.add(request.text)
        return Reply(500, error_body("boom", "server_error")) if first else Reply(body=completion("A"))

    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(16)]
    with FaultServer(plan, max_requests=400, max_seconds=30) as server, \
            OpenAIChatComparator("m", base_url=server.url, api_key="k", backoff_initial=SLOW,
                                 max_concurrency=1) as judge:  # one at a time: an answer, then the 5 failures
        judge.judge("warm", [(cands[0], cands[1])])  # the client made: the first attempts come back in time
        kw = {"comparator": judge, "budget": 20, "top_k": 2, "time_budget": 1.0}
        res = asyncio.run(arerank("needle", cands, **kw)) if use_async else rerank("needle", cands, **kw)
    assert res.failed_calls == 5 and res.calls > 6 and res.retries == 0 and res.failure is None
    assert sorted(res.order) == list(range(16))
    assert res.errors == [f"InternalServerError from {server.url} (model 'm'): boom (HTTP 500)"]  # its status: the
    # openai SDK's message does not say it


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("dead", ["refused", "http500"])
def test_a_dead_judge_under_a_time_budget_shorter_than_its_retries_is_a_judge_failure(use_async, dead):
    """A judge that refuses every connection, or answers 500 to every attempt, under a time budget shorter than
    its retries: every call fails at once, its retry withheld, and 5 in a row with no answer open the breaker:
    ``ComparatorUnavailable`` with its accounting, or with ``on_failure="prior"`` the prior order with ``failure``
    set; the calls' errors are among ``errors``. It returned the prior order with no failure, no error and no
    log, as if the judge were up; then each call was cut before its retry (outcome unknown), so the breaker never
    opened and every call of the round went out."""
    pytest.importorskip("openai")
    from _llm_server import FaultServer, Reply, error_body

    from activeprp_core.comparators import OpenAIChatComparator

    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(8)]

    def run(url: str, **kw):
        with OpenAIChatComparator("m", base_url=url, api_key="k", backoff_initial=SLOW) as judge:
            kw = {"comparator": judge, "budget": 20, "top_k": 2, "time_budget": 0.5, **kw}
            return asyncio.run(arerank("q", cands, **kw)) if use_async else rerank("q", cands, **kw)

    def check(url: str, last: str, status_code: int | None) -> None:
        with pytest.raises(ComparatorUnavailable, match="circuit breaker open: 5 calls in a row failed") as info:
            run(url)
        assert 5 <= info.value.accounting.failed_calls == info.value.accounting.calls <= 8  # 8: those in flight
        assert info.value.status_code == status_code  # the 500 the failed calls got (None: no response)
        res = run(url, on_failure="prior")
        assert 5 <= res.failed_calls == res.calls <= 8 and res.cut_calls == 0 and res.order == list(range(8))
        assert res.failure.startswith("ComparatorUnavailable: circuit breaker open") and last in res.errors[0]
        assert res.errors[-1] == res.failure

    if dead == "refused":
        with socket.socket() as sock:  # bound, never listening: every connection is refused
            sock.bind(("127.0.0.1", 0))
            check(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", "APIConnectionError", None)
    else:
        with FaultServer(lambda r: Reply(500, error_body("boom", "server_error")), max_requests=400,
                         max_seconds=30) as server:
            check(server.url, f"InternalServerError from {server.url} (model 'm'): boom", 500)


def test_guard_slots_survive_cancelled_and_timed_out_waiters():
    """A waiter for the cap on calls in flight that is cancelled (here just as the slots are freed), or whose
    deadline passes, gives nothing away and blocks no one: the slots stay whole (a leak would make later calls
    wait forever)."""
    from activeprp_core.comparators import CallGuard
    from activeprp_core.comparators.base import DeadlinePassed

    async def scenario():
        guard = CallGuard(max_concurrency=2)
        held, release, waiting = asyncio.Event(), asyncio.Event(), []

        async def hold():
            async with guard.slots(2):
                held.set()
                await release.wait()  # not a sleep: a loaded machine must not free the slots before the timeout
                waiting[0].cancel()  # in the same step as the release below: its waiter is still queued

        holder = asyncio.create_task(hold())
        await held.wait()
        waiting.append(asyncio.create_task(_enter(guard.slots(1))))
        await asyncio.sleep(0)
        with pytest.raises(DeadlinePassed):
            await _enter(guard.slots(1, timeout=0.005))
        release.set()
        await holder
        got = await asyncio.wait_for(asyncio.gather(_enter(guard.slots(2)), _enter(guard.slots(1))), 1.0)
        return got, waiting[0].cancelled(), guard.fair_slots.free

    assert asyncio.run(scenario()) == ([True, True], True, 2)


async def _enter(slots) -> bool:
    async with slots:
        await asyncio.sleep(0)
    return True


def _failing_first(clock: FakeClock, now: float | list[float], retry_after: float | None = None, fails: int = 1,
                   during: bool = False):
    """A ``RemoteComparator`` whose first ``fails`` attempts fail transiently (a refused connection, with
    ``retry_after``), moving ``clock`` to ``now`` as each failure is read (a list: per attempt; ``during``: while
    the attempt runs, before it fails), and whose later attempts answer 0.75; ``sent`` counts the attempts. No
    backoff: the retries wait for nothing but the deadline."""
    times = now if isinstance(now, list) else [now] * fails
    pytest.importorskip("tenacity")
    from activeprp_core.comparators.failures import Failure, Fault

    class FailingFirst(FakeRemote):
        def send(self, client, request):
            answer = super().send(client, request)
            if self.sent <= fails:
                if during:
                    clock.now = times[self.sent - 1]
                raise ConnectionRefusedError("connection refused")
            return answer

        def classify(self, error):
            if not during:
                clock.now = times[self.sent - 1]  # read more than once per failure: by the attempt it is of
            return Failure(Fault.RETRY, str(error), retry_after=retry_after)

    return FailingFirst(max_concurrency=2, backoff_initial=0.0, backoff_max=0.0)


def _judge_one(judge, guard, use_async: bool):
    pair = (Candidate("a", "a"), Candidate("b", "b"))
    return asyncio.run(judge.ajudge("q", [pair], guard=guard)) if use_async else judge.judge("q", [pair], guard=guard)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("retry_after", [None, 5.0, 30.0])
def test_no_retry_past_the_deadline_and_the_call_fails(use_async, retry_after):
    """A call whose attempt failed before the deadline, and whose retry would start past it, is not retried: it
    fails with the attempt's error, as a call that used up its retries, and the breaker counts it (no error of the
    deadline's own escapes). When only the deadline kept the retry from going out (no Retry-After, or one shorter
    than the time left) it was cut (outcome unknown, the breaker unchanged), so a dead endpoint under a short time
    budget never opened the breaker and got every call of each round (review s69f #1)."""
    from activeprp_core.comparators import CallGuard

    clock = FakeClock()
    # the deadline passes while the failure is read: the retry would start after it
    judge = _failing_first(clock, 100.0, retry_after, fails=3)
    guard = CallGuard(2, 1)  # the breaker opens on the first failed call
    guard.clock, guard.deadline = clock, 10.0  # 10 s left when the attempt failed
    out = _judge_one(judge, guard, use_async)
    assert judge.sent == 1 and out[0].prob is None and "connection refused" in out[0].error
    assert guard.completed == 1 and out[0].cut is None and guard.error is not None


def _retries_on_a_fake_clock(monkeypatch, use_async):
    """A ``FakeClock`` that the remote comparators' retry waits advance instead of sleeping, and the list of the
    seconds each wait asked for."""
    from activeprp_core.comparators import remote

    clock, slept = FakeClock(), []
    retrying = remote._retrying

    def sleep(seconds):
        slept.append(seconds)
        clock.now += seconds

    async def asleep(seconds):
        sleep(seconds)

    def on_the_fake_clock(comp, kind, *args, **kw):
        return retrying(comp, kind, *args, **{**kw, "sleep": asleep if use_async else sleep})

    monkeypatch.setattr(remote, "_retrying", on_the_fake_clock)
    return clock, slept


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("retry_after", [5.0, 30.0])
def test_a_retry_after_past_the_deadline_fails_the_call_at_once(monkeypatch, use_async, retry_after):
    """An attempt fails with 10 s left and the endpoint asks to wait 30 s: the call fails at once with the
    attempt's error, with no wait. It slept until just before the deadline first (``DEADLINE_SLACK``), then failed
    as it could have at once: a rerank under ``time_budget=10`` against ``Retry-After: 30`` held its whole budget
    (review s68a). A Retry-After shorter than the time left is still waited out, and the retry answers."""
    from activeprp_core.comparators import CallGuard

    clock, slept = _retries_on_a_fake_clock(monkeypatch, use_async)
    judge = _failing_first(clock, 0.0, retry_after)  # the failure is read at 0 s: 10 s left
    guard = CallGuard(2, 5)
    guard.clock, guard.deadline = clock, 10.0
    out = _judge_one(judge, guard, use_async)
    if retry_after == 30.0:
        assert slept == [] and judge.sent == 1 and clock.now == 0.0
        assert out[0].prob is None and out[0].cut is None and "connection refused" in out[0].error
    else:
        assert slept == [5.0] and judge.sent == 2 and out[0].prob == 0.75 and out[0].retries == 1


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("backoff", [1.0, 20.0])
def test_a_backoff_past_the_deadline_fails_the_call_at_once(monkeypatch, use_async, backoff):
    """An attempt fails with 10 s left and no Retry-After, and the backoff (``backoff_initial`` 20 s: a first wait
    of 20 to 40 s) would end past the deadline: the call fails at once, with no wait, and the breaker counts it.
    It slept until just before the deadline first (``DEADLINE_SLACK``), holding its slot (closing_68), then was cut
    at once with no wait, outcome unknown, which the breaker never counted (review s69f #1). The rule is the
    Retry-After one's (``_Attempts.retry_too_late``). A backoff that ends before the deadline (1 to 2 s) is still
    waited out, and the retry answers."""
    from activeprp_core.comparators import CallGuard

    clock, slept = _retries_on_a_fake_clock(monkeypatch, use_async)
    judge = _failing_first(clock, 0.0)  # the failure is read at 0 s: 10 s left
    judge.backoff_initial = judge.backoff_max = backoff
    guard = CallGuard(2, 1)  # the breaker would open on one failed call
    guard.clock, guard.deadline = clock, 10.0
    out = _judge_one(judge, guard, use_async)
    if backoff == 20.0:
        assert slept == [] and judge.sent == 1 and clock.now == 0.0
        assert out[0].prob is None and out[0].cut is None and "connection refused" in out[0].error
        assert guard.completed == 1 and guard.error is not None  # failed: the breaker counted it
    else:
        assert len(slept) == 1 and 1.0 <= slept[0] <= 2.0 and judge.sent == 2
        assert out[0].prob == 0.75 and out[0].retries == 1


def test_one_retry_after_past_the_deadline_leaves_the_querys_other_calls_going():
    """One call among answered ones gets 429 with a Retry-After past the deadline: that call fails at once, and the
    query's other calls go on, with no cap reported as exhausted. A first fix held back every later call of the
    query once one such 429 came (review s68l: 4 requests of 26, and ``exhausted_by ['time_budget']`` with most of
    the time budget left)."""
    pytest.importorskip("openai")
    import itertools

    from _llm_server import FaultServer, Reply, completion, error_body

    from activeprp_core.comparators import OpenAIChatComparator

    served = itertools.count()

    def plan(request):
        if next(served) == 3:
            return Reply(429, error_body("rate limited"), headers={"Retry-After": "30"})
        return Reply(body=completion("A"))

    candidates = [Candidate(str(i), f"doc {i}") for i in range(10)]
    with FaultServer(plan, max_requests=300, max_seconds=30) as endpoint, \
            OpenAIChatComparator("m", base_url=endpoint.url, api_key="k", max_attempts=2, max_concurrency=1) as judge:
        result = rerank("q", candidates, comparator=judge, budget=40, time_budget=10, max_consecutive_failures=None)
    assert result.failed_calls == 1 and result.calls > 10
    assert "time_budget" not in result.exhausted_by


@pytest.mark.parametrize("use_async", [False, True])
def test_a_retry_goes_out_while_time_is_left_whatever_the_rounds_latency(use_async):
    """A first attempt fails (a transient error) with 3 s left, and the fastest round seen took 5 s: the retry
    still goes out, and is answered. It was withheld by the round's latency (``too_late``, the first attempt's
    test), so the call was cut before its retry, a judge error: a lone request to a judge failing once per prompt
    got a 503 with 2 of its 3 s left."""
    from activeprp_core.comparators import CallGuard

    clock = FakeClock()
    judge = _failing_first(clock, 7.0)  # 3 s left when the failure is read, less than the fastest round
    guard = CallGuard(2, 5)
    guard.clock, guard.deadline = clock, 10.0
    guard.latency = RoundLatency()
    guard.latency.record(5.0)
    out = _judge_one(judge, guard, use_async)
    assert judge.sent == 2 and out[0].prob == 0.75 and out[0].cut is None and out[0].retries == 1


@pytest.mark.parametrize("use_async", [False, True])
def test_a_retry_cut_at_the_deadline_after_a_failed_attempt_is_a_judge_error(use_async):
    """The first attempt fails with 3 s left, the retry goes out and fails only past the deadline (a dead judge
    slower than the time left): the call is cut, and keeps the first attempt's error as a judge error
    (``cut_before_retry``), so a rerank of such calls fails rather than returning its prior order silently. Its
    retry is counted in ``Judgment.retries``."""
    from activeprp_core.comparators import CallGuard

    clock = FakeClock()
    judge = _failing_first(clock, [7.0, 11.0], fails=3, during=True)
    guard = CallGuard(2, 5)
    guard.clock, guard.deadline = clock, 10.0
    out = _judge_one(judge, guard, use_async)
    assert judge.sent == 2 and out[0].cut == IN_FLIGHT and out[0].cut_before_retry and out[0].retries == 1
    assert out[0].error == ("cut at the deadline before its retry (last: ConnectionRefusedError from 127.0.0.1 (model "
                            "'m'): connection refused)")


def test_a_sync_retry_still_running_at_the_deadline_after_a_failed_attempt_is_a_judge_error():
    """The sync path's waiting side cuts a call still running at the deadline: when an attempt of it had failed
    before (here the first; the retry then hangs), the cut is a judge error with its retry counted, as on the async
    path. It was a plain cut with 0 retries, so a dead judge slower than the time left returned its prior order
    silently under ``rerank``."""
    from activeprp_core.comparators import CallGuard
    from activeprp_core.types import IN_FLIGHT

    release = threading.Event()
    judge = _failing_first(FakeClock(), 0.0, during=True)  # moves no clock the guard reads (time.monotonic)
    send = judge.send

    def hanging_retry(client, request):
        if judge.sent:  # the retry: waits past the deadline
            judge.sent += 1
            release.wait(10)
            return 0.75
        return send(client, request)

    judge.send = hanging_retry
    guard = CallGuard(2, 5)
    guard.deadline = time.monotonic() + 0.3
    try:
        out = _judge_one(judge, guard, use_async=False)
    finally:
        release.set()
    assert judge.sent == 2 and out[0].cut == IN_FLIGHT and out[0].cut_before_retry and out[0].retries == 1
    assert "ConnectionRefusedError" in out[0].error


def _cut_by_the_waiting_side_after(monkeypatch, workers: list[threading.Thread], release: threading.Event) -> None:
    """Make the sync path's waiting side, as it records the cut of a call still running at the deadline (the first
    ``record`` of an unknown outcome from this thread), set ``release`` and wait for the threads in ``workers`` to
    end before it reads the other calls' futures: the race of a worker that takes its next call (or wakes from its
    backoff) once the deadline set the batch's stop, forced without timing."""
    from activeprp_core.comparators import CallGuard

    record, waiter = CallGuard.record, threading.current_thread()

    def record_then_let_the_workers_end(self, ok, *args, **kwargs):
        record(self, ok, *args, **kwargs)
        if ok is None and threading.current_thread() is waiter and not release.is_set():
            release.set()
            for worker in workers:
                worker.join(10)

    monkeypatch.setattr(CallGuard, "record", record_then_let_the_workers_end)


def test_a_sync_call_a_worker_takes_once_the_deadline_passed_is_unsent_and_costs_nothing(monkeypatch):
    """The sync remote path at the deadline: a worker that finishes its call just then takes the next queued call
    before the waiting side reads it. That call is not sent (``UNSENT``: refunded, no failed call). It came back
    as a failed call, "not sent: the batch already failed", billed to ``budget``: a rerank whose judge never
    failed raised ``ComparatorUnavailable`` ("every one of the ... calls failed")."""
    pytest.importorskip("tenacity")

    release, workers = threading.Event(), []

    class Blocking(FakeRemote):  # every call waits for the test's release
        def send(self, client, request):
            workers.append(threading.current_thread())
            release.wait(10)
            return super().send(client, request)

    _cut_by_the_waiting_side_after(monkeypatch, workers, release)
    judge, cands = Blocking(max_concurrency=1), [Candidate(name, name) for name in "abcd"]  # 6 pairs, one round
    result = rerank("q", cands, comparator=judge, ranker="allpairs", oracle="single", budget=10, time_budget=0.3)
    assert judge.sent == 1  # the first call; the others were taken by the worker once the deadline had passed
    assert (result.calls, result.cut_calls, result.failed_calls, result.errors) == (1, 1, 0, [])


def _blocked_and_failing_first(release: threading.Event, workers: list):
    """``_failing_first`` with a long backoff, a guard and two pairs, for the races of the sync path at the deadline:
    the pair "blocked" waits for ``release`` (on past the deadline); "retried" fails at once, its worker thread
    noted in ``workers`` (the waiting side waits for it to end), 100 s left on the guard's clock as the failure is
    read, so that its 5 s backoff is waited out; the waiting side waits 0.3 s of real time."""
    from activeprp_core.comparators import CallGuard

    clock = FakeClock()
    judge = _failing_first(clock, -100.0)
    judge.backoff_initial = judge.backoff_max = 5.0
    send = judge.send

    def blocked_or_failing_first(client, request):
        if request == "blocked":
            release.wait(10)
            return 0.75
        workers.append(threading.current_thread())
        return send(client, request)

    judge.send, judge.request = blocked_or_failing_first, lambda query, first, second: first
    guard = CallGuard(2, 5)
    guard.clock, guard.deadline = clock, 0.3
    return judge, guard, [(Candidate(name, name), Candidate("b", "b")) for name in ("blocked", "retried")]


def test_a_sync_retry_a_worker_wakes_to_once_the_deadline_passed_fails_its_call(monkeypatch):
    """The sync remote path at the deadline: a call whose first attempt failed is waiting out its backoff when the
    waiting side reaches the deadline (a worker woken late by a busy machine). Its retry is not sent, so it fails
    with the attempt's error (as when its backoff would end past the deadline), recorded once. It came back as a
    failed call, "not retried: the batch already failed", unrecorded; then as cut before its retry."""
    release, retried, workers = threading.Event(), threading.Event(), []
    judge, guard, pairs = _blocked_and_failing_first(release, workers)
    _cut_by_the_waiting_side_after(monkeypatch, workers, retried)
    try:
        out = judge.judge("q", pairs, guard=guard)
    finally:
        release.set()
    assert [j.cut for j in out] == [IN_FLIGHT, None] and judge.sent == 1
    assert out[1].prob is None and "ConnectionRefusedError" in out[1].error and out[1].retries == 0
    assert guard.completed == 2  # each call recorded once


def test_a_sync_call_the_waiting_side_cuts_before_its_worker_wakes_from_its_backoff_is_recorded_once(monkeypatch):
    """The other order of the race above: the waiting side stops the call in its backoff (recorded, failed) before
    the worker wakes; the woken worker, its retry withheld at the deadline, recorded the same call again
    (``guard.completed`` 3 for 2 calls: a cancelled batch billed for it, serve's breaker counting its suspect
    twice)."""
    from activeprp_core.comparators import CallGuard, remote

    release, cut, workers = threading.Event(), threading.Event(), []
    judge, guard, pairs = _blocked_and_failing_first(release, workers)
    record, waiter = CallGuard.record, threading.current_thread()

    def cut_then_let_the_worker_end(self, ok, reason=None, *args, **kwargs):
        record(self, ok, reason, *args, **kwargs)
        if threading.current_thread() is waiter and ok is False:  # its stop of the call in its backoff
            cut.set()
            for worker in workers:
                worker.join(10)

    wait = remote._Stop.wait

    def woken_after_the_cut(self, timeout=None):  # the worker's backoff ends at the stop, but it runs only later
        stopped = wait(self, timeout)
        if stopped and threading.current_thread() is not waiter:
            cut.wait(10)
        return stopped

    monkeypatch.setattr(CallGuard, "record", cut_then_let_the_worker_end)
    monkeypatch.setattr(remote._Stop, "wait", woken_after_the_cut)
    try:
        out = judge.judge("q", pairs, guard=guard)
    finally:
        release.set()
    assert [j.cut for j in out] == [IN_FLIGHT, None] and judge.sent == 1 and cut.is_set()
    assert out[1].prob is None and "ConnectionRefusedError" in out[1].error and out[1].retries == 0
    assert guard.completed == 2  # each call recorded once


def test_a_sync_call_answered_as_the_waiting_side_cuts_it_is_recorded_once(monkeypatch):
    """A call whose answer comes just as the waiting side cuts it at the deadline (recorded) is not recorded again
    by its worker, which settled it as answered (``guard.completed`` 2 for 1 call)."""
    from activeprp_core.comparators import CallGuard

    release, workers = threading.Event(), []
    judge = _failing_first(FakeClock(), 0.0, fails=0)

    def blocked(client, request):
        workers.append(threading.current_thread())
        release.wait(10)
        judge.sent += 1
        return 0.75

    judge.send = blocked
    _cut_by_the_waiting_side_after(monkeypatch, workers, release)  # the answer comes once the cut is recorded
    guard = CallGuard(2, 5)
    guard.deadline = time.monotonic() + 0.3
    try:
        out = judge.judge("q", [(Candidate("a", "a"), Candidate("b", "b"))], guard=guard)
    finally:
        release.set()
    assert out[0].cut == IN_FLIGHT and judge.sent == 1 and not workers[0].is_alive()
    assert guard.completed == 1


def test_a_sync_call_cut_before_its_first_attempt_is_counted_is_a_plain_cut(monkeypatch):
    """The waiting side cuts a call at the deadline after the call set how it is cut but before its first attempt
    is counted (it may be going out): a plain cut in flight with no retry, recorded once. Its retries were
    counted as -1: the sync judge raised ``InvalidAnswer`` ("comparator reported retries=-1")."""
    from activeprp_core.comparators import CallGuard, remote

    release, workers = threading.Event(), []
    judge = _failing_first(FakeClock(), 0.0, fails=0)
    retrying = remote._retrying

    def held_before_its_first_attempt(*args, **kwargs):
        workers.append(threading.current_thread())
        release.wait(10)
        return retrying(*args, **kwargs)

    monkeypatch.setattr(remote, "_retrying", held_before_its_first_attempt)
    _cut_by_the_waiting_side_after(monkeypatch, workers, release)
    guard = CallGuard(2, 5)
    guard.deadline = time.monotonic() + 0.3
    out = judge.judge("q", [(Candidate("a", "a"), Candidate("b", "b"))], guard=guard)
    assert (out[0].cut, out[0].retries, out[0].cut_before_retry) == (IN_FLIGHT, 0, False)
    assert judge.sent == 0 and guard.completed == 1


def test_a_far_time_budget_is_no_limit_on_the_sync_remote_path():
    """A ``time_budget`` past ``threading.TIMEOUT_MAX`` (any finite one is a valid setting) waits for the calls
    as no time budget does: the futures' wait raised ``OverflowError``."""
    from activeprp_core.comparators import CallGuard

    judge = _failing_first(FakeClock(), 0.0, fails=0)
    send = judge.send
    judge.send = lambda client, request: time.sleep(0.05) or send(client, request)  # waited for, not done at once
    for far in (1e10, 1e308):
        guard = CallGuard(2, 5)
        guard.deadline = time.monotonic() + far
        assert _judge_one(judge, guard, use_async=False)[0].prob == 0.75


def test_the_retries_of_a_cut_call_are_counted():
    """``RerankResult.retries`` sums every call's retries, those of calls cut at the deadline too (they went out)."""
    from activeprp_core.comparators.base import Comparator, cut_in_flight

    class CutAfterRetries(Comparator):
        def judge(self, query, pairs, *, guard=None):
            return [cut_in_flight(2) for _ in pairs]

    cands = [Candidate(str(i), f"doc {i}") for i in range(4)]
    result = rerank("q", cands, comparator=CutAfterRetries(), ranker="allpairs", oracle="single", budget=3)
    assert result.calls == result.cut_calls == 3 and result.retries == 6


@pytest.mark.parametrize("use_async", [True, False])
def test_a_call_that_could_not_be_answered_in_time_is_not_sent(use_async):
    """A chunk that gets its slot with less time left than the fastest answered round is not sent (UNSENT,
    refunded), rather than sent and cut at the deadline (IN_FLIGHT, spent): under load, such doomed calls took the
    judge's slots from calls that could be answered."""
    from activeprp_core.comparators.base import CallGuard, as_comparator

    cands, labels = make_case(3, seed=1)
    hanging, pairs = Hanging(labels, delay=0.2), [(cands[0], cands[1]), (cands[1], cands[2])]
    judge = as_comparator(hanging)
    guard = CallGuard(1, None)  # one call in flight: the second waits for the first
    guard.latency = RoundLatency()
    guard.latency.record(0.2)  # a round answered in 0.2 s seen before
    guard.latency.record(0.01, answered=False)  # a round cut at its deadline tells nothing about a call's time
    guard.deadline = guard.clock() + 0.3
    out = asyncio.run(judge.ajudge("q", pairs, guard=guard)) if use_async else judge.judge("q", pairs, guard=guard)
    assert [j.cut for j in out] == [None, UNSENT] and out[0].prob is not None and len(hanging.started) == 1
    assert guard.completed == 1


def test_calls_cancelled_in_flight_are_counted_as_sent():
    """A rerank cancelled while its calls are out (its client went away): the calls reached the judge, so the
    guard counts them (outcome unknown), as it counts calls cut at a deadline."""
    from activeprp_core.comparators.base import CallGuard, as_comparator

    cands, labels = make_case(3, seed=1)
    hanging, guard = Hanging(labels, delay=5.0), CallGuard(None, None)
    judge = as_comparator(hanging)

    async def scenario():
        task = asyncio.ensure_future(judge.ajudge("q", [(cands[0], cands[1]), (cands[1], cands[2])], guard=guard))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    assert len(hanging.started) == 1 and guard.completed == 2  # one chunk of two calls, sent then cancelled


class TickClock(FakeClock):
    """A clock that moves ``tick`` seconds forward at each reading: planning a question reads it, so planning
    takes time on it."""

    def __init__(self, tick: float) -> None:
        super().__init__()
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_a_lazy_round_stops_growing_at_a_share_of_the_time_left_and_goes_out_before_the_deadline():
    """allpairs with no call cap offers every pair lazily: its round used to be planned until the deadline refused
    a question (review s68j: the whole time budget went to planning, no call went out, and recording the planned
    prompts took as long again past the deadline). Planning now stops once it took ``PLAN_SHARE`` of the time
    left, and the round goes out with the rest of the time."""
    cands, labels = make_case(200, seed=1)  # 19,900 pairs
    clock, budget = TickClock(1e-4), 1.0  # the deadline refuses after about 10,000 readings
    reranking = Reranking("q", cands, ranker="allpairs", oracle="randomized", budget=None, time_budget=budget,
                          clock=clock)
    batch = reranking.next_batch()
    assert batch is not DONE and clock.now < budget / 4  # the parent planned it up to the deadline
    from activeprp_core.reranking import PLAN_SHARE

    # stopped at the share, then a few readings to open the round
    assert batch is not DONE and clock.now < reranking.deadline - (1 - PLAN_SHARE) * budget + 20 * 1e-4
    assert 0 < len(batch.prompts) <= PLAN_SHARE * budget / 1e-4  # a prompt reads the clock at least once
    reranking.send(SimulatedComparator(labels).compare(batch.query, batch.pairs))
    res = reranking.result()
    assert res.calls == len(batch.prompts) and res.exhausted_by == ["time_budget"] and res.cut_calls == 0
    assert sorted(res.order) == list(range(200))
    assert reranking.ledger.floor.per_call > 0  # its calls keep back the time to record them (see below)


def _counting(counts, name, plain):
    def counted(*args):
        counts[name] += 1
        return plain(*args)

    return counted


def test_the_unsent_tail_of_a_lazy_round_costs_no_work_per_prompt(monkeypatch):
    """A lazy round whose later calls the deadline kept from going out: the ranker reads the round up to the first
    of them only (as a cap refusing it while planning), the oracle is asked no outcome and no re-ask for the rest,
    and what they reserved is given back in one refund per cap, not one per prompt (review s68j: recording a
    round of 280,000 unsent prompts took 0.9 s past the deadline)."""
    import activeprp_core.budget as budget

    refunds = []
    plain = budget.Cap.refund
    monkeypatch.setattr(budget.Cap, "refund", lambda cap, n: refunds.append(n) or plain(cap, n))
    cands, labels = make_case(60, seed=2)  # 1,770 pairs
    clock = FakeClock()
    reranking = Reranking("q", cands, ranker="allpairs", oracle="adaptive", budget=None, time_budget=10.0,
                          clock=clock, seed=3)
    oracle, asked = reranking.oracle, {"outcome": 0, "reask": 0}
    for name in asked:
        monkeypatch.setattr(oracle, name, _counting(asked, name, getattr(oracle, name)))
    batch = reranking.next_batch()
    n, sent = len(batch.prompts), 100
    clock.now = 10.5  # the deadline passed while the round was out: its calls after the first 100 never went out
    judge = SimulatedComparator(labels)
    reranking.send(judge.compare(batch.query, batch.pairs[:sent]) + [Judgment(None, cut=UNSENT)] * (n - sent))
    res = reranking.result()
    assert n > 1000 and res.calls == sent and res.rounds == 1 and res.exhausted_by == ["time_budget"]
    # outcomes up to the first question with an unsent call only
    assert res.comparisons <= asked["outcome"] <= min(res.comparisons + 1, sent + 1) and asked["reask"] == 0
    assert [r for r in refunds if r] == [n - sent]  # one refund of the whole tail, not one per prompt
    assert sorted(res.order) == list(range(60))
    top = {i for i in range(60) if any(i in pair for pair in batch.prompts[:sent])}
    assert set(res.order[:len(top)]) == top  # the pairs read rank their candidates; the others keep prior order
    assert res.order[len(top):] == sorted(set(range(60)) - top)


def test_a_lazy_rounds_calls_stop_going_out_in_time_to_record_those_sent():
    """A round's answers are recorded once it is back: a lazy round's calls (``CallFloor.per_call`` set) stop going
    out while the time left is no more than recording those sent so far takes (``CallFloor.reserve``), so a fast
    judge's many answers are not recorded past the deadline (review s68j)."""
    from activeprp_core.comparators.base import CallGuard
    from activeprp_core.judging import CallFloor

    cands, labels = make_case(60, seed=2)
    clock = FakeClock()
    guard = CallGuard(max_concurrency=4, max_consecutive_failures=None)
    guard.clock, guard.deadline = clock, 1.0
    floor = CallFloor(RoundLatency(clock))
    guard.latency = floor
    pairs = [(cands[i], cands[j]) for i in range(20) for j in range(20) if i != j][:200]
    floor.per_call = 0.01  # 100 calls sent take 1 s to record: the whole time left
    judged = SimulatedComparator(labels).judge("q", pairs, guard=guard)
    assert [j.cut for j in judged] == [None] * 100 + [UNSENT] * 100
    assert floor.out == 100 and floor.reserve() == pytest.approx(1.0) and floor.call_floor() == pytest.approx(1.0)
    floor.per_call, floor.out = 0.0, 0  # any other round: nothing kept back
    assert all(j.cut is None for j in SimulatedComparator(labels).judge("q", pairs, guard=guard))
