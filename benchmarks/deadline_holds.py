"""The deadline holds: ``rerank`` and ``arerank`` return within ``time_budget`` + 0.3 s, and send no call after the
deadline, against judges that hang, are slow with a heavy tail, or are dead.

Judges (every one on 127.0.0.1, started and stopped here, bounded in requests and time):

- ``http-hang``: an OpenAI-compatible endpoint (uvicorn) that reads each request and never answers;
- ``http-heavy``: the same endpoint answering each request after a lognormal time (median 0.5 s, p99 5 s);
- ``http-refused``: a port nothing listens on (connection refused);
- ``http-silent``: a socket that accepts connections (in the kernel's backlog) and never reads them;
- ``py-hang`` / ``py-heavy``: Python comparators (``compare`` for ``rerank``, ``acompare`` for ``arerank``) that
  hang, or take the same lognormal time per call (a chunk of calls takes the longest of its calls).

The HTTP judges are ``OpenAIChatComparator`` (defaults: 3 attempts, 8 calls in flight, 60 s timeout) over real HTTP,
the uvicorn endpoint in a process of its own. Each cell runs ``--reranks`` reranks (``--concurrent`` at once,
default 5: sync, ``rerank`` in threads; async, ``arerank`` tasks on one event loop), N candidates, the online preset
(``auto``, ``auto``, 50 calls, 6 rounds) and ``time_budget``. A rerank's return time is measured from the call to
its return or its typed error (a dead endpoint may raise ``ComparatorUnavailable`` once its breaker opens, with
``on_failure="raise"``); a call's lateness is its send time (the comparator's: an HTTP attempt, or a Python
comparator's call on a chunk of pairs; for the uvicorn endpoint also its arrival at the server) minus the rerank's
deadline (start + time_budget): negative means before it.

Command (from the repository root; about 10 minutes):

    python benchmarks/deadline_holds.py --out benchmarks/results/time_budget
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import math
import random
import re
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from activeprp_core import Candidate, arerank, rerank  # noqa: E402
from activeprp_core.comparators import OpenAIChatComparator  # noqa: E402
from activeprp_core.engine import DEADLINE_GOAL  # noqa: E402
from activeprp_core.settings import ONLINE  # noqa: E402
from tests._llm_server import free_port  # noqa: E402

MEDIAN_S, P99_S = 0.5, 5.0
SIGMA = math.log(P99_S / MEDIAN_S) / 2.3263478740408408
GOAL_S = DEADLINE_GOAL
ID = re.compile(r"\[rerank (\d+)\]")
JUDGES = ("http-hang", "http-heavy", "http-refused", "http-silent", "py-hang", "py-heavy")


class Log:
    """Thread-safe record of call send times: ``(rerank id, monotonic seconds)``."""

    def __init__(self) -> None:
        self.lock, self.sent, self.arrived = threading.Lock(), [], []

    def note(self, where: list, text: str) -> None:
        found = ID.search(text)
        if found:
            with self.lock:
                where.append((int(found.group(1)), time.monotonic()))


class _App:
    """The ASGI app of ``Endpoint`` (in its own process): notes each request's arrival, then hangs (until the
    server stops) or answers after a lognormal latency."""

    def __init__(self, hang: bool) -> None:
        self.log, self.hang, self.rng = Log(), hang, random.Random(7)
        self.stopping: asyncio.Event | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        chunks, more = [], True
        while more:  # the whole request body
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        self.log.note(self.log.arrived, b"".join(chunks).decode("utf-8", "replace"))
        if self.stopping is None:
            self.stopping = asyncio.Event()
        if self.hang:
            await self.stopping.wait()
            return
        await asyncio.sleep(self.rng.lognormvariate(math.log(MEDIAN_S), SIGMA))
        payload = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                              "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51},
                              "choices": [{"index": 0, "finish_reason": "length", "logprobs": None,
                                           "message": {"role": "assistant", "content": "A"}}]}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})


def _serve(port: int, hang: bool, ready, stop, out, max_seconds: float) -> None:
    """The endpoint's process: serve until ``stop`` is set (or ``max_seconds``), then report the arrivals."""
    import uvicorn

    app = _App(hang)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="off",
                            interface="asgi3", timeout_graceful_shutdown=1, backlog=4096)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    ready.set()
    stop.wait(max_seconds)
    server.should_exit = True
    thread.join(timeout=5)
    out.put(app.log.arrived)


class Endpoint:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 (uvicorn) in its own process, so that serving does not
    compete with the reranks for the interpreter: ``hang`` never answers, else each request is answered after a
    lognormal latency. It stops itself after ``max_seconds``; on exit its arrivals join ``log.arrived`` (one
    monotonic clock for both processes on Linux)."""

    def __init__(self, log: Log, hang: bool, max_seconds: float = 900) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.log, self.port = log, free_port()
        self.ready, self.stop, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.process = ctx.Process(target=_serve, args=(self.port, hang, self.ready, self.stop, self.out,
                                                        max_seconds), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Endpoint:
        self.process.start()
        if not self.ready.wait(60):
            raise RuntimeError("the endpoint did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.log.arrived.extend(self.out.get(timeout=30))
        self.process.join(timeout=10)


class Silent:
    """A socket on 127.0.0.1 that accepts TCP connections (kernel backlog) and never reads them."""

    def __enter__(self) -> Silent:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


class Recording(OpenAIChatComparator):
    """``OpenAIChatComparator`` noting when each attempt is sent."""

    def __init__(self, log: Log, url: str) -> None:
        super().__init__("m", base_url=url, api_key="k")
        self.log = log

    def send(self, client, request):
        self.log.note(self.log.sent, request["messages"][-1]["content"])
        return super().send(client, request)

    async def asend(self, client, request):
        self.log.note(self.log.sent, request["messages"][-1]["content"])
        return await super().asend(client, request)


class PyJudge:
    """A Python comparator: hangs (``hang``) or takes a lognormal time per call (a chunk: its longest call)."""

    max_concurrency = 8

    def __init__(self, log: Log, hang: bool) -> None:
        self.log, self.hang, self.rng, self.lock = log, hang, random.Random(11), threading.Lock()

    def _delay(self, n: int) -> float:
        with self.lock:
            return 3600.0 if self.hang else max(self.rng.lognormvariate(math.log(MEDIAN_S), SIGMA) for _ in range(n))

    def compare(self, query, pairs):
        self.log.note(self.log.sent, query)
        time.sleep(self._delay(len(pairs)))
        return [1.0] * len(pairs)

    async def acompare(self, query, pairs):
        self.log.note(self.log.sent, query)
        await asyncio.sleep(self._delay(len(pairs)))
        return [1.0] * len(pairs)


def candidates(n: int) -> list[Candidate]:
    return [Candidate(f"d{i}", f"passage {i} " + " ".join(f"w{i}x{k}" for k in range(40))) for i in range(n)]


def settings(time_budget: float) -> dict:
    return {**ONLINE.as_dict(), "time_budget": time_budget}


def run_cell(comparator, mode: str, n: int, ids: range, time_budget: float, concurrent: int
             ) -> tuple[dict[int, float], dict[int, tuple[float, str]]]:
    """Reranks ``ids`` (``concurrent`` at once) with ``comparator``; returns each rerank's start and its
    ``(return seconds, "result" or the error's type)``."""
    cands = candidates(n)
    starts: dict[int, float] = {}
    outcomes: dict[int, tuple[float, str]] = {}

    def done(i: int, began: float, kind: str) -> None:
        outcomes[i] = (time.monotonic() - began, kind)

    if mode == "sync":
        def one(i: int) -> None:
            starts[i] = began = time.monotonic()
            try:
                rerank(f"[rerank {i}] what is it?", cands, comparator=comparator, **settings(time_budget))
                done(i, began, "result")
            except Exception as error:
                done(i, began, type(error).__name__)

        with ThreadPoolExecutor(concurrent) as pool:
            list(pool.map(one, ids))
    else:
        async def one_async(i: int, gate: asyncio.Semaphore) -> None:
            async with gate:
                starts[i] = began = time.monotonic()
                try:
                    await arerank(f"[rerank {i}] what is it?", cands, comparator=comparator, **settings(time_budget))
                    done(i, began, "result")
                except Exception as error:
                    done(i, began, type(error).__name__)

        async def all_async() -> None:
            gate = asyncio.Semaphore(concurrent)
            await asyncio.gather(*(one_async(i, gate) for i in ids))

        asyncio.run(all_async())
    return starts, outcomes


def summary(judge: str, mode: str, n: int, starts: dict, outcomes: dict, log: Log, time_budget: float) -> dict:
    """One row of the table: the return times of a cell's reranks and the lateness of their sends and arrivals."""
    returns = sorted(t for t, _ in outcomes.values())
    late = [t - starts[i] - time_budget for i, t in log.sent if i in starts]
    arrived = [t - starts[i] - time_budget for i, t in log.arrived if i in starts]
    kinds: dict[str, int] = {}
    for _, kind in outcomes.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"judge": judge, "mode": mode, "n": n, "reranks": len(outcomes), "worst_return_s": returns[-1],
            "p50_return_s": statistics.median(returns), "p99_return_s": returns[int(0.99 * (len(returns) - 1))],
            "calls_sent": len(late), "sent_after_deadline": sum(x > 0 for x in late),
            "latest_send_vs_deadline_s": max(late, default=None),
            "latest_arrival_vs_deadline_s": max(arrived, default=None), "outcomes": kinds,
            "goal_met": returns[-1] <= time_budget + GOAL_S and not any(x > 0 for x in late)}


class _judge:
    """The comparator of judge ``name`` (with its server, if any) for a ``with`` block."""

    def __init__(self, name: str, log: Log) -> None:
        self.name, self.log, self.stack = name, log, []

    def __enter__(self):
        kind, what = self.name.split("-")
        if kind == "py":
            self.comparator = PyJudge(self.log, hang=what == "hang")
            return self.comparator
        if what in ("hang", "heavy"):
            server = Endpoint(self.log, hang=what == "hang").__enter__()
        elif what == "silent":
            server = Silent().__enter__()
        else:
            server = None
        self.stack.append(server)
        url = server.url if server else f"http://127.0.0.1:{free_port()}/v1"
        self.comparator = Recording(self.log, url)
        return self.comparator

    def __exit__(self, *exc) -> None:
        if isinstance(self.comparator, Recording):
            self.comparator.close()
        for server in self.stack:
            if server is not None:
                server.__exit__(*exc)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="directory for deadline_holds.json and deadline_holds.md")
    p.add_argument("--reranks", type=int, default=100)
    p.add_argument("--time-budget", type=float, default=1.0)
    p.add_argument("--judges", nargs="*", default=list(JUDGES))
    p.add_argument("--concurrent", type=int, default=5, help="reranks at once (sync: threads; async: tasks)")
    args = p.parse_args()
    faulthandler.dump_traceback_later(3600, exit=True)  # a stuck run says where, and ends
    rows = []
    for judge in args.judges:
        log, cells = Log(), []
        with _judge(judge, log) as comparator:  # one endpoint per judge; each cell's reranks have their own ids
            for k, (mode, n) in enumerate((m, n) for m in ("sync", "async") for n in (20, 100)):
                began = time.monotonic()
                ids = range(k * args.reranks, (k + 1) * args.reranks)
                cells.append((mode, n, *run_cell(comparator, mode, n, ids, args.time_budget, args.concurrent)))
                print(f"{judge} {mode} N={n}: {time.monotonic() - began:.0f} s", flush=True)
        for mode, n, starts, outcomes in cells:  # the endpoint's arrivals are in the log once it has stopped
            rows.append(summary(judge, mode, n, starts, outcomes, log, args.time_budget))
            print(json.dumps(rows[-1]), flush=True)
    table = [f"time_budget = {args.time_budget} s, {args.reranks} reranks per cell, {args.concurrent} at once; goal: "
             f"worst return <= "
             f"{args.time_budget + GOAL_S} s and no call sent after the deadline", "",
             "| judge | mode | N | worst return (s) | p99 (s) | p50 (s) | sends | sent after the deadline | "
             "latest send - deadline (s) | latest arrival - deadline (s) | outcomes | goal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        arrival = "-" if r["latest_arrival_vs_deadline_s"] is None else f"{r['latest_arrival_vs_deadline_s']:+.3f}"
        send = "-" if r["latest_send_vs_deadline_s"] is None else f"{r['latest_send_vs_deadline_s']:+.3f}"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        table.append(f"| {r['judge']} | {r['mode']} | {r['n']} | {r['worst_return_s']:.3f} | {r['p99_return_s']:.3f} "
                     f"| {r['p50_return_s']:.3f} | {r['calls_sent']} | {r['sent_after_deadline']} | {send} | "
                     f"{arrival} | {outcomes} | {'met' if r['goal_met'] else 'missed'} |")
    print("\n".join(table))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "deadline_holds.json").write_text(json.dumps({"time_budget": args.time_budget, "rows": rows},
                                                                 indent=1))
        (args.out / "deadline_holds.md").write_text("\n".join(table) + "\n")
    return 0 if all(r["goal_met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
