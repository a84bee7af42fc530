"""Cost of one forward pass of the bundled model vs batch size: fit ``seconds = a + b * batch_size``.

The throughput benchmark of issue 12 simulates a batching comparator whose forward pass costs ``a + b * B``; this
measures ``a`` and ``b`` for the bundled SmolLM2-135M on this CPU, for both modes:

- ``ab``: one forward pass over B PRP prompts (``judge`` of B ordered DL19 pairs with ``batch_size=B``);
- ``query_likelihood``: one forward pass over B (passage, query) prompts (``passage_scores`` of B DL19 passages,
  a fresh comparator per call so that nothing is cached, ``batch_size=B``).

Each timed call includes tokenisation and padding (both scale with B, like the forward pass). One warm-up call per
mode is not timed. Pairs and passages come from the BM25 top-100 of DL19 queries, a different slice per repeat.
The machine is shared: each sample records the 1-minute load average, and ``fit.json`` gives two least-squares
fits per mode, over all samples and over the fastest sample of each batch size (the least disturbed one), with
per-B medians; a table is printed.

Run (repository root, TREC DL19 files in DATA):
    PYTHONPATH=. OMP_NUM_THREADS=2 python benchmarks/forward_cost.py --data ../shared/data/trec-dl-2019 \
        --out benchmarks/results/forward_cost
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import time
from pathlib import Path

from activeprp_bench.datasets import load_trec_dl
from activeprp_core.comparators import TransformersComparator


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Ordinary least squares ``y = a + b x``: returns ``(a, b, r^2)``."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, 1.0 - ss_res / ss_tot if ss_tot else 1.0


def _fit(rows: list[dict]) -> dict:
    a, b, r2 = fit_line([s["batch_size"] for s in rows], [s["seconds"] for s in rows])
    return {"a_s": round(a, 4), "b_s_per_prompt": round(b, 4), "a_over_b": round(a / b, 3) if b else None,
            "r2": round(r2, 4), "n": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="the trec-dl-2019 directory (bm25_dl19_top100.jsonl, qrels)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--passage-tokens", type=int, default=128, help="passage cut (the rerank CLI default)")
    ap.add_argument("--modes", nargs="+", default=["ab", "query_likelihood"])
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    coll = load_trec_dl(args.data, 2019)
    qids = coll.qids
    samples, fits = [], {}
    for mode in args.modes:
        def make(size: int, mode: str = mode) -> TransformersComparator:  # the model loads once per process
            return TransformersComparator.from_bundled(mode, batch_size=size, device="cpu",
                                                       max_passage_tokens=args.passage_tokens)

        judge = make(1)
        for rep in range(-1, args.repeats):  # rep -1: warm-up, not recorded
            for size in args.batch_sizes if rep >= 0 else [max(args.batch_sizes)]:
                qid = qids[((rep + 1) * len(args.batch_sizes) + args.batch_sizes.index(size)) % len(qids)]
                query, cands = coll.queries[qid], coll.candidates[qid]
                load = os.getloadavg()[0]
                judge = make(size)  # fresh: no query-likelihood score is cached
                if mode == "ab":
                    pairs = [(cands[2 * i], cands[2 * i + 1]) for i in range(size)]
                    tokens = sum(len(judge.ab_prompt_ids(query, a.text, b.text)) for a, b in pairs)
                    started = time.perf_counter()
                    judge.judge(query, pairs)
                else:
                    passages = [c.text for c in cands[:size]]
                    tokens = sum(len(p) + len(q) for p, q in (judge.ql_prompt_ids(query, t) for t in passages))
                    started = time.perf_counter()
                    judge.passage_scores(query, passages)
                seconds = time.perf_counter() - started
                if rep >= 0:
                    samples.append({"mode": mode, "batch_size": size, "repeat": rep, "seconds": round(seconds, 4),
                                    "prompt_tokens": tokens, "load1": round(load, 2)})
                    print(f"{mode:>16} B={size:>2} rep={rep} {seconds:7.3f} s  {tokens / size:5.0f} tok/prompt "
                          f"load {load:.2f}", flush=True)
        rows = [s for s in samples if s["mode"] == mode]
        fastest = [min((s for s in rows if s["batch_size"] == n), key=lambda s: s["seconds"]) for n in args.batch_sizes]
        fits[mode] = {
            "all_samples": _fit(rows), "fastest_per_batch_size": _fit(fastest),
            "median_s_by_batch": {str(n): round(statistics.median(s["seconds"] for s in rows
                                                                  if s["batch_size"] == n), 4)
                                  for n in args.batch_sizes},
            "mean_prompt_tokens": round(statistics.fmean(s["prompt_tokens"] / s["batch_size"] for s in rows), 1),
            "load1_min_max": [min(s["load1"] for s in rows), max(s["load1"] for s in rows)],
        }
    with open(out / "samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(samples[0]))
        writer.writeheader()
        writer.writerows(samples)
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "passage_tokens": args.passage_tokens, "repeats": args.repeats,
            "batch_sizes": args.batch_sizes}
    (out / "fit.json").write_text(json.dumps({"meta": meta, "fits": fits}, indent=2) + "\n")
    for mode, fit in fits.items():
        for name in ("all_samples", "fastest_per_batch_size"):
            f = fit[name]
            print(f"{mode} ({name}): a = {f['a_s']} s, b = {f['b_s_per_prompt']} s/prompt, a/b = {f['a_over_b']}, "
                  f"r^2 = {f['r2']}; load {fit['load1_min_max']}")


if __name__ == "__main__":
    main()
