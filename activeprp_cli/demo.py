"""``activeprp demo``: rerank bundled TREC DL 2019 queries (BM25 top candidates, graded judgments) with the
bundled model and print NDCG@10 of the BM25 order vs the reranked order, calls, rounds and time."""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from typing import Any

from activeprp_core.types import Candidate

from .metrics import ndcg_at_k, ranking_to_run
from .rerank import add_comparator_args, add_ranking_args, make_comparator, run_rerank

DATA = "dl19_demo.jsonl"  # 10 queries x 30 BM25 hits + qrels; see activeprp_cli/data/SOURCE.md


def load_demo_queries() -> list[dict[str, Any]]:
    """The bundled queries: ``[{"qid", "query", "hits": [{"docid", "rank", "score", "content"}], "qrels"}]``."""
    text = resources.files("activeprp_cli").joinpath("data").joinpath(DATA).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp demo`` (defaults sized to finish in a few minutes on a 2-core CPU)."""
    p = subparsers.add_parser("demo", help="rerank bundled TREC DL19 queries with the bundled model; print NDCG@10",
                              description=__doc__)
    p.add_argument("--queries", type=int, default=5, help="number of bundled queries (at most 10)")
    p.add_argument("--candidates", type=int, default=16, help="BM25 top candidates per query (at most 30)")
    add_ranking_args(p, budget=40, top_k=10, ranker="mohajer", oracle="randomized")
    add_comparator_args(p)
    p.set_defaults(func=main, passage_tokens=64)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp demo``: one row per query, then the mean NDCG@10 before and after."""
    from tqdm import tqdm

    rows = load_demo_queries()[: args.queries]
    print(f"activeprp demo: {len(rows)} TREC DL 2019 queries x {args.candidates} BM25 candidates, "
          f"passages cut to {args.passage_tokens} tokens, ranker={args.ranker} oracle={args.oracle} "
          f"budget={args.budget} calls/query, top_k={args.top_k}, comparator={args.comparator}"
          f"{'' if args.comparator != 'bundled' else ' (SmolLM2-135M-Instruct)'}")
    started = time.perf_counter()
    table, before, after = [], {}, {}
    with make_comparator(args) as comparator:  # closed (clients, files) however the loop ends
        print(f"{comparator!r} ready in {time.perf_counter() - started:.1f} s")
        bar = tqdm(rows, desc="queries", unit="q", disable=args.no_progress)
        for row in bar:
            qid, qrels = row["qid"], {row["qid"]: row["qrels"]}
            candidates = [Candidate(h["docid"], h["content"]) for h in row["hits"][: args.candidates]]
            result = run_rerank(row["query"], candidates, comparator, args)
            before[qid] = ndcg_at_k(qrels, {qid: ranking_to_run([c.id for c in candidates])})[qid]
            after[qid] = ndcg_at_k(qrels, {qid: ranking_to_run([c.id for c in result.ranked])})[qid]
            table.append((qid, row["query"], result))
            bar.set_postfix(ndcg_before=f"{before[qid]:.3f}", ndcg_after=f"{after[qid]:.3f}")
        bar.close()
    print(f"\n{'qid':>8}  {'query':<40} {'BM25':>6} {'rerank':>6} {'calls':>5} {'rounds':>6} {'time_s':>6}")
    for qid, query, r in table:
        print(f"{qid:>8}  {query[:40]:<40} {before[qid]:>6.3f} {after[qid]:>6.3f} {r.calls:>5} {r.rounds:>6} "
              f"{r.wall_time_s:>6.1f}")
    n = max(len(table), 1)
    calls, rounds = sum(r.calls for *_, r in table), sum(r.rounds for *_, r in table)
    failed = sum(r.failed_calls for *_, r in table)
    print(f"\nmean NDCG@10: BM25 {sum(before.values()) / n:.4f} -> reranked {sum(after.values()) / n:.4f}  "
          f"({len(table)} queries; calls {calls}, rounds {rounds}, failed calls {failed}, "
          f"total time {time.perf_counter() - started:.1f} s)")
    return 0
