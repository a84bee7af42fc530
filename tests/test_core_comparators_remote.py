"""``RemoteComparator``, the transport base, with a provider whose transport is a Python async callable (the
shape of a framework chat model: no HTTP, no client), written in one small class as the docs describe; and the
OpenAI provider's token upper bound against the bundled model's real chat template."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
import re
import threading

import pytest
from _llm_server import FaultServer, Reply, completion

from activeprp_core import Candidate, ComparatorAuthError, ComparatorRequestError, arerank, rerank
from activeprp_core.comparators import CallGuard, OpenAIChatComparator, RemoteComparator
from activeprp_core.comparators.answers import Answer, UnusableAnswer, answer_from
from activeprp_core.comparators.base import comparator_name
from activeprp_core.comparators.clients import LoopClients
from activeprp_core.comparators.failures import MAX_MESSAGE, Failure, Fault, status_failure
from activeprp_core.comparators.prompts import (
    PRP_PROMPT,
    SwappablePrompts,
    cut_words,
    parse_answer,
    prp_messages,
)
from tests.conftest import FakeRemote

pytest.importorskip("tenacity")

SECRET = "sk-fake-SECRET-42"
TOPS = (("A", -0.1), ("B", -2.4))


class StatusError(Exception):
    """What a framework raises for an HTTP error (it carries the status)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class FakeChatModel:
    """A framework chat model stand-in: ``ainvoke(messages)`` answers ``plan(user text)`` (a reply dict, or an
    exception to raise); ``seen`` holds every user text sent."""

    def __init__(self, plan) -> None:
        self.plan, self.seen = plan, []

    async def ainvoke(self, messages: list[dict[str, str]]) -> dict:
        self.seen.append(messages[-1]["content"])
        await asyncio.sleep(0)
        answer = self.plan(messages[-1]["content"])
        if isinstance(answer, Exception):
            raise answer
        return answer


class ChatModelJudge(SwappablePrompts, RemoteComparator):
    """The whole provider: the PRP prompt as chat messages, the model's async call, its reply and its errors."""

    def __init__(self, llm: FakeChatModel, *, max_passage_words: int = 200, **kw) -> None:
        super().__init__(secrets=(SECRET,), backoff_initial=0.001, backoff_max=0.002, **kw)
        self.llm, self.model, self.endpoint = llm, "fake-chat", "FakeChatModel"
        self.prompt, self.system_prompt, self.max_passage_words = PRP_PROMPT, None, max_passage_words

    def request(self, query: str, first: str, second: str) -> list[dict[str, str]]:
        n = self.max_passage_words
        return prp_messages(self.prompt, self.system_prompt, query, cut_words(first, n), cut_words(second, n))

    async def asend(self, client, request):
        return await self.llm.ainvoke(request)

    def parse(self, response: dict) -> Answer:
        usage = response.get("usage", {})
        return answer_from(response.get("logprobs"), response.get("content"), usage.get("input_tokens"),
                           usage.get("output_tokens"))

    def classify(self, error: Exception) -> Failure | None:
        return status_failure(error.status_code, str(error)) if isinstance(error, StatusError) else None


def reply(content: str = "A", tops=TOPS) -> dict:
    logprobs = {"content": [{"top_logprobs": [{"token": t, "logprob": lp} for t, lp in tops]}]} if tops else None
    return {"content": content, "logprobs": logprobs, "usage": {"input_tokens": 40, "output_tokens": 1}}


def pair(tag: str = "") -> tuple[Candidate, Candidate]:
    return Candidate("a", f"first passage {tag}"), Candidate("b", f"second passage {tag}")


def test_a_provider_over_an_async_callable_answers_sync_and_async_from_logprobs_or_the_letter():
    judge = ChatModelJudge(FakeChatModel(lambda text: reply() if "logprobs" in text else reply("Passage B.", None)))
    pairs = [pair("logprobs"), pair("letter")]
    expected = math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.4))
    for judgments in (judge.judge("q", pairs), asyncio.run(judge.ajudge("q", pairs))):
        assert [j.prob for j in judgments] == [pytest.approx(expected), 0.0]
        assert [(j.prompt_tokens, j.completion_tokens, j.retries) for j in judgments] == [(40, 1, 0)] * 2
    assert len(judge.llm.seen) == 4 and comparator_name(judge) == "fake-chat"


def test_the_provider_sends_the_same_prompt_and_ranks_as_the_openai_provider():
    """Same answers give the same ranking: the judge prefers the passage with the lower number."""

    def label(text: str) -> str:
        first, second = (int(n) for n in re.findall(r"Passage [AB]: \"passage (\d+)", text))
        return "A" if first < second else "B"

    cands = [Candidate(f"d{i}", f"passage {i} " + "word " * 30) for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    fake = FakeChatModel(lambda text: reply(label(text), None))
    kw = {"budget": 40, "seed": 3, "ranker": "mohajer", "oracle": "randomized"}
    mine = asyncio.run(arerank("which number is lowest", cands, comparator=ChatModelJudge(fake), **kw))
    seen = []
    with FaultServer(lambda r: seen.append(r.text) or Reply(body=completion(label(r.text), None)),
                     max_requests=100) as server:
        api = OpenAIChatComparator("m", base_url=server.url, api_key="k")
        theirs = asyncio.run(arerank("which number is lowest", cands, comparator=api, **kw))
    assert mine.order == theirs.order and mine.calls == theirs.calls
    assert [c.id for c in mine.top[:3]] == ["d0", "d1", "d2"]
    assert sorted(fake.seen) == sorted(seen)  # byte-identical prompts


def test_transient_failures_are_retried_then_fail_the_call():
    attempts = {"n": 0}

    def flaky(text: str):
        attempts["n"] += 1
        return StatusError(503, "overloaded") if attempts["n"] <= 2 else reply()

    (j,) = ChatModelJudge(FakeChatModel(flaky), max_attempts=3).judge("q", [pair()])
    assert j.prob is not None and j.retries == 2
    (failed,) = ChatModelJudge(FakeChatModel(lambda t: StatusError(429, "slow down")), max_attempts=2).judge(
        "q", [pair()])
    assert failed.prob is None and failed.retries == 1
    # its status at the end, as a ComparatorError says it (the SDK's message does not): a 200's errors tell it
    assert failed.error == "StatusError from FakeChatModel (model 'fake-chat'): slow down (HTTP 429)"
    assert failed.status_code == 429
    (long,) = ChatModelJudge(FakeChatModel(lambda t: StatusError(500, "x" * 1000)), max_attempts=1).judge(
        "q", [pair()])
    assert long.error.endswith("xx (HTTP 500)") and len(long.error) == MAX_MESSAGE  # not cut off with the words


def test_the_error_of_a_rerank_whose_every_call_failed_says_their_status_once():
    """The failed calls' text ends with its status now, and so does the error's message: said once, not twice."""
    from activeprp_core import ComparatorUnavailable

    judge = ChatModelJudge(FakeChatModel(lambda t: StatusError(500, "down")), max_attempts=1)
    with pytest.raises(ComparatorUnavailable) as raised:
        rerank("q", list(pair()), comparator=judge, budget=2)
    said = str(raised.value)
    assert raised.value.status_code == 500 and said.endswith(": down (HTTP 500)") and said.count("HTTP 500") == 1


class Down(FakeRemote):
    """A remote judge whose every attempt fails with a 500 ("down")."""

    def send(self, client, request):
        raise StatusError(500, "down")

    def classify(self, error):
        return status_failure(error.status_code, str(error)) if isinstance(error, StatusError) else None


LAST = "(last: StatusError from 127.0.0.1 (model 'm'): down (HTTP 500))"


@pytest.mark.parametrize("settings, want", [
    ({}, f"circuit breaker open: 5 calls in a row failed {LAST}"),
    ({"time_budget": 1.0, "max_attempts": 2, "max_consecutive_failures": None},
     "every one of the 6 calls failed: StatusError from 127.0.0.1 (model 'm'): down (HTTP 500)")])
def test_an_open_breaker_or_a_spent_time_budget_says_the_status_once(settings, want):
    """Review s67h finding 4: these messages quote the last failed call's text, which ends with its status, and
    ``ComparatorError.__str__`` appended the status again: "... down (HTTP 500)) (HTTP 500)". Now once (the time
    budget's retries wait 60 s: the deadline withholds them, and each call fails)."""
    from activeprp_core import ComparatorUnavailable

    judge = Down(max_attempts=settings.get("max_attempts", 1), backoff_initial=60.0, backoff_max=60.0)
    cands = [Candidate(f"d{i}", f"p {i}") for i in range(4)]
    with pytest.raises(ComparatorUnavailable) as raised:
        rerank("q", cands, comparator=judge, budget=10, ranker="allpairs", time_budget=settings.get("time_budget"),
               max_consecutive_failures=settings.get("max_consecutive_failures", 5))
    assert raised.value.status_code == 500 and str(raised.value) == want
    other = ComparatorUnavailable(f"circuit breaker open: 5 calls in a row failed {LAST}", status_code=503)
    assert str(other) == f"{other.message} (HTTP 503)"  # another status than the one quoted is still said


@pytest.mark.parametrize("use_async", [True, False])
def test_a_refusal_raises_typed_without_the_secret_and_stops_every_later_call(use_async):
    fake = FakeChatModel(lambda t: StatusError(401, f"invalid key {SECRET}"))
    judge, guard = ChatModelJudge(fake, max_concurrency=1), CallGuard(1, 5)
    call = (lambda: asyncio.run(judge.ajudge("q", [pair()] * 3, guard=guard))) if use_async else (
        lambda: judge.judge("q", [pair()] * 3, guard=guard))
    with pytest.raises(ComparatorAuthError) as info:
        call()
    assert info.value.status_code == 401 and SECRET not in str(info.value) and "invalid key ***" in str(info.value)
    assert "FakeChatModel (model 'fake-chat')" in str(info.value) and guard.error is not None
    with pytest.raises(ComparatorAuthError):
        call()
    assert len(fake.seen) == 1  # one request went out, none after the refusal


def test_a_rejected_request_fails_that_call_only_and_a_bug_is_not_hidden():
    judge, guard = ChatModelJudge(FakeChatModel(lambda t: StatusError(400, "prompt too long"))), CallGuard(None, 1)
    with pytest.raises(ComparatorRequestError, match="prompt too long"):
        judge.judge("q", [pair()], guard=guard)
    assert guard.error is None  # the endpoint answered: the breaker does not count it
    broken = ChatModelJudge(FakeChatModel(lambda t: KeyError("a bug in the provider")))
    with pytest.raises(KeyError):
        broken.judge("q", [pair()])


def test_a_status_that_is_no_http_status_fails_the_call_without_one():
    """A ``Judgment.status_code`` outside 100-599 is invalid, so a client's own code (0, 999) is read as none."""
    for code, fault in ((0, Fault.REJECT), (999, Fault.RETRY)):
        assert status_failure(code, "odd") == Failure(fault, "odd")
    judge = ChatModelJudge(FakeChatModel(lambda t: StatusError(999, "odd status")), max_attempts=1)
    assert judge.judge("q", [pair()])[0].status_code is None


def test_the_default_send_works_in_a_thread_that_runs_an_event_loop():
    """A sync ``rerank`` inside ``async def`` (a Jupyter cell) with a provider that keeps the default ``send``: with
    one worker its calls run in the caller's thread, whose loop is running (``asyncio.run`` refused it before)."""
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
    kw = {"budget": 12, "seed": 0, "ranker": "mohajer", "oracle": "randomized", "on_failure": "prior"}

    def judge() -> ChatModelJudge:
        return ChatModelJudge(FakeChatModel(lambda t: reply()), max_concurrency=1)

    async def inside_a_loop():
        return rerank("q", cands, comparator=judge(), **kw), judge().judge("q", [pair()])

    outside = rerank("q", cands, comparator=judge(), **kw)
    inside, (one,) = asyncio.run(inside_a_loop())
    assert (inside.order, inside.calls, inside.failed_calls) == (outside.order, outside.calls, 0) and outside.calls
    assert one.prob == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.4)))


class FakeClient:
    def __init__(self, n: int) -> None:
        self.n, self.closed_on = n, None


def loop_clients(fail: set[int]) -> LoopClients:
    """``LoopClients`` whose async clients are numbered from 0; closing one in ``fail`` raises."""
    made = iter(range(100))

    async def aclose(client: FakeClient) -> None:
        await asyncio.sleep(0)
        if client.n in fail:
            raise OSError(f"cannot close client {client.n}")
        client.closed_on = asyncio.get_running_loop()

    return LoopClients(lambda: None, lambda: FakeClient(next(made)), lambda c: None, aclose)


@pytest.mark.parametrize("fail", [set(), {0}])
@pytest.mark.parametrize("how", ["close", "aclose", "close outside a loop"])
def test_clients_of_idle_loops_close_on_their_loops_from_a_thread_that_runs_another_and_one_failure_leaks_none(
        how, fail):
    """A comparator used on private loops (``run_until_complete``, as Ray's async actor does), closed from async
    code: each idle loop's client closes on that loop; one that fails to close is raised after the others closed
    (``run_until_complete`` refused this thread before, and the clients after the failure were dropped)."""
    clients = loop_clients(fail)
    loops = [asyncio.new_event_loop() for _ in range(3)]

    async def shut():
        await clients.aclose() if how == "aclose" else clients.close()

    def run() -> None:
        clients.close() if how == "close outside a loop" else asyncio.run(shut())

    try:
        made = [loop.run_until_complete(clients.for_running_loop()) for loop in loops]
        if fail:
            with pytest.raises(OSError, match="cannot close client 0"):
                run()
        else:
            run()
        assert [c.closed_on for c in made] == [None if c.n in fail else loop for c, loop in zip(made, loops)]
        assert clients.live_async_clients() == 0
    finally:
        for loop in loops:
            loop.close()


@pytest.mark.parametrize("turns", [0, 1, 2, "closed from another thread"])
def test_a_sync_close_on_a_running_loop_closes_its_client_though_asyncio_run_ends_right_after(turns):
    """Review s68f: ``close()`` (or ``with``) in async code only scheduled the close on the running loop, and
    ``asyncio.run`` cancelled it when the main coroutine returned ``turns`` turns of the loop later: the client was
    never closed (an httpx client's sockets were left to the GC, a ``ResourceWarning`` each). The same for a close
    from another thread just before the loop's main coroutine returns."""
    steps: list[str] = []

    async def aclose(client: FakeClient) -> None:
        for step in range(6):  # a close that takes a few turns, as closing a pool of connections does
            await asyncio.sleep(0)
            steps.append(f"step {step}")
        client.closed_on = asyncio.get_running_loop()

    clients = LoopClients(lambda: None, lambda: FakeClient(0), lambda c: None, aclose)

    async def main():
        client = await clients.for_running_loop()
        if turns == "closed from another thread":
            loop, done = asyncio.get_running_loop(), asyncio.Event()

            def close_then_end() -> None:
                clients.close()
                loop.call_soon_threadsafe(done.set)  # after the close that close() scheduled on the loop

            await asyncio.gather(asyncio.to_thread(close_then_end), done.wait())
        else:
            clients.close()
            for _ in range(turns):
                await asyncio.sleep(0)
        return client, asyncio.get_running_loop()

    client, loop = asyncio.run(main())
    assert steps == [f"step {k}" for k in range(6)] and client.closed_on is loop
    assert clients.live_async_clients() == 0


def test_rerank_with_the_provider_and_a_dead_model_opens_the_breaker():
    from activeprp_core import ComparatorUnavailable

    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
    dead = ChatModelJudge(FakeChatModel(lambda t: StatusError(502, "bad gateway")), max_attempts=1)
    with pytest.raises(ComparatorUnavailable, match="circuit breaker"):
        rerank("q", cands, comparator=dead, budget=30, max_consecutive_failures=3)


def test_openai_token_estimate_bounds_the_bundled_models_chat_template():
    """The stated upper bound (UTF-8 bytes of the messages + the template's overhead + max_tokens) holds for the
    bundled SmolLM2 (the model the llama.cpp test server runs), with and without a system prompt, for text far
    from English; and it is within a small factor of the real count for English."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from activeprp_core.comparators import bundled_model_dir

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir(), local_files_only=True)
    texts = [("fleas " * 50, "how long do fleas live"), ("Ünïcødé — 東京タワー 🐈‍⬛ " * 20, "¿qué es? 🙂"),
             ("{braces} \\n\t tabs " * 30, "{query}")]
    for system in (None, "You judge passages."):
        comp = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k", system_prompt=system)
        for text, query in texts:
            a, b = Candidate("a", text), Candidate("b", text[::-1])
            bound = comp.estimate_tokens(query, [(a, b), (b, a)])
            for (first, second), estimate in zip([(a, b), (b, a)], bound):
                messages = comp.request(query, first.text, second.text)["messages"]
                rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                real = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
                assert real + 1 <= estimate  # + the one completion token requested
                if text.startswith("fleas"):
                    assert estimate <= 6 * (real + 1)


@pytest.mark.parametrize("use_async", [False, True])
def test_rerank_many_keeps_the_other_queries_answers_when_one_is_rejected(use_async):
    """Sync: every query's calls share one pool of threads (``judge_each``); a rejected query stops its own calls
    only, and no answered call of another query is asked again."""
    from activeprp_core import RerankFailure, arerank_many, rerank_many

    def answer(text: str):
        if 'query "gamma"' in text:
            return StatusError(400, "prompt too long")
        first, second = (int(n) for n in re.findall(r"Passage [AB]: \"passage (\d+)", text))
        return reply("A" if first < second else "B", None)

    fake = FakeChatModel(answer)
    cands = [Candidate(f"d{i}", f"passage {i}") for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    reqs = [(q, cands) for q in ("alpha", "beta", "gamma", "delta")]
    kw = {"comparator": ChatModelJudge(fake, max_concurrency=4), "budget": 20, "ranker": "mohajer", "top_k": 3}
    out = asyncio.run(_collect(arerank_many(reqs, **kw))) if use_async else list(rerank_many(reqs, **kw))
    sent = {q: sum(f'query "{q}"' in text for text in fake.seen) for q, _ in reqs}
    assert isinstance(out[2], RerankFailure) and isinstance(out[2].error, ComparatorRequestError)
    assert [sent[q] for q in ("alpha", "beta", "delta")] == [out[i].calls for i in (0, 1, 3)]
    assert all(0 < out[i].calls <= 20 and [c.id for c in out[i].top] == ["d0", "d1", "d2"] for i in (0, 1, 3))
    assert 1 <= sent["gamma"] <= 4  # its first call failed: its queued calls were dropped


async def _collect(agen):
    return [item async for item in agen]


class OwnTimeout(RemoteComparator):
    """A provider whose transport raises a TimeoutError of its own at once, which its ``classify`` calls a failed
    call (not retried)."""

    model, endpoint = "m", "127.0.0.1"

    def __init__(self):
        super().__init__(max_concurrency=1, max_attempts=3, backoff_initial=0.0, backoff_max=0.0)
        self.attempt_timeout, self.sent = 30.0, 0

    def request(self, query, first, second):
        return query

    async def asend(self, client, request):
        self.sent += 1
        raise TimeoutError("gateway: queue full")

    def classify(self, error):
        from activeprp_core.comparators.failures import Fault

        return Failure(Fault.FAIL, str(error))


@pytest.mark.parametrize("use_async", [True, False])
def test_a_provider_s_own_timeout_error_goes_to_its_classify_not_to_the_attempt_timeout(use_async):
    """On Python >= 3.11 asyncio.TimeoutError is TimeoutError: the provider's own was taken for the cut of
    ``attempt_timeout`` (retried, its message replaced by "timed out after 30 s")."""
    judge, pair = OwnTimeout(), (Candidate("a", "a"), Candidate("b", "b"))
    (j,) = asyncio.run(judge.ajudge("q", [pair])) if use_async else judge.judge("q", [pair])
    assert judge.sent == 1 and j.prob is None and "gateway: queue full" in j.error


class ParkedRemote(RemoteComparator):
    """A provider whose every attempt, sync or async, waits in its ``park`` (``test_core_comparators_base.Park``)
    before answering "A"."""

    model, endpoint = "parked", "127.0.0.1"

    def __init__(self):
        from tests.test_core_comparators_base import Park

        super().__init__(max_concurrency=2)
        self.park = Park()

    def request(self, query, first, second):
        return query

    def send(self, client, request):
        self.park.hold()
        return reply()

    async def asend(self, client, request):
        await asyncio.to_thread(self.park.hold)
        return reply()

    def parse(self, response):
        return answer_from(response.get("logprobs"), response.get("content"), None, None)


@pytest.mark.parametrize("threads, tasks", [(3, 1), (2, 2)])
def test_a_remote_judge_s_sync_calls_hold_the_guard_s_slots_with_its_async_calls(threads, tasks):
    """The sync path capped only its own batch's thread pool: ``judge`` in threads and ``ajudge`` on a loop under
    one guard (a capped service's, a user's) had each batch's cap of calls in flight (measured: 6 with a cap of 2,
    two sync batches and an async one); now every call holds one of the guard's slots."""
    from tests.test_core_comparators_base import on_both_paths

    judge, guard = ParkedRemote(), CallGuard(max_concurrency=2)
    inside, errors = on_both_paths(judge, lambda: guard, guard.fair_slots, threads, tasks,
                                   sync=RemoteComparator.judge, asyn=RemoteComparator.ajudge)
    assert not errors and inside == judge.park.peak == 2
    assert guard.fair_slots.free == 2 and guard.completed == threads + tasks


class LateSlots(CallGuard):
    """A guard whose slots are waited for past the deadline (as a thread woken late at its wait's timeout is)."""

    def slots(self, n=1, timeout=None, threads=False):
        return super().slots(n, None, threads)


def test_a_sync_call_still_waiting_for_its_slot_at_the_deadline_is_not_sent_and_costs_nothing():
    """The guard's one slot is held elsewhere (another batch's call, a cut call's thread) through the deadline: the
    batch's call still waiting for it then is reported unsent (never sent, not counted), not cut in flight, and
    sends nothing once it gets the slot."""
    import time

    from activeprp_core.slots import held

    judge, guard = ParkedRemote(), LateSlots(max_concurrency=1)
    guard.deadline = time.monotonic() + 0.05
    with held(guard.slots(1, threads=True)):
        judgments = judge.judge("q", [pair("1"), pair("2")], guard=guard)
    assert [j.cut for j in judgments] == ["unsent", "unsent"] and guard.completed == 0
    with held(guard.fair_slots.take(1, timeout=30.0, threads=True)):  # the waiting call got the slot, and left
        pass
    assert judge.park.peak == 0 and guard.fair_slots.free == 1 and guard.completed == 0


class Interrupting(FakeRemote):
    """A remote judge whose first call raises ``error`` (a ``KeyboardInterrupt`` or ``SystemExit``, as a framework's
    callback or a signal handler may raise in the transport); its other calls wait for ``release``, then answer."""

    def __init__(self, error, **transport):
        super().__init__(**transport)
        self.error, self.release, self._lock = error, threading.Event(), threading.Lock()

    def send(self, client, request):
        with self._lock:
            first = super().send(client, request) and self.sent == 1
        if first:
            raise self.error
        self.release.wait(5)  # set by the test once the rerank raised; the bound ends the old code's wait for it
        return 0.75


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3)], ids=["KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("path", ["threads", "time_budget", "prior", "rerank_many"])
def test_a_remote_call_s_keyboard_interrupt_or_system_exit_propagates_as_itself_from_worker_threads(error, path):
    """Review s66a finding 1: on the thread-pool path (``max_concurrency`` > 1, any ``time_budget``,
    ``rerank_many``) the worker's ``KeyboardInterrupt`` / ``SystemExit`` became the ask's outcome and then an
    ``InvalidAnswer``: ``on_failure="prior"`` returned a best-effort result for a ``sys.exit()`` and ``rerank_many``
    a ``RerankFailure``, going on with the other query. Now it propagates as itself, as with ``max_concurrency=1``,
    at once (the other calls in flight wait for ``release``, set only after it)."""
    from activeprp_core import rerank_many

    judge = Interrupting(error, max_concurrency=1 if path == "time_budget" else 4)
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
    kw = {"comparator": judge, "budget": 10, "ranker": "quicksort"}
    run = {"threads": lambda: rerank("q", cands, **kw),
           "time_budget": lambda: rerank("q", cands, time_budget=60, **kw),
           "prior": lambda: rerank("q", cands, on_failure="prior", **kw),
           "rerank_many": lambda: list(rerank_many([("q", cands), ("r", cands)], **kw))}[path]
    try:
        with pytest.raises(type(error)) as raised:
            run()
        assert raised.value is error
    finally:
        judge.release.set()


class BrokenAfter(FakeRemote):
    """A remote judge whose calls after the first ``answers`` raise ``RuntimeError`` (a bug in the model's wrapper,
    which no failure table reads); ``threaded``: the async path sends through ``send`` in worker threads
    (``sends_in_thread``, a LangChain chat model with only ``_generate``)."""

    def __init__(self, answers: int, threaded: bool = False, **transport):
        super().__init__(**transport)
        self.answers, self.threaded, self._lock = answers, threaded, threading.Lock()

    def send(self, client, request):
        with self._lock:
            n = super().send(client, request) and self.sent
        if n > self.answers:
            raise RuntimeError("a bug in my model wrapper")
        return 0.75

    def sends_in_thread(self):
        return self.threaded


@pytest.mark.parametrize("path", ["sync", "async", "async_threads", "rerank_many"])
def test_a_remote_call_s_bug_propagates_with_every_call_sent_billed(path):
    """Review s67b finding 2: a call raising an exception that is no transport failure (a bug) propagated as itself
    (as documented) but was not recorded as sent, so the rerank refunded its whole round: 10 calls sent, the
    error's ``accounting.calls`` 6. Now the call that raised is recorded as sent (outcome unknown, the breaker
    unchanged), as a ``ComparatorClosed`` one is, and the accounting bills every call that went out."""
    from activeprp_core import RerankFailure, rerank_many

    judge = BrokenAfter(7, threaded=path == "async_threads", max_concurrency=4)  # quicksort's first round: 7 calls
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(8)]
    kw = {"comparator": judge, "budget": 30, "ranker": "quicksort", "seed": 0}
    if path == "rerank_many":
        (failure,) = rerank_many([("q", cands)], **kw)
        assert isinstance(failure, RerankFailure)
        error = failure.error
    else:
        with pytest.raises(RuntimeError, match="a bug in my model wrapper") as raised:
            asyncio.run(arerank("q", cands, **kw)) if path.startswith("async") else rerank("q", cands, **kw)
        error = raised.value
    assert judge.sent > 7 and error.accounting.calls == judge.sent  # the failing round's calls included
    assert (error.accounting.rounds, error.accounting.failed_calls) == (2, judge.sent - 7)


class NumberedRemote(FakeRemote):
    """A ``FakeRemote`` whose requests are ``(query, n)``, numbered as made (``made``), under ``_lock``."""

    def __init__(self, **transport):
        super().__init__(**transport)
        self.made, self._lock = 0, threading.Lock()

    def request(self, query, first, second):
        with self._lock:
            self.made += 1
            return query, self.made


class BugAmidBackoff(NumberedRemote):
    """A remote judge whose first call fails with a 500 (retried) and whose second raises a bug once the first has
    failed; the others answer. ``calls``: the distinct calls sent (requests are numbered as made)."""

    def __init__(self, **transport):
        super().__init__(**transport)
        self.calls, self.first_failed = set(), threading.Event()

    def send(self, client, request):
        with self._lock:
            super().send(client, request)
            self.calls.add(request)
        if request[1] == 1:
            self.first_failed.set()
            raise StatusError(500, "down")
        if request[1] == 2:
            self.first_failed.wait(5)
            raise RuntimeError("a bug in my model wrapper")
        return 0.75

    def classify(self, error):
        return status_failure(error.status_code, str(error)) if isinstance(error, StatusError) else None


def test_a_call_stopped_in_its_backoff_by_another_call_s_bug_is_billed():
    """Review s67h finding 2: on the sync path's threads, call A failed with a 500 and waited in its backoff; call B
    raised a bug, which stopped A before its retry ("not retried"), and A was never recorded: 5 of 6 calls sent
    billed. Now A is recorded as sent, outcome unknown, once (by itself or by the waiting side)."""
    judge = BugAmidBackoff(max_concurrency=2, max_attempts=3, backoff_initial=30.0, backoff_max=30.0)
    cands = [Candidate(f"d{i}", f"p {i}") for i in range(4)]
    with pytest.raises(RuntimeError, match="a bug in my model wrapper") as raised:
        rerank("q", cands, comparator=judge, budget=10, ranker="allpairs")
    assert judge.first_failed.is_set() and raised.value.accounting.calls == len(judge.calls) >= 2


class Retried(NumberedRemote):
    """A remote judge whose every call's first attempt fails with a 500 (retried) and whose retries answer, except
    for the calls made after the first ``answers``: their retry raises a bug, or with ``down`` fails with a 500
    too. ``sent`` counts every attempt; ``threaded``: as ``BrokenAfter``'s."""

    def __init__(self, answers: int, down: bool = False, threaded: bool = False, **transport):
        super().__init__(**transport)
        self.answers, self.down, self.threaded = answers, down, threaded
        self.tried = set()

    def send(self, client, request):
        with self._lock:
            super().send(client, request)
            retry, _ = request in self.tried, self.tried.add(request)
        if not retry or (self.down and request[1] > self.answers):
            raise StatusError(500, "down")
        if request[1] > self.answers:
            raise RuntimeError("a bug in my model wrapper")
        return 0.75

    def sends_in_thread(self):
        return self.threaded

    def classify(self, error):
        return status_failure(error.status_code, str(error)) if isinstance(error, StatusError) else None


@pytest.mark.parametrize("path, kind", [*itertools.product(["sync", "async", "async_threads", "rerank_many"],
                                                             ["bug", "breaker"]), ("threads", "bug")])
def test_a_failed_rerank_bills_the_retries_of_every_call_sent(path, kind):
    """A rerank stopped in a round by a call's bug (after its retry) or by the breaker (opened by 5 calls failed
    after 3 attempts each) billed every call sent but only the retries of the rounds answered before: the failing
    round's calls were billed as failed with no retry (e.g. 6 calls, 0 retries for 17 requests). Now the guard
    sums the retries it records (``CallGuard.retries``) and ``Reranking.fail`` bills those of the failing round,
    so calls + retries is every request the judge got, on every path (review_s67h's p3_accounting.py -r). One call
    in flight at a time, but on "threads" (its batch waits for every call: the request count is final when it
    raises)."""
    from activeprp_core import ComparatorUnavailable, RerankFailure, rerank_many

    judge = Retried(1, down=kind == "breaker", threaded=path == "async_threads", max_attempts=3,
                    max_concurrency=4 if path == "threads" else 1, backoff_initial=0.0, backoff_max=0.0)
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(8)]
    kw = {"comparator": judge, "budget": 30, "ranker": "quicksort", "seed": 0}
    with pytest.raises(RuntimeError if kind == "bug" else ComparatorUnavailable) as raised:
        if path == "rerank_many":
            (failure,) = rerank_many([("q", cands)], **kw)
            assert isinstance(failure, RerankFailure)
            raise failure.error
        asyncio.run(arerank("q", cands, **kw)) if path.startswith("async") else rerank("q", cands, **kw)
    spent = raised.value.accounting
    assert spent.calls + spent.retries == judge.sent and spent.retries > 0
    if path != "threads":  # quicksort's first round, 7 calls: its 2nd raises after its retry, or its 2nd to 6th
        # fail after 3 attempts and the breaker keeps its 7th from going out
        assert (spent.calls, spent.retries) == ((2, 2) if kind == "bug" else (6, 11))


class RefusedAmidCalls(FakeRemote):
    """A remote judge whose first call is refused (401) once ``in_flight`` other calls have gone out; those wait for
    ``release`` (set by the test once the rerank raised), then answer."""

    def __init__(self, in_flight: int, **transport):
        super().__init__(**transport)
        self.in_flight, self.release, self._lock = in_flight, threading.Event(), threading.Lock()
        self.others_sent = threading.Semaphore(0)

    def send(self, client, request):
        with self._lock:
            n = super().send(client, request) and self.sent
        if n == 1:
            for _ in range(self.in_flight):
                self.others_sent.acquire(timeout=5)
            raise StatusError(401, "invalid key")
        self.others_sent.release()
        self.release.wait(5)
        return 0.75

    def sends_in_thread(self):
        return True

    def classify(self, error):
        return status_failure(error.status_code, str(error)) if isinstance(error, StatusError) else None


@pytest.mark.parametrize("use_async", [False, True])
def test_a_refusal_amid_calls_in_flight_bills_them(use_async):
    """Review s67b finding 2, for a refusal: on the sync path's threads a 401 ends the wait at once, and the calls
    of its batch still in flight were never recorded (abandoned), so the rerank billed 1 call of 4 sent. Now they
    are recorded as sent, outcome unknown, when the wait ends; the async path cancels and bills them already."""
    judge = RefusedAmidCalls(3, max_concurrency=4)
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(8)]
    kw = {"comparator": judge, "budget": 30, "ranker": "quicksort"}
    try:
        with pytest.raises(ComparatorAuthError) as raised:
            asyncio.run(arerank("q", cands, **kw)) if use_async else rerank("q", cands, **kw)
    finally:
        judge.release.set()
    assert judge.sent == 4 and raised.value.accounting.calls == 4


class ClosedMidCall(FakeRemote):
    """A remote judge with clients (``FakeClient``s, numbered as opened) whose first call closes the comparator while
    it is in flight (``close()`` on the sync path, ``aclose()`` on the async one: a shared judge's other user leaving
    its ``with`` block). An attempt on a closed client fails as httpx's does, which the openai SDK raises as a
    connection error: ``classify`` retries it."""

    def __init__(self, **transport):
        super().__init__(**transport)
        self.opened, self.closed, self.refused = [], [], 0

    def open_client(self):
        self.opened.append(FakeClient(len(self.opened)))
        return self.opened[-1]

    open_async_client = open_client

    def close_client(self, client):
        self.closed.append(client)

    async def aclose_client(self, client):
        self.closed.append(client)

    def send(self, client, request):
        answer = super().send(client, request)
        if self.sent == 1:
            self.close()
        return self._refused(client, answer)

    def _refused(self, client, answer):
        if client in self.closed:
            self.refused += 1
            raise ConnectionError("Cannot send a request, as the client has been closed.")
        return answer

    async def asend(self, client, request):
        answer = super().send(client, request)
        if self.sent == 1:
            await self.aclose()
        return self._refused(client, answer)

    def classify(self, error):
        return Failure(Fault.RETRY, str(error))


@pytest.mark.parametrize("use_async", [False, True])
def test_closing_a_judge_while_a_rerank_s_call_is_in_flight_raises_comparator_closed_at_once(use_async):
    """Review s66a finding 2: the call kept the client it started with, and every retry went to that closed client;
    the closed client's refusal was a connection error, retried with backoff and counted by the circuit breaker, so
    the rerank blamed a healthy endpoint (sync: a failed call, or ComparatorUnavailable; async: the batch's calls,
    all on the batch's client, opened the breaker). Closing a client in use is the caller's lifetime mistake (httpx
    raises RuntimeError for it): the call is not retried, the rerank raises ``ComparatorClosed`` (a RuntimeError,
    with its accounting, not degraded by "prior"), and a later rerank opens a new client."""
    from activeprp_core.comparators.clients import ComparatorClosed

    def closed():
        return pytest.raises(ComparatorClosed, match="was closed .* while a rerank's call was in flight")

    judge, guard = ClosedMidCall(backoff_initial=0.0, backoff_max=0.0), CallGuard(1, max_consecutive_failures=1)
    with closed() as raised:
        asyncio.run(judge.ajudge("q", [pair("1")], guard=guard)) if use_async else judge.judge("q", [pair("1")],
                                                                                               guard=guard)
    # one attempt on the closed client, no retry, recorded as sent (billed) but not counted by the breaker
    assert judge.refused == 1 and guard.completed == 1 and guard.error is None
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no client error chained

    judge = ClosedMidCall(max_concurrency=1, backoff_initial=0.0, backoff_max=0.0)
    cands = [Candidate(f"d{i}", f"passage {i}") for i in range(6)]
    kw = {"comparator": judge, "budget": 10, "ranker": "quicksort", "on_failure": "prior"}
    run = (lambda: asyncio.run(arerank("q", cands, **kw))) if use_async else (lambda: rerank("q", cands, **kw))
    with closed() as raised:
        run()
    # billed with every call sent (async: also those that took the slot, on a new client, before the batch's other
    # calls were cancelled)
    assert judge.refused == 1 and raised.value.accounting.calls == judge.sent
    sent = judge.sent
    later = run()
    assert later.calls > 0 and later.failed_calls == 0 and judge.sent == sent + later.calls and judge.refused == 1


@pytest.mark.parametrize("use_async", [False, True])
def test_closing_a_judge_during_rerank_many_stops_every_query_with_comparator_closed(use_async):
    """Review s66d finding 2: the queries in flight became ``RerankFailure(ComparatorClosed)`` and the others went
    on, opening new clients after the close (the sync one left open). Now ``ComparatorClosed`` stops the whole
    run, whatever ``on_failure``, with the accounting of every query in progress."""
    from activeprp_core import rerank_many
    from activeprp_core.comparators.clients import ComparatorClosed
    from activeprp_core.many import arerank_many

    judge = ClosedMidCall(max_concurrency=1, backoff_initial=0.0, backoff_max=0.0)
    requests = [(f"query {i}", [Candidate(f"d{j}", f"passage {j}") for j in range(5)]) for i in range(4)]
    kw = {"comparator": judge, "budget": 6, "max_active": 2, "on_failure": "prior"}
    out = []

    async def collect():
        async for item in arerank_many(requests, **kw):
            out.append(item)

    with pytest.raises(ComparatorClosed) as raised:
        asyncio.run(collect()) if use_async else out.extend(rerank_many(requests, **kw))
    assert out == [] and judge.refused == 1 and raised.value.accounting.calls == judge.sent
    assert judge.sent <= 2  # the first call of each query in progress at most: none after the step
    assert all(client in judge.closed for client in judge.opened)  # none opened after the close and left open


class ThreadNoting(RemoteComparator):
    """A sync provider noting whether each call's thread is a daemon, and in which ``contextvars`` context it ran."""

    model, endpoint = "noting", "127.0.0.1"

    def __init__(self):
        super().__init__(max_concurrency=2)
        self.daemon, self.tags = [], []

    def request(self, query, first, second):
        return query

    def send(self, client, request):
        self.daemon.append(threading.current_thread().daemon)
        self.tags.append(TAG.get())
        return reply()

    def parse(self, response):
        return answer_from(response.get("logprobs"), response.get("content"), None, None)


TAG: contextvars.ContextVar[str] = contextvars.ContextVar("TAG", default="unset")


def test_a_remote_judge_s_sync_calls_run_in_daemon_threads_in_the_caller_s_context():
    """They ran in a ``ThreadPoolExecutor``, whose workers Python joins at its exit: a call cut at the deadline with
    no timeout of its own kept the process alive until it returned (see ``test_integrations_llm_judge``)."""
    judge, token = ThreadNoting(), TAG.set("caller")
    try:
        judgments = judge.judge("q", [pair(str(k)) for k in range(3)])
    finally:
        TAG.reset(token)
    assert [j.prob for j in judgments] == [pytest.approx(1 / (1 + math.exp(-2.3)))] * 3
    assert judge.daemon == [True] * 3 and judge.tags == ["caller"] * 3


# Generated answers as chat models write them when they give more than the one letter asked for (no logprobs, a
# completion cap ignored or raised to 16 tokens), with the label they give; None = no single label: unusable.
GENERATED_ANSWERS = [
    ("A", "A"), (" a", "A"), ("B.", "B"), ("Passage B", "B"), (" Passage B.", "B"), ("(A)", "A"),
    ("**Passage B:**", "B"),
    ("A:", "A"), ("A)", "A"), ("[B]", "B"), ("**A**", "A"), ("**B**\n", "B"), ("**Passage B**", "B"),
    ("A\n\nExplanation: Passage A directly answers", "A"), ("B\n\nExplanation: Passage B names the", "B"),
    ("A. Passage A answers the query", "A"), ("b. passage b", "B"), ("**A**.", "A"), ("B! It names", "B"),
    ("Passage A is more relevant.", "A"), ("Passage B is the more relevant passage.", "B"),
    ("Passage B is more relevant than Passage A.", "B"), ("passage a is the most relevant", "A"),
    ("Passage B.\n\nPassage B explains", "B"), ("**Passage A** is more relevant", "A"),
    ("Passage B is more relevant to the query.", "B"), ("Passage A is the most relevant one.", "A"),
    ("Answer: A", "A"), ("answer: b", "B"), ("**Answer:** Passage B", "B"), ("Final answer: B", "B"),
    ("The answer is B.", "B"), ("The answer is Passage B", "B"), ("The answer is (A).", "A"),
    ("the answer is: a", "A"), ("Output: Passage A", "A"), ("The more relevant passage is Passage B.", "B"),
    ("A\nA", "A"), ("b. a passage about it", "B"), ("The most relevant passage is A.", "A"), ("> **Answer:** B", "B"),
    ("Passage B is more relevant than A.", "B"), ("The answer is:\n\nPassage B", "B"),
    # no single label: the article, both labels, a question, a refusal, an echo of the prompt
    ("A passage about the Eiffel Tower", None), ("a passage about the Eiffel Tower", None),
    ("A better answer is B", None), ("Passage A is less relevant than Passage B", None),
    ("passage a is less relevant than passage b", None), ("Passage A is not relevant", None),
    ("A or B", None), ("Passage A or Passage B", None), ("A, B", None), ("A/B", None), ("A?", None),
    ("A. B.", None), ("A\nB", None), ("A. Not relevant. B. Relevant.", None),
    ("Passage A: Not relevant. Passage B: Relevant.", None), ("Passage A: It answers the query", None),
    ("A: Not relevant", None), ("**Passage A** is less relevant than **Passage B**", None),
    ("(A) is less relevant than (B)", None), ("A) because it names", None), ("A - it names", None),
    ("Passage A\nPassage B", None), ("Answer: A\nAnswer: B", None), ("A\n\nAnswer: B", None),
    ("The answer is A.\nB.", None), ("Neither A nor B", None), ("A and B", None), ("A.I. is", None),
    ('Passage A:\n"The Eiffel Tower is', None),
    # a later mention of the other label: perhaps a correction, never guessed at
    ("Passage B is more relevant. Passage A is off-topic.", None), ("B. A is off-topic.", None), ("b. a.", None),
    ("A is more relevant? No, B.", None), ("A\n\nWait, actually Passage B is more relevant.", None),
    ("A.\n\nHowever, on reflection, the answer is B.", None), ("Passage A is more relevant than Passage A.", None),
    ("Passage A is more relevant to cooking, while Passage B is more relevant to the query.", None),
    ("Passage A is more relevant than Passage B? Let me check. So the answer is B", None),
    ("Passage A is more relevant, because", None),
    ("Passage A is more relevant to cooking, while the other passage answers the query.", None),
    ("Passage A is more relevant to the query, while", None),
    ("_" * 198 + "\nA is less relevant than the other.", None),
    (">" * 174 + "Passage A is more relevant to cooking, while the other passage answers the query.", None),
    ("Neither", None), ("neither passage", None), ("Both", None), ("Both are relevant.", None),
    ("both A and B", None), ("I cannot decide", None), ("I'm sorry, but I can't help with that.", None),
    ("I think A", None), ("The answer is A passage that", None), ("Answer: AB", None), ("Alpha", None),
    ('Passage A: "The Eiffel Tower is', None), ('Given a query "q", which of the following', None),
    ("", None), ("   ", None), ("Maybe", None), ("Answer:", None), ("Passage", None),
]


@pytest.mark.parametrize(("text", "label"), GENERATED_ANSWERS)
def test_a_generated_answer_is_read_only_when_it_gives_exactly_one_label(text, label):
    if label is None:
        with pytest.raises(UnusableAnswer, match="unparseable answer"):
            answer_from(None, text, 3, 16)
    else:
        assert answer_from(None, text, 3, 16) == Answer(float(label == "A"), 3, 16)


@pytest.mark.parametrize("lead_in", ["The answer is", "the more relevant passage is", "Passage", "**"])
def test_a_long_reply_is_read_in_time_linear_in_its_length(lead_in):
    """A lead-in, a long run of whitespace, then no answer: the first regular expression tried every split of the
    run between two patterns (10 s for 16,000 spaces, on the event loop); a reply may hold ``max_reply_bytes``."""
    for space in (" ", "\n", "\t"):
        assert parse_answer(lead_in + space * 300_000 + "x") is None
    assert parse_answer("A." + " It names the query." * 20_000) == "A"


def test_parse_answer_gives_the_label_or_none_and_refuses_a_non_str():
    assert [parse_answer(t) for t in ("Passage B is more relevant.", "A passage", "answer: a")] == ["B", None, "A"]
    with pytest.raises(TypeError, match="must be a str"):
        parse_answer(None)


@pytest.mark.parametrize(("token", "counts"), [
    ("A)", True), (" Passage A", True), ("Passage A is more relevant", False), ("A\n\nExplanation", False),
    ("Answer: A", False),
])
def test_a_top_logprob_alternative_counts_only_when_it_is_a_bare_label(token, counts):
    """The first answer token's alternatives stay strict (``parse_label``): only a token that is a label counts."""
    tops = {"content": [{"top_logprobs": [{"token": token, "logprob": -0.1}, {"token": "B", "logprob": -2.0}]}]}
    expected = math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.0)) if counts else 0.0
    assert answer_from(tops, "A", 0, 0).prob == pytest.approx(expected)
