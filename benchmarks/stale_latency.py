"""A stale record of round latencies in ``activeprp serve``: after a slow spell, do short time budgets get calls
again once the judge answers fast (``judging.RoundLatency.probe``), or only after ``LATENCY_HORIZON`` (60 s)?

``activeprp serve``'s app (``create_app``, the service's ``RerankPool``) under uvicorn on 127.0.0.1, the tests'
``WordJudge`` (``acompare`` sleeps its delay, each chunk's calls at once), ``budget`` 50, ``max_rounds`` 6;
requests over HTTP (``httpx``), each with its own query. Three scenarios, each on a fresh app:

- ``burst``: ``max_concurrency`` 8; the judge takes 0.8 s per call; 20 concurrent requests (``time_budget`` 6 s)
  whose rounds wait for the 8 slots; then the judge takes 20 ms, and a request with ``time_budget`` 2 s is sent
  every 0.5 s.
- ``burst-merged``: the same with a judge that batches across queries (``max_batch_size`` 8: a local model's
  shape), whose rounds the service merges into one call at a time: 8 concurrent requests with ``time_budget`` 9 s
  (their merged rounds take about 7 s), then 20 requests with ``time_budget`` 2 s every 0.5 s.
- ``mixed``: no cap on calls in flight; the judge takes 2.5 s per call; 4 requests with ``time_budget`` 6 s, one
  round and a budget of 4 calls (answered in about 2.5 s), and 30 with ``time_budget`` 1 s and a budget of 4
  calls (their rounds cut at the deadline: lower bounds, shorter than any answered round, so the estimate is
  under the fastest round); then the judge takes 20 ms, and a request with ``time_budget`` 2 s every 1 s.

- ``turns-slow``: the reverse, a judge that turns slower than the time budget after answering fast (review
  1129ag): ``max_concurrency`` 8; 2 requests (``time_budget`` 3 s) answered in 20 ms a call; then the judge takes
  4 s per call, and a request with ``time_budget`` 3 s is sent every 0.5 s for 12 s, each without waiting for the
  one before. Every round it sends is cut: the count of calls is what the record let through.

Per later request: seconds since the first spell (``slow_spell`` in the JSON) ended, calls, rounds, cut calls,
``exhausted_by`` and the record's ``estimate`` / ``fastest`` / ``call_floor`` after it. Summary per scenario: the
record after the first spell, how many later requests got no call, when the first that did was sent, and the later
requests' calls and cut calls. About 60 s in all; bounded (each request's HTTP timeout 30 s).

Run (repository root; ``--checkout DIR`` measures another checkout's code, e.g. one before the probe):
    PYTHONPATH=. python benchmarks/stale_latency.py --out benchmarks/results/serve/stale_latency
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAST = 0.02  # seconds per call once the judge answers fast again
SCENARIOS = {  # name: (first delay, max_batch_size, max_concurrency, first requests as [(count, body extras)],
    #                 later delay, later time_budget, a later request every ... s, how many, sent without waiting)
    "burst": (0.8, None, 8, [(20, {"time_budget": 6.0})], FAST, 2.0, 0.5, 12, False),
    "burst-merged": (0.8, 8, 8, [(8, {"time_budget": 9.0})], FAST, 2.0, 0.5, 20, False),
    "mixed": (2.5, None, None, [(4, {"time_budget": 6.0, "budget": 4, "max_rounds": 1}),
                                (30, {"time_budget": 1.0, "budget": 4})], FAST, 2.0, 1.0, 10, False),
    "turns-slow": (FAST, None, 8, [(2, {"time_budget": 3.0})], 4.0, 3.0, 0.5, 24, True),
}


async def post(client, url: str, i: int, extras: dict) -> dict:
    from tests._serve_helpers import make_request

    query, docs = make_request(i)
    response = await client.post(url + "/v2/rerank", json={"model": "activeprp", "query": query,
                                                            "documents": docs, **extras})
    response.raise_for_status()
    meta = response.json()["meta"]["activeprp"]
    return {k: meta.get(k) for k in ("calls", "rounds", "cut_calls", "exhausted_by")}


async def scenario(name: str) -> dict:
    import httpx

    from activeprp_integrations.serve import create_app
    from tests._serve_helpers import WordJudge, serving

    delay, batch, concurrency, slow, later_delay, later_budget, every, count, overlap = SCENARIOS[name]
    judge = WordJudge(delay=delay, max_batch_size=batch)
    app = create_app(judge, budget=50, max_rounds=6, max_concurrency=concurrency, time_budget=10)
    out: dict = {"scenario": name, "slow_delay_s": delay, "max_batch_size": batch, "max_concurrency": concurrency,
                 "slow_requests": slow,
                 "later": {"delay_s": later_delay, "time_budget": later_budget, "every_s": every, "count": count,
                           "without_waiting": overlap}}
    with serving(app) as (url, _):
        latency = app.state.service.pool.latency
        # no keep-alive: a connection the server closes while idle (uvicorn: after 5 s) is never reused
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            start = time.monotonic()
            bodies = [extras for n, extras in slow for _ in range(n)]
            spell = await asyncio.gather(*(post(client, url, i, b) for i, b in enumerate(bodies)))
            ended = time.monotonic()
            out["slow_spell"] = {"seconds": round(ended - start, 2), "calls": sum(r["calls"] for r in spell),
                                 "cut_calls": sum(r["cut_calls"] or 0 for r in spell),
                                 "estimate_s": latency.estimate(), "fastest_s": latency.fastest()}
            judge.delay = later_delay

            async def later_request(k: int) -> dict:
                sent = time.monotonic() - ended
                row = await post(client, url, 100 + k, {"time_budget": later_budget})
                row.update(sent_after_s=round(sent, 2), estimate_s=latency.estimate(), fastest_s=latency.fastest(),
                           call_floor_s=latency.call_floor())
                return row

            running = []
            for k in range(count):
                running.append(asyncio.ensure_future(later_request(k)))
                if not overlap:
                    await running[-1]
                await asyncio.sleep(every)
            later = list(await asyncio.gather(*running))
    out["later_requests"] = later
    first = next((r["sent_after_s"] for r in later if r["calls"]), None)
    out["summary"] = {"no_call": sum(not r["calls"] for r in later), "of": len(later),
                      "first_with_calls_sent_after_s": first, "calls": sum(r["calls"] for r in later),
                      "cut_calls": sum(r["cut_calls"] or 0 for r in later)}
    return out


def describe(result: dict) -> list[str]:
    spell, summary = result["slow_spell"], result["summary"]
    fmt = lambda s: "-" if s is None else f"{s:.3f}"  # noqa: E731
    lines = [f"== {result['scenario']}: first spell {spell['seconds']} s, calls {spell['calls']} "
             f"(cut {spell['cut_calls']}); record after it: estimate {fmt(spell['estimate_s'])} s, "
             f"fastest {fmt(spell['fastest_s'])} s"]
    for r in result["later_requests"]:
        lines.append(f"  t+{r['sent_after_s']:5.2f} s time_budget {result['later']['time_budget']}: "
                     f"calls={r['calls']} rounds={r['rounds']} cut={r['cut_calls']} exhausted_by={r['exhausted_by']}"
                     f" | estimate {fmt(r['estimate_s'])} fastest {fmt(r['fastest_s'])} "
                     f"call floor {fmt(r['call_floor_s'])}")
    first = summary["first_with_calls_sent_after_s"]
    lines.append(f"  {summary['no_call']} of {summary['of']} later requests got no call; first with calls: "
                 + ("none" if first is None else f"sent {first} s after the first spell")
                 + f"; {summary['calls']} calls sent, {summary['cut_calls']} cut")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the results JSON")
    parser.add_argument("--name", default="results.json", help="the results file's name (default results.json)")
    parser.add_argument("--checkout", type=Path, default=ROOT,
                        help="the checkout whose activeprp code runs (default: this one)")
    parser.add_argument("--scenarios", nargs="+", choices=sorted(SCENARIOS), default=list(SCENARIOS))
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))  # its activeprp packages and its tests/ helpers
    import activeprp_core

    commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"activeprp_core from {activeprp_core.__file__} (commit {commit})")
    results = []
    for name in args.scenarios:
        results.append(asyncio.run(scenario(name)))
        print("\n".join(describe(results[-1])), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join(["python", *sys.argv]), "checkout_commit": commit or None,
              "python": platform.python_version(), "load_average": os.getloadavg(), "scenarios": results}
    (args.out / args.name).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
