"""RerankPool (activeprp_core.stream): fair slots, continuous batching that isolates a failing request, the
deadline, and cancellation of a request's calls in flight."""

import asyncio

import pytest

from activeprp_core import (
    Candidate,
    Comparator,
    RerankFailure,
    RerankResult,
    RerankSettings,
    SimulatedComparator,
    rerank,
)
from activeprp_core.stream import FairSlots, RerankPool, arerank_stream
from tests.test_core_many import Merging, requests


def test_fair_slots_serve_lower_keys_first_and_never_let_a_waiter_be_overtaken():
    async def scenario():
        slots, order = FairSlots(2), []

        async def hold(key, n, release):
            async with slots.take(n, key):
                order.append(key)
                await release.wait()

        first = asyncio.Event()
        holder = asyncio.ensure_future(hold(0, 2, first))  # takes both slots
        await asyncio.sleep(0)
        done = asyncio.Event()
        done.set()
        waiters = {key: asyncio.ensure_future(hold(key, n, done)) for key, n in ((3, 1), (1, 2), (2, 1), (4, 1))}
        await asyncio.sleep(0)
        waiters[4].cancel()  # a waiter that leaves is skipped
        first.set()
        await asyncio.gather(holder, *(w for k, w in waiters.items() if k != 4))
        return order, slots.free

    order, free = asyncio.run(scenario())
    assert order == [0, 1, 2, 3]  # key 1 needs both slots: keys 2 and 3 wait behind it
    assert free == 2


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
