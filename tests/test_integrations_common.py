"""Both integrations against the core API: same order, optional extras, max_concurrency, validation."""

from __future__ import annotations

import asyncio
import importlib
import sys

import pytest

pytest.importorskip("langchain_core", reason='pip install "activeprp[langchain]"')
pytest.importorskip("llama_index.core", reason='pip install "activeprp[llama-index]"')
from integration_data import noveleval
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from activeprp_core import Candidate, SimulatedComparator, rerank
from activeprp_core.settings import ONLINE
from activeprp_integrations.langchain import ActivePRPRerank as LCRerank
from activeprp_integrations.llama_index import ActivePRPRerank as LIRerank
from tests.conftest import Recorder


def _case(query_index: int = 1, n: int = 12, judge=SimulatedComparator):
    query, passages, grades = noveleval(query_index, n)
    comparator = judge(grades, doc_noise=0.6, position_bias=0.4, pair_noise=0.8, seed=5)
    return query, passages, comparator


def _three_ways(query, passages, comparator, **fields):
    """Top ids and scores from the core API, LangChain (sync + async) and LlamaIndex (sync + async)."""
    cands = [Candidate(d, t, {}) for d, t in passages]
    top_n = fields["top_n"]
    core = rerank(query, cands, comparator=comparator, ranker=fields["ranker"], oracle=fields["oracle"],
                  budget=fields["budget"], top_k=top_n, seed=fields["seed"],
                  max_rounds=fields.get("max_rounds", ONLINE.max_rounds))  # the wrappers' default round cap
    core_top = [(cands[i].id, core.scores[i]) for i in core.order[:top_n]]

    docs = [Document(page_content=t, id=d) for d, t in passages]
    lc = LCRerank(comparator=comparator, **fields)
    lc_sync = [(x.id, x.metadata["relevance_score"]) for x in lc.compress_documents(docs, query)]
    lc_async = [(x.id, x.metadata["relevance_score"]) for x in asyncio.run(lc.acompress_documents(docs, query))]

    nodes = [NodeWithScore(node=TextNode(id_=d, text=t), score=1.0) for d, t in passages]
    li = LIRerank(comparator=comparator, **fields)
    li_sync = [(x.node.node_id, x.score) for x in li.postprocess_nodes(nodes, QueryBundle(query))]
    li_async = [(x.node.node_id, x.score) for x in asyncio.run(li.apostprocess_nodes(nodes, QueryBundle(query)))]
    return core, core_top, [lc_sync, lc_async, li_sync, li_async]


@pytest.mark.parametrize(("ranker", "oracle", "budget", "rounds"), [
    ("mohajer", "randomized", 40, {}), ("auto", "bidirectional", 30, {}), ("auto", "auto", 50, {}),
    ("heapsort", "randomized", None, {"max_rounds": None}), ("quicksort", "single", 15, {"max_rounds": 3}),
    ("parallel_mohajer", "randomized", None, {}),
])
def test_same_order_through_langchain_llama_index_and_core(ranker, oracle, budget, rounds):
    query, passages, comparator = _case()
    prior = [d for d, _ in passages]
    orders = set()
    for seed in (0, 1, 2):
        fields = dict(ranker=ranker, oracle=oracle, budget=budget, top_n=5, seed=seed, **rounds)
        core, core_top, others = _three_ways(query, passages, comparator, **fields)
        for got in others:
            assert got == core_top
        assert core.calls <= (budget if budget is not None else core.calls)
        orders.add(tuple(d for d, _ in core_top))
    assert any(list(o) != prior[:5] for o in orders), "reranking never changed the prior order: a vacuous check"


@pytest.mark.parametrize(("module", "framework", "extra"), [
    ("activeprp_integrations.langchain", "langchain_core", "activeprp[langchain]"),
    ("activeprp_integrations.llama_index", "llama_index", "activeprp[llama-index]"),
])
def test_missing_framework_names_the_extra(monkeypatch, module, framework, extra):
    for name in [m for m in sys.modules if m == framework or m.startswith(framework + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: the import raises ImportError
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=extra.replace("[", r"\[").replace("]", r"\]")):
        importlib.import_module(module)


def test_max_concurrency_caps_batches_without_changing_the_order():
    query, passages, free = _case(2, 16, judge=Recorder)
    docs = [Document(page_content=t, id=d) for d, t in passages]
    capped = _case(2, 16, judge=Recorder)[2]
    kw = dict(ranker="mohajer", budget=60, top_n=4)
    want = [d.id for d in LCRerank(comparator=free, **kw).compress_documents(docs, query)]
    assert max(free.sizes) > 2  # rounds are batched: the cap below has something to cut
    reranker = LCRerank(comparator=capped, max_concurrency=2, **kw)
    assert [d.id for d in reranker.compress_documents(docs, query)] == want
    assert [d.id for d in asyncio.run(reranker.acompress_documents(docs, query))] == want
    assert capped.batches and max(capped.sizes) <= 2
    assert capped.abatches and max(map(len, capped.abatches)) <= 2
    assert sum(capped.sizes) == sum(free.sizes)  # same calls, only split


class _InFlight:
    """An async comparator that counts the calls (pairs) in flight per query while it sleeps."""

    def __init__(self, inner):
        self.inner, self.now, self.peak = inner, {}, {}
        self.max_concurrency = 8

    def compare(self, query, pairs):
        raise AssertionError("acompare must be used")

    async def acompare(self, query, pairs):
        self.now[query] = self.now.get(query, 0) + len(pairs)
        self.peak[query] = max(self.peak.get(query, 0), self.now[query])
        await asyncio.sleep(0.002)
        self.now[query] -= len(pairs)
        return self.inner.compare(query, pairs)


@pytest.mark.parametrize("cls", [LCRerank, LIRerank])
def test_rerankers_sharing_a_comparator_keep_their_own_caps_and_never_change_it(cls):
    (q1, p1, comparator), (q2, p2, _) = _case(1, 16), _case(2, 16)
    shared = _InFlight(comparator)
    before = dict(vars(shared))
    one, four = (cls(comparator=shared, ranker="mohajer", budget=40, top_n=3, max_concurrency=c) for c in (1, 4))

    async def both():
        if cls is LCRerank:
            return await asyncio.gather(one.acompress_documents([Document(page_content=t, id=d) for d, t in p1], q1),
                                        four.acompress_documents([Document(page_content=t, id=d) for d, t in p2], q2))
        nodes = [[NodeWithScore(node=TextNode(id_=d, text=t)) for d, t in p] for p in (p1, p2)]
        return await asyncio.gather(one.apostprocess_nodes(nodes[0], QueryBundle(q1)),
                                    four.apostprocess_nodes(nodes[1], QueryBundle(q2)))

    asyncio.run(both())
    assert shared.peak[q1] == 1 and shared.peak[q2] == 4  # rounds of the 16-candidate tournament hold > 4 pairs
    assert shared.max_concurrency == 8 and {k: v for k, v in vars(shared).items() if k not in ("now", "peak")} == {
        k: v for k, v in before.items() if k not in ("now", "peak")}


@pytest.mark.parametrize("cls", [LCRerank, LIRerank])
@pytest.mark.parametrize("bad", [{"ranker": "nope"}, {"oracle": "nope"}, {"budget": -1}, {"top_n": 0},
                                 {"max_concurrency": 0}, {"not_a_field": 1}, {"max_rounds": -2},
                                 {"on_failure": "ignore"}])
def test_invalid_settings_fail_at_construction(cls, bad):
    with pytest.raises(ValueError):
        cls(comparator=SimulatedComparator({}), **bad)


@pytest.mark.parametrize("cls", [LCRerank, LIRerank])
@pytest.mark.parametrize("bad", [{"budget": True}, {"top_n": 2.5}, {"max_rounds": "3"}, {"comparator": None},
                                 {"comparator": object()}])
def test_mistyped_settings_fail_at_construction(cls, bad):
    with pytest.raises(TypeError):
        cls(**{"comparator": SimulatedComparator({}), **bad})


@pytest.mark.parametrize("cls", [LCRerank, LIRerank])
def test_numpy_integers_are_accepted(cls):
    np = pytest.importorskip("numpy")
    reranker = cls(comparator=SimulatedComparator({}), budget=np.int64(7), top_n=np.int32(2), max_rounds=np.int8(3))
    assert (reranker.budget, reranker.top_n, reranker.max_rounds) == (7, 2, 3)


@pytest.mark.parametrize("cls", [LCRerank, LIRerank])
def test_from_openai_builds_the_comparator_and_keeps_the_fields(cls):
    pytest.importorskip("openai")
    from activeprp_core.comparators import OpenAIChatComparator

    reranker = cls.from_openai("some-model", base_url="http://127.0.0.1:9/v1", api_key="k", budget=7,
                               max_concurrency=3, comparator_kwargs={"max_passage_words": 50})
    comparator = reranker.comparator
    assert isinstance(comparator, OpenAIChatComparator) and comparator.model == "some-model"
    assert comparator.max_passage_words == 50 and reranker.budget == 7
    assert reranker.max_concurrency == 3 and comparator.max_concurrency == 8  # the cap is the reranker's, per call


@pytest.mark.slow
def test_from_local_model_reranks_with_the_bundled_model():
    pytest.importorskip("torch")
    reranker = LIRerank.from_local_model(budget=3, top_n=2, oracle="randomized")
    from activeprp_core.comparators import TransformersComparator

    assert isinstance(reranker.comparator, TransformersComparator) and reranker.comparator.mode == "query_likelihood"
    assert "prp_prompt" in reranker._get_prompts() and "ql_prompt" in reranker._get_prompts()
    passages = ["Bananas are yellow fruit rich in potassium.",
                "The Eiffel Tower in Paris was completed in 1889 for the World's Fair.",
                "Stock markets fell on Monday."]
    nodes = [NodeWithScore(node=TextNode(id_=str(i), text=t)) for i, t in enumerate(passages)]
    query = "When was the Eiffel Tower built?"
    out = reranker.postprocess_nodes(nodes, query_str=query)
    assert [n.node.node_id for n in out][0] == "1"  # query likelihood prefers the passage that answers it
    # the three-way equality holds with the real model too
    core, core_top, others = _three_ways(query, [(str(i), t) for i, t in enumerate(passages)], reranker.comparator,
                                         ranker="auto", oracle="randomized", budget=3, top_n=2, seed=0)
    assert core_top == [(n.node.node_id, n.score) for n in out] and all(o == core_top for o in others)
