"""The framework's own LLM as the judge: ``ChatModelComparator`` (LangChain ``BaseChatModel``) and
``LLMComparator`` (LlamaIndex ``LLM``), with the frameworks' fake models and, for the real client code paths
(ChatOpenAI, OpenAILike), a canned OpenAI-compatible endpoint on loopback (``FaultServer``: no model)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import math
import pickle
import re
import threading
import time
from typing import Any

import pytest
from _llm_server import SAID_BODIES, FaultServer, Reply, completion, error_body, responses_body

from activeprp_core import (
    Candidate,
    ComparatorAuthError,
    ComparatorRequestError,
    ComparatorUnavailable,
    arerank,
    rerank,
)
from activeprp_core.comparators import OpenAIChatComparator
from activeprp_core.comparators.prompts import MAX_TOP_LOGPROBS, PRP_PROMPT

pytest.importorskip("langchain_core", reason='pip install "activeprp[langchain]"')
pytest.importorskip("llama_index.core", reason='pip install "activeprp[llama-index]"')
lc = pytest.importorskip("activeprp_integrations.langchain")
li = pytest.importorskip("activeprp_integrations.llama_index")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models import BaseChatModel, FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from llama_index.core.base.llms.types import LogProb  # noqa: E402
from llama_index.core.llms import (  # noqa: E402
    LLM,
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402
from pydantic import AliasChoices, Field, SecretStr  # noqa: E402

ChatModelComparator, LLMComparator = lc.ChatModelComparator, li.LLMComparator
SECRET = "sk-test-SECRET-4242"
P_A = math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.4))


def label(text: str) -> str:
    """The judge of these tests prefers the passage with the lower number."""
    first, second = (int(n) for n in re.findall(r"Passage [AB]: \"passage (\d+)", text))
    return "A" if first < second else "B"


def labelled(text: str) -> AIMessage:
    """``label``'s answer as an AIMessage with logprobs: a module-level script, so a pickle holds it by name."""
    return ai(label(text))


def tops(answer: str) -> list[tuple[str, float]]:
    other = "B" if answer == "A" else "A"
    return [(answer, -0.1), (other, -2.4)]


def pair(tag: str = "") -> tuple[Candidate, Candidate]:
    return Candidate("a", f"passage 1 {tag}"), Candidate("b", f"passage 2 {tag}")


CANDS = [Candidate(f"d{i}", f"passage {i} " + "word " * 30) for i in (5, 2, 7, 0, 3, 6, 1, 4)]


# ---- fake framework models ----------------------------------------------------------------------------
class ScriptedChat(BaseChatModel):
    """A LangChain chat model answering ``script(user text)``: an AIMessage, or an exception to raise. It declares
    the fields the judge sets on its copy (as ChatOpenAI does) and records the settings each call ran with."""

    script: Any
    temperature: float = 0.7
    max_tokens: int | None = None
    max_retries: int = 2
    logprobs: bool | None = None
    top_logprobs: int | None = None
    api_key: SecretStr | None = None
    seen: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append((messages[-1].content, self.temperature, self.max_tokens, self.logprobs, self.max_retries))
        out = self.script(messages[-1].content)
        if isinstance(out, Exception):
            raise out
        return ChatResult(generations=[ChatGeneration(message=out)])


def ai(answer: str, with_logprobs: bool = True) -> AIMessage:
    meta = {"logprobs": {"content": [{"token": answer, "logprob": -0.1, "top_logprobs": [
        {"token": t, "logprob": lp} for t, lp in tops(answer)]}]}} if with_logprobs else {}
    return AIMessage(content=answer, response_metadata=meta,
                     usage_metadata={"input_tokens": 40, "output_tokens": 1, "total_tokens": 41})


class StatusError(Exception):
    """A framework error carrying an HTTP status (as the openai / anthropic SDK errors do)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class ScriptedLLM(CustomLLM):
    """A LlamaIndex LLM answering ``script(user text)`` with logprobs and raw usage (as OpenAILike does)."""

    script: Any
    max_retries: int = 3
    temperature: float = 0.5
    max_tokens: int | None = None
    calls: int = 0

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=True, model_name="scripted-llm")

    @llm_chat_callback()
    def chat(self, messages, **kwargs) -> ChatResponse:
        self.calls += 1
        out = self.script(messages[-1].content)
        if isinstance(out, Exception):
            raise out
        logprobs = [[LogProb(token=t, logprob=lp, bytes=[]) for t, lp in tops(out)]]
        return ChatResponse(message=ChatMessage(role="assistant", content=out), logprobs=logprobs,
                            raw={"usage": {"prompt_tokens": 40, "completion_tokens": 1}})

    @llm_chat_callback()
    async def achat(self, messages, **kwargs) -> ChatResponse:
        await asyncio.sleep(0)
        return self.chat(messages, **kwargs)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        raise NotImplementedError


class LetterLLM(CustomLLM):
    """A LlamaIndex ``CustomLLM`` that only completes text (chat goes through LlamaIndex's completion-to-chat):
    a one-letter answer, no logprobs, no usage."""

    answers: list = []

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="letters")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        return CompletionResponse(text=self.answers[label(prompt) == "B"])

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        raise NotImplementedError


# ---- answers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_async", [False, True])
def test_langchain_judge_reads_logprobs_and_usage_and_never_changes_the_users_model(use_async):
    llm = ScriptedChat(script=lambda text: ai(label(text)), seen=[])
    before = llm.model_dump(exclude={"seen"})
    judge = ChatModelComparator(llm)
    (a, b) = pair()
    run = (lambda p: asyncio.run(judge.ajudge("q", p))) if use_async else (lambda p: judge.judge("q", p))
    judgments = run([(a, b), (b, a)])
    assert [j.prob for j in judgments] == [pytest.approx(P_A), pytest.approx(1 - P_A)]
    assert [(j.prompt_tokens, j.completion_tokens, j.retries, j.error) for j in judgments] == [(40, 1, 0, None)] * 2
    # the judge ran on a copy: greedy, one token, logprobs on, the framework's retries off; the user's unchanged
    assert {s[1:] for s in llm.seen} == {(0, 1, True, 0)}
    assert llm.model_dump(exclude={"seen"}) == before and llm.temperature == 0.7 and llm.max_retries == 2
    assert judge.llm is llm and judge.judge_llm is not llm


def test_langchain_judge_parses_letters_and_fails_unparseable_answers():
    fake = FakeListChatModel(responses=["A", " Passage B.", "I cannot decide"])
    judge = ChatModelComparator(fake, max_concurrency=1)
    judgments = judge.judge("q", [pair("1"), pair("2"), pair("3")])
    assert [j.prob for j in judgments] == [1.0, 0.0, None]
    assert "unparseable answer 'I cannot decide'" in judgments[2].error
    assert judgments[0].prompt_tokens == 0  # the fake reports no usage: counted as 0, never guessed
    assert fake.i == 0  # the user's fake model never advanced: the judge calls its own copy


@pytest.mark.parametrize("use_async", [False, True])
def test_llama_index_judge_reads_logprobs_and_usage(use_async):
    llm = ScriptedLLM(script=label)
    judge = LLMComparator(llm)
    (a, b) = pair()
    run = (lambda p: asyncio.run(judge.ajudge("q", p))) if use_async else (lambda p: judge.judge("q", p))
    judgments = run([(a, b), (b, a)])
    assert [j.prob for j in judgments] == [pytest.approx(P_A), pytest.approx(1 - P_A)]
    assert [(j.prompt_tokens, j.completion_tokens) for j in judgments] == [(40, 1)] * 2
    assert judge.judge_llm.temperature == 0 and judge.judge_llm.max_retries == 0
    assert llm.temperature == 0.5 and llm.max_retries == 3 and llm.calls == 0  # the copy was called, not it


def test_llama_index_judge_parses_letters_through_completion_to_chat():
    judge = LLMComparator(LetterLLM(answers=["A", "Passage B"]))
    (a, b) = pair()
    assert [j.prob for j in judge.judge("q", [(a, b), (b, a)])] == [1.0, 0.0]
    bad = LLMComparator(LetterLLM(answers=["maybe", "maybe"]))
    (j,) = bad.judge("q", [(a, b)])
    assert j.prob is None and "unparseable answer 'maybe'" in j.error


class GateLLM(CustomLLM):
    """A sync-only LlamaIndex ``CustomLLM`` (as LlamaCPP, HuggingFaceLLM): its ``complete`` blocks until ``gate`` is
    set (at most ``wait_s``), counting the calls in flight and their peak; ``full`` (an asyncio event of the test's
    loop) is set once ``target`` calls are in flight at once."""

    gate: Any
    wait_s: float = 10.0
    target: int = 0
    full: Any = None
    loop: Any = None
    counts: Any = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="gated")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs) -> CompletionResponse:
        with self.counts["lock"]:
            self.counts["now"] += 1
            self.counts["peak"] = max(self.counts["peak"], self.counts["now"])
            if self.counts["now"] == self.target and self.full is not None:
                self.loop.call_soon_threadsafe(self.full.set)
        try:
            self.gate.wait(self.wait_s)
            return CompletionResponse(text=label(prompt))
        finally:
            with self.counts["lock"]:
                self.counts["now"] -= 1

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):
        raise NotImplementedError


def gate_counts() -> dict:
    return {"lock": threading.Lock(), "now": 0, "peak": 0}


def test_a_custom_llm_without_its_own_achat_is_called_in_threads_concurrently_off_the_loop():
    """``CustomLLM.achat`` runs the blocking ``chat`` on the event loop: the async judge runs ``chat`` in worker
    threads instead, so the loop keeps running (a heartbeat ticks while every call is blocked) and the calls
    run at once up to ``max_concurrency``, never more."""
    gate, counts = threading.Event(), gate_counts()

    async def main() -> tuple[bool, int, list]:
        full, ticks = asyncio.Event(), [0]
        llm = GateLLM(gate=gate, wait_s=2.0, target=3, full=full, loop=asyncio.get_running_loop(), counts=counts)
        judge = LLMComparator(llm, max_concurrency=3)

        async def heartbeat() -> None:
            while True:
                ticks[0] += 1
                await asyncio.sleep(0)

        beat = asyncio.create_task(heartbeat())
        judging = asyncio.create_task(judge.ajudge("q", [pair(str(k)) for k in range(4)]))
        reached = asyncio.create_task(full.wait())
        try:  # before: each call blocked the loop in turn (at most wait_s), one at a time; the judging ended first
            await asyncio.wait({reached, judging}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            at_full = ticks[0]
            for _ in range(5):
                await asyncio.sleep(0)
            beats_while_blocked = ticks[0] - at_full if counts["now"] == 3 else 0
            gate.set()
            return full.is_set(), beats_while_blocked, await judging
        finally:
            gate.set()
            beat.cancel()
            reached.cancel()

    reached, beats, judgments = asyncio.run(main())
    assert reached and beats > 0 and counts["peak"] == 3
    assert [j.prob for j in judgments] == [1.0] * 4 and counts["now"] == 0
    assert LLMComparator(ScriptedLLM(script=label)).sends_in_thread() is False  # its own achat is awaited


def test_a_custom_llm_s_attempts_in_threads_are_not_cut_by_attempt_timeout_so_retries_keep_the_cap():
    """A thread cannot be stopped: an attempt cut at ``attempt_timeout`` ran on while its retry started another
    thread under the same slot, so the model had ``max_attempts`` calls at once with ``max_concurrency=1``."""
    gate, counts = threading.Event(), gate_counts()  # never set: each call answers after wait_s
    judge = LLMComparator(GateLLM(gate=gate, wait_s=0.5, counts=counts), max_concurrency=1, max_attempts=3,
                          backoff_initial=0.0, backoff_max=0.0)
    judge.attempt_timeout = 0.1
    judgments = asyncio.run(judge.ajudge("q", [pair("1")]))
    assert counts["peak"] == 1 and [(j.prob, j.retries) for j in judgments] == [(1.0, 0)]


def test_a_custom_llm_judge_returns_at_the_time_budget():
    """A ``time_budget`` holds with a sync-only LlamaIndex LLM: calls still blocked at the deadline are cut (their
    threads run on) and ``apostprocess_nodes`` returns then, not after the calls."""
    gate, counts = threading.Event(), gate_counts()
    nodes = [NodeWithScore(node=TextNode(text=f"passage {i}")) for i in range(8)]
    reranker = li.ActivePRPRerank(llm=GateLLM(gate=gate, counts=counts), budget=8, top_n=8, time_budget=0.5,
                                  on_failure="prior")
    try:
        start = time.perf_counter()
        out = asyncio.run(reranker.apostprocess_nodes(nodes, query_str="q"))
        elapsed = time.perf_counter() - start
    finally:
        gate.set()  # the cut calls' threads return
    assert elapsed < 3.0  # before: the first call blocked the loop for its whole 10 s
    assert counts["peak"] > 1 and [n.node.text for n in out] == [n.node.text for n in nodes]


class GateChat(BaseChatModel):
    """A LangChain chat model as LangChain's guide to custom chat models writes one, ``_generate`` only: each call
    blocks until ``gate`` is set (at most ``wait_s``), counting the calls in flight and their peak, and noting
    whether its thread is a daemon (``counts["daemon"]``)."""

    gate: Any
    wait_s: float = 10.0
    counts: Any = None

    @property
    def _llm_type(self) -> str:
        return "gated"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        with self.counts["lock"]:
            self.counts["now"] += 1
            self.counts["peak"] = max(self.counts["peak"], self.counts["now"])
            self.counts["daemon"].append(threading.current_thread().daemon)
        try:
            self.gate.wait(self.wait_s)
            return ChatResult(generations=[ChatGeneration(message=ai(label(messages[-1].content)))])
        finally:
            with self.counts["lock"]:
                self.counts["now"] -= 1


def test_a_chat_model_with_only_generate_runs_in_daemon_threads_so_asyncio_run_returns_at_the_time_budget():
    """LangChain's own ``_agenerate`` runs ``_generate`` in the event loop's default executor: the await returned at
    the deadline, but ``asyncio.run`` then waited for those workers until the cut calls returned (20 s after a
    1 s budget, measured), and a later rerank on the same loop queued behind them. The judge now calls ``invoke``
    in daemon threads of its own, each holding a slot until it returns."""
    from langchain_core.language_models.fake_chat_models import FakeChatModel

    gate, counts = threading.Event(), {**gate_counts(), "daemon": []}
    docs = [Document(page_content=f"passage {i}") for i in range(8)]
    reranker = lc.ActivePRPRerank(llm=GateChat(gate=gate, wait_s=5.0, counts=counts), budget=8, top_n=8,
                                  time_budget=0.5, on_failure="prior")
    try:
        out = asyncio.run(reranker.acompress_documents(docs, "q"))
        still_blocked = counts["now"]
    finally:
        gate.set()  # the cut calls' threads return
    assert still_blocked > 0  # before: 0, asyncio.run had waited for the executor's workers (wait_s)
    assert counts["daemon"] and all(counts["daemon"]) and counts["peak"] <= 8
    assert [d.page_content for d in out] == [d.page_content for d in docs]
    assert ChatModelComparator(FakeListChatModel(responses=["A"])).sends_in_thread() is True  # SimpleChatModel's
    assert ChatModelComparator(FakeChatModel()).sends_in_thread() is False  # its own _agenerate is awaited


def test_a_framework_judge_s_sync_calls_cut_at_the_deadline_do_not_keep_the_process_alive():
    """The sync path ran its calls in a ``ThreadPoolExecutor``, whose workers Python joins at exit: a model with no
    per-request timeout (a LangChain model without an openai client, a LlamaIndex ``CustomLLM``) cut by the time
    budget kept the process alive until the call returned (22-25 s after the rerank returned at 1 s, measured).
    A fresh interpreter reranks with each (and LangChain's async path), every call hanging ``HANG`` s."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    hang = 10.0
    script = f"""
import asyncio, atexit, threading, time
import tests.test_integrations_llm_judge as t
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, TextNode
never, counts = threading.Event(), {{**t.gate_counts(), "daemon": []}}
docs = [Document(page_content=f"passage {{i}}") for i in range(6)]
nodes = [NodeWithScore(node=TextNode(text=f"passage {{i}}")) for i in range(6)]
kw = dict(budget=6, top_n=6, time_budget=0.3, on_failure="prior")
lc_rerank = t.lc.ActivePRPRerank(llm=t.GateChat(gate=never, wait_s={hang}, counts=counts), **kw)
li_rerank = t.li.ActivePRPRerank(llm=t.GateLLM(gate=never, wait_s={hang}, counts=counts), **kw)
start = time.monotonic()
atexit.register(lambda: print(f"{{time.monotonic() - start:.2f}}", flush=True))
lc_rerank.compress_documents(docs, "q")
li_rerank.postprocess_nodes(nodes, query_str="q")
asyncio.run(lc_rerank.acompress_documents(docs, "q"))
print(counts["now"], flush=True)
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, timeout=120, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])})
    assert done.returncode == 0, done.stderr[-2000:]
    blocked, exit_after = done.stdout.split()
    assert int(blocked) > 0  # the cut calls were still blocked when the script ended
    assert float(exit_after) < hang / 2  # before: >= hang, the interpreter joined the pool's workers first


def test_settings_are_checked_against_the_models_fields():
    llm = ScriptedChat(script=lambda t: ai("A"), seen=[])
    assert ChatModelComparator(llm, settings={"temperature": None}).settings.get("temperature") is None
    assert ChatModelComparator(llm, logprobs=False).settings == {"temperature": 0, "max_tokens": 1, "max_retries": 0}
    with pytest.raises(ValueError, match="not fields of ScriptedChat"):
        ChatModelComparator(llm, settings={"num_ctx": 4})
    with pytest.raises(TypeError, match="BaseChatModel"):
        ChatModelComparator(ScriptedLLM(script=label))
    with pytest.raises(TypeError, match="LlamaIndex LLM"):
        LLMComparator(llm)



class AliasedChat(ScriptedChat):
    """A chat model whose model field goes by another name too (as LangChain's HuggingFace models' ``repo_id``)."""

    model_id: str = Field(default="m", alias="repo_id")


class ChoicesChat(ScriptedChat):
    """A chat model whose model field is built by either of two names (``AliasChoices``)."""

    model_id: str = Field(default="m", validation_alias=AliasChoices("hub_id", "model_id"))


def model_of(kind: str) -> Any:
    """A model of each kind of model field, built without a network."""
    if kind == "langchain":
        return pytest.importorskip("langchain_openai").ChatOpenAI(model="gpt-4o-mini", api_key="k")
    if kind == "azure":
        return pytest.importorskip("langchain_openai").AzureChatOpenAI(
            azure_endpoint="https://example.invalid", azure_deployment="gpt-4o", api_version="2024-10-21",
            api_key="k")
    if kind in ("llama_index", "engine"):
        openai = pytest.importorskip("llama_index.llms.openai").OpenAI
        if kind == "llama_index":
            return openai(model="gpt-4o-mini", api_key="k", temperature=0.3)

        class EngineOpenAI(openai):  # LlamaIndex's AzureOpenAI's fields naming the deployment (its package is extra)
            engine: str = "gpt-4o"
            azure_deployment: str | None = None

        return EngineOpenAI(model="gpt-4o", api_key="k")
    return {"aliased": AliasedChat, "choices": ChoicesChat}[kind](script=labelled, seen=[])


def judge_of(llm: Any) -> Any:
    return LLMComparator if isinstance(llm, LLM) else ChatModelComparator


@pytest.mark.parametrize("framework, key, keyword", [
    ("langchain", "model_name", "model"), ("langchain", "model", "model"), ("llama_index", "model", "model"),
    ("aliased", "repo_id", "repo_id"), ("aliased", "model_id", "repo_id"), ("choices", "model_id", "hub_id"),
    ("azure", "deployment_name", "azure_deployment"), ("azure", "azure_deployment", "azure_deployment"),
    ("azure", "model", "model"), ("engine", "engine", "engine"), ("engine", "azure_deployment", "azure_deployment")])
def test_settings_that_name_the_model_raise_saying_to_build_the_model_with_it(framework, key, keyword):
    """A copy's update names another model without the framework seeing it: LangChain kept your model's profile
    (o3-mini in ``settings`` was judged as no reasoning model: temperature 0 and logprobs sent, a 400 on every
    call), LlamaIndex saw a reasoning model but kept your temperature; AzureChatOpenAI kept its client, so its
    ``deployment_name`` did nothing. The model is named on the model object, by a keyword its class takes."""
    llm = model_of(framework)
    dump = llm.model_dump()
    says = rf"settings \['{key}'\] name the model.* {type(llm).__name__}\({keyword}=\.\.\.\), and pass that as llm"
    with pytest.raises(ValueError, match=says):
        judge_of(llm)(llm, settings={key: "o3-mini", "temperature": None})
    assert llm.model_dump() == dump


@pytest.mark.parametrize("framework, settings, where, keyword", [
    ("langchain", {"model_kwargs": {"model": "o3-mini"}}, "['model_kwargs']['model']", "model"),
    ("langchain", {"extra_body": {"model": "o3-mini"}}, "['extra_body']['model']", "model"),
    ("langchain", {"model_kwargs": {"extra_body": {"model": "o3-mini"}}}, "['model_kwargs']['extra_body']['model']",
     "model"),
    ("azure", {"extra_body": {"model": "o3-mini"}}, "['extra_body']['model']", "model"),
    ("llama_index", {"additional_kwargs": {"model": "o3-mini"}}, "['additional_kwargs']['model']", "model"),
    ("llama_index", {"additional_kwargs": {"extra_body": {"model": None}}},
     "['additional_kwargs']['extra_body']['model']", "model"),
    ("engine", {"additional_kwargs": {"engine": "o3-mini"}}, "['additional_kwargs']['engine']", "engine")])
def test_settings_that_name_the_model_in_the_request_body_raise(framework, settings, where, keyword):
    """``model_kwargs`` / ``extra_body`` / ``additional_kwargs`` go into each request's body: a model there was sent
    (model=o3-mini with temperature 0 and logprobs, as no reasoning model), so they are refused as well."""
    llm = model_of(framework)
    says = rf"settings{re.escape(where)} names the model.* {type(llm).__name__}\({keyword}=\.\.\.\)"
    with pytest.raises(ValueError, match=says):
        judge_of(llm)(llm, settings=settings)
    body = {"langchain": "model_kwargs", "azure": "extra_body"}.get(framework, "additional_kwargs")
    assert judge_of(llm)(llm, settings={body: {"user": "u"}}).settings[body] == {"user": "u"}


@pytest.mark.parametrize("framework, key", [("langchain", "model_id"), ("llama_index", "model_name"),
                                            ("llama_index", "model_id"), ("azure", "engine"),
                                            ("aliased", "model_name")])
def test_a_model_key_that_is_no_field_of_the_class_is_no_setting(framework, key):
    """``ChatOpenAI(model_id=...)`` builds gpt-3.5-turbo (the keyword goes to ``model_kwargs``) and LlamaIndex
    ``OpenAI(model_name=...)`` drops it: such a key is refused as no field of the class, not with that advice."""
    llm = model_of(framework)
    with pytest.raises(ValueError, match=rf"settings \['{key}'\] are not fields of {type(llm).__name__}"):
        judge_of(llm)(llm, settings={key: "o3-mini"})


@pytest.mark.parametrize("framework, key", [("langchain", "model"), ("langchain", "model_name"),
                                            ("azure", "azure_deployment"), ("llama_index", "model"),
                                            ("aliased", "repo_id")])
def test_a_model_key_set_to_none_keeps_the_models_own(framework, key):
    """A value None keeps the model's own (``settings``' rule), so it names no other model: accepted, no change."""
    from activeprp_integrations._chat_judge import MODEL_KEYS

    llm = model_of(framework)
    judge = judge_of(llm)(llm, settings={key: None})
    assert key not in judge.settings
    dump, judged = llm.model_dump(), judge.judge_llm.model_dump()
    assert {k: judged[k] for k in MODEL_KEYS if k in dump} == {k: dump[k] for k in MODEL_KEYS if k in dump} != {}
    assert judge.model == judge_of(llm)(llm).model


def test_the_remote_judges_share_their_defaults():
    import inspect

    from activeprp_core.comparators import prompts, remote
    from activeprp_integrations._chat_judge import JUDGE_SETTINGS, FrameworkJudge

    homes = {"max_concurrency": remote.MAX_CONCURRENCY, "max_attempts": remote.MAX_ATTEMPTS,
             "backoff_initial": remote.BACKOFF_INITIAL, "backoff_max": remote.BACKOFF_MAX,
             "max_retry_after": remote.MAX_RETRY_AFTER}
    chat = homes | {"top_logprobs": prompts.TOP_LOGPROBS, "max_passage_words": prompts.MAX_PASSAGE_WORDS}
    assert tuple(homes.values()) + tuple(chat.values())[-2:] == (8, 3, 0.5, 8.0, 60.0, 5, 200)
    for cls, wanted in ((remote.RemoteComparator, homes), (OpenAIChatComparator, chat), (FrameworkJudge, chat)):
        params = inspect.signature(cls).parameters
        assert {name: params[name].default for name in wanted} == wanted, cls
    assert JUDGE_SETTINGS["max_tokens"] == prompts.ANSWER_TOKENS == 1
    judge = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert judge.request("q", "a", "b")["max_tokens"] == prompts.ANSWER_TOKENS


def test_the_chat_judges_build_their_messages_with_one_method():
    """``OpenAIChatComparator`` and ``FrameworkJudge`` each rendered and cut the pair's messages themselves."""
    from activeprp_core.comparators.prompts import ChatPrompts
    from activeprp_integrations._chat_judge import FrameworkJudge

    assert OpenAIChatComparator.messages is FrameworkJudge.messages is ChatPrompts.messages
    judge = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k", system_prompt="S",
                                 max_passage_words=2)
    sent = judge.request("q", "one two three", "four")["messages"]
    assert sent == judge.messages("q", "one two three", "four") and sent[0] == {"role": "system", "content": "S"}
    assert "one two" in sent[1]["content"] and "three" not in sent[1]["content"]


def test_top_logprobs_has_the_openai_comparators_limit():
    llm = ScriptedChat(script=lambda t: ai("A"), seen=[])
    assert ChatModelComparator(llm, top_logprobs=MAX_TOP_LOGPROBS).settings["top_logprobs"] == MAX_TOP_LOGPROBS == 20
    with pytest.raises(ValueError, match="top_logprobs must be <= 20 \\(the API's limit\\), got 25"):
        ChatModelComparator(llm, top_logprobs=25)
    with pytest.raises(ValueError, match="top_logprobs must be <= 20"):
        OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k", top_logprobs=25)


@pytest.mark.parametrize("logprobs", ["no", 0, None])
def test_logprobs_must_be_a_bool_in_every_chat_judge(logprobs):
    """``OpenAIChatComparator`` refused ``logprobs="no"``; the framework judges read it by truthiness (``"no"``
    asked for logprobs). The chat judges now check their shared keywords once (``ChatPrompts.set_chat_settings``)."""
    from activeprp_core.comparators.prompts import ChatPrompts

    makers = [lambda: ChatModelComparator(ScriptedChat(script=lambda t: ai("A"), seen=[]), logprobs=logprobs),
              lambda: LLMComparator(ScriptedLLM(script=label), logprobs=logprobs),
              lambda: OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k", logprobs=logprobs)]
    for make in makers:
        with pytest.raises(TypeError, match=f"logprobs must be a bool, got {type(logprobs).__name__}"):
            make()
    assert ChatModelComparator.set_chat_settings is OpenAIChatComparator.set_chat_settings is \
        ChatPrompts.set_chat_settings


# ---- errors -------------------------------------------------------------------------------------------
def test_transient_errors_are_retried_by_the_judge_and_counted():
    calls = {"n": 0}

    def flaky(text: str):
        calls["n"] += 1
        return StatusError(503, "overloaded") if calls["n"] <= 2 else ai("A")

    llm = ScriptedChat(script=flaky, seen=[])
    (j,) = ChatModelComparator(llm, max_attempts=3, backoff_initial=0.001).judge("q", [pair()])
    assert j.prob == pytest.approx(P_A) and j.retries == 2 and calls["n"] == 3
    timeouts = ScriptedLLM(script=lambda t: TimeoutError("read timed out"))
    (failed,) = LLMComparator(timeouts, max_attempts=2, backoff_initial=0.001).judge("q", [pair()])
    assert failed.prob is None and failed.retries == 1 and "read timed out" in failed.error


@pytest.mark.parametrize("use_async", [False, True])
def test_an_auth_error_raises_typed_at_once_without_the_key(use_async):
    llm = ScriptedChat(script=lambda t: StatusError(401, f"Incorrect API key provided: {SECRET}"), seen=[],
                       api_key=SECRET)
    judge = ChatModelComparator(llm, max_concurrency=1, max_attempts=5, backoff_initial=1.0)
    start = time.monotonic()
    with pytest.raises(ComparatorAuthError) as info:
        if use_async:
            asyncio.run(judge.ajudge("q", [pair()] * 3))
        else:
            judge.judge("q", [pair()] * 3)
    assert time.monotonic() - start < 0.5 and len(llm.seen) == 1  # no retry, no later call
    assert info.value.status_code == 401 and SECRET not in str(info.value) and "***" in str(info.value)


def test_openai_errors_through_chat_openai_and_openai_like_are_typed_retried_and_keyless():
    langchain_openai = pytest.importorskip("langchain_openai")
    openai_like = pytest.importorskip("llama_index.llms.openai_like")

    def plan(r):
        if "401" in r.text:
            return Reply(401, error_body(f"Incorrect API key provided: {r.api_key}"))
        return Reply(503, error_body("overloaded")) if "503" in r.text else Reply(body=completion("A"))

    with FaultServer(plan, max_requests=100) as server:
        models = [ChatModelComparator(langchain_openai.ChatOpenAI(model="m", base_url=server.url, api_key=SECRET,
                                                                  max_retries=4), backoff_initial=0.001),
                  LLMComparator(openai_like.OpenAILike(model="m", api_base=server.url, api_key=SECRET,
                                                       is_chat_model=True, max_retries=4), backoff_initial=0.001)]
        for judge in models:
            with pytest.raises(ComparatorAuthError) as info:
                judge.judge("q", [pair("401")])
            assert SECRET not in str(info.value) and "Incorrect API key provided: ***" in str(info.value)
            for run in (judge.judge, lambda *a, j=judge: asyncio.run(j.ajudge(*a))):
                before = server.requests
                (j,) = run("q", [pair("503")])
                # the judge's 3 attempts, each one request: the model's own max_retries=4 is off in the judge's copy
                assert j.prob is None and j.retries == 2 and server.requests - before == 3
                assert "overloaded" in j.error
        assert models[0].llm.max_retries == 4 and models[0].llm.root_client.max_retries == 4
        assert models[1].llm.max_retries == 4


def test_a_dead_model_opens_the_circuit_breaker():
    dead = ScriptedChat(script=lambda t: StatusError(502, "bad gateway"), seen=[])
    with pytest.raises(ComparatorUnavailable, match="circuit breaker"):
        rerank("q", CANDS, comparator=ChatModelComparator(dead, max_attempts=1), budget=30,
               max_consecutive_failures=3)
    assert len(dead.seen) <= 3 + 8  # stopped after the breaker opened (at most one round more in flight)


class RawLLM(ScriptedLLM):
    """A LlamaIndex LLM whose ``ChatResponse.raw`` is the chat completion ``script(user text)`` (a dict), as
    LlamaIndex's OpenAI keeps the SDK's object; its message is the body's first choice's content."""

    @llm_chat_callback()
    def chat(self, messages, **kwargs) -> ChatResponse:
        body = self.script(messages[-1].content)
        content = body["choices"][0]["message"]["content"]
        return ChatResponse(message=ChatMessage(role="assistant", content=content), raw=body)


def said_reply(text: str) -> AIMessage:
    """A LangChain AIMessage as langchain-openai makes it of the ``SAID_BODIES`` body the text names."""
    choice = SAID_BODIES[next(name for name in ("cut", "filtered", "refused") if name in text)][0]["choices"][0]
    refusal = choice["message"].get("refusal")
    return AIMessage(content=choice["message"]["content"] or "", additional_kwargs={"refusal": refusal} if refusal
                     else {}, response_metadata={"finish_reason": choice["finish_reason"]})


def said_pairs(names: list[str]) -> list[tuple[Candidate, Candidate]]:
    return [(Candidate(f"a{i}", f"passage 1 {name}"), Candidate(f"b{i}", "passage 2")) for i, name in enumerate(names)]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_framework_judge_s_failed_call_keeps_what_the_endpoint_said_of_its_answer(use_async):
    """A finish_reason "length" or "content_filter", or a message's refusal, where the frameworks keep them
    (LangChain: ``response_metadata["finish_reason"]``, ``additional_kwargs["refusal"]``; LlamaIndex: the chat
    completion in ``ChatResponse.raw``) ends the failed call's reason as ``OpenAIChatComparator``'s does
    (``answers.why_no_answer``). The framework judges said only "unparseable answer ..." (closing_68)."""
    names = ["cut", "filtered", "refused"]
    judges = [ChatModelComparator(ScriptedChat(script=said_reply, seen=[]), max_attempts=1),
              LLMComparator(RawLLM(script=lambda text: SAID_BODIES[next(n for n in names if n in text)][0]),
                            max_attempts=1)]
    for judge in judges:
        pairs = said_pairs(names)
        out = asyncio.run(judge.ajudge("q", pairs)) if use_async else judge.judge("q", pairs)
        for name, j in zip(names, out):
            said = SAID_BODIES[name][1]
            assert j.prob is None and j.error.endswith(said[said.index("("):]), (type(judge).__name__, name, j)


def test_chat_openai_and_openai_like_judges_keep_what_the_endpoint_said():
    """The same through the real clients (ChatOpenAI, LlamaIndex's OpenAILike) on a canned endpoint, and for
    ChatOpenAI a 200 body's ``error.message`` (langchain-openai raises a ValueError of the error member): said
    as ``OpenAIChatComparator`` says it, not as the member's repr."""
    langchain_openai = pytest.importorskip("langchain_openai")
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    names = list(SAID_BODIES)

    def plan(request):
        return Reply(body=SAID_BODIES[next(n for n in names if n in request.text)][0])

    with FaultServer(plan, max_requests=100) as server:
        judges = {"ChatOpenAI": (ChatModelComparator(langchain_openai.ChatOpenAI(
                      model="m", base_url=server.url, api_key="k"), max_attempts=1), ["cut", "filtered", "refused",
                                                                                      "error"]),
                  "OpenAILike": (LLMComparator(openai_like.OpenAILike(
                      model="m", api_base=server.url, api_key="k", is_chat_model=True), max_attempts=1),
                      ["cut", "filtered", "refused"])}
        for kind, (judge, said_of) in judges.items():
            for name, j in zip(said_of, judge.judge("q", said_pairs(said_of))):
                said = SAID_BODIES[name][1]
                assert j.prob is None and j.error.endswith(said[said.index("("):]), (kind, name, j)


def test_a_404_names_the_url_with_the_v1_hint_as_the_openai_comparator_does():
    """A base_url without /v1 (vLLM's usual slip) through ChatOpenAI or OpenAILike: the 404 names the URL
    requested and says that an OpenAI-compatible base_url usually ends in /v1, as ``OpenAIChatComparator``'s
    (``openai_chat.not_found``); the framework judges said only "Not Found". A route that is no OpenAI one (an
    Anthropic-like /v1/messages) is named without the hint; an error with no request keeps its message."""
    langchain_openai = pytest.importorskip("langchain_openai")
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    hint = "/chat/completions not found (an OpenAI-compatible base_url usually ends in /v1): Not Found"
    with FaultServer(lambda request: Reply(404, {"detail": "Not Found"}), max_requests=20) as server:
        for base, expected in ((server.url.removesuffix("/v1"), hint), (server.url, "/v1/chat/completions not "
                                                                                      "found: Not Found")):
            for judge in (ChatModelComparator(langchain_openai.ChatOpenAI(model="m", base_url=base, api_key="k")),
                          LLMComparator(openai_like.OpenAILike(model="m", api_base=base, api_key="k",
                                                               is_chat_model=True))):
                with pytest.raises(ComparatorRequestError) as info:
                    judge.judge("q", [pair()])
                assert info.value.status_code == 404 and expected in str(info.value), str(info.value)
    anthropic_like = StatusError(404, "model: claude-x")
    anthropic_like.request = type("Request", (), {"url": "https://api.example.com/v1/messages"})()
    for error, said in ((anthropic_like, "https://api.example.com/v1/messages not found: model: claude-x"),
                        (StatusError(404, "no such model"), "): no such model")):
        with pytest.raises(ComparatorRequestError) as info:
            ChatModelComparator(ScriptedChat(script=lambda t, e=error: e, seen=[])).judge("q", [pair()])
        assert str(info.value).endswith(said + " (HTTP 404)"), str(info.value)


def test_a_bug_in_the_model_is_not_hidden():
    broken = ScriptedChat(script=lambda t: KeyError("a bug"), seen=[])
    with pytest.raises(KeyError):
        ChatModelComparator(broken).judge("q", [pair()])


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_model_raising_stop_iteration_fails_its_calls_as_one_raising_value_error_does(framework, use_async):
    """A model raising StopIteration in a call reached the sync rerank as Python's RuntimeError "coroutine raised
    StopIteration" (no coroutine passes a StopIteration on), the async one as a RuntimeError too, and neither carried
    what was spent as a ``ComparatorError``; a ValueError from the model is a failed call (ComparatorUnavailable once
    every call failed, with the accounting). A StopIteration is now reported the same way, naming it."""

    def failed(error: Exception) -> ComparatorUnavailable:
        if framework == "langchain":
            reranker = lc.ActivePRPRerank(llm=ScriptedChat(script=lambda t: error, seen=[]), budget=4)
            docs = [Document(page_content=c.text, id=c.id) for c in CANDS[:4]]
            run = reranker.acompress_documents if use_async else reranker.compress_documents
            call = lambda: run(docs, "q")  # noqa: E731
        else:  # ScriptedLLM has an achat of its own: awaited on the async path
            reranker = li.ActivePRPRerank(llm=ScriptedLLM(script=lambda t: error), budget=4)
            nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS[:4]]
            run = reranker.apostprocess_nodes if use_async else reranker.postprocess_nodes
            call = lambda: run(nodes, QueryBundle("q"))  # noqa: E731
        with pytest.raises(ComparatorUnavailable) as info:
            asyncio.run(call()) if use_async else call()
        return info.value

    stopped, valued = failed(StopIteration("no answer left")), failed(ValueError("no answer left"))
    assert "StopIteration('no answer left')" in str(stopped) and "ValueError from " in str(valued)
    assert str(valued).endswith("): no answer left")
    assert stopped.accounting == dataclasses.replace(valued.accounting, wall_time_s=stopped.accounting.wall_time_s)
    assert stopped.accounting.calls == stopped.accounting.failed_calls == 4


# ---- the rerankers' llm= -------------------------------------------------------------------------------
def test_exactly_one_of_comparator_and_llm():
    chat, llm, api = ScriptedChat(script=lambda t: ai("A"), seen=[]), ScriptedLLM(script=label), OpenAIChatComparator(
        "m", base_url="http://127.0.0.1:9/v1", api_key="k")
    for cls, model in ((lc.ActivePRPRerank, chat), (li.ActivePRPRerank, llm)):
        with pytest.raises(ValueError, match="both comparator= and llm="):
            cls(comparator=api, llm=model)
        with pytest.raises(TypeError, match="needs a judge: pass llm="):
            cls()
    with pytest.raises(TypeError, match="BaseChatModel"):
        lc.ActivePRPRerank(llm=llm)
    with pytest.raises(TypeError, match="LlamaIndex LLM"):
        li.ActivePRPRerank(llm=chat)
    reranker = lc.ActivePRPRerank(llm=chat)
    assert reranker.llm is chat and isinstance(reranker.comparator, ChatModelComparator)
    # assignment: another llm becomes the judge; a second judge or none is refused and changes nothing
    other = ScriptedChat(script=lambda t: ai("B"), seen=[])
    reranker.llm = other
    assert reranker.comparator.llm is other and reranker.llm is other
    reranker.compress_documents([Document(page_content=c.text) for c in CANDS[:4]], "q")
    assert other.seen and not chat.seen
    judge = reranker.comparator
    with pytest.raises(ValueError, match="both comparator= and llm="):
        reranker.comparator = api
    with pytest.raises(TypeError, match="needs a judge"):
        reranker.llm = None
    assert reranker.llm is other and reranker.comparator is judge
    by_comparator = lc.ActivePRPRerank(comparator=api)
    with pytest.raises(ValueError, match="both comparator= and llm="):
        by_comparator.llm = chat
    assert by_comparator.llm is None and by_comparator.comparator is api
    assert li.ActivePRPRerank(llm=llm).comparator.llm is llm


def test_a_model_copy_with_another_llm_judges_with_that_llm():
    """``model_copy(update=...)`` skips pydantic's validators; a judge update is checked as an assignment is, so the
    copy calls the model it shows (a cheaper model swapped in this way is the one billed)."""
    chat, other = (ScriptedChat(script=lambda t: ai(label(t)), seen=[]) for _ in range(2))
    api = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    reranker = lc.ActivePRPRerank(llm=chat, budget=4, top_n=2)
    docs = [Document(page_content=c.text, id=c.id) for c in CANDS[:4]]
    copy = reranker.model_copy(update={"llm": other, "budget": 3})
    assert copy.llm is other and copy.comparator.llm is other and copy.budget == 3
    copy.compress_documents(docs, "q")
    assert 0 < len(other.seen) <= 3 and not chat.seen
    assert reranker.comparator.llm is chat  # the original keeps its judge
    with pytest.raises(ValueError, match="both comparator= and llm="):
        reranker.model_copy(update={"comparator": api})
    assert reranker.model_copy(update={"comparator": api, "llm": None}).comparator is api


def pickled(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj))


def test_an_unpickled_judge_over_an_openai_integration_loads_the_sdk_before_its_first_call(monkeypatch):
    """An unpickled judge (a Ray worker's) runs no ``__init__``: its ``renew_state`` loads the openai SDK
    (``openai_chat.load_openai_sdk``) as construction does, so its first call under a deadline imports nothing
    (review 1129ad); a model of no openai integration loads nothing."""
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    from activeprp_core.comparators import openai_chat

    judges = [LLMComparator(openai_like.OpenAILike(model="m", api_base="http://127.0.0.1:9/v1", api_key="k",
                                                   is_chat_model=True)), LLMComparator(ScriptedLLM(script=label))]
    loads = []
    monkeypatch.setattr(openai_chat, "load_openai_sdk", lambda: loads.append(1))
    for judge in judges:
        pickled(judge)
    assert loads == [1]


@pytest.mark.parametrize("how", [copy.deepcopy, pickled])
@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_deep_copied_or_pickled_framework_judge_calls_its_own_copy_of_the_model(framework, how):
    """``copy.deepcopy`` and pickling copy the judge's model (deep) and make the judge's own model (its settings,
    greedy, one token) again from that copy, with clients of its own; the original judge and your model are
    untouched, and the copy's calls never reach them."""
    llm = ScriptedChat(script=labelled, seen=[]) if framework == "langchain" else ScriptedLLM(script=label)
    judge = ChatModelComparator(llm) if framework == "langchain" else LLMComparator(llm)
    state, dump = dict(vars(judge)), llm.model_dump()
    other = how(judge)
    assert vars(judge) == state and llm.model_dump() == dump
    assert other.llm is not llm and other.llm.model_dump() == dump and other.settings == judge.settings
    assert other.judge_llm is not judge.judge_llm and other.judge_llm is not other.llm
    assert other._clients is not judge._clients
    assert other.judge_llm.model_dump() == judge.judge_llm.model_dump()  # greedy, one token, no retries
    assert [j.prob for j in other.judge("q", [pair()])] == [pytest.approx(P_A)]
    assert [j.prob for j in asyncio.run(other.ajudge("q", [pair()]))] == [pytest.approx(P_A)]
    if framework == "langchain":  # the judge's model is a model_copy of its llm: they share ``seen``
        assert len(other.llm.seen) == 2 and llm.seen == []
    else:
        assert other.judge_llm.calls == 2 and judge.judge_llm.calls == 0


def test_a_deep_copied_reranker_judges_with_its_own_copy():
    """A pipeline's deep copy of either reranker (``copy.deepcopy``, ``model_copy(deep=True)``, a pickle) judges
    with a copy of the model and ranks as the original does; the original is untouched."""
    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    chat = ScriptedChat(script=labelled, seen=[])
    reranker = lc.ActivePRPRerank(llm=chat, budget=6, top_n=4)
    judge, order = reranker.comparator, [d.id for d in reranker.compress_documents(docs, "q")]
    calls = len(chat.seen)
    for other in (copy.deepcopy(reranker), reranker.model_copy(deep=True), pickled(reranker)):
        assert other.llm is not chat and other.comparator is not judge and other.comparator.llm is other.llm
        assert [d.id for d in other.compress_documents(docs, "q")] == order
        other.llm = ScriptedChat(script=labelled, seen=[])  # the copy's judge is its llm's: replaced with it
        assert other.comparator.llm is other.llm
    assert reranker.comparator is judge and judge.llm is chat and reranker.llm is chat and len(chat.seen) == calls
    nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS]
    llm = ScriptedLLM(script=label)
    postprocessor = li.ActivePRPRerank(llm=llm, budget=6, top_n=4)
    judge, order = postprocessor.comparator, [n.node.node_id for n in postprocessor.postprocess_nodes(nodes, None, "q")]
    for other in (copy.deepcopy(postprocessor), postprocessor.model_copy(deep=True), pickled(postprocessor)):
        assert other.comparator is not judge and other.comparator.llm is not llm
        assert [n.node.node_id for n in other.postprocess_nodes(nodes, None, "q")] == order
    assert postprocessor.comparator is judge and judge.llm is llm


def test_a_judge_whose_model_cannot_be_deep_copied_says_so_and_to_share_it():
    """LangChain's ``ChatOpenAI`` cannot be deep-copied (its openai client holds a lock), so neither can its judge:
    the error names the model and says what to do (share the judge, or build a new one), without the key."""
    langchain_openai = pytest.importorskip("langchain_openai")
    chat = langchain_openai.ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key=SECRET)
    reranker = lc.ActivePRPRerank(llm=chat, budget=4)
    judge = reranker.comparator
    for deep in (lambda: copy.deepcopy(judge), lambda: copy.deepcopy(reranker), lambda: reranker.model_copy(deep=True)):
        with pytest.raises(TypeError, match=r"ChatModelComparator cannot be deep-copied: its llm \(ChatOpenAI\) "
                                            r"cannot be \(TypeError: cannot pickle.*model_copy\(\) without deep=True"
                           ) as err:
            deep()
        assert SECRET not in str(err.value)
    assert reranker.comparator is judge and judge.llm is chat and reranker.llm is chat
    shallow = reranker.model_copy(update={"budget": 3})
    assert shallow.comparator is judge and shallow.llm is chat and copy.copy(judge).llm is chat


def test_wrappers_with_llm_rank_like_the_openai_comparator_on_the_same_endpoint():
    """Same answers, same ranking: ChatOpenAI(logprobs) and OpenAILike through ``llm=`` send the same messages
    as OpenAIChatComparator to the same endpoint and return the same order for the same budget and seed."""
    langchain_openai = pytest.importorskip("langchain_openai")
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    seen: dict[str, list] = {}
    caps: dict[str, set] = {}
    tag = {"now": ""}

    def plan(r):
        seen.setdefault(tag["now"], []).append(r.body["messages"])
        caps[tag["now"]] = caps.get(tag["now"], set()) | {(r.body.get("max_tokens"), r.body.get("temperature"),
                                                           r.body.get("logprobs"), r.body.get("top_logprobs"))}
        return Reply(body=completion(label(r.text), tops(label(r.text))))

    kw = {"budget": 20, "seed": 3, "top_n": 8, "max_rounds": None}
    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS]
    with FaultServer(plan, max_requests=200) as server:
        tag["now"] = "openai"
        api = OpenAIChatComparator("m", base_url=server.url, api_key="k")
        expected = [d.id for d in lc.ActivePRPRerank(comparator=api, **kw).compress_documents(docs, "q")]
        tag["now"] = "langchain"
        chat = langchain_openai.ChatOpenAI(model="m", base_url=server.url, api_key="k")
        got_lc = asyncio.run(lc.ActivePRPRerank(llm=chat, **kw).acompress_documents(docs, "q"))
        tag["now"] = "llama_index"
        like = openai_like.OpenAILike(model="m", api_base=server.url, api_key="k", is_chat_model=True)
        got_li = li.ActivePRPRerank(llm=like, **kw).postprocess_nodes(nodes, QueryBundle("q"))
    assert expected[0] == "d0" and sorted(expected) == sorted(c.id for c in CANDS)
    assert [d.id for d in got_lc] == expected and [n.node.node_id for n in got_li] == expected
    as_sets = {k: sorted(json.dumps(m, sort_keys=True) for m in v) for k, v in seen.items()}
    assert as_sets["langchain"] == as_sets["openai"] == as_sets["llama_index"]  # the same messages, byte for byte
    assert caps["langchain"] == caps["openai"] == caps["llama_index"] == {(1, 0, True, 5)}
    assert chat.extra_body is None and chat.temperature is None and chat.logprobs is None  # the user's, unchanged
    assert like.max_tokens is None and like.logprobs is None


def test_token_estimates_bound_the_same_messages_as_the_openai_comparator():
    api = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    pairs = [pair("x" * 50), tuple(reversed(pair("y")))]
    for judge in (ChatModelComparator(ScriptedChat(script=lambda t: ai("A"), seen=[])), LLMComparator(
            ScriptedLLM(script=label))):
        assert judge.estimate_tokens("q", pairs) == api.estimate_tokens("q", pairs)
    uncapped = ChatModelComparator(FakeListChatModel(responses=["A"]))  # no max_tokens field: 16 assumed
    assert uncapped.estimate_tokens("q", pairs[:1]) == [api.estimate_tokens("q", pairs[:1])[0] - 1 + 16]


def test_llama_index_prompt_update_keeps_the_llm_judge():
    texts: list[str] = []
    llm = ScriptedLLM(script=lambda text: texts.append(text) or label(text))
    reranker = li.ActivePRPRerank(llm=llm, top_n=3, budget=20)
    first = reranker.comparator
    reranker._update_prompts({"prp_prompt": 'Query {query}\nPassage A: "{first}"\nPassage B: "{second}"\nA or B?'})
    assert isinstance(reranker.comparator, LLMComparator) and reranker.comparator is not first
    assert first.prompt == PRP_PROMPT and reranker.comparator.llm is llm
    out = reranker.postprocess_nodes([NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS],
                                     QueryBundle("q"))
    assert [n.node.node_id for n in out][0] == "d0" and texts and all(t.startswith("Query q\n") for t in texts)


def test_async_reranks_equal_sync_with_a_framework_judge():
    llm = ScriptedChat(script=lambda text: ai(label(text)), seen=[])
    judge = ChatModelComparator(llm)
    kw = {"budget": 25, "seed": 1}
    assert rerank("q", CANDS, comparator=judge, **kw).order == asyncio.run(
        arerank("q", CANDS, comparator=judge, **kw)).order


class RunTree(BaseCallbackHandler):
    """The caller's handler: each chain run's name, and the parent run and token usage of each chat model run."""

    def __init__(self) -> None:
        self.chains, self.chats, self.tokens, self.stats = {}, [], 0, None
        self.lock = threading.Lock()  # on_llm_end runs in the comparator's worker threads

    def on_chain_start(self, serialized, inputs, *, run_id, name=None, **kwargs):
        self.chains[run_id] = name

    def on_chain_end(self, outputs, **kwargs):
        self.stats = outputs.get("stats", self.stats) if isinstance(outputs, dict) else self.stats

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kwargs):
        self.chats.append(parent_run_id)

    def on_llm_end(self, response, **kwargs):
        tokens = sum(g.message.usage_metadata["total_tokens"] for gs in response.generations for g in gs)
        with self.lock:
            self.tokens += tokens


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("caps", [{}, {"max_concurrency": 4}, {"max_concurrency": 4, "time_budget": 30.0}])
def test_the_judges_calls_reach_the_callers_callbacks_under_the_rerank_run(use_async, caps):
    """The judge's chat calls are child runs of the rerank's run, so the callbacks given to ``compress_documents``
    (or a ContextualCompressionRetriever's config) see every call and its tokens, also from the comparator's
    worker threads (``max_concurrency``, ``time_budget``)."""
    reranker = lc.ActivePRPRerank(llm=ScriptedChat(script=lambda text: ai(label(text)), seen=[]), budget=12, **caps)
    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    seen = RunTree()
    if use_async:
        asyncio.run(reranker.acompress_documents(docs, "q", callbacks=[seen]))
    else:
        reranker.compress_documents(docs, "q", callbacks=[seen])
    (rerank_run,) = [run for run, name in seen.chains.items() if name == "ActivePRPRerank"]
    assert seen.chats == [rerank_run] * seen.stats["calls"] and seen.stats["calls"] > 0
    assert seen.tokens == seen.stats["prompt_tokens"] + seen.stats["completion_tokens"]


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("where", ["model", "global"])
def test_a_langchain_cache_answers_a_repeated_rerank_under_a_time_budget(use_async, where):
    """LangChain's LLM cache (the model's ``cache=``, or ``set_llm_cache``) answers every call of a repeated rerank
    under a ``time_budget``. The judge gave ChatOpenAI the time left as ``invoke(..., timeout=...)``, and LangChain
    puts a call's keywords into the cache's key: each call's key differed, and every lookup missed. The requests
    still carry the time left as their timeout (the openai SDK's ``x-stainless-read-timeout`` header), and a cached
    answer still counts as a call, with its stored tokens, not as a cache hit (the same budget gives the same order
    with or without a cache; docs/frameworks-llm.md says why the judge cannot tell a cached answer)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import get_llm_cache, set_llm_cache

    cache, docs = InMemoryCache(), [Document(page_content=c.text, id=c.id) for c in CANDS]
    plan = lambda r: Reply(body=completion(label(r.text), tops(label(r.text))))  # noqa: E731
    with FaultServer(plan, max_requests=100) as server:
        llm = langchain_openai.ChatOpenAI(model="m", base_url=server.url, api_key="k",
                                          cache=cache if where == "model" else None)
        reranker = lc.ActivePRPRerank(llm=llm, budget=12, time_budget=30.0)

        def run() -> tuple[list[str], int, int, int]:
            seen = RunTree()
            if use_async:
                out = asyncio.run(reranker.acompress_documents(docs, "q", callbacks=[seen]))
            else:
                out = reranker.compress_documents(docs, "q", callbacks=[seen])
            return [d.id for d in out], seen.stats["calls"], seen.stats["prompt_tokens"], seen.stats["cache_hits"]

        previous = get_llm_cache()
        set_llm_cache(cache if where == "global" else None)
        try:
            first = run()
            sent = server.requests
            second = run()
        finally:
            set_llm_cache(previous)
    assert sent == first[1] > 0 and server.requests == sent  # the second rerank: every call answered by the cache
    assert second == first and first[2] > 0 and first[3] == 0
    assert all(0 < float(r.headers["x-stainless-read-timeout"]) <= 30.0 for r in server.seen)


def test_a_chat_openai_given_only_its_client_still_gets_the_time_left_as_its_timeout():
    """``ChatOpenAI(client=root.chat.completions)`` has no ``root_client`` to set the timeout on: the judge passes
    it as ``invoke``'s ``timeout`` keyword, as before the cache fix, so the request is bounded (the review found
    none sent)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    import openai

    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    plan = lambda r: Reply(body=completion(label(r.text), tops(label(r.text))))  # noqa: E731
    with FaultServer(plan, max_requests=100) as server:
        root = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
        llm = langchain_openai.ChatOpenAI(model="m", api_key="k", client=root.chat.completions)
        assert llm.root_client is None
        lc.ActivePRPRerank(llm=llm, budget=4, time_budget=30.0).compress_documents(docs, "q")
    assert server.seen and all(0 < float(r.headers["x-stainless-read-timeout"]) <= 30.0 for r in server.seen)


def test_a_client_wrapper_the_user_passed_is_kept_by_the_judge():
    """A ``client=`` that is not its root client's own resource (the user's wrapper: tracing, a proxy) is what the
    judge calls; the judge replaced it by the root's resource (for its ``max_retries=0`` copy, and for the time
    left), silently dropping the wrapper. Its requests still carry the time left (``invoke``'s keyword)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    import openai

    class Traced:  # counts the calls ChatOpenAI makes through it (``client.with_raw_response.create``)
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        @property
        def with_raw_response(self):
            self.calls += 1
            return self.inner.with_raw_response

        def __getattr__(self, name):
            return getattr(self.inner, name)

    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    plan = lambda r: Reply(body=completion(label(r.text), tops(label(r.text))))  # noqa: E731
    with FaultServer(plan, max_requests=100) as server:
        root = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
        traced = Traced(root.chat.completions)
        llm = langchain_openai.ChatOpenAI(model="m", api_key="k", client=traced, root_client=root)
        lc.ActivePRPRerank(llm=llm, budget=4, time_budget=30.0).compress_documents(docs, "q")
    assert traced.calls == len(server.seen) > 0 and llm.client is traced
    assert all(0 < float(r.headers["x-stainless-read-timeout"]) <= 30.0 for r in server.seen)


def test_judges_with_other_settings_do_not_share_cached_answers_of_a_model_already_called():
    """LangChain's cache key holds the model's serialized settings, which ``model_copy`` carried over from a model
    already called: the judge copies of such a model had its key, so a letters-only judge's cached answer (1.0)
    answered a judge asking for logprobs. Each judge copy now has its own settings' key."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.caches import InMemoryCache

    def plan(r):
        return Reply(body=completion("A", tops("A") if r.body.get("logprobs") else None))

    with FaultServer(plan, max_requests=20) as server:
        llm = langchain_openai.ChatOpenAI(model="m", base_url=server.url, api_key="k", cache=InMemoryCache())
        llm.invoke("hello")  # the caller's own call, before the model becomes a judge
        (letters,) = ChatModelComparator(llm, logprobs=False).judge("q", [pair()])
        (graded,) = ChatModelComparator(llm).judge("q", [pair()])
        (again,) = ChatModelComparator(llm).judge("q", [pair()])
    assert letters.prob == 1.0 and graded.prob == again.prob == pytest.approx(P_A)
    assert server.requests == 3  # hello, one call per judge's settings; the repeat is cached


def test_openai_client_judges_work_across_event_loops_and_close_their_clients():
    """The SDK clients pool connections per event loop: each ``asyncio.run`` gets its own, closed at its end (a
    second ``asyncio.run`` on one shared pool fails with "Event loop is closed"). LlamaIndex's OpenAIResponses
    opens its client at construction only (OpenAI and OpenAILike on their first call)."""
    langchain_openai = pytest.importorskip("langchain_openai")
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    llama_openai = pytest.importorskip("llama_index.llms.openai")

    def plan(r):
        if "input" in r.body:  # the Responses API
            return Reply(body=responses_body(label(r.text)))
        return Reply(body=completion(label(r.text), tops(label(r.text))))

    with FaultServer(plan, max_requests=50) as server:
        judges = [ChatModelComparator(langchain_openai.ChatOpenAI(model="m", base_url=server.url, api_key="k")),
                  LLMComparator(openai_like.OpenAILike(model="m", api_base=server.url, api_key="k",
                                                       is_chat_model=True)),
                  LLMComparator(llama_openai.OpenAIResponses(model="gpt-4o-mini", api_base=server.url,
                                                             api_key="k"))]
        for judge, prob in zip(judges, (P_A, P_A, 1.0)):
            for _ in range(3):
                judgments = asyncio.run(judge.ajudge("q", [pair(), pair("x")]))
                assert [j.prob for j in judgments] == [pytest.approx(prob)] * 2
                assert judge._clients.live_async_clients() == 0  # closed when its loop shut down
        assert server.requests == 18


def test_llama_index_mock_llm_echo_is_unparseable_and_prior_order_is_the_opt_in_fallback():
    from llama_index.core.llms import MockLLM

    nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS]
    (j,) = LLMComparator(MockLLM()).judge("q", [pair()])  # MockLLM echoes the prompt: neither A nor B
    assert j.prob is None and "unparseable answer" in j.error
    out = li.ActivePRPRerank(llm=MockLLM(), on_failure="prior", top_n=8, budget=20).postprocess_nodes(
        nodes, QueryBundle("q"))
    assert [n.node.node_id for n in out] == [c.id for c in CANDS]
    with pytest.raises(ComparatorUnavailable):
        li.ActivePRPRerank(llm=MockLLM(), top_n=3, budget=20).postprocess_nodes(nodes, QueryBundle("q"))


def test_a_reasoning_model_as_the_judge_keeps_its_own_temperature_cap_and_logprobs():
    """OpenAI's reasoning models (gpt-5, o-series) answer 400 to a temperature other than the default and to
    logprobs, and count reasoning tokens against the completion cap (a cap of 1 leaves an empty answer). The
    endpoint here follows those rules; the frameworks say which models reason (LangChain's model profile,
    LlamaIndex OpenAI's ``O1_MODELS``), and the judge's copy then leaves those settings as the model has them."""
    langchain_openai = pytest.importorskip("langchain_openai")
    llama_openai = pytest.importorskip("llama_index.llms.openai")
    bodies: list[dict] = []

    def reasoning_endpoint(r):
        bodies.append(r.body)
        if r.body.get("temperature") not in (None, 1) or r.body.get("logprobs") or r.body.get("top_logprobs"):
            return Reply(status=400, body=error_body("Unsupported value: 'temperature' does not support 0 with "
                                                     "this model. Only the default (1) value is supported."))
        caps = [r.body[k] for k in ("max_tokens", "max_completion_tokens") if r.body.get(k) is not None]
        extra = (r.body.get("extra_body") or {}).get("max_tokens")
        if any(c < 64 for c in [*caps, *([extra] if extra is not None else [])]):
            return Reply(body=completion("", None))  # the cap went to reasoning: finish_reason length, no text
        return Reply(body=completion(label(r.text), None))

    kw = {"budget": 20, "seed": 3, "top_n": 8}
    docs = [Document(page_content=c.text, id=c.id) for c in CANDS]
    nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in CANDS]
    with FaultServer(reasoning_endpoint, max_requests=200) as server:
        chat = langchain_openai.ChatOpenAI(model="gpt-5-mini", base_url=server.url, api_key="k")
        got_lc = lc.ActivePRPRerank(llm=chat, **kw).compress_documents(docs, "q")
        result = rerank("q", CANDS, comparator=ChatModelComparator(chat), budget=20, seed=3)
        o3 = llama_openai.OpenAI(model="o3-mini", api_base=server.url, api_key="k")
        got_li = li.ActivePRPRerank(llm=o3, **kw).postprocess_nodes(nodes, QueryBundle("q"))
        plain = ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-4o-mini", base_url=server.url,
                                                                api_key="k"))
    assert got_lc[0].id == "d0" and got_li[0].node.node_id == "d0"
    assert result.failed_calls == 0 and result.calls == 20 and len(bodies) == 60  # every call answered
    assert ChatModelComparator(chat).reasoning and not plain.reasoning  # gpt-4o-mini: temperature 0, cap 1
    assert plain.settings["temperature"] == 0 and plain.settings["extra_body"] == {"max_tokens": 1}
    reasoning = ChatModelComparator(chat, settings={"reasoning_effort": "minimal"})
    assert reasoning.settings == {"streaming": False, "max_retries": 0, "reasoning_effort": "minimal"}
    assert chat.temperature is None and chat.max_tokens is None and chat.reasoning_effort is None  # unchanged
    capped = ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-5-mini", api_key="k", max_tokens=2048))
    assert capped.reasoning and capped.judge_llm.max_tokens == 2048  # the user's cap, kept and priced
    assert capped.estimate_tokens("q", [pair()]) == [reasoning.estimate_tokens("q", [pair()])[0] - 16 + 2048]


def test_chat_openai_with_a_base_url_sends_one_token_cap():
    """ChatOpenAI sends its ``max_tokens`` as ``max_completion_tokens``, which llama-cpp-python's server ignores, so
    with a ``base_url`` the judge caps with ``max_tokens``, and only with it: the URL may be a proxy in front of
    OpenAI, which answers 400 to both at once (as this endpoint does), even when the model has a cap of its own."""
    langchain_openai = pytest.importorskip("langchain_openai")
    caps: list[dict] = []

    def openai_rules(r):
        caps.append({k: r.body[k] for k in ("max_tokens", "max_completion_tokens") if k in r.body})
        if "max_tokens" in r.body and "max_completion_tokens" in r.body:
            return Reply(status=400, body=error_body("Setting 'max_tokens' and 'max_completion_tokens' at the same "
                                                     "time is not supported."))
        return Reply(body=completion(label(r.text), tops(label(r.text))))

    with FaultServer(openai_rules, max_requests=20) as server:
        plain = langchain_openai.ChatOpenAI(model="gpt-4.1-mini", base_url=server.url, api_key="k")
        capped = langchain_openai.ChatOpenAI(model="gpt-4.1-mini", base_url=server.url, api_key="k", max_tokens=256)
        judges = [ChatModelComparator(plain), ChatModelComparator(capped),
                  ChatModelComparator(plain, settings={"extra_body": None})]  # the caller's extra_body: max_tokens
        probs = [j.prob for judge in judges for j in judge.judge("q", [pair()])]
    assert probs == [pytest.approx(P_A)] * 3
    assert caps == [{"max_tokens": 1}, {"max_tokens": 1}, {"max_completion_tokens": 1}]
    assert capped.max_tokens == 256 and capped.extra_body is None  # the user's model, unchanged
    api = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert [judge.estimate_tokens("q", [pair()]) for judge in judges] == [api.estimate_tokens("q", [pair()])] * 3


@pytest.mark.parametrize("settings", [{"use_responses_api": True}, {"output_version": "responses/v1"},
                                      {"model_kwargs": {"truncation": "auto"}}])
def test_settings_that_route_chat_openai_to_the_responses_api_are_judged_by_their_text(settings):
    """The judge decides on the Responses API from the model as the caller's ``settings`` make it, not from your
    model alone: a ChatOpenAI on Chat Completions that these settings send to the Responses API gets no logprobs
    and the cap of 16 there (asking for logprobs, every call raised the SDK's TypeError); your model is unchanged."""
    langchain_openai = pytest.importorskip("langchain_openai")
    bodies: list[dict] = []

    def rules(r):
        bodies.append(r.body)
        if "input" not in r.body:
            return Reply(body=completion(label(r.text)))  # Chat Completions: the settings were not applied
        if r.body.get("max_output_tokens", 16) < 16 or "logprobs" in r.body:
            return Reply(status=400, body=error_body("Invalid 'max_output_tokens' or unknown 'logprobs'"))
        return Reply(body=responses_body(label(r.text)))

    with FaultServer(rules, max_requests=10) as server:
        chat = langchain_openai.ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="k")
        dump = chat.model_dump()
        judge = ChatModelComparator(chat, settings=settings)
        (a, b) = pair()
        probs = [j.prob for j in judge.judge("q", [(a, b), (b, a)])]
    assert judge.responses and "logprobs" not in judge.settings and judge.settings["max_tokens"] == 16
    assert probs == [1.0, 0.0] and len(bodies) == 2
    for body in bodies:  # the Responses API's input, with no Chat Completions keyword
        assert "input" in body and body["max_output_tokens"] == 16
        assert not {"logprobs", "top_logprobs", "max_tokens", "max_completion_tokens"} & set(body)
    assert chat.model_dump() == dump and chat.use_responses_api is None


def test_a_chat_openai_with_its_own_logprobs_on_the_responses_api_is_judged_by_its_text():
    """A ChatOpenAI built with ``logprobs=True`` (and ``top_logprobs``) that is on the Responses API: the judge's copy
    clears both (the SDK's ``Responses.create`` raised TypeError on ``logprobs`` in every call, 0 requests sent), your
    model keeps them; ``settings`` asking for logprobs there is refused at construction."""
    langchain_openai = pytest.importorskip("langchain_openai")
    bodies: list[dict] = []

    def rules(r):
        bodies.append(r.body)
        return Reply(body=responses_body(label(r.text)))

    with FaultServer(rules, max_requests=10) as server:
        kw = {"model": "gpt-4o-mini", "base_url": server.url, "api_key": "k", "logprobs": True, "top_logprobs": 3}
        models = [langchain_openai.ChatOpenAI(use_responses_api=True, **kw),
                  langchain_openai.ChatOpenAI(output_version="responses/v1", **kw)]
        dumps = [m.model_dump() for m in models]
        judges = [ChatModelComparator(m) for m in models]
        (a, b) = pair()
        probs = [[j.prob for j in judge.judge("q", [(a, b), (b, a)])] for judge in judges]
    assert probs == [[1.0, 0.0]] * 2 and len(bodies) == 4
    for body in bodies:
        assert "input" in body and body["max_output_tokens"] == 16
        assert not {"logprobs", "top_logprobs"} & set(body)
    assert [m.model_dump() for m in models] == dumps and models[0].logprobs is True and models[0].top_logprobs == 3
    with pytest.raises(ValueError, match="Responses API, which has no logprobs"):
        ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-4o-mini", api_key="k", use_responses_api=True),
                            settings={"logprobs": True})


def test_chat_openai_and_openai_responses_on_the_responses_api_are_judged_by_their_text():
    """OpenAI's Responses API has no ``logprobs`` (the openai SDK's ``Responses.create`` raises TypeError on it) and
    answers 400 to ``max_output_tokens`` below 16, as this endpoint does. A ChatOpenAI that langchain-openai routes
    there, and LlamaIndex's OpenAIResponses, get no logprobs, the cap of 16, and their answer's text is parsed."""
    langchain_openai = pytest.importorskip("langchain_openai")
    llama_openai = pytest.importorskip("llama_index.llms.openai")
    bodies: list[dict] = []

    def responses_rules(r):
        bodies.append(r.body)
        if r.body.get("max_output_tokens", 16) < 16:
            return Reply(status=400, body=error_body("Invalid 'max_output_tokens': integer below minimum value. "
                                                     "Expected a value >= 16, but got 1 instead."))
        return Reply(body=responses_body(label(r.text)))

    with FaultServer(responses_rules, max_requests=20) as server:
        kw = {"base_url": server.url, "api_key": "k"}
        judges = [ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-4o-mini", use_responses_api=True, **kw)),
                  ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-4o-mini", output_version="responses/v1",
                                                                  **kw)),
                  ChatModelComparator(langchain_openai.ChatOpenAI(model="gpt-5.1-codex", **kw)),
                  LLMComparator(llama_openai.OpenAIResponses(model="gpt-4o-mini", api_base=server.url, api_key="k"))]
        (a, b) = pair()
        probs = [[j.prob for j in judge.judge("q", [(a, b), (b, a)])] for judge in judges]
    assert probs == [[1.0, 0.0]] * 4 and len(bodies) == 8
    for body in bodies:  # the Responses API's input, with no Chat Completions keyword
        assert "input" in body and body["max_output_tokens"] == 16
        assert not {"logprobs", "top_logprobs", "max_tokens", "max_completion_tokens"} & set(body)
    api = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert judges[0].estimate_tokens("q", [pair()]) == [api.estimate_tokens("q", [pair()])[0] - 1 + 16]
