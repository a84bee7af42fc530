"""OpenAIChatComparator against a real OpenAI-compatible server (llama-cpp-python serving the bundled GGUF on
loopback), with a fault-injecting proxy in front of it. No network beyond 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json

import pytest
from _llm_server import FaultProxy, demo_query, mixed_plan

from activeprp_cli import main as cli_main
from activeprp_core import ComparatorAuthError, ComparatorRequestError, arerank, rerank
from activeprp_core.comparators import OpenAIChatComparator
from activeprp_core.comparators.openai_chat import _parse

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip('llama-cpp-python is not installed (pip install "llama-cpp-python[server]"): no real '
                "OpenAI-compatible server to test against", allow_module_level=True)

pytestmark = pytest.mark.slow  # a real llama.cpp server on the bundled model

WORDS = 20  # passages cut to 20 words keep each real call around a second on 2 CPU cores


@pytest.fixture(scope="module")
def query_and_candidates():
    return demo_query(WORDS, 8)


def make_proxy(server, request, plan, **kw) -> FaultProxy:
    proxy = FaultProxy(server.url.removesuffix("/v1"), plan, **kw)
    request.addfinalizer(proxy.close)
    return proxy


def comparator(url: str, **kw) -> OpenAIChatComparator:
    opts = {"api_key": "test-key", "max_passage_words": WORDS, "backoff_initial": 0.01, "backoff_max": 0.05,
            "timeout": 30.0} | kw
    return OpenAIChatComparator("smollm2", base_url=url, **opts)


def test_real_server_gives_probabilities_and_usage(server, query_and_candidates):
    query, cands = query_and_candidates
    judgments = comparator(server.url).judge(query, [(cands[0], cands[1]), (cands[1], cands[0])])
    for j in judgments:
        assert j.prob is not None and 0.0 <= j.prob <= 1.0, j
        assert j.retries == 0 and j.error is None
        assert j.prompt_tokens > 30 and j.completion_tokens == 1


def test_retryable_faults_are_retried_and_retry_after_is_honoured(server, request, query_and_candidates):
    query, cands = query_and_candidates
    sequence = ["429", "500", "drop", "ok"]  # timeouts: test_comparators_openai_faults (no model to wait for)
    proxy = make_proxy(server, request, lambda key, attempt: sequence[attempt], retry_after="0.5")
    (j,) = comparator(proxy.url, max_attempts=5).judge(query, [(cands[2], cands[3])])
    assert j.prob is not None and j.error is None
    assert j.retries == 3
    ((key, served),) = proxy.log.items()
    assert served == sequence
    times = proxy.times[key]
    assert times[1] - times[0] >= 0.5  # Retry-After: 0.5 honoured (the backoff alone is capped at 0.05 s)


def test_retries_stop_after_max_attempts(server, request, query_and_candidates):
    query, cands = query_and_candidates
    proxy = make_proxy(server, request, lambda key, attempt: "503")
    (j,) = comparator(proxy.url, max_attempts=3).judge(query, [(cands[0], cands[2])])
    assert j.prob is None and j.retries == 2 and "InternalServerError" in j.error
    assert [len(s) for s in proxy.log.values()] == [3]


@pytest.mark.parametrize(("fault", "error"), [
    ("malformed", "JSONDecodeError"), ("nonjson", "no choices"), ("garbage", "unparseable"),
])
def test_unusable_answers_fail_the_call_once(server, request, query_and_candidates, fault, error):
    query, cands = query_and_candidates
    proxy = make_proxy(server, request, lambda key, attempt: fault)
    (j,) = comparator(proxy.url).judge(query, [(cands[1], cands[2])])
    assert j.prob is None and j.retries == 0 and j.error and error in j.error
    assert [len(s) for s in proxy.log.values()] == [1]


@pytest.mark.parametrize(("fault", "error"), [
    ("400", ComparatorRequestError), ("401", ComparatorAuthError), ("404", ComparatorRequestError),
])
def test_refusals_raise_typed_errors_without_retrying(server, request, query_and_candidates, fault, error):
    query, cands = query_and_candidates
    proxy = make_proxy(server, request, lambda key, attempt: fault)
    with pytest.raises(error, match=f"injected {fault}") as info:
        comparator(proxy.url).judge(query, [(cands[1], cands[2])])
    assert info.value.status_code == int(fault)
    assert [len(s) for s in proxy.log.values()] == [1]


@pytest.mark.parametrize("use_async", [True, False])
def test_rerank_under_faults_stays_a_permutation_within_budget(server, request, query_and_candidates, use_async):
    query, cands = query_and_candidates
    proxy = make_proxy(server, request, mixed_plan, retry_after="0")
    comp = comparator(proxy.url, max_attempts=3, max_concurrency=8)
    kw = {"ranker": "mohajer", "oracle": "randomized", "comparator": comp, "budget": 7, "top_k": 3,
          "seed": 1 if use_async else 2, "max_concurrency": 3, "max_consecutive_failures": None}
    if use_async:
        import asyncio

        result = asyncio.run(arerank(query, cands, **kw))
    else:
        result = rerank(query, cands, **kw)
    assert sorted(result.order) == list(range(len(cands)))
    assert result.calls <= 7
    assert result.calls == len(proxy.log)  # each call is one distinct request body
    assert result.retries == sum(len(s) - 1 for s in proxy.log.values())
    assert result.failed_calls == sum(s[-1] != "ok" for s in proxy.log.values())
    assert proxy.injected() > 0 and result.failed_calls > 0
    assert result.prompt_tokens > 0 and not result.converged
    assert proxy.max_inflight <= 3


def test_cli_rerank_with_openai_comparator(server, tmp_path, capsys, query_and_candidates):
    query, cands = query_and_candidates
    path = tmp_path / "cands.jsonl"
    path.write_text("".join(json.dumps({"id": c.id, "text": c.text}) + "\n" for c in cands[:4]))
    code = cli_main(["rerank", "--query", query, "--candidates", str(path), "--comparator", "openai",
                     "--model", "smollm2", "--base-url", server.url, "--api-key", "k", "--budget", "4",
                     "--top-k", "2", "--passage-tokens", str(WORDS), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert len(out["top"]) == 2 and {r["id"] for r in out["top"]} <= {c.id for c in cands[:4]}
    assert 0 < out["stats"]["calls"] <= 4 and out["stats"]["failed_calls"] == 0


def test_parse_reads_top_logprobs_and_falls_back_to_the_answer():
    def completion(content, tops):
        logprobs = {"content": [{"token": content, "logprob": -0.1, "top_logprobs": [
            {"token": t, "logprob": lp} for t, lp in tops]}]} if tops is not None else None
        from openai.types.chat import ChatCompletion

        return ChatCompletion.model_validate({
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
            "choices": [{"index": 0, "finish_reason": "length", "logprobs": logprobs,
                         "message": {"role": "assistant", "content": content}}]})

    prob, pt, ct = _parse(completion("Pass", [("Pass", -0.5), ("A", -1.0), (" B", -2.0), ("a", -3.0)]))
    assert (pt, ct) == (7, 1)
    assert prob == pytest.approx((0.3679 + 0.0498) / (0.3679 + 0.0498 + 0.1353), rel=1e-3)
    assert _parse(completion("B", None))[0] == 0.0
    assert _parse(completion("A.", []))[0] == 1.0
    with pytest.raises(ValueError, match="unparseable"):
        _parse(completion("Pass", [("Pass", -0.1), ("The", -2.0)]))
