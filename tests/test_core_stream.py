"""arerank_stream: requests from an async source join the queries in progress, results come out as they finish,
each equal to rerank of that request alone with its own settings."""

import asyncio

import pytest

from activeprp_core import Candidate, RerankFailure, RerankResult, SimulatedComparator, rerank
from activeprp_core.stream import arerank_stream
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


@pytest.mark.parametrize("settings", [{"ranker": "quicksort"}, ["budget"], {"budget": -1}])
def test_bad_settings_of_one_request_fail_that_request_only(settings):
    reqs, labels = requests(3)
    items = [reqs[1], (*reqs[2], settings)]
    out = dict(asyncio.run(_collect(arerank_stream(_source(items), comparator=Merging(labels), budget=10))))
    assert isinstance(out[0], RerankResult)
    assert isinstance(out[1], RerankFailure) and isinstance(out[1].error, (TypeError, ValueError))
