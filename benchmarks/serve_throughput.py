"""``activeprp serve``: throughput of concurrent vs one-at-a-time requests, and the HTTP layer's overhead per request
compared with calling ``arerank`` / ``arerank_many`` directly.

The server runs in a child process (this script with ``--serve``: ``create_app`` under uvicorn on 127.0.0.1, a
free port, default admission: 32 requests reranked at once, the others queued) with a judge that waits ``--delay``
seconds per call: with ``--judge word`` in the server's process (``tests._serve_helpers.WordJudge``: the calls of
a round at once, like an endpoint with no cap on calls in flight); with ``--judge http`` over HTTP, the fake
OpenAI-compatible judge of ``benchmarks/serve_production.py`` in its own process behind ``OpenAIChatComparator``
with 8 calls in flight (``--max-concurrency``). The client (aiohttp, this process; httpx's async client spends
about 30 ms of CPU per request at 200 connections, which would measure the client) sends:

1. throughput: ``--requests`` Cohere v2 requests (``--docs`` documents, ``top_n`` 5, the server's budget 30 and
   6 rounds), all at once (``asyncio.gather``, one connection each), then the same requests one at a time; and
   ``arerank_many`` over the same requests in this process (no HTTP) for reference. Every response is checked:
   status 200, the order of ``arerank`` of that request alone, calls within the budget.
2. overhead: ``--overhead-requests`` requests one at a time, each timed over HTTP and by ``arerank`` in this
   process with the same judge; overhead = HTTP time - direct time, per request (p50, p95), at the judge's
   ``--delay`` and with a judge that answers at once.

Run (repository root):
    PYTHONPATH=. python benchmarks/serve_throughput.py --out benchmarks/results/serve
    PYTHONPATH=. python benchmarks/serve_throughput.py --judge http --out benchmarks/results/serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ helpers, from any directory

from activeprp_core import arerank, arerank_many  # noqa: E402
from tests._llm_server import free_port  # noqa: E402
from tests._serve_helpers import WordJudge, candidates, make_request  # noqa: E402

SETTINGS = {"ranker": "auto", "oracle": "auto", "budget": 30, "max_rounds": 6, "seed": 0}
TOP_N = 5
JUDGE_URL = "SERVE_THROUGHPUT_JUDGE"
"""The environment variable holding the fake judge's base URL with ``--judge http`` (set by ``main``, read by the
server's process too)."""


def judge(delay: float):
    """The judge: ``WordJudge(delay)``, or an ``OpenAIChatComparator`` (8 calls in flight) on the fake judge."""
    url = os.environ.get(JUDGE_URL)
    if url is None:
        return WordJudge(delay)
    from activeprp_core.comparators import OpenAIChatComparator

    return OpenAIChatComparator("fake", base_url=url, api_key="sk-fake", max_concurrency=8)


def serve(port: int, delay: float, stack: str) -> None:
    import uvicorn

    from activeprp_integrations.serve import create_app

    app = create_app(judge(delay), budget=SETTINGS["budget"], max_rounds=SETTINGS["max_rounds"])
    loop, http = ("asyncio", "h11") if stack == "plain" else ("auto", "auto")
    # keep-alive past the warm-up (all requests at once): idle pooled connections stay usable
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop=loop, http=http, timeout_keep_alive=120)


def uvicorn_stack(choice: str) -> str:
    """The event loop and HTTP parser uvicorn uses for ``--uvicorn`` ``choice``."""
    import importlib.util

    if choice == "plain":
        return "asyncio + h11"
    have = [m for m in ("uvloop", "httptools") if importlib.util.find_spec(m)]
    return f"{'uvloop' if 'uvloop' in have else 'asyncio'} + {'httptools' if 'httptools' in have else 'h11'}"


class Server:
    """This script in ``--serve`` mode as a child process; stopped (SIGTERM) on exit."""

    def __init__(self, delay: float, stack: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), "--delay", str(delay),
                                      "--uvicorn", stack],
                                     env=env)

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.url}/health", timeout=1).raise_for_status()
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("the server did not start")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def body(query: str, docs: list[str]) -> dict:
    return {"model": "activeprp", "query": query, "documents": docs, "top_n": TOP_N}


async def direct(query: str, docs: list[str], comparator):
    return await arerank(query, candidates(docs), comparator=comparator, top_k=TOP_N, **SETTINGS)


class Client:
    """POSTs Cohere v2 bodies to the server with aiohttp; ``post`` returns (status, parsed JSON)."""

    def __init__(self, url: str, connections: int) -> None:
        self.url, self.connections = f"{url}/v2/rerank", connections

    async def __aenter__(self) -> Client:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.connections),
                                             timeout=aiohttp.ClientTimeout(total=300))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()

    async def post(self, query: str, docs: list[str]) -> tuple[int, dict]:
        async with self.session.post(self.url, json=body(query, docs)) as response:
            return response.status, await response.json()


def check(responses: list[tuple[int, dict]], expected: list) -> None:
    """Every response is a 200 with the order of ``arerank`` of its request alone, within the budget."""
    assert all(status == 200 for status, _ in responses), [r for s, r in responses if s != 200][:3]
    assert [[x["index"] for x in r["results"]] for _, r in responses] == [e.order[:TOP_N] for e in expected]
    assert all(r["meta"]["activeprp"]["calls"] <= SETTINGS["budget"] for _, r in responses)


async def throughput(url: str, requests: list[tuple[str, list[str]]], delay: float) -> dict:
    async with judge(0.0) as comparator:  # one comparator (one client), closed after
        expected = [await direct(q, d, comparator) for q, d in requests]
    async with Client(url, len(requests)) as client:
        await asyncio.gather(*(client.post(q, d) for q, d in requests))  # warm-up (opens the connections), untimed
        started = time.perf_counter()
        together = await asyncio.gather(*(client.post(q, d) for q, d in requests))
        concurrent_s = time.perf_counter() - started
    async with Client(url, 1) as client:  # one busy connection (an idle pooled one may meet uvicorn's keep-alive cut)
        await client.post(*requests[0])
        started = time.perf_counter()
        alone = [await client.post(q, d) for q, d in requests]
        sequential_s = time.perf_counter() - started
    started = time.perf_counter()
    async with judge(delay) as comparator:
        many = [r async for r in arerank_many([(q, candidates(d)) for q, d in requests], comparator=comparator,
                                              top_k=TOP_N, carry_judge=False, **SETTINGS)]
    many_s = time.perf_counter() - started
    check(together, expected)
    check(alone, expected)
    assert [m.order for m in many] == [e.order for e in expected]
    n = len(requests)
    return {"requests": n, "calls_per_request_mean": statistics.mean(e.calls for e in expected),
            "rounds_per_request_mean": statistics.mean(e.rounds for e in expected),
            "concurrent_s": round(concurrent_s, 3), "sequential_s": round(sequential_s, 3),
            "arerank_many_direct_s": round(many_s, 3),
            "concurrent_req_per_s": round(n / concurrent_s, 1), "sequential_req_per_s": round(n / sequential_s, 1),
            "arerank_many_req_per_s": round(n / many_s, 1), "speedup_concurrent_vs_sequential":
                round(sequential_s / concurrent_s, 1), "all_answered": True}


async def overhead(url: str, requests: list[tuple[str, list[str]]], delay: float) -> dict:
    http_s, direct_s = [], []
    async with Client(url, 1) as client, judge(delay) as comparator:
        await client.post(*requests[0])  # warm-up, untimed
        await direct(*requests[0], comparator)
        for query, docs in requests:
            started = time.perf_counter()
            status, _ = await client.post(query, docs)
            http_s.append(time.perf_counter() - started)
            assert status == 200
            started = time.perf_counter()
            await direct(query, docs, comparator)
            direct_s.append(time.perf_counter() - started)
    diff_ms = [1000 * (h - d) for h, d in zip(http_s, direct_s)]
    return {"judge_delay_s": delay, "requests": len(requests),
            "http_p50_ms": round(1000 * statistics.median(http_s), 2),
            "direct_arerank_p50_ms": round(1000 * statistics.median(direct_s), 2),
            "overhead_p50_ms": round(statistics.median(diff_ms), 2),
            "overhead_p95_ms": round(percentile(diff_ms, 95), 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    p.add_argument("--delay", type=float, default=0.01, help="seconds the judge waits per call (default 0.01)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--docs", type=int, default=20, help="documents per request")
    p.add_argument("--overhead-requests", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3, help="measurements, each on fresh servers (default 3)")
    p.add_argument("--uvicorn", choices=("auto", "plain"), default="auto",
                   help="auto: uvloop and httptools when installed (uvicorn[standard]); plain: asyncio and h11")
    p.add_argument("--judge", choices=("word", "http"), default="word",
                   help="word: a judge in the server's process; http: the fake OpenAI-compatible judge of "
                        "serve_production.py (--delay per call), 8 calls in flight")
    p.add_argument("--out", type=Path, help="write results-<uvicorn>[-http].json there")
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.delay, args.uvicorn)
        return
    if args.judge == "http":
        from benchmarks.serve_production import Judge

        with Judge(args.delay) as fake:
            os.environ[JUDGE_URL] = f"{fake.url}/v1"
            return measure(args)
    measure(args)


def measure(args: argparse.Namespace) -> None:
    requests = [make_request(i, args.docs) for i in range(args.requests)]
    load_before = os.getloadavg()
    results: dict = {"command": "PYTHONPATH=. python " + " ".join(sys.argv), "python": platform.python_version(),
                     "cpus": os.cpu_count(), "uvicorn": uvicorn_stack(args.uvicorn), "judge": args.judge,
                     "settings": {**SETTINGS, "top_n": TOP_N, "docs": args.docs}}
    runs: dict[str, list[dict]] = {"throughput": [], "overhead_judge": [], "overhead_instant": []}
    for _ in range(args.repeats):  # the machine is shared: each repeat starts fresh servers
        with Server(args.delay, args.uvicorn) as server:
            runs["throughput"].append(asyncio.run(throughput(server.url, requests, args.delay)))
            runs["overhead_judge"].append(asyncio.run(overhead(server.url, requests[: args.overhead_requests],
                                                               args.delay)))
        if args.judge == "word":  # the fake judge's delay is its own
            with Server(0.0, args.uvicorn) as server:
                runs["overhead_instant"].append(asyncio.run(overhead(server.url, requests[: args.overhead_requests],
                                                                     0.0)))
    results["median_over_repeats"] = {
        "speedup_concurrent_vs_sequential": statistics.median(r["speedup_concurrent_vs_sequential"]
                                                              for r in runs["throughput"]),
        "concurrent_req_per_s": statistics.median(r["concurrent_req_per_s"] for r in runs["throughput"]),
        "overhead_p50_ms_with_judge": statistics.median(r["overhead_p50_ms"] for r in runs["overhead_judge"]),
        "overhead_p50_ms_instant_judge": statistics.median(r["overhead_p50_ms"] for r in runs["overhead_instant"])
        if runs["overhead_instant"] else None}
    results["runs"] = runs
    results["loadavg_before_after"] = [load_before, os.getloadavg()]
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        suffix = "-http" if args.judge == "http" else ""
        (args.out / f"results-{args.uvicorn}{suffix}.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
