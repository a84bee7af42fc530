"""``activeprp rerank-run``: rerank every query of a TREC run file and write the reranked run.

Example (TREC DL19, a corpus JSONL made from the BM25 hits, the simulated judge)::

    activeprp rerank-run --run trec_results_dl19_top100.bm25.txt --queries topics.dl19-passage.txt \\
        --corpus corpus.jsonl --qrels qrels.dl19-passage.txt --comparator simulated --out reranked.run

Every input file is read and checked before the comparator is built, so bad input costs no LLM call: it ends in
one line ``activeprp: error: FILE:LINE: reason`` and exit status 2. Each query's top ``--depth`` rows by rank
are reranked; OUT holds exactly those (qid, docid) pairs, ranks 1.. and strictly decreasing scores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import SimulatedComparator
from ..trecfiles import read_qrels, read_run_candidates, write_run
from ..types import Candidate, Pair, RerankResult
from . import InputError
from .rerank import add_comparator_args, add_ranking_args, make_comparator, run_rerank

Request = tuple[str, str, list[Candidate]]  # (qid, query text, candidates in input rank order)


class QrelsSimulator:
    """The simulated judge for many queries: each ``compare(query, pairs)`` goes to the ``SimulatedComparator``
    of that query (found by its text), whose graded labels are the query's qrels (negative grades and unjudged
    docids count as 0). ``knobs`` are ``SimulatedComparator``'s noise arguments.

    Raises:
        InputError: two queries with the same text but different judgments (the text would not say which).
        ValueError: ``compare`` for a query text it was not built with.
    """

    def __init__(self, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], **knobs: float) -> None:
        self.by_query: dict[str, SimulatedComparator] = {}
        labels_of: dict[str, tuple[str, dict[str, int]]] = {}
        for qid, text in queries.items():
            labels = {d: max(0, g) for d, g in qrels.get(qid, {}).items()}
            other = labels_of.setdefault(text, (qid, labels))
            if other[1] != labels:
                raise InputError(f"queries {other[0]} and {qid} have the same text but different qrels: the "
                                 "simulated judge finds a query's labels by its text")
            self.by_query[text] = SimulatedComparator(labels, **knobs)

    @property
    def calls(self) -> int:
        """Ordered pairs judged so far, all queries together."""
        return sum(c.calls for c in self.by_query.values())

    def compare(self, query: str, pairs: Sequence[Pair]) -> list[float]:
        judge = self.by_query.get(query)
        if judge is None:
            raise ValueError(f"no simulated judge for query {query[:60]!r}")
        return judge.compare(query, pairs)


def simulated_knobs() -> tuple[dict[str, float], str]:
    """The noise knobs of the simulated judge and a label for them: ``CALIBRATED_PARAMS`` (fitted to the paper's
    Flan-T5-XL flip rate and quality) when the evaluation module imports, else none (a perfect judge)."""
    try:
        from ..evaluation.calibration import CALIBRATED_PARAMS
    except ImportError:
        return {}, "noiseless (activeprp_core.evaluation is not importable)"
    return dict(CALIBRATED_PARAMS), "calibrated " + " ".join(f"{k}={v}" for k, v in CALIBRATED_PARAMS.items())


def rerank_requests(requests: Sequence[Request], comparator: Any, args: argparse.Namespace
                    ) -> Iterator[RerankResult]:
    """One ``RerankResult`` per request, in input order (today a loop of ``run_rerank``; the place where the
    whole batch goes to ``rerank_many``)."""
    for _, query, candidates in requests:
        yield run_rerank(query, candidates, comparator, args)


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def check_out(path: str) -> None:
    """Raise ``InputError`` unless ``path`` can be written as a file (its directory exists and is writable)."""
    out = Path(path)
    if out.is_dir():
        raise InputError(f"{path}: is a directory, not a file")
    parent = out.parent
    if not parent.is_dir():
        raise InputError(f"{path}: no such directory {str(parent)!r}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"{path}: directory {str(parent)!r} is not writable")


def add_parser(subparsers: Any) -> None:
    """Register ``activeprp rerank-run``."""
    p = subparsers.add_parser("rerank-run", help="rerank every query of a TREC run file; write the reranked run",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    files = p.add_argument_group("files (.jsonl/.json names are read as JSONL, others as TSV)")
    files.add_argument("--run", required=True, help="TREC run: qid Q0 docid rank score tag")
    files.add_argument("--queries", required=True, help="queries: qid<TAB>text, or JSONL with _id/qid and text")
    files.add_argument("--corpus", required=True, help="passages: docid<TAB>text, or JSONL with _id/docid/id, "
                                                       "text/contents and an optional title")
    files.add_argument("--out", required=True, help="the reranked TREC run to write")
    files.add_argument("--qrels", help="TREC qrels: print nDCG@10 of the input and the output (ir-measures); the "
                                       "graded labels of --comparator simulated")
    p.add_argument("--depth", type=positive_int, default=None, metavar="N",
                   help="rerank (and write) each query's top N rows by rank (default: all)")
    p.add_argument("--tag", default="activeprp", help="the run tag of OUT (6th column)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar over queries (stderr)")
    add_ranking_args(p, budget=100, top_k=10)
    add_comparator_args(p)
    p.set_defaults(func=main)


def build_comparator(args: argparse.Namespace, requests: Sequence[Request],
                     qrels: Mapping[str, Mapping[str, int]] | None) -> Any:
    """The judge: ``QrelsSimulator`` for ``--comparator simulated`` (labels from ``qrels``), else
    ``make_comparator`` (None when it cannot be built; the reason is printed)."""
    if args.comparator != "simulated":
        return make_comparator(args)
    knobs, label = simulated_knobs()
    print(f"simulated judge: labels from {args.qrels}, noise {label}")
    unjudged = [qid for qid, _, _ in requests if not (qrels or {}).get(qid)]
    if unjudged:
        print(f"note: {len(unjudged)} queries (e.g. {unjudged[0]}) have no judgments in {args.qrels}; the simulated "
              "judge sees all their passages as grade 0")
    return QrelsSimulator({qid: query for qid, query, _ in requests}, qrels or {}, **knobs)


def ndcg_line(qrels: Mapping[str, Mapping[str, int]], before: Mapping[str, Iterable[str]],
              after: Mapping[str, Iterable[str]], input_label: str = "input") -> str:
    """``nDCG@10 (ir-measures, N judged queries): input X -> reranked Y``: means over the queries of ``after``
    that have judgments; ``before``/``after`` are ``{qid: docids best first}``."""
    from ..metrics import ndcg_at_k, ranking_to_run

    means = []
    for ranked in (before, after):
        per_query = ndcg_at_k(qrels, {q: ranking_to_run(list(d)) for q, d in ranked.items()}, 10)
        means.append(sum(per_query.values()) / len(per_query) if per_query else float("nan"))
    return (f"nDCG@10 (ir-measures, {len(per_query)} judged queries): {input_label} {means[0]:.4f} -> "
            f"reranked {means[1]:.4f}")


def main(args: argparse.Namespace) -> int:
    """Handler of ``activeprp rerank-run``: check every input, rerank query by query, write OUT, print counts
    (and nDCG@10 with ``--qrels``)."""
    if args.comparator == "simulated" and not args.qrels:
        raise InputError("--comparator simulated needs --qrels QRELS (its graded labels)")
    run, requests = read_run_candidates(args.run, args.queries, args.corpus, args.depth)
    qrels = read_qrels(args.qrels) if args.qrels else None
    if qrels is not None:
        try:
            import ir_measures  # noqa: F401
        except ImportError:
            raise InputError("--qrels needs the ir-measures package (pip install ir-measures)") from None
    check_out(args.out)
    read, kept = sum(map(len, run.values())), sum(len(c) for _, _, c in requests)
    print(f"read {read} lines ({len(run)} queries) from {args.run}; reranking {kept} "
          f"(depth {args.depth or 'all'}) with ranker={args.ranker} oracle={args.oracle} budget={args.budget} "
          f"top_k={args.top_k} comparator={args.comparator}")

    comparator = build_comparator(args, requests, qrels)
    if comparator is None:
        return 2
    from tqdm import tqdm

    started, calls, reranked = time.perf_counter(), [], {}
    bar = tqdm(total=len(requests), desc="queries", unit="q", disable=args.no_progress, file=sys.stderr)

    def ranked_lists() -> Iterator[tuple[str, list[str]]]:
        for (qid, _, candidates), result in zip(requests, rerank_requests(requests, comparator, args)):
            calls.append(result.calls)
            reranked[qid] = [candidates[i].id for i in result.order]
            bar.update()
            yield qid, reranked[qid]

    try:
        written = write_run(args.out, ranked_lists(), tag=args.tag)
    finally:
        bar.close()
        close = getattr(comparator, "close", None)  # comparators holding a client or a file (issue 11)
        if callable(close):
            close()
    print(f"wrote {written} lines ({len(reranked)} queries) to {args.out} in {time.perf_counter() - started:.1f} s; "
          f"LLM calls: {sum(calls)} total, at most {max(calls, default=0)} per query")
    if qrels is not None:
        before = {q: [c.id for c in cands] for q, _, cands in requests}
        print(ndcg_line(qrels, before, reranked, "input" if args.depth is None else f"input top {args.depth}"))
    return 0
