"""``arerank_many`` against a real local OpenAI-compatible server: queries/s and per-query latency at several caps
on requests in flight across queries.

Starts ``python -m llama_cpp.server`` (llama-cpp-python) on the bundled SmolLM2-135M GGUF at 127.0.0.1 on a free
port (``LlamaServer`` of tests/_llm_server.py), sends one untimed warm-up request, then for each
``--concurrency`` C runs ``arerank_many`` over the first ``--queries`` DL19 queries x BM25 top ``--depth`` (passages
cut to ``--words`` words) with ``max_concurrency=C`` (``OpenAIChatComparator(max_concurrency=C)``, mohajer,
randomized oracle, ``--budget`` calls per query, seed 0), and stops the server. Bounded: at most queries x budget
requests per level, and ``--time-limit`` seconds in all (a level that would run past it is cancelled and reported as
such).

Per level: wall time, queries/s, p50/p95 of each query's own ``wall_time_s`` (from its start to its result),
calls and failed calls, prompts per ``ajudge_batch`` step (what could be in flight at once) and whether the orders
equal those of the first level. Load average before and after.

Run (repository root):
    PYTHONPATH=. python benchmarks/server_throughput.py --data ../shared/data/trec-dl-2019 \\
        --out benchmarks/results/server_throughput
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the loopback llama.cpp server helper

from _llm_server import LlamaServer  # noqa: E402

from activeprp_bench.datasets import load_trec_dl  # noqa: E402
from activeprp_core import Comparator, arerank_many  # noqa: E402
from activeprp_core.comparators import OpenAIChatComparator  # noqa: E402
from activeprp_core.comparators.hf import bundled_gguf_path  # noqa: E402


class Steps(Comparator):
    """Forwards ``ajudge_batch`` to ``inner`` and records how many prompts each step held (``batches_queries``:
    ``arerank_many`` sends it each step as one merged call, as it sent every comparator before 9c6b656)."""

    batches_queries = True

    def __init__(self, inner: Comparator) -> None:
        self.inner, self.max_concurrency, self.sizes = inner, inner.max_concurrency, []

    def compare(self, query, pairs):
        raise AssertionError("async only")

    async def ajudge_batch(self, items, *, guard=None):
        self.sizes.append(len(items))
        return await self.inner.ajudge_batch(items, guard=guard)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear interpolation between order statistics."""
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


async def level(url: str, requests, args, cap: int, deadline: float) -> dict:
    comparator = OpenAIChatComparator("smollm2-135m", base_url=url, api_key="local", max_passage_words=args.words,
                                      max_concurrency=cap, timeout=120)
    steps = Steps(comparator)
    kw = {"ranker": "mohajer", "oracle": "randomized", "budget": args.budget, "top_k": args.top_k, "seed": 0}

    async def collect():
        return [r async for r in arerank_many(requests, comparator=steps, max_concurrency=cap, **kw)]

    started = time.perf_counter()
    try:
        results = await asyncio.wait_for(collect(), timeout=max(deadline - time.monotonic(), 1.0))
    except asyncio.TimeoutError:
        return {"max_concurrency": cap, "cancelled": f"past --time-limit after {time.perf_counter() - started:.0f} s"}
    finally:
        await comparator.aclose()
    wall = time.perf_counter() - started
    latency = [r.wall_time_s for r in results]
    return {"max_concurrency": cap, "wall_s": round(wall, 2), "queries_per_s": round(len(results) / wall, 4),
            "latency_p50_s": round(percentile(latency, 50), 2), "latency_p95_s": round(percentile(latency, 95), 2),
            "calls": sum(r.calls for r in results), "failed_calls": sum(r.failed_calls for r in results),
            "s_per_call": round(wall / max(sum(r.calls for r in results), 1), 2),
            "steps": len(steps.sizes), "prompts_per_step_mean": round(statistics.fmean(steps.sizes), 1),
            "prompts_per_step_max": max(steps.sizes), "orders": [r.order for r in results]}


async def bench(url: str, requests, args) -> list[dict]:
    warm = OpenAIChatComparator("smollm2-135m", base_url=url, api_key="local", max_passage_words=args.words)
    query, cands = requests[0]
    await warm.ajudge(query, [(cands[0], cands[1])])
    await warm.aclose()
    deadline = time.monotonic() + args.time_limit
    out = []
    for cap in args.concurrency:
        row = await level(url, requests, args, cap, deadline)
        row["load1_after"] = round(os.getloadavg()[0], 2)
        print({k: v for k, v in row.items() if k != "orders"}, flush=True)
        out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="the trec-dl-2019 directory")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--queries", type=int, default=6)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--budget", type=int, default=8)
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--words", type=int, default=48, help="passages cut to this many words")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--time-limit", type=float, default=1500.0, help="seconds for all levels together")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    coll = load_trec_dl(args.data, 2019).subset(args.queries, args.depth)
    requests = [(coll.queries[q], coll.candidates[q]) for q in coll.qids]
    load_before = os.getloadavg()[0]
    server = LlamaServer(bundled_gguf_path(), args.out / "server.log")
    try:
        rows = asyncio.run(bench(server.url, requests, args))
    finally:
        server.stop()
    first = next((r["orders"] for r in rows if "orders" in r), None)
    for r in rows:
        if "orders" in r:
            r["same_orders_as_first_level"] = r.pop("orders") == first
    result = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "load1_before": round(load_before, 2), "cpu_count": os.cpu_count(), "levels": rows}
    (args.out / "server_throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "server.log").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
