"""The public sans-I/O driver (Reranking), the comparator base class and guard, and failure handling."""

import asyncio
import logging

import pytest

from activeprp_core import (
    DONE,
    Candidate,
    Comparator,
    ComparatorAuthError,
    ComparatorError,
    ComparatorUnavailable,
    InvalidAnswer,
    Reranking,
    SimulatedComparator,
    arerank,
    rerank,
)
from activeprp_core.comparators import CallGuard
from activeprp_core.types import Judgment
from tests.conftest import make_case


def cands(n):
    return [Candidate(f"d{i}", f"text {i}") for i in range(n)]


def test_driving_reranking_by_hand_equals_rerank():
    cs, labels = make_case(40, seed=2)
    judge = SimulatedComparator(labels, doc_noise=0.5, pair_noise=0.5, seed=3)
    reranking = Reranking("q", cs, ranker="mohajer", oracle="bidirectional", budget=150, top_k=5, seed=9)
    batches = 0
    while (batch := reranking.next_batch()) is not DONE:
        assert reranking.next_batch() is batch  # asking again gives the same pending batch
        assert batch.pairs == [(cs[a], cs[b]) for a, b in batch.prompts]
        reranking.send(judge.compare(batch.query, batch.pairs))
        batches += 1
    hand = reranking.result()
    core = rerank("q", cs, ranker="mohajer", oracle="bidirectional", comparator=SimulatedComparator(
        labels, doc_noise=0.5, pair_noise=0.5, seed=3), budget=150, top_k=5, seed=9)
    assert (hand.order, hand.calls, hand.rounds) == (core.order, core.calls, core.rounds) and batches == hand.rounds


def test_protocol_misuse_is_reported():
    reranking = Reranking("q", cands(4), budget=None, top_k=2)
    with pytest.raises(RuntimeError, match="before the reranking is done"):
        reranking.result()
    with pytest.raises(InvalidAnswer, match="1 answers for"):
        reranking.send([1.0])
    while not reranking.done:
        reranking.send([1.0] * len(reranking.next_batch().prompts))
    with pytest.raises(RuntimeError, match="no batch pending"):
        reranking.send([])
    assert sorted(reranking.result().order) == [0, 1, 2, 3]


class Failing(Comparator):
    """Raises ``error`` from the ``fail_at``-th call on (counting calls), else answers from ``inner``."""

    def __init__(self, inner, error, fail_at=0):
        self.inner, self.error, self.fail_at, self.calls = inner, error, fail_at, 0

    def compare(self, query, pairs):
        self.calls += 1
        if self.calls > self.fail_at:
            raise self.error
        return self.inner.compare(query, pairs)


@pytest.mark.parametrize("error", [ComparatorAuthError("bad key", status_code=401), KeyError("bug")])
def test_a_comparator_error_propagates_with_the_partial_accounting(error, caplog):
    cs, labels = make_case(30, seed=1)
    comp = Failing(SimulatedComparator(labels), error, fail_at=2)
    with caplog.at_level(logging.WARNING, logger="activeprp"), pytest.raises(type(error)) as info:
        rerank("q", cs, comparator=comp, budget=None)
    spent = info.value.accounting
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("activeprp")]
    assert warnings == ([f"rerank of 30 candidates failed after {spent.calls} calls: ComparatorAuthError: bad key "
                         "(HTTP 401)"] if isinstance(error, ComparatorError) else [])  # a bug is raised, not logged
    # the failing third batch reached no backend: its calls and round are refunded
    assert comp.calls == 3 and spent.rounds == 2 and spent.calls > 0 and spent.failed_calls == 0


def test_on_failure_prior_degrades_reports_and_warns(caplog):
    cs, labels = make_case(30, seed=1)
    comp = Failing(SimulatedComparator(labels), ComparatorUnavailable("endpoint down", status_code=503), fail_at=2)
    full = rerank("q", cs, comparator=SimulatedComparator(labels), budget=None)
    with caplog.at_level(logging.WARNING, logger="activeprp"):
        res = rerank("q", cs, comparator=comp, budget=None, on_failure="prior")
    assert comp.calls == 3  # nothing is sent after the failure
    assert sorted(res.order) == list(range(30)) and not res.converged and not res.exhausted
    assert res.failure == "ComparatorUnavailable: endpoint down (HTTP 503)" and res.errors == [res.failure]
    assert res.failed_calls == 0 and 0 < res.calls < full.calls and res.rounds == 2  # the third batch never went out
    assert res.stats()["failure"] == res.failure
    (record,) = [r for r in caplog.records if r.name.startswith("activeprp")]
    assert record.levelno == logging.WARNING and "degraded" in record.getMessage()


def test_on_failure_prior_does_not_swallow_bugs():
    cs, labels = make_case(10, seed=1)
    with pytest.raises(KeyError):
        rerank("q", cs, comparator=Failing(SimulatedComparator(labels), KeyError("bug")), budget=None,
               on_failure="prior")


def test_bad_on_failure():
    with pytest.raises(ValueError, match="on_failure"):
        rerank("q", cands(3), comparator=SimulatedComparator({}), budget=None, on_failure="ignore")


class AlwaysNone(Comparator):
    def __init__(self):
        self.batches = []

    def compare(self, query, pairs):
        self.batches.append(len(pairs))
        return [None] * len(pairs)


@pytest.mark.parametrize("max_concurrency", [None, 2])
def test_circuit_breaker_stops_sending_after_consecutive_failures(max_concurrency):
    comp = AlwaysNone()
    with pytest.raises(ComparatorUnavailable, match="circuit breaker open: 5 calls in a row failed") as info:
        rerank("q", cands(60), comparator=comp, budget=None, top_k=3, max_concurrency=max_concurrency)
    # uncapped: the first round (30 tournament matches) went out as one chunk; capped: chunks of 2 until 5 failed
    assert sum(comp.batches) == (30 if max_concurrency is None else 6)
    spent = info.value.accounting  # exactly the calls that went out, all failed; the rest of the round refunded
    assert spent.failed_calls == spent.calls == sum(comp.batches) and spent.rounds == 1


def test_circuit_breaker_ignores_failures_that_are_not_consecutive():
    class EveryOther(Comparator):
        n = 0

        def compare(self, query, pairs):
            out = []
            for _ in pairs:
                self.n += 1
                out.append(None if self.n % 2 else 1.0)
            return out

    judge = EveryOther()
    res = rerank("q", cands(40), comparator=judge, budget=None, max_concurrency=3, max_consecutive_failures=2)
    # every call went out and every odd-numbered one failed, so the breaker (2 in a row) never opened
    assert res.calls == judge.n > 2 and res.failed_calls == (judge.n + 1) // 2
    assert res.failure is None and sorted(res.order) == list(range(40))


def test_guard_trips_on_a_fatal_error_and_every_later_check_raises_a_copy():
    guard = CallGuard(max_concurrency=4, max_consecutive_failures=None)
    guard.check()
    first = ComparatorAuthError("invalid key", status_code=401)
    guard.trip(first)
    guard.trip(ComparatorError("later"))
    for _ in range(2):
        with pytest.raises(ComparatorAuthError, match="invalid key") as info:
            guard.check()
        assert info.value is not first and info.value.status_code == 401 and info.value.__cause__ is first


def test_comparator_subclass_must_implement_something():
    with pytest.raises(TypeError, match="must implement compare"):
        type("Nothing", (Comparator,), {})()


def test_judge_subclass_keeps_retries_and_tokens_in_async():
    class Judging(Comparator):
        def judge(self, query, pairs, *, guard=None):
            return [Judgment(1.0, retries=1, prompt_tokens=5) for _ in pairs]

    res = asyncio.run(arerank("q", cands(6), comparator=Judging(), budget=None, top_k=2))
    assert res.retries == res.calls == res.prompt_tokens / 5 > 0


def test_async_chunks_hold_the_guard_slots():
    inflight, peak = [0], [0]

    class Slow(Comparator):
        def compare(self, query, pairs):
            raise AssertionError("acompare must be used")

        async def acompare(self, query, pairs):
            inflight[0] += len(pairs)
            peak[0] = max(peak[0], inflight[0])
            await asyncio.sleep(0.001)
            inflight[0] -= len(pairs)
            return [1.0] * len(pairs)

    async def two():
        comp = Slow()
        return await asyncio.gather(*(arerank(f"q{i}", cands(20), comparator=comp, budget=None, max_concurrency=3)
                                      for i in range(2)))

    asyncio.run(two())
    assert peak[0] == 6  # each rerank's own cap of 3, two reranks at once


def test_sync_comparator_in_async_stops_between_chunks_when_cancelled():
    started = []

    class Blocking(Comparator):
        def compare(self, query, pairs):
            started.append(len(pairs))
            import time

            time.sleep(0.05)
            return [1.0] * len(pairs)

    async def cancel_soon():
        task = asyncio.create_task(arerank("q", cands(40), comparator=Blocking(), budget=None, max_concurrency=2))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)  # the chunk in its thread finishes; no further chunk starts

    asyncio.run(cancel_soon())
    assert started == [2]
