"""Evaluation metrics through a maintained library (ir-measures over pytrec_eval), never hand-written.

``ir-measures`` is an optional dependency (the ``eval`` extra, also pulled in by ``bench`` and ``all``); it is
imported when a metric is computed, and a missing one raises an ``ImportError`` naming the extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

EVAL_EXTRA = 'pip install "activeprp[eval]"'


def _ir_measures() -> Any:
    try:
        import ir_measures
    except ImportError as err:
        raise ImportError(f"nDCG needs ir-measures: install it with {EVAL_EXTRA}") from err
    return ir_measures

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


def ranking_to_run(doc_ids: Sequence[str]) -> dict[str, float]:
    """Scores for one query's ranked doc ids (best first) that preserve the order: n, n-1, ..., 1.

    Duplicate ids keep their best (first) rank, as trec_eval would count a document once.
    """
    n = len(doc_ids)
    run: dict[str, float] = {}
    for rank, doc_id in enumerate(doc_ids):
        run.setdefault(doc_id, float(n - rank))
    return run


def ndcg_at_k(qrels: Qrels, run: Run, k: int = 10) -> dict[str, float]:
    """nDCG@k per query (trec_eval ``ndcg_cut.k``: linear gains = the graded labels), via ``ir_measures``.

    Args:
        qrels: ``{query_id: {doc_id: grade}}``; run: ``{query_id: {doc_id: score}}`` (higher is better).
    Returns:
        ``{query_id: ndcg}`` for every query of ``run`` that has judgments (as trec_eval reports them).
    Raises:
        ValueError: k < 1. ImportError: ir-measures is not installed (the ``eval`` extra).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ir_measures = _ir_measures()
    measure = ir_measures.nDCG @ k
    in_run = {str(q) for q in run}  # ir-measures would score a judged query missing from the run as 0
    qrels_d = {str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in qrels.items() if str(q) in in_run}
    run_d = {str(q): {str(d): float(s) for d, s in docs.items()} for q, docs in run.items()}
    return {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels_d, run_d)}


def mean_ndcg_at_k(qrels: Qrels, run: Run, k: int = 10) -> float:
    """Mean nDCG@k over the judged queries of ``run`` (0.0 when there are none)."""
    per_query = ndcg_at_k(qrels, run, k)
    return sum(per_query.values()) / len(per_query) if per_query else 0.0
