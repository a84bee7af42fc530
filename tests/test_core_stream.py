"""activeprp_core.stream: ``arerank_stream`` (requests from an async source join the queries in progress, results
come out as they finish, each equal to rerank of that request alone with its own settings) and ``RerankPool``
(continuous batching that isolates a failing request, the deadline, and cancellation of a request's calls in
flight)."""

import asyncio

import pytest

from activeprp_core import (
    Candidate,
    Comparator,
    RerankFailure,
    RerankResult,
    RerankSettings,
    SimulatedComparator,
    arerank,
    arerank_many,
    judging,
    rerank,
)
from activeprp_core import stream as stream_module
from activeprp_core.errors import ComparatorUnavailable, InvalidAnswer
from activeprp_core.stream import RerankPool, arerank_stream
from tests.test_core_many import KNOBS, Merging, requests

SHARED = dict(ranker="mohajer", oracle="randomized", budget=40, top_k=5, seed=3, max_rounds=8)


async def _source(items):
    for item in items:
        yield item


async def _collect(stream):
    return [pair async for pair in stream]


@pytest.mark.parametrize("oracle, hard", [("randomized", True), ("adaptive", True), ("randomized", False),
                                          ("adaptive", False)])
def test_each_result_equals_rerank_with_its_own_settings(oracle, hard):
    # soft answers (the confidence gate) and adaptive read the judge's record: a request's own answers only
    reqs, labels = requests(10)
    shared, knobs = {**SHARED, "oracle": oracle}, {**KNOBS, "hard": hard}
    own = [{"budget": 5 + 4 * i, "seed": i, "top_k": 1 + i % 4, "max_rounds": 2 + i % 5} for i in range(len(reqs))]
    items = [(q, c, o) if i % 3 else (q, c) for i, ((q, c), o) in enumerate(zip(reqs, own))]
    out = dict(asyncio.run(_collect(arerank_stream(_source(items), comparator=Merging(labels, **knobs), **shared))))
    assert sorted(out) == list(range(len(reqs)))
    for i, (q, c) in enumerate(reqs):
        settings = {**shared, **own[i]} if i % 3 else shared
        solo = rerank(q, c, comparator=SimulatedComparator(labels, **knobs), **settings)
        assert isinstance(out[i], RerankResult)
        assert (out[i].order, out[i].calls, out[i].rounds, out[i].top_k) == (solo.order, solo.calls, solo.rounds,
                                                                            solo.top_k)
        assert out[i].calls <= settings["budget"] and out[i].rounds <= settings["max_rounds"]


def test_results_come_out_as_they_finish():
    big = [Candidate(f"b{i}", "x") for i in range(40)]
    small = [Candidate("s0", "x"), Candidate("s1", "x")]
    labels = {c.id: i for i, c in enumerate(big + small)}
    stream = arerank_stream(_source([("big", big), ("small", small)]), comparator=Merging(labels), budget=None,
                            top_k=10, ranker="mohajer")
    assert [i for i, _ in asyncio.run(_collect(stream))] == [1, 0]


def test_a_request_that_arrives_later_joins_without_waiting_for_the_first():
    reqs, labels = requests(3)
    judge = Merging(labels)
    first_done = asyncio.Event()

    async def source():
        yield reqs[1]
        yield reqs[2]
        await first_done.wait()  # a stream that waited for this while queries were in progress would hang

    async def main():
        out = {}
        async for index, item in arerank_stream(source(), comparator=judge, budget=None, top_k=5, ranker="mohajer"):
            out[index] = item
            if len(out) == 2:
                first_done.set()
        return out

    out = asyncio.run(asyncio.wait_for(main(), 10))
    assert sorted(out) == [0, 1] and all(isinstance(r, RerankResult) for r in out.values())
    assert any(len(set(b)) == 2 for b in judge.batches)  # their prompts shared a step


async def _queued(queue):
    while (item := await queue.get()) is not None:
        yield item


def test_a_queue_fed_stream_merges_requests_put_while_a_step_is_in_flight():
    reqs, labels = requests(6)

    class Slow(Merging):
        async def ajudge_batch(self, items, *, guard=None):
            await asyncio.sleep(0.01)
            return await super().ajudge_batch(items, guard=guard)

    judge = Slow(labels)

    async def main():
        queue = asyncio.Queue()
        stream = arerank_stream(_queued(queue), comparator=judge, budget=None, top_k=5, ranker="mohajer")
        queue.put_nowait(reqs[3])
        results = asyncio.ensure_future(_collect(stream))
        await asyncio.sleep(0.015)  # the first request's first step is in flight
        for r in (reqs[4], reqs[5], None):
            queue.put_nowait(r)
        return dict(await results)

    out = asyncio.run(asyncio.wait_for(main(), 10))
    assert [out[i].order for i in range(3)] == [
        rerank(q, c, comparator=SimulatedComparator(labels), budget=None, top_k=5, ranker="mohajer").order
        for q, c in reqs[3:]]
    assert any(len(set(b)) == 3 for b in judge.batches)


@pytest.mark.parametrize("settings", [{"ranker": "quicksort"}, ["budget"], {"budget": -1}, [], ""])
def test_bad_settings_of_one_request_fail_that_request_only(settings):
    reqs, labels = requests(3)
    items = [reqs[1], (*reqs[2], settings)]
    out = dict(asyncio.run(_collect(arerank_stream(_source(items), comparator=Merging(labels), budget=10))))
    assert isinstance(out[0], RerankResult)
    assert isinstance(out[1], RerankFailure) and isinstance(out[1].error, (TypeError, ValueError))


class FailsFor(Merging):
    """A batching comparator whose merged calls raise when they hold a prompt of query ``bad``."""

    def __init__(self, labels, bad):
        super().__init__(labels)
        self.bad = bad

    async def ajudge_batch(self, items, *, guard=None):
        if any(q == self.bad for q, _, _ in items):
            self.batches.append([q for q, _, _ in items])
            raise ValueError(f"cannot judge {self.bad}")
        return await super().ajudge_batch(items, guard=guard)


def test_a_merged_call_that_fails_is_asked_again_request_by_request():
    reqs, labels = requests(6)
    bad = reqs[3][0]
    judge = FailsFor(labels, bad)

    async def collect():
        async def source():
            for r in reqs[1:]:
                yield r

        return dict([pair async for pair in arerank_stream(source(), comparator=judge, budget=30, top_k=5,
                                                            ranker="mohajer")])

    out = asyncio.run(collect())
    assert isinstance(out[2], RerankFailure) and "cannot judge" in str(out[2].error)
    for i, (query, cands) in enumerate(reqs[1:]):
        if query == bad:
            continue
        solo = rerank(query, cands, comparator=SimulatedComparator(labels), budget=30, top_k=5, ranker="mohajer")
        assert isinstance(out[i], RerankResult) and out[i].order == solo.order
    assert any(len(set(b)) > 1 and bad in b for b in judge.batches)  # it failed merged, then alone


class Hanging(Comparator):
    """An async judge that never answers; counts the calls started and those cancelled."""

    def __init__(self):
        self.started = self.cancelled = 0

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        self.started += len(pairs)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled += len(pairs)
            raise


def _cands(n=8):
    return [Candidate(f"d{i}", f"passage {i}") for i in range(n)]


class HangingBatches(Hanging):
    """A batching comparator (a local model's shape) whose merged calls never answer."""

    max_batch_size = 4

    async def ajudge_batch(self, items, *, guard=None):
        return await super().ajudge_batch(items, guard=guard)


@pytest.mark.parametrize("judge_kind", [Hanging, HangingBatches])
@pytest.mark.parametrize("waited", [0.0, 0.15])
def test_at_the_deadline_the_round_in_flight_is_cut_and_the_order_is_best_effort(judge_kind, waited):
    judge = judge_kind()

    async def run():
        pool = RerankPool(judge, RerankSettings(budget=20, top_k=3, on_failure="raise"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await pool.rerank("q", _cands(), {"time_budget": 0.3}, started=started - waited)  # e.g. queued
        await pool.aclose()
        return result, loop.time() - started

    result, took = asyncio.run(run())
    assert 0.3 - waited <= took < 0.3 - waited + 0.3
    assert result.order == list(range(8)) and result.exhausted_by == ["time_budget"]
    assert result.time_budget == 0.3 and result.on_failure == "raise"
    assert judge.started > 0 and judge.cancelled == judge.started


class SlowBatches(Comparator):
    """A batching comparator whose chunks take 0.05 s each (one merged call serves several requests)."""

    max_batch_size = 64

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        await asyncio.sleep(0.05)
        return [1.0] * len(pairs)


@pytest.mark.parametrize("other_query", ["q", "another query"])
def test_a_request_stops_at_its_own_deadline_in_a_merged_call_and_leaves_the_others_alone(other_query):
    """Merged with a request that has no deadline (the same query text or another), a request with a time budget
    returns at its deadline (the merged call runs on for the other), and the other is not cut at it: its result
    is that of ``arerank`` alone."""
    settings = RerankSettings(budget=None, ranker="allpairs", oracle="single", top_k=3, max_concurrency=3)

    async def run():
        pool, loop = RerankPool(SlowBatches(), settings), asyncio.get_running_loop()
        started = loop.time()

        async def timed(query, per_request):
            result = await pool.rerank(query, _cands(10), per_request)
            return result, loop.time() - started

        (short, took), (other, _) = await asyncio.gather(timed("q", {"time_budget": 0.2}), timed(other_query, {}))
        await pool.aclose()
        return short, took, other

    short, took, other = asyncio.run(run())
    alone = asyncio.run(arerank(other_query, _cands(10), settings, comparator=SlowBatches()))
    assert took < 0.2 + 0.3 and short.exhausted_by == ["time_budget"] and short.cut_calls > 0
    assert (other.order, other.calls, other.exhausted_by, other.cut_calls) == (alone.order, alone.calls, [], 0)


def test_a_cancelled_request_cancels_its_calls_in_flight_and_sends_no_more():
    judge = Hanging()

    async def run():
        pool = RerankPool(judge, RerankSettings(budget=20, top_k=3))
        task = asyncio.ensure_future(pool.rerank("q", _cands()))
        while not judge.started:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        started = judge.started
        await asyncio.sleep(0.05)
        return started

    started = asyncio.run(run())
    assert judge.started == started and judge.cancelled == started


class Slowed(Comparator):
    """An async judge whose calls take ``delay`` seconds (settable between requests)."""

    def __init__(self, delay: float, max_batch_size: int | None = None):
        self.delay, self.calls, self.max_batch_size = delay, 0, max_batch_size

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        self.calls += len(pairs)
        await asyncio.sleep(self.delay)
        return [1.0] * len(pairs)


def _slowed_pool(judge: Slowed, now: list[float] | None = None) -> RerankPool:
    """A ``RerankPool`` over ``judge`` (mohajer, 20 calls, the top 3 of ``_cands()``) whose record of rounds reads
    the clock ``now[0]`` when given (else real time); made in the test's event loop."""
    pool = RerankPool(judge, RerankSettings(budget=20, top_k=3, ranker="mohajer", oracle="single"))
    if now is not None:
        pool.latency = judging.RoundLatency(lambda: now[0])
    return pool


def _prior(result) -> bool:
    """Nothing sent: the candidates in their prior order."""
    return result.calls == 0 and result.order == list(range(8))


def _ranked(result) -> bool:
    """Ranked by calls, none of them cut."""
    return result.calls > 0 and result.cut_calls == 0 and result.order != list(range(8))


def test_after_a_slow_spell_of_the_judge_short_budgets_rank_again_once_its_rounds_age_out(monkeypatch):
    """A slow spell's rounds make a time budget shorter than them plan no round (nothing sent, so nothing faster is
    observed); once they are ``LATENCY_HORIZON`` old they no longer count and the requests send calls again."""
    monkeypatch.setattr(judging, "LATENCY_HORIZON", 0.5)
    judge = Slowed(0.3)

    async def run():
        pool = _slowed_pool(judge)
        await pool.rerank("q", _cands(), {"time_budget": 1.0})  # the slow spell: rounds of about 0.3 s
        judge.delay, sent = 0.0, judge.calls
        during = await pool.rerank("q", _cands(), {"time_budget": 0.2})  # no round of 0.3 s fits in 0.2 s
        await asyncio.sleep(0.6)
        after = await pool.rerank("q", _cands(), {"time_budget": 0.2})
        await pool.aclose()
        return sent, during, after

    sent, during, after = asyncio.run(run())
    assert sent > 0 and _prior(during) and _ranked(after)


@pytest.mark.parametrize("max_batch_size", [None, 8], ids=["each", "merged"])
def test_after_a_burst_a_short_time_budget_probes_the_judge_instead_of_waiting_out_the_horizon(max_batch_size):
    """``activeprp serve``'s case (review 1129u, finding 2): the pool's shared record holds a burst's rounds of 2.5 s
    (its calls waited for the judge's slots); the judge now answers at once. The requests with a 2 s time budget
    while the burst's rounds are fresh send nothing (too late: under the fastest round, 2.5 s); those refused
    calls observe nothing, so 2.5 s after the burst the record is stale: the next request's round is a probe,
    answered at once, and the requests after it rank as usual (before: every one got its prior order with no call
    until the burst's rounds were ``LATENCY_HORIZON`` old). "merged": a judge that batches across queries (a local
    model's shape), whose rounds go out in a merged call (``_Merger``): the probe's calls go out there too (review
    1129ab, finding 2: the merged call read the shared record's floor, so the probe was used up, its calls
    refused)."""
    judge = Slowed(0.0, max_batch_size)
    now = [0.0]

    async def run():
        pool = _slowed_pool(judge, now)
        for _ in range(20):
            pool.latency.record(2.5)
        during = []
        for now[0] in (1.0, 2.0, 2.4):
            during.append(await pool.rerank("q", _cands(), {"time_budget": 2.0}))
        now[0] = 2.6
        after = [await pool.rerank("q", _cands(), {"time_budget": 2.0}) for _ in range(3)]
        await pool.aclose()
        return during, after

    during, after = asyncio.run(run())
    assert all(map(_prior, during)) and all(map(_ranked, after))


@pytest.mark.parametrize("max_batch_size", [None, 8], ids=["each", "merged"])
def test_a_judge_slower_than_the_time_budget_is_sent_one_probe_per_floor_not_a_round_per_request(max_batch_size):
    """``activeprp serve``'s case (review 1129ae, finding 1): the judge takes 0.5 s a call, the requests' time
    budgets are under it. The first request's round is cut at its deadline with no call back; before, every later
    request sent a whole round too, all cut (the call floor was the fastest answered round: none). Now that cut
    round is the floor while no round is answered (``RoundLatency.call_floor``): the requests with less time
    left send nothing and get their prior order, until the record is that round's length old (on the record's
    clock); then one request's round is the probe, and answered fast, it refutes the record."""
    judge = Slowed(0.5, max_batch_size)
    now = [0.0]

    async def run():
        pool = _slowed_pool(judge, now)
        first = await pool.rerank("q", _cands(), {"time_budget": 0.3})
        sent = judge.calls
        during = [await pool.rerank("q", _cands(), {"time_budget": 0.2}) for _ in range(3)]
        during_calls = judge.calls - sent
        now[0], judge.delay = 1.0, 0.0  # the record is stale now: a probe, and the judge answers at once
        after = [await pool.rerank("q", _cands(), {"time_budget": 0.2}) for _ in range(2)]
        await pool.aclose()
        return first, during, during_calls, after

    first, during, during_calls, after = asyncio.run(run())
    assert first.calls == first.cut_calls > 0
    assert during_calls == 0 and all(map(_prior, during)) and all(map(_ranked, after))



def test_round_latencies_count_for_latency_horizon_seconds():
    now = [0.0]
    latency = judging.RoundLatency(lambda: now[0])
    latency.record(2.5)
    now[0] = judging.LATENCY_HORIZON - 1
    latency.record(0.1, answered=False)
    assert latency.estimate() == 2.5 and latency.fastest() == 2.5
    now[0] = judging.LATENCY_HORIZON + 1  # the 2.5 s round is too old now
    assert latency.estimate() == 0.1 and latency.fastest() is None
    now[0] = 3 * judging.LATENCY_HORIZON
    assert latency.estimate() is None


def test_round_latencies_are_read_and_recorded_from_several_threads():
    """A sync comparator's worker threads read the record (``CallGuard.too_late``) while rounds are recorded."""
    import sys
    import threading
    import time

    now, errors = [0.0], []
    latency = judging.RoundLatency(lambda: now[0])
    stop = time.monotonic() + 0.5

    def reader():
        while time.monotonic() < stop:
            try:
                latency.fastest(), latency.estimate()
            except Exception as error:  # 'deque mutated during iteration' before the lock
                errors.append(error)

    def writer():
        while time.monotonic() < stop:
            now[0] += 1.0  # the oldest rounds age out as new ones come
            latency.record(0.5)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # makes the race quick to hit; it exists at the default interval too
    try:
        threads = [threading.Thread(target=reader) for _ in range(3)] + [threading.Thread(target=writer)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors and latency.estimate() == 0.5


class CountingAsync(Comparator):
    """A custom judge with only the documented ``async def ajudge(self, query, pairs)`` (``kw``: it also takes
    ``**kw``, so a caller passing ``guard=`` would skip the guarded chunk loop unnoticed). Counts the calls and the
    most pairs in flight at once; ``answer=False``: every answer is None (a failing endpoint)."""

    def __init__(self, labels, answer=True):
        self.labels, self.answer = labels, answer
        self.calls = self.in_flight = self.peak = 0

    def judge(self, query, pairs):
        raise AssertionError("async only")

    async def _answers(self, pairs):
        self.calls += len(pairs)
        self.in_flight += len(pairs)
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)  # the other requests' chunks run meanwhile, if the guard lets them
        self.in_flight -= len(pairs)
        if not self.answer:
            return [None] * len(pairs)
        return [1.0 if self.labels[a.id] > self.labels[b.id] else 0.0 for a, b in pairs]

    async def ajudge(self, query, pairs):
        return await self._answers(pairs)


class CountingAsyncKw(CountingAsync):
    async def ajudge(self, query, pairs, **kw):
        return await self._answers(pairs)


@pytest.mark.parametrize("kind", [CountingAsync, CountingAsyncKw])
def test_a_custom_async_judge_runs_under_the_pools_concurrency_cap_and_breaker(kind):
    """The pool calls a custom ``ajudge`` as ``arerank`` does (``aguarded_judge``): chunks of ``max_concurrency``
    pairs, a cap shared by the concurrent requests, and the circuit breaker."""
    reqs, labels = requests(6)
    reqs = [r for r in reqs if len(r[1]) >= 10]
    settings = RerankSettings(ranker="parallel_mohajer", budget=60, top_k=5, max_concurrency=4,
                              max_consecutive_failures=3)

    async def pooled(judge):
        pool = RerankPool(judge, settings)
        try:
            return await asyncio.gather(*(pool.rerank(q, c) for q, c in reqs), return_exceptions=True)
        finally:
            await pool.aclose()

    judge = kind(labels)
    out = asyncio.run(asyncio.wait_for(pooled(judge), 10))
    for (q, c), result in zip(reqs, out):
        alone = asyncio.run(arerank(q, c, settings, comparator=kind(labels)))
        assert isinstance(result, RerankResult)
        assert (result.order, result.calls, result.rounds) == (alone.order, alone.calls, alone.rounds)
    assert judge.peak == 4  # across the requests, never more than the cap in flight

    failing, alone = kind(labels, answer=False), kind(labels, answer=False)
    out = asyncio.run(asyncio.wait_for(pooled(failing), 10))
    with pytest.raises(ComparatorUnavailable, match="circuit breaker"):
        asyncio.run(arerank(*reqs[0], settings, comparator=alone))
    assert all(isinstance(e, ComparatorUnavailable) for e in out)
    # one request's failed chunk stops it alone (as alone); the next request's opens the pool's breaker for all
    assert alone.calls == 4 and failing.calls == 2 * alone.calls


class Generated(Merging):
    """A batching comparator whose ``ajudge_batch`` answers with a generator (any iterable is an answer)."""

    async def ajudge_batch(self, items, *, guard=None):
        return (p for p in await super().ajudge_batch(items, guard=guard))


class AnswersNone(Merging):
    """A batching comparator whose ``ajudge_batch`` returns None (a comparator bug)."""

    async def ajudge_batch(self, items, *, guard=None):
        await super().ajudge_batch(items, guard=guard)


async def _bounded_collect(stream):
    return dict(await asyncio.wait_for(_collect(stream), 10))  # a hang fails the test instead of stalling it


def test_a_batching_judges_generator_of_answers_gives_the_results_of_arerank_many():
    reqs, labels = requests(5)
    kw = dict(ranker="mohajer", budget=30, top_k=5)
    out = asyncio.run(_bounded_collect(arerank_stream(_source(reqs), comparator=Generated(labels), **kw)))
    many = asyncio.run(_collect(arerank_many(reqs, comparator=Generated(labels), carry_judge=False, **kw)))
    assert sorted(out) == list(range(len(reqs)))
    for i, expected in enumerate(many):
        assert isinstance(out[i], RerankResult) and isinstance(expected, RerankResult)
        assert (out[i].order, out[i].calls, out[i].rounds) == (expected.order, expected.calls, expected.rounds)


def test_a_batching_judge_that_returns_none_fails_each_request_with_invalid_answer():
    reqs, labels = requests(5)
    reqs = [r for r in reqs if len(r[1]) >= 2]  # each sends a call
    out = asyncio.run(_bounded_collect(arerank_stream(_source(reqs), comparator=AnswersNone(labels), budget=30)))
    many = asyncio.run(_collect(arerank_many(reqs, comparator=AnswersNone(labels), budget=30)))
    assert sorted(out) == list(range(len(reqs)))
    for i, expected in enumerate(many):
        assert isinstance(out[i], RerankFailure) and isinstance(out[i].error, InvalidAnswer)
        assert isinstance(expected, RerankFailure) and type(expected.error) is type(out[i].error)


def test_an_error_in_the_merger_past_the_comparators_call_fails_the_waiting_requests(monkeypatch):
    """Any exception in the merged call's handling reaches every request whose round it had taken."""
    reqs, labels = requests(5)
    reqs = [r for r in reqs if len(r[1]) >= 2]

    def broken(*_):
        raise RuntimeError("broken bookkeeping")

    monkeypatch.setattr(stream_module, "_credit", broken)
    out = asyncio.run(_bounded_collect(arerank_stream(_source(reqs), comparator=Merging(labels), budget=30)))
    assert sorted(out) == list(range(len(reqs)))
    assert all(isinstance(r, RerankFailure) and "broken bookkeeping" in str(r.error) for r in out.values())


def test_closing_the_pool_cancels_a_request_whose_round_is_in_the_merged_call():
    judge = HangingBatches()

    async def run():
        pool = RerankPool(judge, RerankSettings(budget=20, top_k=3))
        task = asyncio.ensure_future(pool.rerank("q", _cands()))  # no time budget: nothing else ends its wait
        while not judge.started:
            await asyncio.sleep(0.001)
        await pool.aclose()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)  # before: it waited forever for the cancelled call's answers

    asyncio.run(run())
    assert judge.cancelled == judge.started > 0


def test_a_pool_s_requests_and_other_calls_on_its_guard_share_the_guard_s_cap():
    """``RerankPool`` queued its requests for slots of its own: a guard shared with another pool, or used for
    calls outside the pool, had its cap once in the pool and once outside."""
    import itertools
    import time

    from activeprp_core.comparators import CallGuard
    from activeprp_core.comparators.base import RequestGuard
    from tests.test_core_comparators_base import Parked, on_both_paths

    judge, guard = Parked(), CallGuard(max_concurrency=2)
    pool, keys = RerankPool(judge, RerankSettings(budget=20, top_k=3), guard), itertools.count()
    views = itertools.cycle([lambda: RequestGuard(guard, pool.slots, next(keys), time.monotonic), lambda: guard])
    inside, errors = on_both_paths(judge, lambda: next(views)(), guard.fair_slots, 0, 4)
    assert not errors and inside == judge.park.peak == 2


class Gated(Comparator):
    """An async judge that notes the query of each call in ``order``; the call of query "blocker" waits for
    ``gate``."""

    def __init__(self):
        self.order, self.gate = [], asyncio.Event()

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        self.order.append(query)
        if query == "blocker":
            await self.gate.wait()
        return [0.7] * len(pairs)


def test_pools_and_direct_calls_sharing_a_guard_are_served_oldest_request_first():
    """Two pools share a guard (cap 1), with direct calls on it: the request that came first is served first.
    Each pool counted its request keys from 0 and a direct call waited with key 0, all in one queue ordered by key,
    so the older pool's request waited behind the younger pool's later ones, and behind every direct call."""
    from activeprp_core.comparators import CallGuard

    cands = _cands(2)

    async def scenario():
        judge, guard = Gated(), CallGuard(max_concurrency=1)
        settings = RerankSettings(budget=1, max_rounds=1, ranker="mohajer", oracle="single", max_concurrency=1)
        old, young = RerankPool(judge, settings, guard), RerankPool(judge, settings, guard)
        for i in range(3):  # the old pool has served requests before
            await old.rerank(f"warm {i}", cands)
        judge.order.clear()
        tasks = []

        async def arrives(call, waiting):
            tasks.append(asyncio.ensure_future(call))
            for _ in range(10_000):  # until it waits for the slot (a hang guard, not a timing assertion)
                if guard.fair_slots.waiting == waiting and judge.order:
                    return
                await asyncio.sleep(0)
            raise AssertionError(f"{waiting} calls do not wait")

        await arrives(young.rerank("blocker", cands), 0)
        await arrives(old.rerank("old, first", cands), 1)
        await arrives(young.rerank("young, second", cands), 2)
        await arrives(judge.ajudge("direct, third", [tuple(cands)], guard=guard), 3)
        await arrives(young.rerank("young, fourth", cands), 4)
        judge.gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        return judge.order

    assert asyncio.run(scenario()) == ["blocker", "old, first", "young, second", "direct, third", "young, fourth"]


def test_a_dead_endpoint_under_a_time_budget_shorter_than_its_backoff_opens_the_breakers():
    """Every attempt fails at once with a 503 and the backoff (60 s) would end past each request's deadline (10 s):
    each call fails at once, its retry withheld, and the breakers count it. A request's own breaker opens after 5
    such calls, the pool's shared one once a second request's fail too, and later requests send nothing. They were
    cut (outcome unknown), which no breaker counts: each request sent its whole round (19 calls of quicksort on
    20 documents), rerank_many's every query too (review s69f #1: 230 requests for 10 pool requests)."""
    pytest.importorskip("tenacity")
    from activeprp_core import rerank_many
    from activeprp_core.comparators.failures import status_failure
    from tests.conftest import FakeRemote

    class Dead(FakeRemote):
        def send(self, client, request):
            self.sent += 1
            raise ConnectionError("down")

        def classify(self, error):
            return status_failure(503, str(error))

    cands = [Candidate(f"d{i}", f"p{i}") for i in range(20)]
    settings = dict(budget=60, ranker="quicksort", time_budget=10.0)
    judge = Dead(max_concurrency=4, backoff_initial=60.0, backoff_max=60.0)

    async def four_requests():
        pool, sent, errors = RerankPool(judge, RerankSettings(**settings)), [], []
        for i in range(4):
            before = judge.sent
            with pytest.raises(ComparatorUnavailable) as info:
                await pool.rerank(f"q{i}", cands)
            sent.append(judge.sent - before)
            errors.append(str(info.value))
        await pool.aclose()
        return sent, errors

    sent, errors = asyncio.run(four_requests())
    assert all(5 <= n <= 8 for n in sent[:2]) and sent[2:] == [0, 0], sent
    assert all("circuit breaker open" in e and "(HTTP 503)" in e for e in errors), errors
    judge.sent = 0
    with pytest.raises(ComparatorUnavailable, match="circuit breaker open"):
        list(rerank_many([(f"q{i}", cands) for i in range(8)], comparator=judge, **settings))
    assert judge.sent <= 16


def test_requests_a_merged_call_fails_each_raise_their_own_error_with_their_own_accounting():
    """A 401 in a merged call of two requests fails both. They raised the one exception object, so each request's
    accounting overwrote the other's (``activeprp serve`` told a client another request's judge calls; review s69f
    #3). Now each raises its own copy: same type, message, status and cause, its own accounting."""
    from activeprp_core.errors import ComparatorAuthError

    class Refusing(Merging):
        async def ajudge_batch(self, items, *, guard=None):
            self.batches.append([q for q, _, _ in items])
            await asyncio.sleep(0)
            try:
                raise KeyError("the client's own error")
            except KeyError as cause:
                raise ComparatorAuthError("invalid key", status_code=401) from cause

    reqs, labels = requests()
    judge = Refusing(labels, **KNOBS)

    async def both():
        pool = RerankPool(judge, RerankSettings(budget=40, ranker="quicksort", on_failure="raise"))
        out = await asyncio.gather(pool.rerank(*reqs[1]), pool.rerank(*reqs[3]), return_exceptions=True)
        await pool.aclose()
        return out

    first, second = asyncio.run(both())
    assert len(judge.batches) == 1 and len(set(judge.batches[0])) == 2  # one merged call of both
    assert isinstance(first, ComparatorAuthError) and isinstance(second, ComparatorAuthError)
    assert first is not second and str(first) == str(second) == "invalid key (HTTP 401)"
    assert isinstance(first.__cause__, KeyError) and second.__cause__ is first.__cause__
    sizes = sorted(len(c) - 1 for _, c in (reqs[1], reqs[3]))  # quicksort's first round: n - 1 calls
    assert sorted(e.accounting.calls for e in (first, second)) == sizes


def test_a_pool_whose_client_retries_a_failing_request_stays_open_to_the_others():
    """Review s69g, finding 1: a ``RerankPool`` counted a request's failed calls on the shared breaker by request,
    so a failing request sent again (a client retrying it) was a second query in a row and opened the breaker for
    every later request, for good. The same query text is now one source: each try fails alone (its own breaker
    after 5 calls), and the next request is answered."""

    class Judge:
        calls = 0

        def compare(self, query, pairs):
            Judge.calls += len(pairs)
            return [None] * len(pairs) if "POISON" in query else [0.7] * len(pairs)

    async def main():
        pool = RerankPool(Judge(), RerankSettings(budget=20, seed=0, max_concurrency=2))
        cands = [Candidate(f"d{i}", f"p{i}") for i in range(8)]
        errors = []
        for _ in range(3):
            with pytest.raises(ComparatorUnavailable, match="circuit breaker open: 5 calls in a row failed") as info:
                await pool.rerank("POISON query", cands)
            errors.append(info.value.accounting.calls)
        good = await pool.rerank("good query", cands)
        await pool.aclose()
        return errors, good

    errors, good = asyncio.run(main())
    assert errors == [5, 5, 5]  # each try its own 5 calls; none stopped by the shared breaker with no call
    assert good.calls > 0 and good.failure is None and good.failed_calls == 0


@pytest.mark.parametrize("q1_fails", [True, False], ids=["q1-raises", "q1-answers-later"])
def test_a_request_past_its_deadline_in_a_merged_call_is_billed_the_calls_it_sent(q1_fails):
    """Review s69f #2 and #4, through ``RerankPool``: in one merged call, q0 (time budget 1 s) sent 2 of its 4 calls,
    then its deadline passed (the loop's clock jumps 5 s; its other 2 are not sent), and q1 sent its calls. q0 was
    billed all 4: cut at its deadline while the call ran on for q1 (here its timer fires first), or as failed calls
    had q1's failure come first (the call's calls split by prompt order, as q1's re-sent calls got no retry). Now
    q0 is billed the 2 it sent, and q1 its own, with a retry for each of its calls the failed merged call sent."""
    from tests.test_core_many import PAST_CANDIDATES, PAST_KW, PastItsDeadline

    shift = [0.0]
    judge = PastItsDeadline(lambda: shift.__setitem__(0, shift[0] + 5.0), fails=q1_fails)

    async def run():
        loop = asyncio.get_running_loop()
        real = loop.time
        loop.time = lambda: real() + shift[0]  # the clock of the pool, its timers and the requests' deadlines
        judge.release = asyncio.Event()
        pool = RerankPool(judge, RerankSettings(**PAST_KW))

        async def short():
            try:
                return await pool.rerank("q0", PAST_CANDIDATES, {"time_budget": 1.0})
            except Exception as error:
                return error
            finally:
                judge.release.set()

        out = await asyncio.gather(short(), pool.rerank("q1", PAST_CANDIDATES))
        await pool.aclose()
        return out

    q0, q1 = asyncio.run(run())
    spent = getattr(q0, "accounting", q0)
    assert judge.sent == {"q0": 2, "q1": 6 if q1_fails else 4}
    assert spent.calls == 2 and spent.calls == spent.failed_calls + spent.cut_calls and spent.retries == 0
    assert isinstance(q1, RerankResult) and (q1.calls, q1.failed_calls, q1.retries) == (4, 0, 2 if q1_fails else 0)
    if not q1_fails:
        assert isinstance(q0, RerankResult) and q0.cut_calls == 2 and q0.exhausted_by == ["time_budget"]


class FailsWhenReleased(Comparator):
    """Batches across queries; query "q1"'s first call is out until ``release`` is set (``out`` says it is), then
    raises a bug. ``sent``: the calls each query sent."""

    max_batch_size = 8

    def __init__(self):
        self.sent, self.release, self.out = {}, asyncio.Event(), asyncio.Event()

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        self.sent[query] = self.sent.get(query, 0) + len(pairs)
        if query == "q1" and self.sent[query] == len(pairs):
            self.out.set()
            await self.release.wait()
            raise RuntimeError("a bug in q1's first call")
        return [1.0] * len(pairs)


def test_a_request_gone_while_its_merged_call_runs_is_not_asked_again_when_the_call_fails():
    """q0 sent its 4 calls in a merged call, then its client went away (cancelled) while q1's first call was out;
    that call then raised. The merged call's requests were each asked again on its own, q0's too: its 4 calls went
    out again, for no one. Now only q1 is (billed its calls, a retry for each the merged call sent)."""
    from tests.test_core_many import PAST_CANDIDATES, PAST_KW

    async def run():
        judge = FailsWhenReleased()
        pool = RerankPool(judge, RerankSettings(**PAST_KW))
        gone = asyncio.ensure_future(pool.rerank("q0", PAST_CANDIDATES))
        other = asyncio.ensure_future(pool.rerank("q1", PAST_CANDIDATES))
        await judge.out.wait()
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        judge.release.set()
        result = await other
        await pool.aclose()
        return judge, result

    judge, q1 = asyncio.run(run())
    assert judge.sent == {"q0": 4, "q1": 6}
    assert isinstance(q1, RerankResult) and (q1.calls, q1.failed_calls, q1.retries) == (4, 0, 2)


class RetriedThenRefused(Comparator):
    """Batches across queries; a query's first chunk's calls fail after one transport retry each
    (``Judgment.retries``), its next chunk is refused (a 401, which stops every request)."""

    max_batch_size = 8

    def __init__(self):
        self.sent = {}

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        from activeprp_core.errors import ComparatorAuthError
        from activeprp_core.types import Judgment

        self.sent[query] = self.sent.get(query, 0) + len(pairs)
        if self.sent[query] > len(pairs):
            raise ComparatorAuthError("invalid key", status_code=401)
        return [Judgment(None, error="503 from the judge", retries=1)] * len(pairs)


def test_a_refused_merged_call_bills_its_retries_on_a_request_that_sent_calls():
    """A merged call of q0 (its deadline too close: it sends nothing) and q1 (2 calls failed after a retry each, then
    a 401) bills its 2 retries on its first request, q0, which sent no call to bill them on: they were lost. Now on
    q1. The loop's clock stands still, so q0's deadline (0.01 s away) never comes."""
    from tests.test_core_many import PAST_CANDIDATES, PAST_KW

    async def run():
        loop = asyncio.get_running_loop()
        frozen = loop.time()
        loop.time = lambda: frozen
        judge = RetriedThenRefused()
        pool = RerankPool(judge, RerankSettings(**PAST_KW))
        out = await asyncio.gather(pool.rerank("q0", PAST_CANDIDATES, {"time_budget": 1.0}, started=frozen - 0.99),
                                   pool.rerank("q1", PAST_CANDIDATES), return_exceptions=True)
        await pool.aclose()
        return judge, out

    judge, (q0, q1) = asyncio.run(run())
    assert judge.sent == {"q1": 4}
    assert (q0.accounting.calls, q0.accounting.retries) == (0, 0)
    assert (q1.accounting.calls, q1.accounting.failed_calls, q1.accounting.retries) == (4, 4, 2)
