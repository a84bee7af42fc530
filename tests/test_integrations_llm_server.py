"""The framework's own LLM as the judge against a real OpenAI-compatible server (llama-cpp-python serving the
bundled GGUF on loopback): LangChain ``ChatOpenAI`` and LlamaIndex ``OpenAILike`` through
``ActivePRPRerank(llm=...)`` order the documents exactly as ``OpenAIChatComparator`` does on the same endpoint,
within the call budget. No network beyond 127.0.0.1."""

from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest
from _llm_server import FaultProxy, demo_query

from activeprp_core.comparators import OpenAIChatComparator

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

WORDS, N_DOCS, BUDGET = 20, 4, 4  # short passages and a small budget keep this to seconds on 2 CPU cores


@pytest.fixture(scope="module")
def query_and_docs():
    return demo_query(WORDS, N_DOCS, cut=True)


def test_chat_openai_and_openai_like_rank_as_the_openai_comparator_on_the_same_server(server, query_and_docs):
    """The drop-in wrappers, async paths, through a counting proxy: the same documents in the same order from the
    same number of requests (within the budget); and, sync, the same P(A) and tokens for one pair."""
    query, cands = query_and_docs
    proxy = FaultProxy(server.url.removesuffix("/v1"), lambda key, attempt: "ok")
    try:
        chat = ChatOpenAI(model="smollm2", base_url=proxy.url, api_key="k", logprobs=True, timeout=120.0)
        like = OpenAILike(model="smollm2", api_base=proxy.url, api_key="k", is_chat_model=True, timeout=120.0)
        api = OpenAIChatComparator("smollm2", base_url=proxy.url, api_key="k", timeout=120.0)
        kw = {"budget": BUDGET, "seed": 7, "max_rounds": None}
        docs = [Document(page_content=c.text, id=c.id) for c in cands]
        nodes = [NodeWithScore(node=TextNode(text=c.text, id_=c.id)) for c in cands]
        runs = {
            "openai": lambda: lc.ActivePRPRerank(comparator=api, top_n=None, **kw).acompress_documents(docs, query),
            "langchain": lambda: lc.ActivePRPRerank(llm=chat, top_n=None, **kw).acompress_documents(docs, query),
            "llama_index": lambda: li.ActivePRPRerank(llm=like, top_n=N_DOCS, **kw).apostprocess_nodes(
                nodes, QueryBundle(query)),
        }
        order, requests, seconds = {}, {}, {}
        for name, run in runs.items():
            before, start = proxy_requests(proxy), time.monotonic()
            out = asyncio.run(run())
            seconds[name], requests[name] = round(time.monotonic() - start, 1), proxy_requests(proxy) - before
            order[name] = [getattr(x, "id", None) or x.node.node_id for x in out]
        judges = {"openai": api, "langchain": lc.ChatModelComparator(chat), "llama_index": li.LLMComparator(like)}
        one = {name: judge.judge(query, [(cands[0], cands[1])])[0] for name, judge in judges.items()}
    finally:
        proxy.close()
    print("seconds", seconds, "requests", requests, "order", order["openai"])

    assert sorted(order["openai"]) == sorted(c.id for c in cands) and 0 < requests["openai"] <= BUDGET
    assert order["langchain"] == order["openai"] and order["llama_index"] == order["openai"]
    assert requests["langchain"] == requests["openai"] == requests["llama_index"]
    assert one["langchain"].prob == pytest.approx(one["openai"].prob) == one["llama_index"].prob
    assert {(j.prompt_tokens, j.completion_tokens) for j in one.values()} == {(one["openai"].prompt_tokens, 1)}


def proxy_requests(proxy: FaultProxy) -> int:
    return sum(len(seq) for seq in proxy.log.values())
