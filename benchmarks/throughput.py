"""Throughput of ``rerank_many`` vs a loop of ``rerank`` with a batching comparator whose forward pass costs
``a + b * n`` seconds for n prompts (issue 12's throughput model).

The judge is the calibrated simulator of ``activeprp bench`` (``SimulatedComparator.from_qrels``: each query's
graded qrels, ``CALIBRATED_PARAMS``) wrapped in ``ModelledCost``: a comparator that runs every call in forward
passes of at most ``batch_size`` prompts and adds ``a + b * n`` per pass to a modelled clock (no sleep), so a grid
that would take hours of model time runs in seconds. A loop of ``rerank`` sends each round of one query as its own
passes; one ``rerank_many`` sends the rounds of all queries in progress (``max_active``) together. Time per run =
modelled clock + the measured wall time of the run itself (the engine and the simulator; a few ms). Every query's
order from ``rerank_many`` is checked against the loop's (``identical``).

Cost profiles (``--profiles``; a and b in seconds):
- ``cpu``: the bundled SmolLM2-135M on this 2-core CPU, ``ab`` mode, 1 thread (benchmarks/results/forward_cost,
  least squares over 25 samples): b = 1.47 s/prompt, a = -0.51 s clipped to 0 (no fixed cost to amortise).
- ``gpu_ft16`` / ``gpu_ft32``: NVIDIA FasterTransformer's T5 guide (docs/t5_guide.md, "End-to-end translation
  performance on PyTorch", V100), T5-base, tokens/s at batch 1 / 8 / 32 / 128: FP16 364 / 1733 / 4517 / 8519, FP32
  226 / 1153 / 3021 / 4184, read as one decoding step of B sequences taking B / throughput; least squares over the
  four batch sizes: FP16 a = 3.51 ms, b = 0.0914 ms/prompt (a/b = 38); FP32 a = 4.57 ms, b = 0.203 ms/prompt
  (a/b = 23, the low end of the guide's 23-39).
- ``gpu_hf16``: the same table's Hugging Face PyTorch row, T5-base FP16, 19 / 83 / 337 / 956 tokens/s: a = 73.9 ms,
  b = 0.487 ms/prompt (a/b = 152: mostly per-step Python overhead).
These are decoding steps; a PRP call is one prefill of a ~250-token prompt, whose per-prompt cost is higher, so
its a/b on the same GPU is lower: the GPU a/b here are upper-end values (benchmarks/results/README.md, section 6).

A real-time check (``--check``) runs a few queries with ``sleep=True`` (the comparator sleeps a + b*n per pass)
and compares the measured wall time with the modelled clock.

Run (repository root, ../shared/data beside it):
    PYTHONPATH=. python benchmarks/throughput.py --data ../shared/data --out benchmarks/results/throughput
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from activeprp_bench.datasets import load_trec_dl
from activeprp_core import Comparator, RerankResult, SimulatedComparator, rerank, rerank_many
from activeprp_core.comparators import as_comparator
from activeprp_core.comparators.base import CallGuard, Item
from activeprp_core.comparators.simulated import CALIBRATED_PARAMS
from activeprp_core.types import Judgment, Pair, to_judgments

# (a seconds, b seconds per prompt, batch size, where from); see the module docstring
PROFILES = {
    "cpu": (0.0, 1.4725, 8, "bundled SmolLM2-135M, ab, this CPU (forward_cost/fit.json)"),
    "gpu_ft32": (4.57e-3, 0.203e-3, 64, "FasterTransformer T5-base FP32, V100 (t5_guide.md)"),
    "gpu_ft16": (3.51e-3, 0.0914e-3, 64, "FasterTransformer T5-base FP16, V100 (t5_guide.md)"),
    "gpu_hf16": (73.9e-3, 0.487e-3, 64, "HF PyTorch T5-base FP16, V100 (t5_guide.md)"),
}


class ModelledCost(Comparator):
    """A batching comparator: ``judge_batch`` runs its items in forward passes of at most ``batch_size`` prompts,
    each adding ``a + b * n`` seconds to ``clock`` (and sleeping that long with ``sleep``); the answers come from
    ``inner``. ``judge`` (one query's round, as ``rerank`` sends it) takes the same path."""

    def __init__(self, inner, a: float, b: float, batch_size: int, sleep: bool = False) -> None:
        self.inner, self.a, self.b, self.sleep = as_comparator(inner), a, b, sleep
        self.max_batch_size = self.batch_size = batch_size
        self.clock, self.passes, self.prompts = 0.0, 0, 0

    def judge_batch(self, items: Sequence[Item], *, guard: CallGuard | None = None) -> list[Judgment]:
        out: list[Judgment] = []
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            if guard is not None:
                guard.check()
            cost = self.a + self.b * len(chunk)
            self.clock, self.passes, self.prompts = self.clock + cost, self.passes + 1, self.prompts + len(chunk)
            if self.sleep:
                time.sleep(cost)
            answers = to_judgments(self.inner.judge_batch(chunk), len(chunk))
            if guard is not None:
                guard.record_all(answers)
            out.extend(answers)
        return out

    def _judge_chunk(self, query: str, pairs: Sequence[Pair]) -> list[Judgment]:
        return self.judge_batch([(query, a, b) for a, b in pairs])


def load(data: Path, n_queries: int | None):
    """(requests, judge) over DL19 + DL20 (BM25 top-100): ``(query, candidates)`` pairs and the simulator."""
    requests, queries, qrels = [], {}, {}
    for year, sub in ((2019, "trec-dl-2019"), (2020, "trec-dl-2020")):
        coll = load_trec_dl(data / sub, year).subset(n_queries)
        for q in coll.qids:
            requests.append((coll.queries[q], coll.candidates[q]))
            queries[f"{year}:{q}"], qrels[f"{year}:{q}"] = coll.queries[q], coll.qrels[q]
    return requests, SimulatedComparator.from_qrels(qrels, queries, **CALIBRATED_PARAMS)


def run(requests, judge, profile, *, mode: str, sleep: bool = False, max_active: int = 64,
        **kw) -> tuple[list[RerankResult], dict]:
    a, b, batch_size, _ = profile
    comp = ModelledCost(judge, a, b, batch_size, sleep=sleep)
    started = time.perf_counter()
    if mode == "loop":
        results = [rerank(q, c, comparator=comp, **kw) for q, c in requests]
    else:
        results = list(rerank_many(requests, comparator=comp, max_active=max_active, **kw))
    wall = time.perf_counter() - started
    seconds = wall if sleep else comp.clock + wall
    return results, {"modelled_s": comp.clock, "wall_s": wall, "seconds": seconds, "passes": comp.passes,
                     "prompts_per_pass": comp.prompts / max(comp.passes, 1),
                     "queries_per_s": len(requests) / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="directory with trec-dl-2019/ and trec-dl-2020/")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rankers", nargs="+", default=["mohajer"])
    p.add_argument("--oracles", nargs="+", default=["randomized", "bidirectional"])
    p.add_argument("--budgets", nargs="+", type=int, default=[150, 250])
    p.add_argument("--profiles", nargs="+", choices=sorted(PROFILES), default=list(PROFILES))
    p.add_argument("--max-active", type=int, default=64)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="also the real-time check (sleeping comparator)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    requests, judge = load(args.data, None)
    rows = []
    for ranker in args.rankers:
        for oracle in args.oracles:
            for budget in args.budgets:
                kw = {"ranker": ranker, "oracle": oracle, "budget": budget, "top_k": args.top_k, "seed": args.seed}
                for name in args.profiles:
                    loop, lstats = run(requests, judge, PROFILES[name], mode="loop", **kw)
                    many, mstats = run(requests, judge, PROFILES[name], mode="many", max_active=args.max_active,
                                       **kw)
                    same = [r.order for r in loop] == [r.order for r in many]
                    row = {"ranker": ranker, "oracle": oracle, "budget": budget, "profile": name,
                           "a_s": PROFILES[name][0], "b_s": PROFILES[name][1], "batch_size": PROFILES[name][2],
                           "queries": len(requests), "calls_per_query": sum(r.calls for r in many) / len(many),
                           "rounds_per_query": sum(r.rounds for r in many) / len(many),
                           **{f"loop_{k}": v for k, v in lstats.items()}, **{f"many_{k}": v for k, v in mstats.items()},
                           "speedup": mstats["queries_per_s"] / lstats["queries_per_s"], "identical": same}
                    rows.append(row)
                    print(f"{ranker:>16} {oracle:>13} B={budget} {name:>6}: loop {lstats['queries_per_s']:10.3f} q/s, "
                          f"many {mstats['queries_per_s']:10.3f} q/s, x{row['speedup']:.2f}, identical={same}",
                          flush=True)
    check = real_time_check(args) if args.check else None
    write(args, rows, check)


def real_time_check(args) -> dict:
    """Sleep for real (a + b*n per pass) on 8 DL19 queries, a = 20 ms, b = 0.6 ms (a/b = 33, like gpu_ft scaled
    up so that the sleeps dominate the engine's own time): measured wall vs modelled clock."""
    requests, judge = load(args.data, 4)  # 4 DL19 + 4 DL20 queries
    profile = (20e-3, 0.6e-3, 64, "check")
    kw = {"ranker": args.rankers[0], "oracle": "randomized", "budget": 150, "top_k": args.top_k, "seed": args.seed}
    out = {"a_s": profile[0], "b_s": profile[1], "batch_size": profile[2], "queries": len(requests), **kw}
    for mode in ("loop", "many"):
        _, modelled = run(requests, judge, profile, mode=mode, **kw)
        _, real = run(requests, judge, profile, mode=mode, sleep=True, **kw)
        out[mode] = {"modelled_s": round(modelled["seconds"], 3), "measured_s": round(real["wall_s"], 3),
                     "passes": real["passes"]}
        print(f"check {mode}: modelled {modelled['seconds']:.2f} s, measured {real['wall_s']:.2f} s", flush=True)
    out["load1"] = os.getloadavg()[0]
    return out


def write(args, rows: list[dict], check: dict | None) -> None:
    with (args.out / "rows.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    config["profiles_constants"] = {k: PROFILES[k] for k in args.profiles}
    (args.out / "config.json").write_text(json.dumps({"args": config, "check": check}, indent=2) + "\n")
    lines = ["| ranker | oracle | B | profile (a, b, batch) | calls/q | rounds/q | loop q/s | rerank_many q/s | "
             "speed-up | prompts/pass (loop -> many) | identical |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        a_ms, b_ms = r["a_s"] * 1e3, r["b_s"] * 1e3
        lines.append(f"| {r['ranker']} | {r['oracle']} | {r['budget']} | {r['profile']} ({a_ms:g} ms, {b_ms:g} ms, "
                     f"{r['batch_size']}) | {r['calls_per_query']:.1f} | {r['rounds_per_query']:.1f} | "
                     f"{r['loop_queries_per_s']:.4g} | {r['many_queries_per_s']:.4g} | {r['speedup']:.2f}x | "
                     f"{r['loop_prompts_per_pass']:.1f} -> {r['many_prompts_per_pass']:.1f} | {r['identical']} |")
    lines += ["", "Queries/s, loop of `rerank` -> `rerank_many` (speed-up), per cost profile:", "",
              "| ranker | oracle | B | calls / rounds per query | "
              + " | ".join(f"{name} (a/b = {PROFILES[name][0] / PROFILES[name][1]:.0f})" for name in args.profiles)
              + " |", "|---|---|---:|---:|" + "---:|" * len(args.profiles)]
    for i in range(0, len(rows), len(args.profiles)):
        group = rows[i : i + len(args.profiles)]
        r = group[0]
        cells = [f"{g['loop_queries_per_s']:.3g} -> {g['many_queries_per_s']:.3g} (**{g['speedup']:.1f}x**)"
                 for g in group]
        lines.append(f"| {r['ranker']} | {r['oracle']} | {r['budget']} | {r['calls_per_query']:.0f} / "
                     f"{r['rounds_per_query']:.1f} | " + " | ".join(cells) + " |")
    if check:
        lines += ["", f"Real-time check ({check['queries']} queries, a = {check['a_s'] * 1e3:g} ms, "
                      f"b = {check['b_s'] * 1e3:g} ms, batch {check['batch_size']}, load average "
                      f"{check['load1']:.1f}): loop modelled {check['loop']['modelled_s']} s / measured "
                      f"{check['loop']['measured_s']} s; rerank_many modelled {check['many']['modelled_s']} s / "
                      f"measured {check['many']['measured_s']} s."]
    (args.out / "throughput.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
