"""Wall time of README's LangChain snippet, ``ActivePRPRerank(llm=ChatOpenAI(...), top_n=3)``, on a 20-document
rerank against an OpenAI-compatible judge that answers each call after ``--delay`` seconds (0.5 by default).

The judge is ``serve_production.py``'s (uvicorn on 127.0.0.1, A or B by a hash of the prompt, with logprobs); the
documents are the BM25 top 20 of the first ``--queries`` DL19 queries. Per query, three reranks over HTTP:

- ``default``: README's snippet as written: the ``llm=`` judge's own cap, ``MAX_CONCURRENCY`` (8) calls in flight;
- ``max_concurrency=16``: the same reranker with ``max_concurrency=16`` (every round's calls in flight at once);
- ``rounds``: the default again, its judge wrapped to note each round's calls (the sizes, and the modelled time:
  the sum over rounds of ceil(calls / in flight) x delay).

Run (repository root, ../shared/data beside it):
    python benchmarks/wrapper_walltime.py --data ../shared/data --out benchmarks/results/latency_walltime/wrapper.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from serve_production import Judge  # noqa: E402

from activeprp_bench import load_named  # noqa: E402
from activeprp_bench.instrumented import RoundRecorder  # noqa: E402
from activeprp_core.comparators.remote import MAX_CONCURRENCY  # noqa: E402
from activeprp_integrations.langchain import ActivePRPRerank, ChatModelComparator  # noqa: E402


class Stats(BaseCallbackHandler):
    """Keeps the ``stats`` (``RerankResult.stats()``) of the last rerank run."""

    stats: dict = {}

    def on_chain_end(self, outputs, **kwargs) -> None:
        if isinstance(outputs, dict) and "stats" in outputs:
            self.stats = outputs["stats"]


def timed(reranker: ActivePRPRerank, docs: list[Document], query: str) -> tuple[float, dict]:
    handler = Stats()
    started = time.perf_counter()
    reranker.compress_documents(docs, query, callbacks=[handler])
    return time.perf_counter() - started, handler.stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--queries", type=int, default=3, help="DL19 queries (default 3)")
    p.add_argument("--delay", type=float, default=0.5, help="seconds the judge takes per call (default 0.5)")
    args = p.parse_args()
    coll = load_named("dl19", args.data).subset(args.queries, 20)
    lines = [f"README's `ActivePRPRerank(llm=ChatOpenAI(...), top_n=3)` on DL19's BM25 top 20, judge at "
             f"{args.delay} s per call over HTTP on 127.0.0.1 (`python benchmarks/wrapper_walltime.py`).", "",
             f"| qid | runs as | calls | rounds | calls per round | default ({MAX_CONCURRENCY} in flight) s "
             f"| modelled at {MAX_CONCURRENCY} s | max_concurrency=16 s | modelled at 16 s |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    with Judge(args.delay) as judge:
        llm = ChatOpenAI(model="fake", logprobs=True, base_url=f"{judge.url}/v1", api_key="sk-fake")
        for qid in coll.qids:
            query, docs = coll.queries[qid], [Document(c.text) for c in coll.candidates[qid]]
            default_s, stats = timed(ActivePRPRerank(llm=llm, top_n=3), docs, query)
            wide_s, _ = timed(ActivePRPRerank(llm=llm, top_n=3, max_concurrency=16), docs, query)
            recorder = RoundRecorder(ChatModelComparator(llm))
            timed(ActivePRPRerank(comparator=recorder, top_n=3), docs, query)
            modelled = {k: sum(math.ceil(n / k) for n in recorder.batches) * args.delay for k in (MAX_CONCURRENCY, 16)}
            sizes = " ".join(map(str, recorder.batches))
            lines.append(f"| {qid} | {stats['ranker']}/{stats['oracle']} | {stats['calls']} | {stats['rounds']} "
                         f"| {sizes} | {default_s:.2f} | {modelled[MAX_CONCURRENCY]:.2f} | {wide_s:.2f} "
                         f"| {modelled[16]:.2f} |")
            print(lines[-1], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
