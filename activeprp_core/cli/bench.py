"""``activeprp bench``: the benchmark harness (grid, calibration, overhead) on local test collections.

``--data DIR`` names the directory that holds the collections (the layout each loader reads is in README.md,
"Benchmarks"); nothing is read from a default path. Examples (from the repository root, data in
``../shared/data``)::

    activeprp bench grid --data ../shared/data --out benchmarks/results/sim_dl1920     # the paper's Table 1 grid
    activeprp bench grid --data ../shared/data --comparator bundled --collections dl19 --queries 20 --depth 30 \
        --scale-budgets
    activeprp bench calibrate --data ../shared/data --out benchmarks/results/calibration
    activeprp bench overhead --data ../shared/data --out benchmarks/results/overhead
    activeprp bench flip --data ../shared/data --comparator bundled --mode ab --collections dl19 --queries 10
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from . import InputError


def _sim_params(spec: str | None) -> dict[str, float]:
    from ..evaluation.calibration import CALIBRATED_PARAMS

    if not spec:
        return dict(CALIBRATED_PARAMS)
    path = Path(spec)
    data = json.loads(path.read_text()) if path.is_file() else json.loads(spec)
    return dict(data.get("params", data))


def _collections(args):
    from ..evaluation.datasets import load_named

    if not args.data:
        raise InputError("--data DIR is required: the directory holding the collections (e.g. ../shared/data)")
    return [load_named(n, args.data).subset(args.queries, args.depth) for n in args.collections]


def _comparator_for(args, out: Path):
    """``collection -> (qid -> comparator)`` for the chosen backend (real models behind the disk cache)."""
    from ..evaluation.grid import simulator_factory

    if args.comparator == "simulated":
        params = _sim_params(args.sim_params)
        return lambda c: simulator_factory(c, params)
    from ..comparators.cached import CachedComparator, identity

    if args.comparator == "bundled":
        from ..comparators import TransformersComparator

        inner = TransformersComparator.from_bundled(args.mode, batch_size=args.batch_size, device="cpu")
        name = f"smollm2-135m-q4_1/{args.mode}"
    else:
        from ..comparators import OpenAIChatComparator

        inner = OpenAIChatComparator(args.model, base_url=args.base_url)
        name = f"openai/{args.base_url}/{args.model}"
    cached = CachedComparator(inner, args.cache or out / "answers.sqlite", identity(inner, name))
    return lambda c: (lambda qid: cached)


def _report(rows, out: Path, seed: int, paper: bool, paired: list[str]) -> str:
    import numpy as np

    from ..evaluation.report import Summary, markdown_table, paired_table, plot

    summary = Summary(rows, np.random.default_rng(seed))
    parts = ["## nDCG@10 (%), mean ±95% bootstrap CI half-width over seeds" +
             (" (paper Table 1 in brackets)" if paper else ""), markdown_table(summary, "ndcg", paper),
             "## LLM calls per query", markdown_table(summary, "calls"),
             "## Sequential rounds per query", markdown_table(summary, "rounds")]
    rankers = {r for r, _, _ in summary.keys}
    for spec in paired:
        a, b = spec.split(":")
        if {a, b} <= rankers:
            parts += [f"## Paired bootstrap over queries: {a} vs {b} (10k resamples, p < 0.05)",
                      paired_table(summary, a, b, np.random.default_rng(seed))]
    text = "\n\n".join(parts) + "\n"
    (out / "tables.md").write_text(text)
    plot(summary, out / "ndcg_vs_budget.png", "budget")
    plot(summary, out / "ndcg_vs_rounds.png", "rounds")
    return text


def _grid(args) -> int:
    from ..evaluation.grid import read_csv, run_grid, write_csv

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_csv:
        rows = read_csv(args.from_csv)
    else:
        colls = _collections(args)
        budgets = args.budgets
        if args.scale_budgets:
            n = min(len(c.candidates[q]) for c in colls for q in c.qids)
            budgets = sorted({max(1, round(b * n / 100)) for b in budgets})
        seeds = {"bidirectional": [0], "single": [0], "randomized": list(range(args.seeds))}
        rows = run_grid(colls, _comparator_for(args, out), args.rankers, args.oracles, budgets, seeds,
                        args.top_k, progress=not args.no_progress)
        write_csv(rows, out / "rows.csv.gz")
        (out / "config.json").write_text(json.dumps({"argv": sys.argv[1:], "budgets": budgets, **{
            k: v for k, v in vars(args).items() if k != "func"}}, indent=1, default=str))
    baseline = _baseline(args) if not args.from_csv else ""
    paper = not (args.no_paper or args.scale_budgets)  # the paper's columns are budgets at N = 100
    print(baseline + _report(rows, out, args.bootstrap_seed, paper, args.paired))
    return 0


def _baseline(args) -> str:
    colls = _collections(args)
    vals = {c.name: c.first_stage_ndcg() for c in colls}
    return "First stage (BM25) nDCG@10: " + ", ".join(
        f"{n} {100 * sum(v.values()) / len(v):.2f}" for n, v in vals.items()) + "\n\n"


def _calibrate(args) -> int:
    from ..evaluation.calibration import calibrate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.check:
        from ..evaluation.calibration import Calibration, converged_quality, flip_rate

        params, colls = _sim_params(args.sim_params), _collections(args)
        conv = converged_quality(colls, params)
        cal, name = Calibration(params, flip_rate(colls, params), conv.pop("mean"), conv), "check"
    else:
        cal, name = calibrate(_collections(args), pair_noise=args.pair_noise), f"pair_noise_{args.pair_noise}"
    text = json.dumps(vars(cal), indent=1)
    (out / f"calibration_{name}.json").write_text(text + "\n")
    print(text)
    return 0


def _flip(args) -> int:
    from ..evaluation.calibration import measured_flip_rate

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rate, pairs = measured_flip_rate(_comparator_for(args, out), _collections(args), args.pairs_per_query,
                                     random.Random(args.seed))
    mode = args.mode if args.comparator == "bundled" else ""
    text = f"{args.comparator} {mode}: flip rate {100 * rate:.1f}% of {pairs} pairs (both slot orders asked)\n"
    (out / f"flip_{args.comparator}{mode}.md").write_text(text)
    print(text)
    return 0


def _overhead(args) -> int:
    from ..evaluation.grid import PAPER_RANKERS
    from ..evaluation.overhead import comparator_throughput, scheduling_overhead

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| Ranker | Oracle | calls/query | µs per call |", "|---|---|---:|---:|"]
    for r in scheduling_overhead(args.rankers or PAPER_RANKERS, args.oracles, repeats=args.repeats):
        lines.append(f"| {r['ranker']} | {r['oracle']} | {r['calls_per_query']:.1f} | {r['us_per_call']:.1f} |")
    if args.comparator == "bundled":
        from ..comparators import TransformersComparator

        coll = _collections(args)[0]
        qid = coll.qids[0]
        cands = coll.candidates[qid]
        # disjoint pairs: no passage is scored twice (query-likelihood caches passage scores)
        pairs = [(cands[2 * i], cands[2 * i + 1]) for i in range(min(args.throughput_pairs, len(cands) // 2))]
        for batch in (1, args.batch_size):
            judge = TransformersComparator.from_bundled(args.mode, batch_size=batch, device="cpu")
            t = comparator_throughput(judge, coll.queries[qid], pairs)
            lines.append(f"\nbundled {args.mode} batch_size={batch}: single {t['single_calls_per_s']:.2f} calls/s, "
                         f"batched {t['batched_calls_per_s']:.2f} calls/s over {int(t['pairs'])} pairs")
    text = "\n".join(lines) + "\n"
    (out / "overhead.md").write_text(text)
    print(text)
    return 0


def add_parser(subparsers) -> None:
    """Register ``activeprp bench {grid,calibrate,overhead}``; each sets ``func(args) -> int``."""
    from ..evaluation.grid import PAPER_BUDGETS, PAPER_RANKERS

    bench = subparsers.add_parser("bench", help="benchmark rankers x oracles x budgets on test collections",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = bench.add_subparsers(dest="bench_mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data", help="the directory holding the collections, needed by every mode that reads one "
                        "(e.g. ../shared/data: trec-dl-2019/, trec-dl-2020/, beir-scifact/, noveleval/, cranfield/)")
    common.add_argument("--collections", nargs="+", default=["dl19", "dl20"],
                        help="dl19 dl20 scifact noveleval cranfield")
    common.add_argument("--queries", type=int, help="first N judged queries per collection (default: all)")
    common.add_argument("--depth", type=int, help="rerank the top DEPTH candidates (default: all, 100)")
    common.add_argument("--out", default="benchmarks/results/latest", help="output directory")
    common.add_argument("--rankers", nargs="+", default=list(PAPER_RANKERS))
    common.add_argument("--oracles", nargs="+", default=["bidirectional", "randomized"])
    common.add_argument("--comparator", choices=["simulated", "bundled", "openai"], default="simulated")
    common.add_argument("--mode", default="query_likelihood", help="bundled model mode: query_likelihood or ab")
    common.add_argument("--batch-size", type=int, default=8, help="bundled model batch size")
    common.add_argument("--sim-params", help="simulator knobs as JSON or a calibration JSON file "
                        "(default: the committed calibration)")
    common.add_argument("--model", help="model name for --comparator openai")
    common.add_argument("--base-url", help="endpoint for --comparator openai")
    common.add_argument("--cache", help="sqlite answer cache (default OUT/answers.sqlite)")
    grid = modes.add_parser("grid", parents=[common], help="run the grid; write rows.csv.gz, tables.md and plots")
    grid.add_argument("--budgets", nargs="+", type=int, default=list(PAPER_BUDGETS))
    grid.add_argument("--scale-budgets", action="store_true", help="multiply budgets by DEPTH/100")
    grid.add_argument("--seeds", type=int, default=8, help="seeds for the randomized oracle (default 8)")
    grid.add_argument("--top-k", type=int, default=10)
    grid.add_argument("--from-csv", help="re-make the tables and plots from a rows.csv[.gz]")
    grid.add_argument("--no-paper", action="store_true", help="do not print the paper's values in the table")
    grid.add_argument("--bootstrap-seed", type=int, default=0)
    grid.add_argument("--paired", nargs="*", default=["mohajer_bubble:bubblesort", "mohajer_bubble:heapsort"],
                      metavar="A:B", help="rankers to compare by paired bootstrap over queries")
    grid.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    grid.set_defaults(func=_grid)
    cal = modes.add_parser("calibrate", parents=[common], help="fit the simulator to the paper's judge")
    cal.add_argument("--pair-noise", type=float, default=0.5)
    cal.add_argument("--check", action="store_true", help="no fit: measure flip rate and converged quality of "
                     "--sim-params (default: the committed calibration)")
    cal.set_defaults(func=_calibrate)
    over = modes.add_parser("overhead", parents=[common], help="scheduling µs/call; comparator calls/s")
    over.add_argument("--repeats", type=int, default=20)
    over.add_argument("--throughput-pairs", type=int, default=16)
    over.set_defaults(func=_overhead)
    flip = modes.add_parser("flip", parents=[common], help="measure a comparator's order-effect flip rate")
    flip.add_argument("--pairs-per-query", type=int, default=4)
    flip.add_argument("--seed", type=int, default=0)
    flip.set_defaults(func=_flip)
