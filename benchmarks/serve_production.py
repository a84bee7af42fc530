"""``activeprp serve`` on a production request path, over real HTTP: a burst beyond capacity, clients that go away,
a judge that goes down and comes back, and abuse.

Three kinds of process, all on 127.0.0.1:

- the judge: this script with ``--judge PORT``, an OpenAI-compatible chat endpoint (uvicorn, a bare ASGI app) that
  answers each call after ``--delay`` seconds (A or B by a hash of the prompt, with logprobs) and logs each call's
  arrival time and query; ``/admin/mode?mode=ok|slow|down|hang`` switches it (slow: 3 s per call; down: HTTP 500
  at once; hang: accepts and never answers), ``/admin/log?since=N`` returns the log;
- the service: the ``activeprp serve --comparator openai --base-url <judge>`` command itself, a fresh process per
  phase, with its flags (``--max-concurrency 8`` calls in flight, the defaults otherwise unless said);
- the load: this process, ``httpx.AsyncClient``.

Phases (each prints and records its figures with the load average):

1. ``burst``: 8 requests at a time (8 workers, one request after another) for the baseline rate of judge calls,
   then ``--requests`` (200) at once: statuses, latencies, Retry-After, completion order, judge calls per second
   during the burst, and judge calls against the budget; then the same burst on a server with a small queue
   (``--max-queue 64``) so some are refused; and, on a full server (``--max-active 2 --max-queue 2``, the judge
   slowed to 3 s a call), 10 requests one at a time: each refused, and how fast.
2. ``disconnect``: 20 clients whose timeout is 1 s (budget 50, so they are still running); per client, the last
   judge call with its query after it closed.
3. ``breaker``: the judge down (HTTP 500, then hanging), requests until one gets 503, then 10 requests in a row
   (status and time each), ``/ready``; the judge back: time until ``/ready`` is 200 and until a request succeeds.
4. ``late``: a judge taking 0.3 s a call, 60 requests 50 ms apart with ``time_budget`` 2 s (``--max-active 32``):
   the judge's calls and how many the answers report as cut at the deadline.
5. ``abuse``: a server with a key: unauthenticated and wrong-key requests (judge calls they caused), a 2 MB query,
   a 300 MB chunked body, a 300 MB body with Content-Length and a 60 MB body of 12 M two-letter documents, under
   the body cap (statuses, seconds; the server's RSS and peak RSS, from /proc, before and after).

Run (repository root):
    PYTHONPATH=. python benchmarks/serve_production.py --out benchmarks/results/serve/production
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ helpers, from any directory

from tests._llm_server import free_port  # noqa: E402
from tests._serve_helpers import make_request  # noqa: E402

KEY = "bench-key-0123456789"


# ---- the judge ---------------------------------------------------------------------------------------------
class JudgeState:
    mode, delay, log = "ok", 0.02, []


QUERY = re.compile(r'query "(.*?)", which', re.DOTALL)


def completion(text: str) -> dict:
    label = "A" if hashlib.sha1(text.encode()).digest()[0] % 2 else "B"
    other = "B" if label == "A" else "A"
    tops = [{"token": label, "logprob": -0.1, "bytes": None}, {"token": other, "logprob": -2.4, "bytes": None}]
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
            "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": 1, "total_tokens": len(text) // 4 + 1},
            "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": label},
                         "logprobs": {"content": [{"token": label, "logprob": -0.1, "bytes": None,
                                                   "top_logprobs": tops}]}}]}


async def judge_app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        return await send({"type": "lifespan.shutdown.complete"})
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    query = parse_qs(scope["query_string"].decode())
    status, out = 200, None
    if scope["path"] == "/admin/mode":
        JudgeState.mode = query["mode"][0]
        out = {"mode": JudgeState.mode}
    elif scope["path"] == "/admin/log":
        out = JudgeState.log[int(query.get("since", ["0"])[0]):]
    elif scope["path"] == "/v1/chat/completions":
        text = json.loads(body)["messages"][-1]["content"]
        match = QUERY.search(text)
        JudgeState.log.append((time.time(), match.group(1) if match else ""))
        if JudgeState.mode == "down":
            status, out = 500, {"error": {"message": "the judge is down", "type": "server_error"}}
        elif JudgeState.mode == "slow":
            await asyncio.sleep(3.0)
            out = completion(text)
        elif JudgeState.mode == "hang":
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        else:
            await asyncio.sleep(JudgeState.delay)
            out = completion(text)
    else:
        status, out = 404, {"error": {"message": "not found"}}
    data = json.dumps(out).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def run_judge(port: int, delay: float) -> None:
    import uvicorn

    JudgeState.delay = delay
    uvicorn.run(judge_app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---- processes -------------------------------------------------------------------------------------------
class Process:
    """A child process serving HTTP on 127.0.0.1:``port`` (ready when ``ready_path`` answers); stopped on exit."""

    def __init__(self, argv: list[str], port: int, ready_path: str = "/health", cwd: str | None = None) -> None:
        self.port, self.url, self.ready_path = port, f"http://127.0.0.1:{port}", ready_path
        cwd = os.path.abspath(cwd or os.getcwd())  # the checkout whose code runs (python -m puts it first)
        self.proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": cwd}, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> Process:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                httpx.get(self.url + self.ready_path, timeout=2)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"{self.proc.args[:4]} did not start: {self.proc.stderr.read().decode()[-2000:]}")

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu_s(self) -> float:
        """User + system CPU seconds the process has used (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset_peak(self) -> None:
        """Start VmHWM afresh at the current RSS (Linux >= 4.0; left as is where not allowed)."""
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def memory_kb(self) -> dict[str, int]:
        """VmRSS and VmHWM (the peak) of the process, in kB (Linux /proc)."""
        fields = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0])
        return fields


class Judge(Process):
    def __init__(self, delay: float) -> None:
        port = free_port()
        super().__init__([sys.executable, os.path.abspath(__file__), "--judge", str(port), "--delay", str(delay)], port,
                         "/admin/log")

    def mode(self, mode: str) -> None:
        httpx.post(f"{self.url}/admin/mode?mode={mode}").raise_for_status()

    def calls(self, since: int = 0) -> list[tuple[float, str]]:
        return [tuple(row) for row in httpx.get(f"{self.url}/admin/log?since={since}", timeout=30).json()]


def service(judge: Judge, *flags: str, checkout: str | None = None) -> Process:
    """``activeprp serve`` of ``checkout`` (default: this one) in front of ``judge``."""
    port = free_port()
    argv = [sys.executable, "-m", "activeprp_cli", "serve", "--comparator", "openai", "--model", "fake",
            "--base-url", f"{judge.url}/v1", "--api-key", "sk-fake", "--port", str(port), "--max-concurrency", "8",
            *flags]
    return Process(argv, port, cwd=checkout)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def body(i: int, docs: int = 20, **extra) -> dict:
    query, documents = make_request(i, docs)
    return {"model": "activeprp", "query": f"{query} r{i}", "documents": documents, "top_n": 5, **extra}


async def _note_sent(request: httpx.Request) -> None:
    request.extensions["sent_at"] = time.monotonic()  # the client is about to write it


def client(connections: int = 256, timeout: float = 120.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(timeout=timeout, limits=limits, event_hooks={"request": [_note_sent]})


class Load:
    """``httpx.AsyncClient``s for ``n`` concurrent requests, ``PER_CLIENT`` requests per client: httpx's
    connection pool spends CPU per request in proportion to its connections (one client for 200 connections made
    the load itself take longer than the service: 429s came back after 0.3-3.8 s, against 0.2-0.4 s with a client
    per 4 connections), and the load is meant to measure the service."""

    PER_CLIENT = 4

    def __init__(self, n: int, timeout: float = 120.0) -> None:
        self.clients = [client(self.PER_CLIENT, timeout) for _ in range(-(-n // self.PER_CLIENT))]

    def __getitem__(self, i: int) -> httpx.AsyncClient:
        return self.clients[i % len(self.clients)]

    async def __aenter__(self) -> Load:
        return self

    async def __aexit__(self, *exc) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients))


async def timed_post(http: httpx.AsyncClient, url: str, payload: dict, t0: float) -> dict:
    started = time.monotonic()
    try:
        response = await http.post(url, json=payload)
    except httpx.HTTPError as err:
        return {"status": type(err).__name__, "start_s": started - t0, "latency_s": time.monotonic() - started}
    done = time.monotonic()
    row = {"status": response.status_code, "start_s": started - t0, "end_s": done - t0, "latency_s": done - started,
           "from_send_s": done - response.request.extensions.get("sent_at", started)}
    if response.status_code == 200:
        row["calls"] = response.json()["meta"]["activeprp"]["calls"]
    else:
        row["retry_after"] = response.headers.get("retry-after")
    return row


# ---- phases ----------------------------------------------------------------------------------------------
async def baseline(server: Process, judge: Judge, per_worker: int) -> dict:
    """8 workers, each sending requests one after another: the judge's rate of calls at 8 requests at a time."""
    url = f"{server.url}/v2/rerank"
    async with Load(8) as http:
        await asyncio.gather(*(http[i].post(url, json=body(10_000 + i)) for i in range(8)))  # warm-up
        since, t0, cpu0 = len(judge.calls()), time.monotonic(), server.cpu_s()
        wall0 = time.time()

        async def worker(w: int) -> list[dict]:
            return [await timed_post(http[w], url, body(20_000 + w * per_worker + k), t0) for k in range(per_worker)]

        rows = [r for rows in await asyncio.gather(*(worker(w) for w in range(8))) for r in rows]
        wall1, cpu = time.time(), server.cpu_s() - cpu0
    calls = [t for t, _ in judge.calls(since) if wall0 <= t <= wall1]
    return {"requests": len(rows), "statuses": sorted({str(r["status"]) for r in rows}),
            "seconds": round(wall1 - wall0, 3), "judge_calls": len(calls),
            "judge_calls_per_s": round(len(calls) / (wall1 - wall0), 1),
            "server_cpu_ms_per_judge_call": round(1000 * cpu / max(len(calls), 1), 2),
            "latency_p50_s": round(statistics.median(r["latency_s"] for r in rows), 3)}


async def refusals_while_full(server: Process, judge: Judge, n: int = 10) -> dict:
    """With ``--max-active 2 --max-queue 2`` and a judge that takes 3 s per call: 4 requests fill the service, then
    ``n`` requests one at a time: their statuses, times and Retry-After."""
    url = f"{server.url}/v2/rerank"
    judge.mode("slow")
    async with client(8) as http:
        filling = [asyncio.ensure_future(http.post(url, json=body(91_000 + i))) for i in range(4)]
        while True:
            metrics = (await http.get(f"{server.url}/metrics")).text
            if re.search(r"^activeprp_requests_queued 2\.0", metrics, re.MULTILINE):
                break
            await asyncio.sleep(0.05)
        rows = [await timed_post(http, url, body(90_000 + i), time.monotonic()) for i in range(n)]
        judge.mode("ok")
        await asyncio.gather(*filling)
    return {"statuses": sorted({r["status"] for r in rows}), "max_s": round(max(r["latency_s"] for r in rows), 4),
            "each_s": [round(r["latency_s"], 4) for r in rows],
            "retry_after": sorted({str(r.get("retry_after")) for r in rows})}


async def burst(server: Process, judge: Judge, n: int, budget: int, time_budget: float) -> dict:
    url = f"{server.url}/v2/rerank"
    async with Load(n) as http:
        await asyncio.gather(*(http[i].get(url.replace("/v2/rerank", "/health")) for i in range(n)))  # connect
        since, cpu0 = len(judge.calls()), server.cpu_s()
        t0, wall0 = time.monotonic(), time.time()
        rows = await asyncio.gather(*(timed_post(http[i], url, body(i), t0) for i in range(n)))
        wall1, cpu = time.time(), server.cpu_s() - cpu0
    calls = judge.calls(since)
    during = [t for t, _ in calls if wall0 <= t <= wall1]
    ok = [r for r in rows if r["status"] == 200]
    refused = [r for r in rows if r["status"] == 429]
    latency = sorted(r["latency_s"] for r in ok)
    by_end = sorted((i for i in range(n) if rows[i]["status"] == 200), key=lambda i: rows[i]["end_s"])
    return {
        "requests": n, "answered_200": len(ok), "refused_429": len(refused),
        "other": [r for r in rows if r["status"] not in (200, 429)][:5],
        "refused_with_retry_after": sum(r["retry_after"] is not None and int(r["retry_after"]) >= 1 for r in refused),
        "refused_latency_max_s": round(max((r["latency_s"] for r in refused), default=0.0), 3),
        "refused_from_send_max_s": round(max((r["from_send_s"] for r in refused), default=0.0), 3),
        "send_delay_max_s": round(max(r["latency_s"] - r["from_send_s"] for r in rows if "from_send_s" in r), 3),
        "latency_max_s": round(max(r["latency_s"] for r in rows), 3),
        "within_time_budget_plus_2s": all(r["latency_s"] <= time_budget + 2 for r in rows),
        "answered_latency_p50_s": round(statistics.median(latency), 3) if latency else None,
        "answered_latency_max_s": round(latency[-1], 3) if latency else None,
        "median_over_max": round(statistics.median(latency) / latency[-1], 3) if latency else None,
        "first_answers": [round(x, 3) for x in latency[:3]],
        "answered_in_order_of_completion_first_20": by_end[:20],
        "mean_index_first_half_answered": round(statistics.mean(by_end[: len(ok) // 2]), 1) if ok else None,
        "mean_index_second_half_answered": round(statistics.mean(by_end[len(ok) // 2:]), 1) if ok else None,
        "seconds": round(wall1 - wall0, 3), "judge_calls": len(calls), "judge_calls_during": len(during),
        "judge_calls_per_s": round(len(during) / (wall1 - wall0), 1),
        "server_cpu_ms_per_judge_call": round(1000 * cpu / max(len(calls), 1), 2),
        "calls_reported_by_answers": sum(r["calls"] for r in ok),
        "judge_calls_at_most_budget_per_answer": len(calls) <= budget * len(ok),
    }


async def disconnects(url: str, judge: Judge, n: int, after: float) -> dict:
    since = len(judge.calls())
    closed: dict[str, float] = {}
    answered = 0

    async def one(i: int) -> None:
        nonlocal answered
        payload = body(40_000 + i, budget=50)
        async with httpx.AsyncClient(timeout=after) as http:
            try:
                await http.post(url, json=payload)
                answered += 1
            except httpx.TimeoutException:
                closed[payload["query"]] = time.time()

    await asyncio.gather(*(one(i) for i in range(n)))
    await asyncio.sleep(2.0)
    calls = judge.calls(since)
    late = {q: max((t for t, cq in calls if cq == q), default=c) - c for q, c in closed.items()}
    after_close = sum(1 for t, q in calls if q in closed and t > closed[q])
    metrics = httpx.get(url.replace("/v2/rerank", "/metrics")).text
    gone = re.search(r'activeprp_requests_total\{route="/v2/rerank",status="499"\} (\S+)', metrics)
    return {"clients": n, "timeout_s": after, "closed": len(closed), "answered_before_close": answered,
            "judge_calls": len(calls), "calls_arriving_after_their_close": after_close,
            "latest_call_after_close_s": round(max(late.values(), default=0.0), 3),
            "server_counted_499": float(gone.group(1)) if gone else 0.0}


async def breaker(server: Process, judge: Judge, down: str, cool_down: float) -> dict:
    url = f"{server.url}/v2/rerank"
    judge.mode(down)
    async with client(4, timeout=60) as http:
        opened = None
        for i in range(20):
            started = time.monotonic()
            response = await http.post(url, json=body(50_000 + i))
            if response.status_code == 503:
                opened = {"requests_until_503": i + 1, "last_request_s": round(time.monotonic() - started, 3),
                          "message": response.json()["message"][:160]}
                break
        since = len(judge.calls())
        fast = []
        for i in range(10):
            started = time.monotonic()
            response = await http.post(url, json=body(60_000 + i))
            fast.append({"status": response.status_code, "seconds": round(time.monotonic() - started, 4),
                         "retry_after": response.headers.get("retry-after")})
        ready_down = (await http.get(f"{server.url}/ready")).status_code
        calls_during_fast = len(judge.calls(since))
        judge.mode("ok")
        back = time.monotonic()
        while (await http.get(f"{server.url}/ready")).status_code != 200 and time.monotonic() - back < 60:
            await asyncio.sleep(0.05)
        ready_s = time.monotonic() - back
        response = await http.post(url, json=body(70_000))
        ok_s = time.monotonic() - back
    return {"judge_down_as": down, "cool_down_s": cool_down, "opened": opened, "ten_in_a_row": fast,
            "all_503_under_0.3s": all(r["status"] == 503 and r["seconds"] < 0.3 and r["retry_after"] for r in fast),
            "max_s": max(r["seconds"] for r in fast), "ready_while_down": ready_down,
            "judge_calls_during_the_ten": calls_during_fast, "ready_200_after_judge_back_s": round(ready_s, 3),
            "request_ok_after_judge_back_s": round(ok_s, 3), "request_status_after": response.status_code,
            "within_cool_down_plus_1s": response.status_code == 200 and ok_s <= cool_down + 1}


async def late_calls(server: Process, judge: Judge, n: int = 60, spread: float = 0.05,
                     time_budget: float = 2.0) -> dict:
    """``n`` requests ``spread`` s apart with ``time_budget``: the judge's calls, and those the answers report as
    cut at the deadline (sent too late to come back: their slot taken from calls that could be answered)."""
    url, since = f"{server.url}/v2/rerank", len(judge.calls())

    async def one(http: httpx.AsyncClient, i: int) -> dict:
        await asyncio.sleep(i * spread)
        response = await http.post(url, json=body(90_000 + i, 16, time_budget=time_budget))
        return response.json()["meta"]["activeprp"] if response.status_code == 200 else {}

    async with Load(n) as http:
        metas = await asyncio.gather(*(one(http[i], i) for i in range(n)))
    return {"requests": n, "spread_s": spread, "time_budget_s": time_budget, "judge_calls": len(judge.calls(since)),
            "answered_200": sum("calls" in m for m in metas), "calls_reported": sum(m.get("calls", 0) for m in metas),
            "cut_calls_reported": sum(m.get("cut_calls", 0) for m in metas)}


async def chunks(total: int, size: int = 1 << 20):
    block = b" " * size
    for _ in range(total // size):
        yield block


async def abuse(server: Process, judge: Judge) -> dict:
    url = f"{server.url}/v2/rerank"
    since = len(judge.calls())
    async with client(32) as http:
        none = await asyncio.gather(*(http.post(url, json=body(80_000 + i)) for i in range(50)))
        wrong = await asyncio.gather(*(http.post(url, json=body(81_000 + i), headers={"Authorization": "Bearer no"})
                                       for i in range(50)))
        unauth_calls = len(judge.calls(since))
        auth = {"Authorization": f"Bearer {KEY}"}
        right = await http.post(url, json=body(82_000), headers=auth)
        out = {"unauthenticated_statuses": sorted({r.status_code for r in none + wrong}),
               "judge_calls_from_100_unauthenticated": unauth_calls, "with_the_key": right.status_code}
        tiny = b'{"query": "q", "documents": [' + b",".join([b'"ab"'] * 12_000_000) + b"]}"
        for name, kw in [("query_2MB", {"json": {**body(83_000), "query": "word " * 400_000}}),
                         ("chunked_300MB", {"content": chunks(300 << 20)}),
                         ("content_length_300MB", {"content": b" " * (300 << 20)}),
                         ("tiny_documents_60MB", {"content": tiny})]:
            server.reset_peak()
            before = server.memory_kb()
            started = time.monotonic()
            try:
                response = await http.post(url, headers={**auth, "content-type": "application/json"}, **kw)
                status = response.status_code
            except httpx.HTTPError as err:
                status = type(err).__name__
            after = server.memory_kb()
            mb = {k: round(v / 1024, 1) for k, v in
                  (("rss_before_mb", before["VmRSS"]), ("rss_after_mb", after["VmRSS"]), ("peak_rss_after_mb",
                                                                                          after["VmHWM"]))}
            out[name] = {"status": status, "seconds": round(time.monotonic() - started, 3), **mb,
                         "peak_growth_mb": round((after["VmHWM"] - before["VmRSS"]) / 1024, 1)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--judge", type=int, help=argparse.SUPPRESS)
    p.add_argument("--delay", type=float, default=0.02, help="seconds the judge takes per call (default 0.02)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--budget", type=int, default=10, help="calls per request in the burst (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="bursts, each on a fresh server (default 3)")
    p.add_argument("--cool-down", type=float, default=2.0)
    p.add_argument("--phases", nargs="+", default=["burst", "disconnect", "breaker", "abuse"])
    p.add_argument("--compare", metavar="CHECKOUT",
                   help="also run the burst (--budget, default flags) on the service of another checkout, e.g. main")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.judge:
        return run_judge(args.judge, args.delay)
    results: dict = {"command": "PYTHONPATH=. python " + " ".join(sys.argv), "python": platform.python_version(),
                     "cpus": os.cpu_count(), "judge_delay_s": args.delay, "loadavg_start": load()}
    with Judge(args.delay) as judge:
        if "burst" in args.phases:
            runs = []
            for _ in range(args.repeats):
                with service(judge, "--budget", str(args.budget)) as server:
                    row = {"loadavg": load(), "baseline_8_at_a_time": asyncio.run(baseline(server, judge, 10)),
                           "burst": asyncio.run(burst(server, judge, args.requests, args.budget, 30.0))}
                with service(judge, "--budget", str(args.budget), "--max-queue", "64") as server:
                    row["burst_small_queue"] = asyncio.run(burst(server, judge, args.requests, args.budget, 30.0))
                base = row["baseline_8_at_a_time"]
                row["rate_ratio"] = round(row["burst"]["judge_calls_per_s"] / base["judge_calls_per_s"], 3)
                row["cpu_per_call_ratio"] = round(row["burst"]["server_cpu_ms_per_judge_call"] /
                                                  base["server_cpu_ms_per_judge_call"], 3)
                row["loadavg_after"] = load()
                print(json.dumps(row, indent=1), flush=True)
                runs.append(row)
            results["burst"] = runs
            with service(judge, "--budget", str(args.budget), "--max-active", "2", "--max-queue", "2") as server:
                results["refusals_while_full"] = {"loadavg": load(), **asyncio.run(refusals_while_full(server, judge))}
            print(json.dumps(results["refusals_while_full"]), flush=True)
            if args.compare:
                with service(judge, "--budget", str(args.budget), checkout=args.compare) as server:
                    revision = subprocess.run(["git", "-C", args.compare, "rev-parse", "--short", "HEAD"],
                                              capture_output=True, text=True).stdout.strip()
                    results["compare"] = {"checkout": args.compare, "revision": revision, "loadavg": load(),
                                          "baseline_8_at_a_time": asyncio.run(baseline(server, judge, 10)),
                                          "burst": asyncio.run(burst(server, judge, args.requests, args.budget, 30.0))}
                print(json.dumps(results["compare"], indent=1), flush=True)
        if "disconnect" in args.phases:
            with service(judge, "--budget", "50") as server:
                results["disconnect"] = {"loadavg": load(), **asyncio.run(disconnects(f"{server.url}/v2/rerank",
                                                                                      judge, 20, 1.0))}
            print(json.dumps(results["disconnect"], indent=1), flush=True)
        if "breaker" in args.phases:
            results["breaker"] = []
            for down, flags in (("down", ()), ("hang", ("--judge-timeout", "1"))):
                with service(judge, "--budget", str(args.budget), "--cool-down", str(args.cool_down), *flags) as server:
                    row = {"loadavg": load(), **asyncio.run(breaker(server, judge, down, args.cool_down))}
                judge.mode("ok")
                print(json.dumps(row, indent=1), flush=True)
                results["breaker"].append(row)
        if "late" in args.phases:
            flags = ("--max-active", "32", "--max-queue", "256", "--budget", "30")
            with Judge(0.3) as slow, service(slow, *flags) as server:
                results["late"] = {"loadavg": load(), "judge_delay_s": 0.3, **asyncio.run(late_calls(server, slow))}
            print(json.dumps(results["late"], indent=1), flush=True)
        if "abuse" in args.phases:
            with service(judge, "--auth-key", KEY) as server:
                results["abuse"] = {"loadavg": load(), **asyncio.run(abuse(server, judge))}
            print(json.dumps(results["abuse"], indent=1), flush=True)
    results["loadavg_end"] = load()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
