"""The comparator base class (activeprp_core/comparators/base.py): what a subclass must implement, the call guard
(circuit breaker, fatal errors, concurrency slots) and the chunks a judge sends, sync and async."""

import asyncio
import copy
import pickle
import threading
import time

import pytest

from activeprp_core import (
    Candidate,
    Comparator,
    ComparatorAuthError,
    ComparatorError,
    ComparatorUnavailable,
    SimulatedComparator,
    arerank,
    rerank,
    rerank_many,
)
from activeprp_core.comparators import CallGuard
from activeprp_core.types import Judgment


def cands(n):
    return [Candidate(f"d{i}", f"text {i}") for i in range(n)]


class AlwaysNone(Comparator):
    def __init__(self):
        self.batches = []

    def compare(self, query, pairs):
        self.batches.append(len(pairs))
        return [None] * len(pairs)


def test_a_shared_breaker_opens_only_on_failed_calls_beyond_one_querys_and_each_query_has_its_own():
    """Review s69c, finding 1: one query's failed calls in a row opened the breaker its queries share. Now that
    query's own breaker stops it (as ``rerank`` of it alone), and the shared one counts only the failures in a row
    beyond those of the query with the most: failures of two queries or more, as a dead endpoint gives."""
    from activeprp_core.comparators.base import RequestGuard

    shared = CallGuard(None, 3)
    bad, good, other = (RequestGuard(shared, None, key, time.monotonic) for key in ("bad", "good", "other"))
    for _ in range(4):
        bad.record(False, "HTTP 500")
    with pytest.raises(ComparatorUnavailable, match="3 calls in a row failed .last") as own:
        bad.check()  # its own breaker: open after its third
    assert (own.value.breaker, own.value.in_a_row) == ("own", 3)
    good.check()  # the others go on
    assert shared.error is None and bad.error is None
    good.record(False, "HTTP 500")
    other.record(False, "HTTP 500")
    assert shared.error is None  # 6 in a row, 2 beyond bad's 4
    good.record(True)  # an answer starts the shared count afresh (not bad's own)
    third = RequestGuard(shared, None, "third", time.monotonic)
    for guard in (good, other, third, good):
        guard.record(False, "HTTP 500")
    assert shared.error is None  # 4 in a row, 2 beyond good's
    other.record(False, "no answer")
    assert shared.error is not None  # 5 in a row, 3 beyond good's: the endpoint fails everyone's calls
    with pytest.raises(ComparatorUnavailable, match="5 calls in a row failed across queries .last: no answer") \
            as stopped:
        third.check()
    assert (stopped.value.breaker, stopped.value.in_a_row) == ("shared", 5)
    assert pickle.loads(pickle.dumps(stopped.value)).breaker == "shared"  # Ray moves errors between processes
    lone = CallGuard(None, 3)  # a rerank's own guard (its calls recorded with no key): 3 in a row open it
    for _ in range(3):
        lone.record(False, "HTTP 500")
    assert (lone.error.breaker, lone.error.in_a_row) == ("own", 3)
    assert "across" not in lone.error.message


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


class DeadJudge(Comparator):
    """A subclass implementing ``judge`` (without the guard keyword): every call fails, each takes ``delay`` s."""

    def __init__(self, delay=0.0):
        self.delay, self.sent = delay, 0

    def judge(self, query, pairs):
        self.sent += len(pairs)
        time.sleep(self.delay * len(pairs))
        return [Judgment(None, error="503") for _ in pairs]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_judge_subclass_gets_the_guard_in_sync_and_async(use_async):
    """The engine calls a subclass's ``judge`` inside the base class's guarded loop: the circuit breaker stops a
    dead judge after 5 calls and a deadline stops a slow one, whichever driver runs it."""
    run = (lambda **kw: asyncio.run(arerank(**kw))) if use_async else (lambda **kw: rerank(**kw))
    dead = DeadJudge()
    res = run(query="q", candidates=cands(20), comparator=dead, budget=60, ranker="bubblesort", top_k=3,
              on_failure="prior", max_concurrency=2)
    assert res.failure.startswith("ComparatorUnavailable: circuit breaker open") and res.calls == dead.sent <= 6
    slow = DeadJudge(delay=0.05)
    res = run(query="q", candidates=cands(10), comparator=slow, budget=None, ranker="allpairs", oracle="single",
              top_k=3, time_budget=0.3, max_concurrency=2, max_consecutive_failures=None, on_failure="prior")
    assert res.exhausted_by == ["time_budget"] and res.calls <= 8 and sorted(res.order) == list(range(10))


def test_a_subclass_ajudge_is_its_native_async_path_chunk_by_chunk():
    class Native(Comparator):
        def __init__(self):
            self.sync, self.chunks = 0, []

        def judge(self, query, pairs):
            self.sync += len(pairs)
            return [Judgment(1.0) for _ in pairs]

        async def ajudge(self, query, pairs):
            self.chunks.append(len(pairs))
            return [Judgment(1.0, prompt_tokens=3) for _ in pairs]

    judge = Native()
    res = asyncio.run(arerank("q", cands(10), comparator=judge, budget=None, top_k=3, max_concurrency=4))
    assert judge.sync == 0 and sum(judge.chunks) == res.calls == res.prompt_tokens / 3 > 0
    assert max(judge.chunks) <= 4  # the base class's loop sends it chunks of max_concurrency


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


class Park:
    """Keeps each call inside the judge (``hold``) until ``gate`` is set, counting the calls inside at once
    (``inside``, ``peak``; ``cond`` is notified on each entry)."""

    def __init__(self):
        self.cond, self.gate, self.inside, self.peak = threading.Condition(), threading.Event(), 0, 0

    def hold(self, calls=1):
        with self.cond:
            self.inside += calls
            self.peak = max(self.peak, self.inside)
            self.cond.notify_all()
        self.gate.wait(30)  # the test sets it; 30 s only ends a hung test
        with self.cond:
            self.inside -= calls


class Parked(Comparator):
    """A compare-only judge whose calls wait in its ``park``."""

    def __init__(self):
        self.park = Park()

    def compare(self, query, pairs):
        self.park.hold(len(pairs))
        return [0.5] * len(pairs)


def settled(cond, arrived, total, within=30.0):
    """Wait (under ``cond``, re-checked as calls enter and every 10 ms) until ``arrived()`` reaches ``total``: every
    call is inside the judge, queued for a slot, or failed. A hang guard, not a timing assertion."""
    end = time.monotonic() + within
    with cond:
        while arrived() < total:
            assert time.monotonic() < end, f"only {arrived()} of {total} calls arrived"
            cond.wait(0.01)


def on_both_paths(judge, guards, slots, threads, tasks, sync=Comparator.judge, asyn=Comparator.ajudge):
    """``threads`` calls of ``sync`` (default: the base class's sync path) in threads and ``tasks`` of ``asyn`` on
    one event loop (in its own thread) at once, one pair each, the guard of each from ``guards()``. Once every call
    is inside the judge (``judge.park``) or queued for one of ``slots`` (a ``FairSlots``), the park's gate opens.
    Returns the calls inside the judge then, and the errors the calls raised."""
    park, pair, errors = judge.park, [(Candidate("a", "x"), Candidate("b", "y"))], []

    def one_sync_call():
        try:
            sync(judge, "q", pair, guard=guards())
        except Exception as error:  # noqa: BLE001 - reported to the test
            errors.append(error)
            with park.cond:
                park.cond.notify_all()

    async def tasks_on_a_loop():
        outcomes = await asyncio.gather(*(asyn(judge, "q", pair, guard=guards()) for _ in range(tasks)),
                                        return_exceptions=True)
        errors.extend(o for o in outcomes if isinstance(o, BaseException))

    workers = [threading.Thread(target=one_sync_call) for _ in range(threads)]
    workers.append(threading.Thread(target=asyncio.run, args=(tasks_on_a_loop(),)))
    for w in workers:
        w.start()
    try:
        settled(park.cond, lambda: park.inside + slots.waiting + len(errors), threads + tasks)
        inside = park.inside
    finally:
        park.gate.set()
        for w in workers:
            w.join(30)
    return inside, errors


@pytest.mark.parametrize("threads, tasks", [(2, 2), (3, 1), (1, 3)])
def test_one_guard_caps_judge_in_threads_and_ajudge_on_a_loop_together(threads, tasks):
    """The sync path's slots and the async path's were two counts: one guard used by ``judge`` in threads and
    ``ajudge`` on a loop at once had 2 x ``max_concurrency`` calls in flight (measured: 4 with a cap of 2)."""
    judge, guard = Parked(), CallGuard(max_concurrency=2)
    inside, errors = on_both_paths(judge, lambda: guard, guard.fair_slots, threads, tasks)
    assert not errors
    assert inside == judge.park.peak == 2
    assert guard.fair_slots.free == 2 and guard.fair_slots.waiting == 0


def test_a_request_guard_s_slots_are_held_by_threads_and_tasks_in_one_count():
    """A ``RerankPool`` request's guard (a ``RequestGuard`` on the pool's ``FairSlots``) raised RuntimeError when
    a comparator ran ``Comparator.judge`` in a thread under it ("waited for by tasks"); now its threads wait in
    the same queue as the tasks, under the one cap."""
    from itertools import count

    from activeprp_core.comparators.base import RequestGuard
    from activeprp_core.slots import FairSlots

    judge, shared, keys = Parked(), CallGuard(max_concurrency=2), count()
    pool_slots = FairSlots(2)
    inside, errors = on_both_paths(judge, lambda: RequestGuard(shared, pool_slots, next(keys), time.monotonic),
                                   pool_slots, 2, 2)
    assert not errors
    assert inside == judge.park.peak == 2 and pool_slots.free == 2


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


class Slotted(Comparator):
    __slots__ = ("weight",)

    def __init__(self, weight):
        self.weight = weight

    def compare(self, query, pairs):
        return [self.weight] * len(pairs)


class OwnReduce(Comparator):
    """A user's comparator holding a lock, which its own ``__reduce__`` leaves out of copies and pickles."""

    def __init__(self, weight):
        self.weight, self.lock = weight, threading.Lock()

    def __reduce__(self):
        return OwnReduce, (self.weight,)

    def compare(self, query, pairs):
        return [self.weight] * len(pairs)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_user_comparator_keeps_python_s_own_copies_and_pickles(how):
    """The copy machinery of the comparators holding process state (``FreshState``) stays theirs: on the
    ``Comparator`` base it copied only ``__dict__``, losing a slotted subclass's values and ignoring a user's
    ``__reduce__`` (its lock then refused a deep copy)."""
    copier = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": lambda c: pickle.loads(pickle.dumps(c))}[how]
    slotted, own = Slotted(0.7), OwnReduce(0.3)
    assert copier(slotted).weight == 0.7
    copied = copier(own)
    assert copied.weight == 0.3 and copied.lock is not own.lock


class SyncOwnBatch(Comparator):
    """Overrides ``judge_batch`` only (its ``ajudge_batch`` is the base class's, which records each call)."""

    max_batch_size = 8

    def compare(self, query, pairs):
        raise RuntimeError("boom")

    def judge_batch(self, items, *, guard=None):
        for _ in range(self.records):
            guard.record(False, "answered badly")
        raise RuntimeError("boom")


class GuardsOwnBatch(SyncOwnBatch):
    guards_calls = True  # it records every call that reached the backend: none here


@pytest.mark.parametrize("comparator, records, asynchronous, recorded", [
    (SyncOwnBatch, 0, False, 5),  # its own method recorded nothing: all 5 were handed to it
    (SyncOwnBatch, 2, False, 2),  # it records: its count is kept
    (GuardsOwnBatch, 0, False, 0),  # it guards its calls: none reached the backend
    (SyncOwnBatch, 0, True, 0),  # ajudge_batch is the base class's: its chunk loop records what it sends
])
def test_a_merged_batch_call_that_raises_counts_as_sent_unless_the_comparator_records_its_calls(
        comparator, records, asynchronous, recorded):
    from activeprp_core.comparators.base import spent_if_raises

    judge, guard = comparator(), CallGuard(None, max_consecutive_failures=3)
    judge.records = records
    with pytest.raises(RuntimeError, match="boom"), spent_if_raises(judge, guard, 5, asynchronous):
        judge.judge_batch([], guard=guard)
    assert guard.completed == recorded and guard.error is None  # outcome unknown: the breaker's streak unchanged


class _DuckJudge:
    def compare(self, query, pairs):
        return [0.5] * len(pairs)


@pytest.mark.parametrize("kind", [SimulatedComparator, _DuckJudge])
@pytest.mark.parametrize("entry", ["rerank", "arerank", "rerank_many"])
def test_a_comparator_class_instead_of_an_instance_is_refused_before_any_call(kind, entry):
    """``comparator=OpenAIChatComparator`` (no parentheses) passed the check (a class has a callable ``compare``)
    and failed mid-rerank with "judge() missing 1 required positional argument", a failed call billed."""
    from activeprp_core.comparators.base import as_comparator

    said = rf"^comparator must be an instance, got the class {kind.__name__} \(call it: {kind.__name__}\(\.\.\.\)\)$"
    with pytest.raises(TypeError, match=said) as info:
        if entry == "rerank":
            rerank("q", cands(3), comparator=kind, budget=4)
        elif entry == "arerank":
            asyncio.run(arerank("q", cands(3), comparator=kind, budget=4))
        else:
            list(rerank_many([("q", cands(3))], comparator=kind, budget=4))
    assert getattr(info.value, "accounting", None) is None  # raised before the rerank: nothing spent
    with pytest.raises(TypeError, match=said):
        as_comparator(kind)


class DuckWithEstimate:
    """A judge that is no ``Comparator`` subclass, with a long prompt of its own and an honest bound of it."""

    def estimate_tokens(self, query, pairs):
        return [901] * len(pairs)

    def judge(self, query, pairs):
        return [Judgment(float(a.id < b.id), prompt_tokens=900, completion_tokens=1) for a, b in pairs]

    def compare(self, query, pairs):
        return [j.prob for j in self.judge(query, pairs)]


@pytest.mark.parametrize("entry", ["rerank", "arerank"])
def test_a_duck_typed_judges_estimate_tokens_prices_its_prompts(entry):
    """The wrapper of a duck-typed judge forwarded compare/judge but not estimate_tokens: the engine priced its
    prompts at the base class's bound (235 tokens, not its 901) and token_budget=2000 ended with 7208 tokens
    reported. A judge without one still gets the base class's bound."""
    from activeprp_core.comparators.base import as_comparator

    pair = [(cands(2)[0], cands(2)[1])]
    assert as_comparator(DuckWithEstimate()).estimate_tokens("q", pair) == [901]
    plain = type("Plain", (), {"compare": lambda self, q, pairs: [0.5] * len(pairs)})()
    assert as_comparator(plain).estimate_tokens("q", pair) == Comparator.estimate_tokens("q", pair)
    kw = dict(comparator=DuckWithEstimate(), budget=50, token_budget=2000, ranker="allpairs")
    res = rerank("q", cands(10), **kw) if entry == "rerank" else asyncio.run(arerank("q", cands(10), **kw))
    assert res.calls == 2 and res.prompt_tokens + res.completion_tokens == 1802 <= 2000
    assert res.exhausted_by == ["token_budget"]


class _Raises(Comparator):
    def __init__(self, error):
        self.error = error

    def compare(self, query, pairs):
        raise self.error


class _ARaises(_Raises):
    async def acompare(self, query, pairs):
        raise self.error


class _DuckRaises:
    def __init__(self, error):
        self.error = error

    def compare(self, query, pairs):
        raise self.error


@pytest.mark.parametrize("judge", [_Raises, _ARaises, _DuckRaises])
@pytest.mark.parametrize(("mode", "time_budget"), [("sync", None), ("sync", 60.0), ("async", None), ("async", 60.0)])
def test_a_comparator_raising_stopiteration_is_named_alike_on_both_paths(judge, mode, time_budget):
    """A comparator's ``compare`` raising StopIteration (canned answers run out) reached the sync ``rerank`` as
    Python's bare ``RuntimeError: coroutine raised StopIteration`` (the chunk loop runs coroutines by hand), the async
    one as a RuntimeError naming it; now both name it, its cause kept, with the accounting a ValueError gets."""
    def run(error):
        kw = dict(comparator=judge(error), budget=10, time_budget=time_budget)
        with pytest.raises(Exception) as info:
            rerank("q", cands(5), **kw) if mode == "sync" else asyncio.run(arerank("q", cands(5), **kw))
        return info.value

    stopped, valued = run(StopIteration("no answer left")), run(ValueError("no answer left"))
    assert type(stopped) is RuntimeError and str(stopped) == "the comparator raised StopIteration('no answer left')"
    assert isinstance(stopped.__cause__, StopIteration) and stopped.__cause__.args == ("no answer left",)
    assert stopped.accounting.calls == valued.accounting.calls > 0
