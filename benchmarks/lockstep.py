"""Wall time of ``arerank_many`` over an endpoint judge whose latency varies: queries in lockstep steps (the
default ``carry_judge=True``: each step awaits every query's round) against queries on their own
(``carry_judge=False``: each sends its next round once its last one is answered), and ``arerank_stream`` (the
service's ``RerankPool``).

The judge is the calibrated simulator of ``activeprp bench`` over DL19 + DL20 (BM25 top-100) behind a
``RemoteComparator`` provider whose every request sleeps a seeded log-normal latency (median ``--median`` s,
log-sd ``--sigma``, at most 2 s), as an HTTP endpoint's calls would; no network. Each mode gets a fresh judge with
the same seed; the figure is wall time for about the same work (``calls``).

Run (repository root, ../shared/data beside it):
    python benchmarks/lockstep.py --data ../shared/data --out benchmarks/results/throughput/lockstep.md
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import load  # noqa: E402

from activeprp_core import arerank_many  # noqa: E402
from activeprp_core.comparators import RemoteComparator  # noqa: E402
from activeprp_core.comparators.answers import Answer  # noqa: E402
from activeprp_core.stream import arerank_stream  # noqa: E402


class Jittery(RemoteComparator):
    """One request per pair, answered by ``inner`` (found by the passages' texts in ``requests``) after a seeded
    log-normal sleep."""

    def __init__(self, inner, requests, median: float, sigma: float, seed: int = 0) -> None:
        super().__init__()
        self.inner, self.mu, self.sigma, self.rng = inner, math.log(median), sigma, random.Random(seed)
        self.candidate = {(q, c.text): c for q, cands in requests for c in cands}
        self.model = self.endpoint = "jittery"

    def request(self, query: str, first: str, second: str):
        return query, self.candidate[query, first], self.candidate[query, second]

    async def asend(self, client, request):
        await asyncio.sleep(min(2.0, self.rng.lognormvariate(self.mu, self.sigma)))
        query, first, second = request
        return self.inner.compare(query, [(first, second)])[0]

    def parse(self, response) -> Answer:
        return Answer(response)


async def run(mode: str, requests, judge, kw: dict) -> tuple[float, int, int]:
    started = time.perf_counter()
    if mode == "stream":
        async def source():
            for r in requests:
                yield r
        out = [r async for _, r in arerank_stream(source(), comparator=judge, **kw)]
    else:
        out = [r async for r in arerank_many(requests, comparator=judge, carry_judge=mode == "steps", **kw)]
    return time.perf_counter() - started, sum(r.calls for r in out), max(r.rounds for r in out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--queries", type=int, default=12, help="queries per year (default 12: 24 in all)")
    p.add_argument("--median", type=float, default=0.03)
    p.add_argument("--sigma", type=float, default=0.8)
    p.add_argument("--budgets", type=int, nargs="+", default=[50, 200])
    p.add_argument("--caps", type=int, nargs="+", default=[4, 32])
    args = p.parse_args()
    requests, sim = load(args.data, args.queries)
    budgets, caps = " ".join(map(str, args.budgets)), " ".join(map(str, args.caps))
    command = (f"python benchmarks/lockstep.py --data ../shared/data --queries {args.queries} --median {args.median} "
               f"--sigma {args.sigma} --budgets {budgets} --caps {caps}")
    setting = (f"{len(requests)} queries (DL19 + DL20, BM25 top-100), the default ranker, top_k 10, max_active 16; "
               f"per-call latency log-normal, median {args.median} s, log-sd {args.sigma}.")
    lines = ["# arerank_many: steps or each query on its own\n", "Command:\n", f"    {command}\n",
             textwrap.fill(setting, 118) + "\n",
             "| budget | max_concurrency | mode | wall s | calls | most rounds |", "|---|---|---|---|---|---|"]
    for budget in args.budgets:
        for cap in args.caps:
            for mode in ("steps", "own", "stream"):
                judge = Jittery(sim, requests, args.median, args.sigma)
                kw = dict(budget=budget, top_k=10, max_active=16, max_concurrency=cap)
                wall, calls, rounds = asyncio.run(run(mode, requests, judge, kw))
                lines.append(f"| {budget} | {cap} | {mode} | {wall:.2f} | {calls} | {rounds} |")
                print(lines[-1], flush=True)
    lines.append("\nsteps: `arerank_many` (default `carry_judge=True`); own: `arerank_many(carry_judge=False)`; "
                 "stream: `arerank_stream`.")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
