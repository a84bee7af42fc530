"""The LangChain compressor: outputs, no mutation, tracing, native async, ContextualCompressionRetriever, LCEL."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

pytest.importorskip("langchain_core", reason='pip install "activeprp[langchain]"')
pytest.importorskip("langchain_classic", reason='pip install "activeprp[langchain]"')
from integration_data import noveleval
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tracers.context import collect_runs

from activeprp_core import Candidate, SimulatedComparator, rerank
from activeprp_integrations.langchain import RANK_KEY, SCORE_KEY, ActivePRPRerank


class OverlapRetriever(BaseRetriever):
    """A small real retriever: the k documents sharing the most lower-cased words with the query."""

    docs: list[Document]
    k: int = 8

    def _get_relevant_documents(self, query, *, run_manager):
        words = set(query.lower().split())
        return sorted(self.docs, key=lambda d: -len(words & set(d.page_content.lower().split())))[: self.k]


@pytest.fixture
def case():
    query, passages, grades = noveleval(0, 12)
    docs = [Document(page_content=t, id=d, metadata={"source": "noveleval", "nested": {"pos": i}})
            for i, (d, t) in enumerate(passages)]
    return query, docs, SimulatedComparator(grades, doc_noise=0.3, seed=1)


def _runs(cb, name="ActivePRPRerank"):
    def walk(run):
        yield run
        for child in run.child_runs:
            yield from walk(child)

    return [r for root in cb.traced_runs for r in walk(root) if r.name == name]


def test_returns_new_documents_with_scores_and_keeps_inputs(case):
    query, docs, comparator = case
    before = copy.deepcopy(docs)
    out = ActivePRPRerank(comparator=comparator, budget=40).compress_documents(docs, query)
    assert docs == before  # inputs untouched (metadata included)
    assert len(out) == 3  # top_n defaults to 3
    by_id = {d.id: d for d in docs}
    for rank, d in enumerate(out, start=1):
        src = by_id[d.id]
        assert d is not src and d.page_content == src.page_content
        assert {k: v for k, v in d.metadata.items() if k not in (SCORE_KEY, RANK_KEY)} == src.metadata
        assert d.metadata[RANK_KEY] == rank
        assert 0.0 < d.metadata[SCORE_KEY] <= 1.0
    scores = [d.metadata[SCORE_KEY] for d in out]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    # the score is RerankResult.scores of the core call with the same settings
    cands = [Candidate(d.id, d.page_content) for d in docs]
    core = rerank(query, cands, ranker="auto", comparator=comparator, budget=40, top_k=3)
    assert [(cands[i].id, core.scores[i]) for i in core.order[:3]] == [(d.id, d.metadata[SCORE_KEY]) for d in out]


def test_changing_the_outputs_nested_metadata_leaves_the_inputs_as_they_were(case):
    """The outputs' metadata was a shallow copy: a value nested in it was the input document's own object, so
    changing it changed the caller's document. It is a deep copy now (as Cohere's CohereRerank makes), sync and
    async."""
    query, docs, comparator = case
    before = copy.deepcopy(docs)
    reranker = ActivePRPRerank(comparator=comparator, budget=20, top_n=None)
    for out in (reranker.compress_documents(docs, query), asyncio.run(reranker.acompress_documents(docs, query))):
        for d in out:
            d.metadata["nested"]["pos"] = -1
            d.metadata["source"] = "changed"
        assert docs == before


def test_metadata_that_cannot_be_copied_is_refused_before_any_call(case):
    """The outputs' metadata is a deep copy; made after the rerank, a value that cannot be copied (here a lock)
    raised once the calls were spent, and the paid order was lost. The copy is made before any call (in both
    wrappers: ``_common.make_candidates``), and the error says what to change."""
    import threading

    from activeprp_integrations._common import make_candidates

    query, docs, comparator = case
    locked = [*docs[:2], Document(page_content="x", metadata={"lock": threading.Lock()}), *docs[2:]]

    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def compare(self, query, pairs):
            self.calls += len(pairs)
            return comparator.compare(query, pairs)

    calls = Counting()
    with pytest.raises(TypeError, match=r"document 2: its metadata cannot be copied .*copy\.deepcopy can copy"):
        ActivePRPRerank(comparator=calls, budget=20).compress_documents(locked, query)
    assert calls.calls == 0
    with pytest.raises(TypeError, match="document 0"):
        make_candidates([("a", "text", {"lock": threading.Lock()})])


def test_top_n_none_returns_all_and_missing_ids_fall_back_to_positions(case):
    query, docs, comparator = case
    anonymous = [Document(page_content=d.page_content, metadata=d.metadata) for d in docs]
    out = ActivePRPRerank(comparator=comparator, budget=20, top_n=None).compress_documents(anonymous, query)
    assert len(out) == len(docs) and all(d.id is None for d in out)
    assert sorted(d.metadata[RANK_KEY] for d in out) == list(range(1, len(docs) + 1))
    assert min(d.metadata[SCORE_KEY] for d in out) == pytest.approx(1 / len(docs))


def test_empty_input_makes_no_call_in_a_run_with_stats_as_any_input(case):
    """Every call is a child run whose outputs hold ``stats``, as the class says: an empty input opened none, so a
    handler reading the run's stats (examples/openai_endpoint.py --docs 0) found nothing (review s68b F6)."""
    query, _, comparator = case
    reranker = ActivePRPRerank(comparator=comparator)
    with collect_runs() as cb:
        assert reranker.compress_documents([], query) == []
        assert asyncio.run(reranker.acompress_documents([], query)) == []
    assert comparator.calls == 0
    runs = _runs(cb)
    assert len(runs) == 2
    for run in runs:
        assert run.inputs["documents"] == [] and run.outputs["documents"] == []
        assert run.outputs["stats"]["calls"] == 0 and run.outputs["stats"]["budget"] == reranker.budget


def test_callbacks_get_a_child_run_with_stats(case):
    query, docs, comparator = case
    seen = []

    class Handler(BaseCallbackHandler):
        def on_chain_start(self, serialized, inputs, **kw):
            seen.append(("start", kw["name"], inputs["query"], len(inputs["documents"])))

        def on_chain_end(self, outputs, **kw):
            seen.append(("end", outputs["stats"], [d.id for d in outputs["documents"]]))

    out = ActivePRPRerank(comparator=comparator, budget=25).compress_documents(docs, query, callbacks=[Handler()])
    assert seen[0] == ("start", "ActivePRPRerank", query, len(docs))
    stats = seen[1][1]
    assert seen[1][2] == [d.id for d in out]
    assert stats["calls"] == comparator.calls and 0 < stats["calls"] <= 25
    assert stats["rounds"] >= 1 and isinstance(stats["exhausted"], bool)


def test_errors_are_reported_to_the_run_and_raised(case):
    query, docs, _ = case

    class Broken:
        def compare(self, query, pairs):
            return [2.0] * len(pairs)  # outside [0, 1]: the core refuses it

    errors = []

    class Handler(BaseCallbackHandler):
        def on_chain_error(self, error, **kw):
            errors.append(error)

    with pytest.raises(ValueError, match="outside"):
        ActivePRPRerank(comparator=Broken()).compress_documents(docs, query, callbacks=[Handler()])
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


def test_async_is_native_and_batched(case):
    query, docs, comparator = case

    class AsyncOnly:
        def __init__(self):
            self.batches = []

        def compare(self, query, pairs):
            raise AssertionError("the sync path must not run under acompress_documents")

        async def acompare(self, query, pairs):
            self.batches.append(len(pairs))
            await asyncio.sleep(0)
            return comparator.compare(query, pairs)

    judge = AsyncOnly()
    out = asyncio.run(ActivePRPRerank(comparator=judge, budget=40).acompress_documents(docs, query))
    want = ActivePRPRerank(comparator=comparator, budget=40).compress_documents(docs, query)
    assert [d.id for d in out] == [d.id for d in want]
    assert max(judge.batches) > 1  # a round's calls reach the comparator together


def test_contextual_compression_retriever_traces_the_rerank_as_a_child(case):
    query, docs, comparator = case
    reranker = ActivePRPRerank(comparator=comparator, budget=30, top_n=4)
    retriever = ContextualCompressionRetriever(base_compressor=reranker, base_retriever=OverlapRetriever(docs=docs))
    with collect_runs() as cb:
        out = retriever.invoke(query)
    aout = asyncio.run(retriever.ainvoke(query))
    retrieved = OverlapRetriever(docs=docs).invoke(query)
    assert [d.id for d in out] == [d.id for d in aout] == [d.id for d in reranker.compress_documents(retrieved, query)]
    (run,) = _runs(cb)
    assert run.parent_run_id == cb.traced_runs[0].id  # nested under the retriever's run
    assert run.outputs["stats"]["top_k"] == 4 and run.outputs["stats"]["calls"] <= 30
    assert run.outputs["stats"]["judge"]["answers"] == run.outputs["stats"]["calls"]


def test_lcel_chain(case):
    query, docs, comparator = case
    reranker = ActivePRPRerank(comparator=comparator, budget=30)
    retriever = OverlapRetriever(docs=docs)
    chain = ({"documents": retriever, "query": RunnablePassthrough()} | reranker.as_runnable()
             | RunnableLambda(lambda ds: [d.id for d in ds]))
    with collect_runs() as cb:
        ids = chain.invoke(query)
    assert ids == asyncio.run(chain.ainvoke(query))
    assert ids == [d.id for d in reranker.compress_documents(retriever.invoke(query), query)]
    (run,) = _runs(cb)
    assert run.parent_run_id is not None and run.outputs["stats"]["calls"] > 0
    # a hand-written lambda step is traced too: the compressor picks up the enclosing runnable's callbacks
    lam = {"d": retriever, "q": RunnablePassthrough()} | RunnableLambda(
        lambda x: reranker.compress_documents(x["d"], x["q"]))
    with collect_runs() as cb:
        assert [d.id for d in lam.invoke(query, config={"tags": ["rag"], "metadata": {"user": "u1"}})] == ids
    (run,) = _runs(cb)
    assert "rag" in run.tags and run.extra["metadata"]["user"] == "u1"  # the enclosing config is inherited


@pytest.mark.parametrize("documents, got", [(["a", "b"], "got str"), ("abc", "got str"), (None, "got NoneType"),
                                            ([Document(page_content="a"), {"page_content": "b"}], "got dict"),
                                            (Document(page_content="a"), "got Document"),
                                            ({"page_content": "a"}, "got dict")])
def test_documents_that_are_not_documents_are_a_type_error(case, documents, got):
    _, _, comparator = case
    reranker = ActivePRPRerank(comparator=comparator, budget=10)
    with pytest.raises(TypeError, match=f"langchain_core Document.*{got}"):
        reranker.compress_documents(documents, "q")
    with pytest.raises(TypeError, match=got):
        asyncio.run(reranker.acompress_documents(documents, "q"))


def test_the_runnable_names_the_input_keys_it_needs(case):
    query, docs, comparator = case
    runnable = ActivePRPRerank(comparator=comparator, budget=10).as_runnable()
    with pytest.raises(TypeError, match=r"keys 'documents' and 'query', got \['docs', 'query'\]"):
        runnable.invoke({"docs": docs, "query": query})
    with pytest.raises(TypeError, match="keys 'documents' and 'query', got list"):
        asyncio.run(runnable.ainvoke(docs))
    assert len(runnable.invoke({"documents": tuple(docs), "query": query})) == 3  # any iterable of Document


# ---- rebuilding and copying the compressor -------------------------------------------------------------------
def _judges():
    """A chat model and a comparator, and their state, to check that nothing below changes them."""
    from langchain_core.language_models import FakeListChatModel

    chat, comparator = FakeListChatModel(responses=["A"]), SimulatedComparator({}, seed=2)
    return chat, comparator, (chat.model_dump(), dict(vars(comparator)))


def test_rebuilt_from_its_own_fields_it_keeps_the_judge(case):
    """``ActivePRPRerank(**dict(r))`` and ``model_validate(dict(r))``: ``dict(r)`` holds ``llm`` and the judge built
    from it as ``comparator``; that judge is recognised as the llm's own (not a second judge) and kept."""
    from activeprp_integrations.langchain import ChatModelComparator

    query, docs, _ = case
    chat, comparator, before = _judges()
    for reranker in (ActivePRPRerank(llm=chat, budget=4, top_n=2, seed=5), ActivePRPRerank(comparator=comparator)):
        for rebuilt in (ActivePRPRerank(**dict(reranker)), ActivePRPRerank.model_validate(dict(reranker))):
            assert dict(rebuilt) == dict(reranker) and rebuilt.comparator is reranker.comparator
    rebuilt = ActivePRPRerank(**dict(ActivePRPRerank(llm=chat, budget=4, top_n=2)))
    assert rebuilt.llm is chat and rebuilt.comparator.llm is chat
    assert len(rebuilt.compress_documents(docs[:4], query)) == 2
    # a judge of that same model built by the user (other options) is that model's judge too: it is the one used
    own = ChatModelComparator(chat, max_attempts=1)
    assert ActivePRPRerank(comparator=own, llm=chat).comparator is own
    # a judge of another model, or another comparator, beside llm= is still two judges
    for second in (ChatModelComparator(chat.model_copy()), comparator):
        with pytest.raises(ValueError, match="both comparator= and llm="):
            ActivePRPRerank(comparator=second, llm=chat)
    # model_dump() turns the model into a dict, which no longer is a chat model: refused, saying what to do
    with pytest.raises(TypeError, match=r"got dict.*dict\(reranker\)"):
        ActivePRPRerank(**ActivePRPRerank(llm=chat).model_dump())
    assert ActivePRPRerank(**ActivePRPRerank(comparator=comparator).model_dump()).comparator is comparator
    # a wrapped model (.bind, .with_retry, .with_config, .with_fallbacks) is no chat model: told to pass the model
    for wrapped in (chat.bind(stop=["x"]), chat.with_retry(), chat.with_config(tags=["t"]),
                    chat.with_fallbacks([chat])):
        with pytest.raises(TypeError, match=rf"got {type(wrapped).__name__} \(a wrapped model: pass the chat model"):
            ActivePRPRerank(llm=wrapped)
    from langchain_core.language_models import FakeListLLM  # a text-completion model is no wrapped chat model

    with pytest.raises(TypeError, match=r"got FakeListLLM \(a text-completion model: the judge needs a chat model"):
        ActivePRPRerank(llm=FakeListLLM(responses=["A"]))
    assert (chat.model_dump(), dict(vars(comparator))) == before


def test_model_copy_checks_its_update_as_an_assignment_is():
    """pydantic's ``model_copy(update=...)`` validates nothing; the compressor's checks every updated field as an
    assignment does and refuses a name that is no field, so no copy holds a setting a constructor would refuse."""
    chat, comparator, before = _judges()
    reranker = ActivePRPRerank(llm=chat, budget=4)
    for update, error, message in (({"budget": -1}, ValueError, "budget"), ({"top_n": 0}, ValueError, "top_n"),
                                   ({"on_failure": "ignore"}, ValueError, "on_failure"),
                                   ({"budget": True}, TypeError, "budget"),
                                   ({"budgett": 3}, TypeError, r"no field.*budgett"),
                                   ({"llm": "gpt"}, TypeError, "BaseChatModel"),
                                   ({"comparator": comparator}, ValueError, "both comparator= and llm="),
                                   ({"llm": None}, TypeError, "needs a judge")):
        with pytest.raises(error, match=message):
            reranker.model_copy(update=update)
    copy = reranker.model_copy(update={"budget": 7, "top_n": None})
    assert (copy.budget, copy.top_n, copy.comparator) == (7, None, reranker.comparator)
    assert (reranker.budget, reranker.top_n) == (4, 3)  # the original is untouched
    switched = reranker.model_copy(update={"comparator": comparator, "llm": None})
    assert switched.comparator is comparator and switched.llm is None
    switched.comparator = reranker.comparator  # once llm is None, the old judge object is a comparator like any other
    assert switched.comparator is reranker.comparator
    assert (chat.model_dump(), dict(vars(comparator))) == before


# ---- pydantic's JSON of the compressor -----------------------------------------------------------------------
SECRET = "sk-test-" + "k" * 24


def test_model_dump_json_records_each_judge_without_its_secrets_and_the_compressor_still_reranks(case):
    """``model_dump_json()`` / ``model_dump(mode="json")`` (a trace's or a log's record of the configuration) raised
    pydantic's ``PydanticSerializationError`` on the comparator. Each judge is now LangChain's own record of it
    (``dumpd``, as a chat model's ``_serialized`` in tracing), with the model's key scrubbed even where LangChain
    knows no secret (a plain str field, shown in the repr LangChain records)."""
    from langchain_core.language_models import FakeListChatModel

    from activeprp_core.comparators import OpenAIChatComparator

    class KeyedChat(FakeListChatModel):
        api_key: str = ""

    query, docs, comparator = case
    chat = KeyedChat(responses=["A"], api_key=SECRET)
    remote = OpenAIChatComparator("m", base_url="http://127.0.0.1:9/v1", api_key=SECRET)
    for reranker in (ActivePRPRerank(comparator=comparator, budget=4), ActivePRPRerank(llm=chat, budget=4),
                     ActivePRPRerank(comparator=remote, budget=4)):
        text = reranker.model_dump_json()
        data = json.loads(text)
        assert data == reranker.model_dump(mode="json") and SECRET not in text
        assert data["budget"] == 4 and data["top_n"] == 3
        assert data["comparator"]["id"][-1] == type(reranker.comparator).__name__
        assert reranker.model_dump()["comparator"] is reranker.comparator  # python mode: the objects, as before
    assert data["llm"] is None
    keyed = json.loads(ActivePRPRerank(llm=chat).model_dump_json())["llm"]
    assert keyed["id"][-1] == "KeyedChat" and "api_key='***'" in keyed["repr"]
    for reranker in (ActivePRPRerank(comparator=comparator, budget=4), ActivePRPRerank(llm=chat, budget=4)):
        reranker.model_dump_json()
        assert len(reranker.compress_documents(docs[:4], query)) == 3
    assert chat.api_key == SECRET


def test_model_dump_json_of_a_chat_openai_judge_holds_langchains_reference_to_its_key():
    """ChatOpenAI's key (``lc_secrets``) is recorded as LangChain records it: a reference to ``OPENAI_API_KEY``."""
    langchain_openai = pytest.importorskip("langchain_openai")

    llm = langchain_openai.ChatOpenAI(model="gpt-4o-mini", api_key=SECRET)
    text = ActivePRPRerank(llm=llm).model_dump_json()
    recorded = json.loads(text)["llm"]
    assert SECRET not in text and recorded["id"][-1] == "ChatOpenAI"
    assert recorded["kwargs"]["openai_api_key"] == {"lc": 1, "type": "secret", "id": ["OPENAI_API_KEY"]}
    assert recorded["kwargs"]["model_name"] == "gpt-4o-mini"
