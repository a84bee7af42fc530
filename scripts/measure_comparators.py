"""Per-call latency of the real comparators on this machine (for the README and issue reports).

    python scripts/measure_comparators.py hf [--pairs 8 --passage-tokens 128]
    python scripts/measure_comparators.py openai [--pairs 8 --passage-tokens 128]   # starts llama.cpp on loopback
    python scripts/measure_comparators.py faults [--queries 4 --candidates 10 --budget 15]
    python scripts/measure_comparators.py errors [--candidates 10 --repeats 3]        # no model needed

hf: the bundled SmolLM2-135M in both modes, one pair per call (batch_size=1) and all pairs in one call
(batch_size=--pairs); also how often the A/B mode prefers slot A. openai: OpenAIChatComparator against a local
llama-cpp-python server on the bundled GGUF, sequential calls vs one concurrent round (max_concurrency=--pairs).
faults: ``arerank`` and ``rerank`` of bundled DL19 queries through OpenAIChatComparator -> a fault-injecting proxy
(tests/_llm_server.py, ``mixed_plan``: 429, 5xx, dropped connections, malformed bodies, non-A/B answers) -> the
llama.cpp server (circuit breaker off: the faults are the point); checks every output is a permutation within the
budget and that the stats match the proxy log. errors: time from the call to the exception with default settings
(``OpenAIChatComparator(model, base_url, api_key)``, ``rerank(..., budget=50)`` and the LangChain wrapper's
defaults) against a fault server (tests/_llm_server.py ``FaultServer``) answering 401, 404 or 500 to everything,
and against a closed port (connection refused).
Pairs: consecutive BM25 hits of the first bundled TREC DL19 query.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from activeprp_cli.demo import load_demo_queries
from activeprp_core import Candidate


def pairs_of(n: int) -> tuple[str, list[tuple[Candidate, Candidate]]]:
    row = load_demo_queries()[0]
    hits = [Candidate(h["docid"], h["content"]) for h in row["hits"][: 2 * n]]
    return row["query"], [(hits[2 * i], hits[2 * i + 1]) for i in range(n)]


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure_hf(args: argparse.Namespace) -> None:
    from activeprp_core.comparators import TransformersComparator

    query, pairs = pairs_of(args.pairs)
    load_s, _ = timed(lambda: TransformersComparator.from_bundled(batch_size=1))
    print(f"bundled model load (safetensors cache): {load_s:.1f} s")
    for mode in ("ab", "query_likelihood"):
        unit = "prompt" if mode == "ab" else "passage"
        for batch in (1, args.pairs):
            comp = TransformersComparator.from_bundled(mode, batch_size=batch, max_passage_tokens=args.passage_tokens)
            if batch == 1:
                secs, judgments = timed(lambda c=comp: [j for p in pairs for j in c.judge(query, [p])])
            else:
                secs, judgments = timed(lambda c=comp: c.judge(query, pairs))
            tokens = sum(j.prompt_tokens for j in judgments) / comp.scored_prompts
            print(f"{mode:>16} batch_size={batch}: {secs / len(pairs):.2f} s/pair, "
                  f"{secs / comp.scored_prompts:.2f} s/{unit} ({comp.scored_prompts} {unit}s, "
                  f"{tokens:.0f} tokens each)")
        if mode == "ab":
            both = comp.compare(query, pairs + [(b, a) for a, b in pairs])
            print(f"{'ab':>16} slot A preferred in {sum(p > 0.5 for p in both)}/{len(both)} prompts "
                  f"(both orders of {len(pairs)} pairs); mean P(A) {sum(both) / len(both):.3f}")


def start_server():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import _llm_server

    from activeprp_core.comparators.hf import bundled_gguf_path

    return _llm_server, _llm_server.LlamaServer(bundled_gguf_path(), Path(tempfile.mkdtemp()) / "llama.log")


def measure_faults(args: argparse.Namespace) -> None:
    from activeprp_core import arerank, rerank
    from activeprp_core.comparators import OpenAIChatComparator

    helpers, server = start_server()
    totals = dict.fromkeys(("runs", "calls", "faults", "failed", "retries", "permutations", "within_budget"), 0)
    try:
        for q, row in enumerate(load_demo_queries()[: args.queries]):
            distinct = {" ".join(h["content"].split()[:20]): h for h in reversed(row["hits"])}
            hits = sorted(distinct.values(), key=lambda h: h["rank"])[: args.candidates]
            cands = [Candidate(h["docid"], h["content"]) for h in hits]
            for use_async in (True, False):
                proxy = helpers.FaultProxy(server.url.removesuffix("/v1"), helpers.mixed_plan, retry_after="0")
                comp = OpenAIChatComparator("smollm2", base_url=proxy.url, api_key="k", max_passage_words=20,
                                            max_attempts=3, max_concurrency=4, backoff_initial=0.05, backoff_max=0.5)
                kw = {"comparator": comp, "budget": args.budget, "top_k": 5, "seed": q,
                      "max_consecutive_failures": None}
                r = asyncio.run(arerank(row["query"], cands, **kw)) if use_async else rerank(row["query"], cands, **kw)
                proxy.close()
                assert r.calls == len(proxy.log) and r.retries == sum(len(s) - 1 for s in proxy.log.values())
                assert r.failed_calls == sum(s[-1] != "ok" for s in proxy.log.values())
                for key, value in (("runs", 1), ("calls", r.calls), ("faults", proxy.injected()),
                                   ("failed", r.failed_calls), ("retries", r.retries),
                                   ("permutations", sorted(r.order) == list(range(len(cands)))),
                                   ("within_budget", r.calls <= args.budget)):
                    totals[key] += value
                print(f"query {row['qid']} {'async' if use_async else 'sync '}: calls {r.calls}/{args.budget}, "
                      f"injected faults {proxy.injected()}, retries {r.retries}, failed calls {r.failed_calls}, "
                      f"rounds {r.rounds}, max in flight {proxy.max_inflight}, {r.wall_time_s:.1f} s")
    finally:
        server.stop()
    print("totals:", totals)


def measure_errors(args: argparse.Namespace) -> None:
    import statistics

    from activeprp_core import rerank
    from activeprp_core.comparators import OpenAIChatComparator

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _llm_server import FaultServer, Reply, closed_port_url, error_body
    from langchain_core.documents import Document

    from activeprp_integrations.langchain import ActivePRPRerank

    row = load_demo_queries()[0]
    cands = [Candidate(h["docid"], h["content"]) for h in row["hits"][: args.candidates]]

    def core(ranker: str):
        return lambda url: rerank(row["query"], cands, ranker=ranker, budget=50,
                                  comparator=OpenAIChatComparator("m", base_url=url, api_key="sk-measure"))

    def langchain(url: str):
        reranker = ActivePRPRerank.from_openai("m", base_url=url, api_key="sk-measure")
        docs = [Document(page_content=c.text, id=c.id) for c in cands]
        return reranker.compress_documents(docs, row["query"])

    answers = {"401": Reply(401, error_body("Incorrect API key provided")),
               "404": Reply(404, error_body("The model `m` does not exist")),
               "500": Reply(500, error_body("internal error"))}
    cases = [(kind, name, run) for kind in ("401", "404", "refused", "500")
             for name, run in (("rerank mohajer (default)", core("mohajer")), ("rerank bubblesort", core("bubblesort")),
                               ("LangChain wrapper defaults", langchain))]
    print(f"N={len(cands)} candidates, budget 50, default comparator settings; {args.repeats} runs each")
    for kind, name, run in cases:
        times, outcome, requests = [], "", []
        for _ in range(args.repeats):
            server = FaultServer(lambda request, kind=kind: answers[kind], max_requests=10_000, max_seconds=600) \
                if kind != "refused" else None
            start = time.perf_counter()
            try:
                run(server.url if server else closed_port_url())
                outcome = "no exception"
            except Exception as err:
                outcome = f"{type(err).__name__} (status {getattr(err, 'status_code', None)})"
            times.append(time.perf_counter() - start)
            if server:
                requests.append(server.requests)
                server.close()
        print(f"{kind:>7} {name:<28} {outcome:<38} median {statistics.median(times):6.2f} s "
              f"(min {min(times):.2f}, max {max(times):.2f}); requests {requests or 'n/a'}")


def measure_openai(args: argparse.Namespace) -> None:
    from activeprp_core.comparators import OpenAIChatComparator

    query, pairs = pairs_of(args.pairs)
    _, server = start_server()
    try:
        comp = OpenAIChatComparator("smollm2", base_url=server.url, api_key=os.environ.get("OPENAI_API_KEY", "k"),
                                    max_passage_words=args.passage_tokens, max_concurrency=args.pairs)
        comp.judge(query, [(pairs[0][0], pairs[-1][1])])  # warm-up: the server maps its weights on first use
        secs, seq = timed(lambda: [j for p in pairs for j in comp.judge(query, [p])])
        print(f"openai (llama.cpp server) sequential: {secs / len(pairs):.2f} s/call, "
              f"{sum(j.prompt_tokens for j in seq) / len(seq):.0f} prompt tokens/call, "
              f"failed {sum(j.prob is None for j in seq)}")
        flipped = [(b, a) for a, b in pairs]  # new prompts: no server-side prompt cache hits
        secs, conc = timed(lambda: asyncio.run(comp.ajudge(query, flipped)))
        print(f"openai (llama.cpp server) one concurrent round of {len(pairs)}: {secs / len(pairs):.2f} s/call, "
              f"failed {sum(j.prob is None for j in conc)}")
        both = [j.prob for j in seq + conc if j.prob is not None]
        print(f"openai slot A preferred in {sum(p > 0.5 for p in both)}/{len(both)} answers")
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("hf", "openai", "faults", "errors"))
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--queries", type=int, default=4, help="faults: bundled queries")
    p.add_argument("--candidates", type=int, default=10, help="faults: candidates per query")
    p.add_argument("--budget", type=int, default=15, help="faults: calls per query")
    p.add_argument("--passage-tokens", type=int, default=128, help="hf: tokens; openai: words")
    p.add_argument("--repeats", type=int, default=3, help="errors: runs per case")
    args = p.parse_args()
    print(f"load average {os.getloadavg()}, {os.cpu_count()} CPUs")
    {"hf": measure_hf, "openai": measure_openai, "faults": measure_faults, "errors": measure_errors}[args.what](args)


if __name__ == "__main__":
    main()
