"""The framework's own LLM as the judge against a real OpenAI-compatible server (llama-cpp-python serving the
bundled GGUF on loopback): LangChain ``ChatOpenAI`` and LlamaIndex ``OpenAILike`` through
``ActivePRPRerank(llm=...)`` order the documents exactly as ``OpenAIChatComparator`` does on the same endpoint,
within the call budget. No network beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest
from _llm_server import LlamaServer

from activeprp_core import Candidate, arerank
from activeprp_core.cli.demo import load_demo_queries
from activeprp_core.comparators import OpenAIChatComparator
from activeprp_core.comparators.hf import bundled_gguf_path

for module in ("llama_cpp", "langchain_openai", "llama_index.llms.openai_like"):
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (llama-cpp-python[server], activeprp[langchain-openai], "
                    "activeprp[llama-index-openai])", allow_module_level=True)

from langchain_core.documents import Document  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402
from llama_index.llms.openai_like import OpenAILike  # noqa: E402

from activeprp_integrations import langchain as lc  # noqa: E402
from activeprp_integrations import llama_index as li  # noqa: E402

WORDS, N_DOCS, BUDGET = 20, 6, 10  # short passages and a small budget keep this around a minute on 2 CPU cores


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LlamaServer(bundled_gguf_path(), tmp_path_factory.mktemp("llama") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def query_and_docs():
    row = load_demo_queries()[0]
    distinct = {" ".join(h["content"].split()[:WORDS]): h for h in reversed(row["hits"])}
    hits = sorted(distinct.values(), key=lambda h: h["rank"])[:N_DOCS]
    return row["query"], [Candidate(h["docid"], " ".join(h["content"].split()[:WORDS])) for h in hits]


def test_chat_openai_and_openai_like_rank_as_the_openai_comparator_on_the_same_server(server, query_and_docs):
    query, cands = query_and_docs
    chat = ChatOpenAI(model="smollm2", base_url=server.url, api_key="k", logprobs=True, timeout=120.0)
    like = OpenAILike(model="smollm2", api_base=server.url, api_key="k", is_chat_model=True, timeout=120.0)
    judges = {"openai": OpenAIChatComparator("smollm2", base_url=server.url, api_key="k", timeout=120.0),
              "langchain": lc.ActivePRPRerank(llm=chat).comparator,
              "llama_index": li.ActivePRPRerank(llm=like).comparator}
    kw = {"ranker": "auto", "oracle": "auto", "budget": BUDGET, "seed": 7, "max_rounds": None, "top_k": N_DOCS}
    results, seconds = {}, {}
    for name, judge in judges.items():
        start = time.monotonic()
        results[name] = asyncio.run(arerank(query, cands, comparator=judge, **kw))
        seconds[name] = round(time.monotonic() - start, 1)
    # the drop-in wrappers themselves (sync paths), with the same settings: the same documents in the same order
    wrapper_kw = {"budget": BUDGET, "seed": 7, "max_rounds": None}
    docs = lc.ActivePRPRerank(llm=chat, top_n=None, **wrapper_kw).compress_documents(
        [Document(page_content=c.text, id=c.id) for c in cands], query)
    nodes = li.ActivePRPRerank(llm=like, top_n=N_DOCS, **wrapper_kw).postprocess_nodes(
        [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in cands], QueryBundle(query))
    print("seconds", seconds, "calls", {k: r.calls for k, r in results.items()}, "order", results["openai"].order)

    expected = results["openai"]
    assert 0 < expected.calls <= BUDGET and expected.failed_calls == 0
    for name in ("langchain", "llama_index"):
        assert results[name].order == expected.order and results[name].calls == expected.calls, name
        assert results[name].prompt_tokens == expected.prompt_tokens, name  # the same prompts, token for token
    ids = [cands[i].id for i in expected.order]
    assert [d.id for d in docs] == ids and [n.node.node_id for n in nodes] == ids
    one = {name: judge.judge(query, [(cands[0], cands[1])])[0] for name, judge in judges.items()}  # sync paths
    assert one["langchain"].prob == pytest.approx(one["openai"].prob) == one["llama_index"].prob
    assert {(j.prompt_tokens, j.completion_tokens) for j in one.values()} == {(one["openai"].prompt_tokens, 1)}
