"""rerank_many / arerank_many: identical per-query results, merged batches, streaming, isolation, dead endpoints."""

import asyncio
import collections

import pytest

from activeprp_core import (
    Candidate,
    Comparator,
    ComparatorAuthError,
    ComparatorError,
    ComparatorRequestError,
    ComparatorUnavailable,
    RerankFailure,
    RerankResult,
    SimulatedComparator,
    arerank_many,
    rerank,
    rerank_many,
)
from activeprp_core.oracles import ORACLES
from activeprp_core.rankers import RANKERS
from activeprp_core.stream import arerank_stream
from tests.conftest import make_case

KNOBS = {"doc_noise": 0.4, "pair_noise": 0.6, "position_bias": 0.3, "seed": 2}


def requests(count=9, seed=0):
    """Queries of different sizes (0..45 candidates) whose labels the comparator finds by candidate id."""
    out, labels = [], {}
    for q in range(count):
        cands, lab = make_case((q * 7) % 46, seed=seed + q)
        cands = [Candidate(f"q{q}{c.id}", c.text, c.metadata) for c in cands]
        labels.update({f"q{q}{d}": v for d, v in lab.items()})
        out.append((f"query {q}", cands))
    return out, labels


class Merging(SimulatedComparator):
    """A comparator that batches across queries: records what each judge_batch call held."""

    max_batch_size = 16

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches = []

    def judge_batch(self, items, *, guard=None):
        self.batches.append([q for q, _, _ in items])
        return self.judge_many(items)

    async def ajudge_batch(self, items, *, guard=None):
        self.batches.append([q for q, _, _ in items])
        await asyncio.sleep(0)
        return self.judge_many(items)

    def judge_many(self, items):
        return [p for q, a, b in items for p in self.compare(q, [(a, b)])]


@pytest.mark.parametrize("ranker", sorted(RANKERS))
@pytest.mark.parametrize("oracle", sorted(ORACLES))
def test_each_result_equals_rerank_of_that_query_alone(ranker, oracle):
    reqs, labels = requests()
    kw = dict(ranker=ranker, oracle=oracle, budget=60, top_k=5, seed=7, max_rounds=12)
    solo = [rerank(q, c, comparator=SimulatedComparator(labels, **KNOBS), **kw) for q, c in reqs]
    merged = Merging(labels, **KNOBS)
    many = list(rerank_many(reqs, comparator=merged, max_active=4, **kw))
    amany = asyncio.run(_collect(arerank_many(reqs, comparator=Merging(labels, **KNOBS), **kw)))
    if oracle == "adaptive":  # its re-asks read the judge's earlier answers: the same window agrees, solo differs
        solo = list(rerank_many(reqs, comparator=Merging(labels, **KNOBS), **kw))
        merged = Merging(labels, **KNOBS)
        many = list(rerank_many(reqs, comparator=merged, **kw))
    for out in (many, amany):
        assert [type(r) for r in out] == [RerankResult] * len(reqs)
        assert [(r.order, r.calls, r.rounds, r.cache_hits) for r in out] == [
            (r.order, r.calls, r.rounds, r.cache_hits) for r in solo]
        assert all(r.calls <= 60 and r.rounds <= 12 for r in out)
    assert sum(map(len, merged.batches)) == sum(r.calls for r in solo)


async def _collect(aiter):
    return [r async for r in aiter]


def test_prompts_of_many_queries_share_a_call_and_steps_follow_the_slowest_query():
    reqs, labels = requests(12)
    comp = Merging(labels)
    out = list(rerank_many(reqs, comparator=comp, ranker="mohajer", budget=None, top_k=5))
    assert max(len(set(b)) for b in comp.batches) > 6  # one call held the prompts of many queries
    assert len(comp.batches) == max(r.rounds for r in out)  # one call per step, not per query round
    assert sum(r.rounds for r in out) > 3 * len(comp.batches)


def test_input_is_streamed_and_results_come_in_input_order():
    reqs, labels = requests(20)
    pulled = []

    def stream():
        for i, r in enumerate(reqs):
            pulled.append(i)
            yield r

    results = rerank_many(stream(), comparator=SimulatedComparator(labels), budget=30, top_k=3, max_active=3)
    first = next(results)
    assert len(pulled) <= 4  # at most max_active in progress (+ the one read to find the end of a window)
    rest = list(results)
    assert [r.order for r in [first, *rest]] == [
        rerank(q, c, comparator=SimulatedComparator(labels), budget=30, top_k=3).order for q, c in reqs]


class FailsFor(Comparator):
    """Raises ``error`` for the prompts of one query (any call that holds them) once it has answered ``after`` of
    its batches, else simulates; ``sent`` / ``answered`` count the calls that reached it / were answered, per
    query."""

    def __init__(self, labels, query, error, after=0):
        self.inner, self.query, self.error, self.after = SimulatedComparator(labels), query, error, after
        self.sent, self.answered, self.batches = collections.Counter(), collections.Counter(), collections.Counter()

    def compare(self, query, pairs):
        self.sent[query] += len(pairs)
        self.batches[query] += 1
        if query == self.query and self.batches[query] > self.after:
            raise self.error
        self.answered[query] += len(pairs)
        return self.inner.compare(query, pairs)


@pytest.mark.parametrize("use_async", [False, True])
def test_a_failing_query_is_isolated_and_the_others_finish(use_async):
    reqs, labels = requests(8)
    error = ComparatorRequestError("prompt too long", status_code=400)
    comp = FailsFor(labels, "query 3", error)
    bad = [*reqs, "not a pair"]
    kw = dict(comparator=comp, ranker="mohajer", budget=40, top_k=3)
    out = asyncio.run(_collect(arerank_many(bad, **kw))) if use_async else list(rerank_many(bad, **kw))
    assert isinstance(out[3], RerankFailure) and out[3].index == 3 and out[3].query == "query 3"
    # its first batch was handed to the comparator, which raised: spent, failed (the error said 0 calls)
    spent = out[3].error.accounting
    assert out[3].error is error and spent.calls == spent.failed_calls == comp.sent["query 3"] > 0
    assert isinstance(out[-1], RerankFailure) and out[-1].query is None and isinstance(out[-1].error, TypeError)
    for i, (q, c) in enumerate(reqs):
        if i != 3:
            assert out[i].order == rerank(q, c, comparator=SimulatedComparator(labels), budget=40, top_k=3,
                                          ranker="mohajer").order


@pytest.mark.parametrize("carry_judge", [False, True])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_query_that_fails_midway_costs_the_others_no_call_twice(use_async, carry_judge):
    """Each query's calls go out on their own: the others' answers in the same step are kept, not asked again, so
    the backend gets at most each query's budget."""
    reqs, labels = requests(6)
    comp = FailsFor(labels, "query 5", ComparatorRequestError("prompt too long", status_code=400), after=2)
    kw = dict(comparator=comp, ranker="mohajer", budget=40, top_k=3, carry_judge=carry_judge)
    out = asyncio.run(_collect(arerank_many(reqs, **kw))) if use_async else list(rerank_many(reqs, **kw))
    assert isinstance(out[5], RerankFailure) and comp.batches["query 5"] == 3  # its third round raised
    spent = out[5].error.accounting  # the raising batch counts as spent (it said the answered calls only)
    assert 0 < comp.answered["query 5"] < spent.calls == comp.sent["query 5"]
    assert spent.failed_calls == comp.sent["query 5"] - comp.answered["query 5"] and spent.rounds == 3
    assert [comp.sent[q] for q, _ in reqs[:5]] == [r.calls for r in out[:5]] and max(comp.sent.values()) <= 40
    assert [r.order for r in out[:5]] == [rerank(q, c, comparator=SimulatedComparator(labels), budget=40, top_k=3,
                                                 ranker="mohajer").order for q, c in reqs[:5]]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_request_may_be_a_list_as_json_gives_it_and_bad_own_settings_name_what_they_got(use_async):
    reqs, labels = requests(2)
    listed = [list(reqs[0]), [*reqs[1], {"budget": 7}], [*reqs[1], ["budget"]], [*reqs[1], {"budjet": 3}], ["q"]]
    kw = dict(comparator=SimulatedComparator(labels), ranker="mohajer", budget=40, top_k=3)
    out = asyncio.run(_collect(arerank_many(listed, **kw))) if use_async else list(rerank_many(listed, **kw))
    fresh = {**kw, "comparator": SimulatedComparator(labels)}
    tupled = list(rerank_many([reqs[0], (*reqs[1], {"budget": 7})], **fresh))
    assert [o.order for o in out[:2]] == [o.order for o in tupled] and out[1].calls == 7
    assert [type(o.error).__name__ for o in out[2:]] == ["TypeError"] * 3
    assert "got list" in str(out[2].error) and "got ['budjet']" in str(out[3].error)
    assert "got list of 1 items" in str(out[4].error) and out[4].query == "q"


class Dead(Comparator):
    def __init__(self, error=None):
        self.error, self.calls = error, 0

    def compare(self, query, pairs):
        self.calls += len(pairs)
        if self.error:
            raise self.error
        return [None] * len(pairs)


@pytest.mark.parametrize("use_async, carry_judge", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("error", [ComparatorAuthError("invalid key", status_code=401), None])
def test_a_dead_endpoint_stops_everything(use_async, carry_judge, error):
    reqs, labels = requests(30)
    dead = Dead(error)
    kw = dict(comparator=dead, budget=40, top_k=3, max_concurrency=4, carry_judge=carry_judge)
    expected = ComparatorAuthError if dead.error else ComparatorUnavailable
    with pytest.raises(expected) as info:
        if use_async:
            asyncio.run(_collect(arerank_many(reqs, **kw)))
        else:
            list(rerank_many(reqs, **kw))
    # a query's own breaker lets it send 5 failed calls (8, its chunk of 4 out), the shared one 5 more of others'
    assert dead.calls <= (8 if error else 2 * 8)
    spent = info.value.accounting  # what had been spent when it stopped: no more than was sent, none answered
    assert spent.failed_calls == spent.calls <= dead.calls  # a batch the comparator raised on counts as spent


async def _feed(reqs):
    for request in reqs:
        yield request


@pytest.mark.parametrize("run", ["rerank_many", "arerank_many", "arerank_stream"])
@pytest.mark.parametrize("max_active", [1, 8])
def test_a_dead_endpoint_raises_the_shared_breakers_error_saying_so(run, max_active):
    """Review s69g finding 4: the error that stopped every query was the first one raised, which could be a query's
    own breaker's ("5 calls in a row failed", N its own) when the shared one was open too (10 sent, all failed).
    Now it is the shared breaker's: ``breaker`` "shared", N (``in_a_row``) every query's failed calls in a row."""
    reqs, _ = requests(12)
    dead = Dead()
    kw = dict(comparator=dead, budget=40, top_k=3, max_concurrency=1, max_active=max_active)
    with pytest.raises(ComparatorUnavailable) as info:
        if run == "rerank_many":
            list(rerank_many(reqs, **kw))
        else:
            many = arerank_many(reqs, **kw) if run == "arerank_many" else arerank_stream(_feed(reqs), **kw)
            asyncio.run(_collect(many))
    error = info.value
    assert error.breaker == "shared" and error.in_a_row == dead.calls  # every call sent failed, in a row
    assert f"circuit breaker open: {dead.calls} calls in a row failed across queries" in error.message


class RefusedLater(Comparator):
    """Refuses query "q"'s third batch (a 401) and raises a ``ComparatorRequestError`` for query "r"'s first (with
    ``r_fails``); else answers. ``sent``: the calls that reached it, per query."""

    def __init__(self, r_fails):
        self.r_fails, self.sent, self.batches = r_fails, collections.Counter(), collections.Counter()

    def compare(self, query, pairs):
        self.sent[query] += len(pairs)
        self.batches[query] += 1
        if query == "q" and self.batches[query] == 3:
            raise ComparatorAuthError("invalid key", status_code=401)
        if query == "r" and self.r_fails:
            raise ComparatorRequestError("prompt too long", status_code=400)
        return [float(a.id > b.id) for a, b in pairs]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("r_fails", [True, False])
def test_a_refusal_bills_the_queries_that_finished_or_failed_but_were_not_yielded(use_async, r_fails):
    """Review s67h finding 3: query "r" failed (or finished) while "q", before it, went on; then q's 401 stopped
    everything, and its accounting summed only the queries in progress: r's calls were in no accounting (r is
    never yielded). Now it sums every query not yet yielded."""
    cands = [Candidate(f"d{i}", f"p {i}") for i in range(8)]
    reqs = [("q", cands), ("r", cands[:2])]
    comp = RefusedLater(r_fails)
    kw = dict(comparator=comp, ranker="mohajer", budget=40, top_k=3, carry_judge=False)
    with pytest.raises(ComparatorAuthError) as info:
        asyncio.run(_collect(arerank_many(reqs, **kw))) if use_async else list(rerank_many(reqs, **kw))
    assert comp.batches["q"] == 3 and comp.sent["r"] > 0
    assert info.value.accounting.calls == comp.sent["q"] + comp.sent["r"]


@pytest.mark.parametrize("use_async, carry_judge", [(False, True), (True, True), (True, False)])
def test_an_input_that_raises_midway_raises_as_itself_billing_the_queries_not_yet_yielded(use_async, carry_judge):
    """Review s68f finding 2: the requests iterable (a DB cursor, a file) raised while queries were in progress (or
    finished behind an earlier one): its error came out with no ``accounting``, and their calls, sent, were billed
    nowhere (10 of 28). Now it comes out as itself, with ``accounting`` as a dead endpoint's: with the results
    yielded before, every call sent is billed."""
    cands = [Candidate(f"d{i}", f"p {i}") for i in range(8)]
    comp = RefusedLater(r_fails=False)  # answers every query ("q" and "r" are not asked)

    def source():
        for k in range(6):
            if k == 3:
                raise OSError("input read failed")
            yield (f"query {k}", cands[:4] if k == 0 else cands)

    yielded = []

    async def consume():
        async for item in arerank_many(source(), **kw):
            yielded.append(item)

    kw = dict(comparator=comp, budget=30, max_active=2, carry_judge=carry_judge)
    with pytest.raises(OSError, match="input read failed") as info:
        asyncio.run(consume()) if use_async else yielded.extend(rerank_many(source(), **kw))
    assert all(isinstance(item, RerankResult) for item in yielded) and len(yielded) < 3
    sent = sum(comp.sent.values())
    assert sum(r.calls for r in yielded) < sent  # calls of queries in progress were sent
    assert info.value.accounting.calls + sum(r.calls for r in yielded) == sent


def test_async_queries_that_read_only_their_own_answers_do_not_wait_for_each_other():
    """With ``carry_judge=False`` each query sends its next round once its last one is answered: the slow query's
    first round is answered only after the fast one's second round went out (in steps, a deadlock)."""
    reqs, labels = requests(3)  # 0, 7 and 14 candidates
    slow, fast = reqs[1][0], reqs[2][0]

    class SlowFirst(Comparator):
        def __init__(self):
            self.rounds, self.fast_went_on = collections.Counter(), asyncio.Event()

        def compare(self, query, pairs):
            raise AssertionError("async only")

        async def acompare(self, query, pairs):
            self.rounds[query] += 1
            if self.rounds[fast] >= 2:
                self.fast_went_on.set()
            if query == slow:
                await self.fast_went_on.wait()
            return SimulatedComparator(labels).compare(query, pairs)

    async def run():
        return [r async for r in arerank_many(reqs, comparator=SlowFirst(), carry_judge=False, budget=40, top_k=3)]

    out = asyncio.run(asyncio.wait_for(run(), 10))
    assert [r.order for r in out] == [rerank(q, c, comparator=SimulatedComparator(labels), budget=40,
                                             top_k=3).order for q, c in reqs]


@pytest.mark.parametrize("carry_judge", [False, True])
def test_closing_arerank_many_early_leaves_no_task_of_it_running(carry_judge):
    """``aclose()`` of ``arerank_many`` after its first result left its inner generator open: its queries' tasks
    ran on, and its own close was a task the loop's finalizer scheduled for later. A loop closed then (``rerank-run
    --out -`` on a full stdout) cancelled those tasks, and one of httpx's connects that had not started warned
    "coroutine ... was never awaited"."""
    reqs, labels = requests(4)

    class Slow(Comparator):
        def compare(self, query, pairs):
            raise AssertionError("async only")

        async def acompare(self, query, pairs):
            if query != reqs[0][0]:
                await asyncio.sleep(3600)  # never answered: only cancelled
            return SimulatedComparator(labels).compare(query, pairs)

    async def first_then_close():
        results = arerank_many(reqs, comparator=Slow(), carry_judge=carry_judge, budget=20, max_active=2)
        first = await anext(results)
        await results.aclose()
        return first, asyncio.all_tasks() - {asyncio.current_task()}

    first, left = asyncio.run(first_then_close())
    assert first.order == [] and left == set()  # the first query has no candidates


def test_a_dead_endpoint_with_on_failure_prior_degrades_every_query():
    reqs, labels = requests(10)
    dead = Dead(ComparatorAuthError("invalid key", status_code=401))
    out = list(rerank_many(reqs, comparator=dead, budget=40, top_k=3, on_failure="prior"))
    assert all(isinstance(r, RerankResult) and r.order == list(range(len(r.order))) for r in out)
    assert all(r.failure and "invalid key" in r.failure for r, (_, c) in zip(out, reqs) if len(c) > 1)


class RefusesOne(Comparator):
    """Refuses the key on query ``refused`` (401) and answers the others; counts each query's calls."""

    def __init__(self, refused, max_batch_size=None):
        self.refused, self.max_batch_size, self.calls = refused, max_batch_size, collections.Counter()

    def compare(self, query, pairs):
        self.calls[query] += 1
        if query == self.refused:
            raise ComparatorAuthError("invalid key", status_code=401)
        return [1.0] * len(pairs)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("max_batch_size", [None, 16])
def test_a_refused_key_on_one_query_sends_no_further_call_with_on_failure_prior(use_async, max_batch_size):
    """The first round of every query goes out together; once one query's key is refused no query sends another
    call, and every one degrades. A batching comparator's merged call raising the 401 went on query by query:
    each query was asked again and the others went on ranking."""
    reqs, _ = requests(4)
    judge = RefusesOne(reqs[2][0], max_batch_size)
    kw = dict(comparator=judge, budget=30, top_k=3, on_failure="prior")
    out = asyncio.run(_collect(arerank_many(reqs, **kw))) if use_async else list(rerank_many(reqs, **kw))
    assert max(judge.calls.values()) == 1
    assert all(isinstance(r, RerankResult) and "invalid key" in r.failure for r in out[1:])


def test_bad_shared_arguments_fail_before_any_request_is_read():
    def never():
        raise AssertionError("read")
        yield

    with pytest.raises(ValueError, match="budget"):
        next(rerank_many(never(), comparator=SimulatedComparator({}), budget=-1))
    with pytest.raises(ValueError, match="max_active"):
        next(rerank_many(never(), comparator=SimulatedComparator({}), budget=1, max_active=0))



@pytest.mark.parametrize("requests, got", [("abc", "got str"), (None, "got NoneType"), (b"ab", "got bytes"),
                                           (("q", [Candidate(id="a", text="x")]), "got one pair"),
                                           ({"q": [Candidate(id="a", text="x")]}, "got a dict: pass its .items()")])
def test_requests_that_are_not_an_iterable_of_pairs_are_a_type_error(requests, got):
    with pytest.raises(TypeError, match=f"requests must be an iterable of \\(query, candidates\\) pairs, {got}"):
        next(rerank_many(requests, comparator=SimulatedComparator({}), budget=5))
    with pytest.raises(TypeError, match=got):
        asyncio.run(_collect(arerank_many(requests, comparator=SimulatedComparator({}), budget=5)))

def test_an_async_iterable_of_requests_is_a_type_error_that_names_arerank_stream():
    """Review s68f: ``arerank_many`` refused an async generator with "got async_generator" only; the async entry
    that takes one is ``arerank_stream``."""
    async def requests():
        yield ("q", [Candidate(id="a", text="x")])

    async def refused():
        source = requests()
        with pytest.raises(TypeError, match="got async_generator: for an async iterable use "
                                            "activeprp_core.stream.arerank_stream"):
            await _collect(arerank_many(source, comparator=SimulatedComparator({}), budget=5))
        with pytest.raises(TypeError, match="arerank_stream"):
            next(rerank_many(source, comparator=SimulatedComparator({}), budget=5))

    asyncio.run(refused())


@pytest.mark.parametrize("flag", ["carry_judge", "progress"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_carry_judge_and_progress_are_bools_as_cache_is(flag, value):
    """``carry_judge="no"`` left the running record on (any truthy value was taken); ``cache`` refused it."""
    cs = [Candidate(id="a", text="x"), Candidate(id="b", text="y")]
    with pytest.raises(TypeError, match=f"{flag} must be a bool, got {type(value).__name__}"):
        next(rerank_many([("q", cs)], comparator=SimulatedComparator({}), budget=2, **{flag: value}))
    with pytest.raises(TypeError, match=f"{flag} must be a bool"):
        asyncio.run(_collect(arerank_many([("q", cs)], comparator=SimulatedComparator({}), budget=2, **{flag: value})))


def test_a_failure_says_why_in_one_line():
    failure = RerankFailure(2, "q", ComparatorRequestError("prompt too long", status_code=400))
    assert failure.reason.startswith("ComparatorRequestError: prompt too long")


def test_one_settings_object_serves_every_entry_point_and_options_replace_its_fields():
    from activeprp_core import RerankSettings, arerank

    cs, labels = make_case(30, seed=2)
    settings = RerankSettings(ranker="quicksort", oracle="bidirectional", budget=40, top_k=5, seed=3)
    alone = rerank("q", cs, settings, comparator=SimulatedComparator(labels))
    assert (alone.ranker, alone.oracle, alone.budget, alone.top_k) == ("quicksort", "bidirectional", 40, 5)
    (many,) = list(rerank_many([("q", cs)], settings, comparator=SimulatedComparator(labels)))
    (amany,) = asyncio.run(_collect(arerank_many([("q", cs)], settings, comparator=SimulatedComparator(labels))))
    async_one = asyncio.run(arerank("q", cs, settings, comparator=SimulatedComparator(labels)))
    for other in (many, amany, async_one):
        assert (other.order, other.calls, other.rounds) == (alone.order, alone.calls, alone.rounds)
    cut = rerank("q", cs, settings, comparator=SimulatedComparator(labels), budget=5)  # a field replaced
    assert cut.budget == 5 and cut.calls <= 5 and settings.budget == 40


def test_bad_settings_object_fails_before_any_request_is_read():
    def never():
        raise AssertionError("read")
        yield

    with pytest.raises(TypeError, match="RerankSettings"):
        next(rerank_many(never(), {"budget": 3}, comparator=SimulatedComparator({})))
    with pytest.raises(TypeError, match="token_budget"):
        next(rerank_many(never(), comparator=SimulatedComparator({}), budget=3, token_budget=2.5))


async def _collect(agen):
    return [item async for item in agen]


class PricesOneWrong(SimulatedComparator):
    """Simulates; prices the prompts of query ``bad`` with one estimate too many once some of its calls were
    answered; ``answered`` counts each query's calls."""

    def __init__(self, labels, bad):
        super().__init__(labels)
        self.bad, self.answered = bad, collections.Counter()

    def compare(self, query, pairs):
        self.answered[query] += len(pairs)
        return super().compare(query, pairs)

    def estimate_tokens(self, query, pairs):
        return [10] * (len(pairs) + (query == self.bad and self.answered[query] > 0))


@pytest.mark.parametrize("use_async", [False, True])
def test_an_estimate_failing_in_a_later_round_fails_or_degrades_its_query_with_no_failed_call(use_async):
    """Its answered calls are no failed calls: the query's error had no accounting, and with on_failure="prior" it
    failed rather than degrading."""
    reqs, labels = requests(4)
    bad = reqs[2][0]
    for on_failure in ("raise", "prior"):
        judge = PricesOneWrong(labels, bad)
        kw = dict(comparator=judge, budget=40, top_k=3, token_budget=10**6, on_failure=on_failure)
        out = asyncio.run(_collect(arerank_many(reqs, **kw))) if use_async else list(rerank_many(reqs, **kw))
        if on_failure == "raise":
            assert isinstance(out[2], RerankFailure) and out[2].reason.startswith("InvalidAnswer: the comparator")
            spent = out[2].error.accounting
        else:
            spent = out[2]
            assert spent.failure.startswith("InvalidAnswer") and sorted(spent.order) == list(range(len(reqs[2][1])))
        assert spent.calls == judge.answered[bad] > 0 and spent.failed_calls == 0
        assert all(isinstance(r, RerankResult) and r.failure is None for i, r in enumerate(out) if i != 2)


class OwnBatches(Comparator):
    """A batching comparator with its own ``judge_batch`` / ``ajudge_batch`` (as a local model has), which record
    nothing on the guard. Counts the prompts each query's calls were handed (``received``); its ``fails_at``-th call
    (1-based), and any call holding a prompt of query ``bad``, raises ``error`` (answers None when it is None);
    ``failed`` holds the sizes of those calls."""

    max_batch_size = 64

    def __init__(self, fails_at=None, bad=None, error=None):
        self.fails_at, self.bad, self.error = fails_at, bad, error
        self.calls, self.received, self.failed, self.batches = 0, collections.Counter(), [], []

    def _answer(self, items):
        self.calls += 1
        self.received.update(q for q, _, _ in items)
        self.batches.append({q for q, _, _ in items})
        if self.calls == self.fails_at or any(q == self.bad for q, _, _ in items):
            self.failed.append(len(items))
            if self.error is None:
                return None
            raise self.error
        return [0.9 if int(a.id[1:]) < int(b.id[1:]) else 0.1 for _, a, b in items]

    def compare(self, query, pairs):  # rerank / arerank: one call per round (no cap on calls in flight)
        return self._answer([(query, a, b) for a, b in pairs])

    def judge_batch(self, items, *, guard=None):
        return self._answer(items)

    async def ajudge_batch(self, items, *, guard=None):
        await asyncio.sleep(0)
        return self._answer(items)


OWN_CANDIDATES = [Candidate(f"d{i}", f"text {i}") for i in range(8)]


def _entry_points():
    """Each entry point run on ``requests``: its outcomes (``RerankResult``, ``RerankFailure`` or the exception
    raised) in input order."""
    from activeprp_core import arerank
    from activeprp_core.stream import arerank_stream

    async def stream(reqs, **kw):
        async def source():
            for r in reqs:
                yield r

        return [o for _, o in sorted([pair async for pair in arerank_stream(source(), **kw)], key=lambda p: p[0])]

    def alone(run):
        def each(reqs, **kw):
            out = []
            for q, c in reqs:
                try:
                    out.append(run(q, c, **kw))
                except Exception as error:
                    out.append(error)
            return out
        return each

    return {
        "rerank": alone(rerank),
        "arerank": alone(lambda q, c, **kw: asyncio.run(arerank(q, c, **kw))),
        "rerank_many": lambda reqs, **kw: list(rerank_many(reqs, **kw)),
        "arerank_many": lambda reqs, **kw: asyncio.run(_collect(arerank_many(reqs, **kw))),
        "arerank_many(carry_judge=False)": lambda reqs, **kw: asyncio.run(_collect(arerank_many(
            reqs, carry_judge=False, **kw))),
        "arerank_stream": lambda reqs, **kw: asyncio.run(asyncio.wait_for(stream(reqs, **kw), 10)),
    }


def _spent(outcome):
    """The accounting of a result, a ``RerankFailure`` or an exception raised."""
    error = outcome.error if isinstance(outcome, RerankFailure) else outcome
    return getattr(error, "accounting", outcome)


class LaterChunkFails(Comparator):
    """Answers the first chunk of a round (the higher id wins), then its second chunk raises a ComparatorError
    (``then="raise"``), answers the wrong shape (``"shape"``) or fails its calls (``"breaker"``: with
    ``max_consecutive_failures=2`` the breaker opens before the third chunk)."""

    def __init__(self, then):
        self.then, self.chunks, self.won = then, [], []

    def compare(self, query, pairs):
        self.chunks.append(len(pairs))
        if len(self.chunks) == 1:
            self.won = [max(a.id, b.id) + ">" + min(a.id, b.id) for a, b in pairs]
            return [float(a.id > b.id) for a, b in pairs]
        if self.then == "raise":
            raise ComparatorError("503 from the judge", status_code=503)
        return [0.5] if self.then == "shape" else [None] * len(pairs)


@pytest.mark.parametrize("entry", ["rerank_many", "arerank_many"])
def test_one_exception_object_raised_for_two_queries_hands_neither_the_other_s_answers(entry):
    """Review s65g, finding 1: the answers of the chunks before a failing one rode on the exception object, so a
    comparator raising one stored error for two queries (or a merged call's error handed to each request) gave query
    A the answers of query B, which raised it last: A came out in B's order. They are kept with the batch they
    answer (``answered_before(error, query, pairs)``); another batch's are not read."""
    from activeprp_core import ComparatorUnavailable

    quota = ComparatorUnavailable("quota exhausted", status_code=429)  # a client that re-raises its last error

    class Judge(Comparator):
        def __init__(self) -> None:
            self.chunks: dict[str, int] = {}

        def compare(self, query, pairs):
            self.chunks[query] = self.chunks.get(query, 0) + 1
            if self.chunks[query] > 1:
                raise quota
            return [float((int(a.id) > int(b.id)) == (query == "A")) for a, b in pairs]

    cands = [Candidate(str(i), f"p{i}") for i in range(4)]
    kw = dict(ranker="allpairs", oracle="single", budget=50, max_concurrency=2, on_failure="prior")
    alone = {q: rerank(q, cands, comparator=Judge(), **kw).order for q in "AB"}
    assert alone["A"] != alone["B"]
    requests = [("A", cands), ("B", cands)]
    if entry == "rerank_many":
        results = list(rerank_many(requests, comparator=Judge(), carry_judge=False, **kw))
    else:
        async def run():
            return [r async for r in arerank_many(requests, comparator=Judge(), **kw)]
        results = asyncio.run(run())
    for query, result in zip("AB", results):
        assert result.order in (alone[query], list(range(4))), (query, result.order)  # its own answers, or none



@pytest.mark.parametrize("on_failure", ["raise", "prior"])
@pytest.mark.parametrize("then", ["raise", "shape", "breaker"])
@pytest.mark.parametrize("entry", sorted(_entry_points()))
def test_a_later_chunk_failing_keeps_the_answers_of_the_chunks_before_it_at_every_entry(entry, then, on_failure):
    """A round of 6 prompts goes out in chunks of 2 (max_concurrency=2); its second chunk fails: only that chunk's
    calls are failed calls (docs/errors.md). The first chunk's answers were counted as failed calls and dropped, so
    with "prior" the order ignored them (the prior order, 0 first, though the judge preferred 1 and 2 to it)."""
    judge = LaterChunkFails(then)
    cands = [Candidate(str(i), f"passage {i}") for i in range(4)]
    kw = dict(comparator=judge, ranker="allpairs", oracle="single", budget=50, max_concurrency=2,
              max_consecutive_failures=2, on_failure=on_failure)
    try:
        (out,) = _entry_points()[entry]([("q", cands)], **kw)
    except ComparatorError as error:  # the breaker open stops a many entry's iterator
        out = error
    spent = _spent(out)
    assert judge.chunks == [2, 2] and (spent.calls, spent.failed_calls, spent.rounds) == (4, 2, 1)
    if on_failure == "raise":
        assert isinstance(getattr(out, "error", out), ComparatorError)
        return
    assert isinstance(out, RerankResult) and out.failure and out.judge.answers == 2
    for pair in judge.won:  # what the judge answered places the winner above the loser
        winner, loser = pair.split(">")
        assert out.order.index(int(winner)) < out.order.index(int(loser))


class RetriedChunks(Comparator):
    """Batches across queries (``max_batch_size``); the first chunk of a round answers (the higher id wins), each
    call after one transport retry (``Judgment.retries``); its second chunk raises ``error``."""

    max_batch_size = 8

    def __init__(self, error):
        self.error, self.chunks = error, 0

    def judge(self, query, pairs, *, guard=None):
        from activeprp_core.types import Judgment

        self.chunks += 1
        if self.chunks > 1:
            raise self.error
        return [Judgment(float(a.id > b.id), retries=1) for a, b in pairs]


@pytest.mark.parametrize("error", [ComparatorError("503 from the judge", status_code=503),
                                   ComparatorAuthError("invalid key", status_code=401)], ids=["503", "401"])
@pytest.mark.parametrize("entry", sorted(_entry_points()))
def test_a_merged_call_that_raises_bills_the_retries_of_its_calls_once(entry, error):
    """A merged call (a comparator that ``batches_queries``) whose second chunk raised billed its calls but none of
    their retries in ``rerank_many`` / ``arerank_many``, alone (a lone query fails) or for everyone (a 401 stops
    them): 4 calls, 0 retries. They are billed now (``CallGuard.retries``), once: the entries that keep the first
    chunk's answers count its retries with them, not again."""
    judge = RetriedChunks(error)
    cands = [Candidate(str(i), f"passage {i}") for i in range(4)]
    try:
        (out,) = _entry_points()[entry]([("q", cands)], comparator=judge, ranker="allpairs", oracle="single",
                                        budget=50, max_concurrency=2)
    except ComparatorError as raised:  # a 401 stops a many entry's iterator
        out = raised
    spent = _spent(out)
    assert judge.chunks == 2 and (spent.calls, spent.retries) == (4, 2)


OWN_KW = dict(budget=40, max_rounds=4, ranker="parallel_mohajer", oracle="single")


@pytest.mark.parametrize("error", [RuntimeError("boom"), None])
@pytest.mark.parametrize("entry", sorted(_entry_points()))
def test_a_batching_comparators_own_batch_call_that_raises_counts_what_it_was_handed_at_every_entry(entry, error):
    """Its second call (the second round: 4 prompts) raises or answers None: every entry point counts the calls the
    comparator received, the failing call's as failed ones (they were refunded as never sent in the many paths)."""
    judge = OwnBatches(fails_at=2, error=error)
    (out,) = _entry_points()[entry]([("q", OWN_CANDIDATES)], comparator=judge, **OWN_KW)
    spent = _spent(out)
    assert not isinstance(out, RerankResult) and judge.calls == 2 and judge.failed == [4]
    assert (spent.calls, spent.failed_calls, spent.rounds) == (judge.received["q"], 4, 2) == (32, 4, 2)


@pytest.mark.parametrize("entry", ["rerank_many", "arerank_many", "RerankPool"])
def test_a_merged_own_batch_call_that_raises_is_asked_again_query_by_query_and_charged_once(entry):
    """A merged call holding the prompts of query "bad" raises: each query is asked again alone; "bad" is charged
    its first round once (it was handed it twice), "good" its calls once (its first round was sent twice). The
    merged call's sending of each is a retry of the call asked again: it was billed nowhere (0 retries)."""
    from activeprp_core import RerankSettings
    from activeprp_core.stream import RerankPool

    async def pool(reqs, comparator, **kw):  # both requests wait for the first merged call together
        rerank_pool = RerankPool(comparator, RerankSettings(**kw))
        try:
            return await asyncio.gather(*(rerank_pool.rerank(q, c) for q, c in reqs), return_exceptions=True)
        finally:
            await rerank_pool.aclose()

    judge = OwnBatches(bad="bad", error=ComparatorRequestError("prompt too long", status_code=400))
    reqs = [("bad", OWN_CANDIDATES), ("good", OWN_CANDIDATES)]
    run = (lambda reqs, **kw: asyncio.run(pool(reqs, **kw))) if entry == "RerankPool" else _entry_points()[entry]
    bad, good = run(reqs, comparator=judge, **OWN_KW)
    assert judge.batches[:3] == [{"bad", "good"}, {"bad"}, {"good"}] and judge.failed == [56, 28]
    assert judge.received["bad"] == 2 * 28
    assert (_spent(bad).calls, _spent(bad).failed_calls, _spent(bad).rounds) == (28, 28, 1)
    assert isinstance(good, RerankResult) and good.failed_calls == 0 and good.calls == judge.received["good"] - 28
    assert _spent(bad).retries == good.retries == 28  # every prompt handed to the judge: a call or a retry


class BatchingSimulated(SimulatedComparator):
    """A comparator that batches across queries and leaves its calls to the base class's guarded chunks (so each
    call asks ``guard.too_late`` of its query)."""

    max_batch_size = 8


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_merged_call_sends_the_calls_of_a_probe_round(monkeypatch, asynchronous):
    """Review 1129ab, finding 2: ``rerank_many``'s merged call (a comparator that ``batches_queries``) read the
    shared record of round latencies, not each query's ``CallFloor``: after a slow spell (rounds of 2.5 s) a query
    with a 2 s time budget on the stale record opened its round as the probe (used up), and the merged call
    refused its calls as too late all the same, so the record never changed. Its calls go out now, and answered,
    they replace the slow rounds. Injected clock: the requests arrive at 1.0 (fresh record: nothing sent), 2.6
    (stale: the probe) and 2.7 s."""
    import activeprp_core.many as many_module
    from activeprp_core.judging import RoundLatency

    now = [0.0]
    slow = RoundLatency(lambda: now[0])
    for _ in range(20):
        slow.record(2.5)
    monkeypatch.setattr(many_module, "clock_now", lambda: lambda: now[0])
    monkeypatch.setattr(many_module, "RoundLatency", lambda clock: slow)
    cands, labels = make_case(8, seed=3)

    def arriving():
        for now[0] in (1.0, 2.6, 2.7):
            yield "q", cands, {"time_budget": 2.0}

    kw = dict(comparator=BatchingSimulated(labels), ranker="mohajer", oracle="single", budget=20, top_k=3,
              max_active=1)
    if asynchronous:
        results = asyncio.run(_collect(arerank_many(arriving(), **kw)))
    else:
        results = list(rerank_many(arriving(), **kw))
    assert [r.calls == 0 for r in results] == [True, False, False]
    assert all(r.cut_calls == 0 for r in results)
    assert slow.fastest() < 2.0


class OutWhenStopped(Comparator):
    """Async only. Query "slow"'s calls stay in flight until cancelled; query "bad" is refused (a 401) once slow's
    first batch is out; query "late" is answered once ``yielded`` is set; any other is answered. ``sent``: the
    calls that reached it, per query."""

    def __init__(self):
        self.sent, self.slow_out, self.yielded = collections.Counter(), asyncio.Event(), asyncio.Event()

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def acompare(self, query, pairs):
        self.sent[query] += len(pairs)
        if query == "slow":
            self.slow_out.set()
            await asyncio.Event().wait()
        if query == "bad":
            await self.slow_out.wait()
            raise ComparatorAuthError("invalid key", status_code=401)
        if query == "late":
            await self.yielded.wait()
        return [float(a.id > b.id) for a, b in pairs]


@pytest.mark.parametrize("stop", ["refusal", "input"])
def test_queries_on_their_own_stopped_by_an_error_bill_the_calls_they_had_in_flight(stop):
    """``arerank_many(carry_judge=False)``: an error that stops every query (a 401, the input raising) cancels the
    other queries' calls in flight; they were sent, but the error's ``accounting`` left them out (review s68h: 1
    billed of 8 sent). Now they are billed, as failed calls: with what was yielded, every call sent is billed."""
    cands = [Candidate(f"d{i}", f"p {i}") for i in range(8)]

    def source():
        if stop == "refusal":
            yield from [("slow", cands), ("bad", cands)]
            return
        yield from [("fast", cands[:3]), ("slow", cands), ("late", cands[:3])]  # read on once "late" finishes
        raise OSError("input read failed")

    comp, yielded = OutWhenStopped(), []

    async def consume():
        async for item in arerank_many(source(), comparator=comp, ranker="allpairs", budget=20, max_active=3,
                                       max_concurrency=64, carry_judge=False):
            yielded.append(item)
            comp.yielded.set()

    with pytest.raises(ComparatorAuthError if stop == "refusal" else OSError) as info:
        asyncio.run(consume())
    assert comp.sent["slow"] > 0 and all(isinstance(item, RerankResult) for item in yielded)
    spent = info.value.accounting
    assert spent.calls + sum(r.calls for r in yielded) == sum(comp.sent.values())
    assert spent.failed_calls >= comp.sent["slow"] > 1


class PoisonedQuery(SimulatedComparator):
    """Fails every call of one query (``poisoned``): answers None for it (how a custom comparator fails a call),
    or, as a remote endpoint, with ``remote=True``, raises a 500 for its prompts (``PoisonedEndpoint``)."""

    def __init__(self, labels, poisoned):
        super().__init__(labels)
        self.poisoned = poisoned

    def compare(self, query, pairs):
        return [None] * len(pairs) if query == self.poisoned else super().compare(query, pairs)


def _poisoned_endpoint(labels, poisoned):
    """A remote comparator (``tests.conftest.FakeRemote``, one attempt) whose endpoint answers 500 to every prompt
    of query ``poisoned`` and, for the others, the passage with the higher label wins (``labels`` by query and text)."""
    pytest.importorskip("tenacity")
    from activeprp_core.comparators.failures import status_failure
    from tests.conftest import FakeRemote

    class ServerError(Exception):
        pass

    class Endpoint(FakeRemote):
        def request(self, query, first, second):
            return query, first, second

        def send(self, client, request):
            query, a, b = request
            if query == poisoned:
                raise ServerError("internal server error")
            return 1.0 if labels[query, a] > labels[query, b] else 0.0

        def classify(self, error):
            return status_failure(500, str(error)) if isinstance(error, ServerError) else None

    return Endpoint(max_attempts=1, backoff_initial=0.0)


def _outcome(out):
    """What must match ``rerank`` of the query alone: the order and calls, or the error and what it spent."""
    if isinstance(out, RerankResult):
        return out.order, out.calls, out.failure
    error = out.error if isinstance(out, RerankFailure) else out
    return type(error).__name__, str(error), error.accounting.calls


@pytest.mark.parametrize("max_active", [1, 12])
@pytest.mark.parametrize("on_failure", ["raise", "prior"])
@pytest.mark.parametrize("judge", ["none", "500"])
@pytest.mark.parametrize("entry", ["rerank_many", "arerank_many", "arerank_many(carry_judge=False)",
                                   "arerank_stream"])
def test_one_query_whose_calls_all_fail_fails_alone_as_rerank_of_it_alone(entry, judge, on_failure, max_active):
    """Review s69c, finding 1: the queries shared one breaker, so one query whose every call fails (its prompts make
    the endpoint fail) opened it after 5 calls and stopped every other query: with "raise" the whole run raised, with
    "prior" the queries in progress (with max_active=1 every later one) degraded, and a Ray batch's rows depended on
    the batching. Each query now has its own breaker, and the shared one counts only failures beyond one query's."""
    reqs, labels = requests(12)
    reqs = [r for r in reqs if len(r[1]) >= 6]
    poisoned = reqs[2][0]

    def make():
        if judge == "none":
            return PoisonedQuery(labels, poisoned)
        return _poisoned_endpoint({(q, c.text): labels[c.id] for q, cands in reqs for c in cands}, poisoned)

    kw = dict(ranker="mohajer", budget=30, top_k=3, max_concurrency=4, on_failure=on_failure)
    alone = [_outcome(o) for o in _entry_points()["rerank"](reqs, comparator=make(), **kw)]
    run = _entry_points()[entry]
    outcomes = [_outcome(o) for o in run(reqs, comparator=make(), max_active=max_active, **kw)]
    assert outcomes == alone
    assert [i for i, o in enumerate(alone) if "circuit breaker open" in str(o)] == [2]


@pytest.mark.parametrize("max_active", [1, 12])
@pytest.mark.parametrize("on_failure", ["raise", "prior"])
@pytest.mark.parametrize("entry", ["rerank_many", "arerank_many", "arerank_many(carry_judge=False)",
                                   "arerank_stream"])
def test_one_query_text_asked_twice_in_a_row_is_one_source_for_the_shared_breaker(entry, on_failure, max_active):
    """Review s69g, finding 1: the shared breaker counted a query's failed calls by request, so the same failing
    query asked twice back to back (a client retrying it, or the same text in another request) was two queries
    and opened it: every later query failed or degraded. Its sources are now query texts: each request still
    fails alone (its own breaker, as ``rerank`` of it alone), the others are answered."""
    reqs, labels = requests(12)
    reqs = [r for r in reqs if len(r[1]) >= 6]
    poisoned = reqs[2][0]
    reqs.insert(3, (poisoned, reqs[3][1]))  # the same text, other documents, right after it
    kw = dict(ranker="mohajer", budget=30, top_k=3, max_concurrency=4, on_failure=on_failure)
    alone = [_outcome(o) for o in _entry_points()["rerank"](reqs, comparator=PoisonedQuery(labels, poisoned), **kw)]
    outcomes = [_outcome(o) for o in _entry_points()[entry](reqs, comparator=PoisonedQuery(labels, poisoned),
                                                            max_active=max_active, **kw)]
    assert outcomes == alone
    assert [i for i, o in enumerate(alone) if "circuit breaker open" in str(o)] == [2, 3]


class PastItsDeadline(Comparator):
    """Batches across queries; its calls go through the base class's chunk loop, which tells the guard what each
    query sends (``CallGuard.sending``). Query "q0"'s first call moves the clock past q0's time budget (``jump``), so
    its later calls are not sent; query "q1"'s first call raises a bug (``fails``), or waits for ``release`` (an
    ``asyncio.Event``, async only). ``sent``: the calls each query sent."""

    max_batch_size = 8

    def __init__(self, jump, fails=True):
        self.jump, self.fails, self.release, self.sent = jump, fails, None, collections.Counter()

    def compare(self, query, pairs):
        self.sent[query] += len(pairs)
        if query == "q0":
            self.jump()
        elif self.fails:
            self.fails = False
            raise RuntimeError("a bug in q1's first call")
        return [1.0] * len(pairs)

    async def acompare(self, query, pairs):
        answers = self.compare(query, pairs)
        if query == "q1" and self.release is not None:
            await self.release.wait()
        return answers


PAST_KW = dict(ranker="quicksort", budget=4, max_rounds=1, max_concurrency=2, seed=0)  # 4 calls each, 2 a chunk
PAST_CANDIDATES = OWN_CANDIDATES[:5]


@pytest.mark.parametrize("entry", ["rerank_many", "arerank_many"])
def test_a_failed_merged_call_bills_each_query_the_calls_it_sent(monkeypatch, entry):
    """Review s69f #2: q0 sent 2 of its 4 calls (then its deadline passed), q1 sent 2 and raised. The merged call's 4
    calls were split by prompt order, so q0 was billed 4 failed calls (2 of them q1's) and q1's re-sent calls
    carried no retry. Now each query is billed what the comparator said it sent of it: q0 2 (failed, as its merged
    call raised), q1 4 calls with 2 retries (its first 2 sent twice). Fake clock."""
    import activeprp_core.many as many_module

    now = [0.0]
    monkeypatch.setattr(many_module, "clock_now", lambda: lambda: now[0])
    judge = PastItsDeadline(lambda: now.__setitem__(0, now[0] + 5.0))
    reqs = [("q0", PAST_CANDIDATES, {"time_budget": 1.0}), ("q1", PAST_CANDIDATES)]
    if entry == "rerank_many":
        q0, q1 = rerank_many(reqs, comparator=judge, **PAST_KW)
    else:
        q0, q1 = asyncio.run(_collect(arerank_many(reqs, comparator=judge, **PAST_KW)))
    assert judge.sent == {"q0": 2, "q1": 6}  # q1's 4 calls, its first 2 twice
    assert (_spent(q0).calls, _spent(q0).failed_calls, _spent(q0).retries) == (2, 2, 0)
    assert isinstance(q1, RerankResult) and (q1.calls, q1.failed_calls, q1.retries) == (4, 0, 2)


def test_a_merged_call_s_calls_are_split_by_what_each_query_sent_else_in_prompt_order():
    """``sent_shares``: the counts the comparator gave per query text (a text asked twice: in order), when they add
    up to the calls sent; else (a comparator that gives none, or counts that do not add up) the first prompts."""
    from activeprp_core.many import sent_shares

    parts = [("q0", 4), ("q1", 4), ("q0", 3)]
    assert sent_shares(parts, 6, {"q0": 5, "q1": 1}) == [4, 1, 1]
    assert sent_shares(parts, 2, {"q1": 2}) == [0, 2, 0]
    assert sent_shares(parts, 6, None) == sent_shares(parts, 6, {}) == [4, 2, 0]
    assert sent_shares(parts, 6, {"q0": 2, "q1": 2}) == [4, 2, 0]  # 4 reported of 6: not trusted
    assert sent_shares(parts, 6, {"q1": 6}) == [4, 2, 0]  # more than q1 holds
