"""The benchmark grid: rankers x oracles x budgets x round caps x seeds over the queries of one or more
collections.

Each cell reranks one query's first-stage top-N with ``activeprp_core.rerank`` and keeps the per-query
accounting and the calls of each round; nDCG@K is computed afterwards through ``activeprp_cli.metrics``
(ir-measures), one batch per (collection, ranker, oracle, budget, max_rounds, seed). Runs sequentially in one
process (the shared 2-core machine).
"""

from __future__ import annotations

import csv
import gzip
import lzma
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

from activeprp_cli.metrics import ndcg_at_k, ranking_to_run
from activeprp_core.comparators.simulated import SimulatedComparator
from activeprp_core.engine import rerank
from activeprp_core.rankers import BudgetDepth, Depth, Mohajer, MohajerBubble, ParallelMohajerDepth, Ranker
from activeprp_core.rankers.budget_depth import PRIOR_WEIGHT
from activeprp_core.types import Accounting

from .datasets import Collection
from .instrumented import RoundRecorder
from .reference import FirstStage, ReferenceFallbackMohajer, ReferenceHeapSort

PAPER_RANKERS = ("mohajer", "mohajer_bubble", "pac_bubble", "bubblesort", "heapsort", "quicksort")
PAPER_BUDGETS = tuple(range(100, 501, 50))

#: Ranker labels the grid accepts beyond the core names: the variants compared in the benchmark report.
VARIANTS: dict[str, Callable[[], Ranker]] = {
    "mohajer_rerun": lambda: Mohajer(reselect="rerun"),
    "mohajer_refill": lambda: Mohajer(skip_last_refill=False),
    "mohajer_reference": lambda: Mohajer(reselect="rerun", skip_last_refill=False),
    "mohajer_reffallback": ReferenceFallbackMohajer,
    "mohajer_reference_all": lambda: ReferenceFallbackMohajer(reselect="rerun", skip_last_refill=False),
    "mohajer_bubble_rerun": lambda: MohajerBubble(reselect="rerun"),
    "heapsort_reference": ReferenceHeapSort,
    "first_stage": FirstStage,  # the baseline a judge must beat (autotable.Family.beats_first_stage)
    # the rerank depths around parallel_mohajer_depth's default (benchmarks/results/depth/); 80: the top 80, three
    # bracket levels at K=10 (benchmarks/results/budget_depth/depth_step.md)
    **{f"parallel_mohajer_depth{d}": partial(ParallelMohajerDepth, d) for d in (20, 30, 50, 70, 80)},
    # auto's plan (budget_depth) over at most the top 40: the advice for a strong first stage (docs/judges.md)
    "budget_depth40": lambda: Depth(BudgetDepth(), 40),
    # auto's plan with the first stage weighed at PRIOR_WEIGHT by name: the label of benchmarks/results/budget_depth/
    # prior/, made when the default weight was 0 (now it is BudgetDepth's default, scaled by the flip rate since;
    # the rows in prior/ are of the whole weight)
    "budget_depth_prior": lambda: BudgetDepth(prior_weight=PRIOR_WEIGHT),
    # auto's plan with the plan's order alone (no first-stage weight): docs/judges.md, "Weighing the first stage"
    "budget_depth_unweighted": lambda: BudgetDepth(prior_weight=0),
}


def make_ranker(label: str) -> str | Ranker:
    """A core ranker name passes through; a ``VARIANTS`` label becomes its configured instance."""
    return VARIANTS[label]() if label in VARIANTS else label


@dataclass(kw_only=True)
class Row(Accounting):
    """One reranked query of the grid (one CSV line): the cell, nDCG@K in ``ndcg10`` (K = the grid's ``top_k``,
    10 unless said; filled in after the batch evaluation), the status flags and every ``Accounting`` field.
    ``budget``/``max_rounds`` are -1 for no cap. ``round_calls``: the calls of each round, space-separated (for
    the wall-time model); ``resolved``: the concrete ``ranker/oracle`` the engine ran (differs for ``auto``);
    ``judge``: the ``activeprp_bench.judges`` name that answered (empty for ``--comparator`` backends)."""

    collection: str
    qid: str
    ranker: str
    oracle: str
    budget: int
    seed: int
    n: int
    top_k: int = 10
    ndcg10: float = 0.0
    max_rounds: int = -1
    exhausted: bool = False
    converged: bool = False
    round_calls: str = ""
    resolved: str = ""
    judge: str = ""


def row_cap(value: int | None) -> int:
    """A budget or round cap as a ``Row`` holds it: None (no cap) as -1."""
    return -1 if value is None else value


def simulator_factory(collection: Collection, params: Mapping[str, float], seed: int = 0):
    """``qid -> comparator`` for ``run_grid``: the judge ``SimulatedComparator.from_qrels`` builds from the
    collection's qrels and queries with the knobs ``params``; ``seed`` selects its noise realisation."""
    judge = SimulatedComparator.from_qrels(collection.qrels, collection.queries, seed=seed, **params)
    return lambda qid: judge


def run_grid(
    collections: Sequence[Collection],
    comparator_for: Callable[[Collection], Callable[[str], Any]],
    rankers: Iterable[str] = PAPER_RANKERS,
    oracles: Iterable[str] = ("bidirectional", "randomized"),
    budgets: Iterable[int | None] = PAPER_BUDGETS,
    seeds: Mapping[str, Sequence[int]] | None = None,
    top_k: int = 10,
    progress: bool = True,
    max_rounds: Iterable[int | None] = (None,),
    judge: str = "",
) -> list[Row]:
    """Run every cell of the grid and return one ``Row`` per (collection, query, ranker, oracle, budget,
    max_rounds, seed).

    Args:
        collections: the collections; every judged query with its full candidate list is reranked.
        comparator_for: ``collection -> (qid -> comparator)``; the comparator sees one query's candidates.
        rankers: core names or ``VARIANTS`` labels (``auto`` included). oracles: oracle names (``auto``
            included).
        budgets: per-query call caps (``None`` = unlimited; stored as -1 in the rows).
        seeds: oracle/ranker seeds per oracle name (default: ``{"bidirectional": [0], "randomized": 0..7}``;
            oracles not listed, e.g. ``auto``, get the randomized seeds).
        top_k: K. progress: show a tqdm bar.
        max_rounds: per-query round caps (``None`` = no cap; stored as -1).
        judge: the judge's name, stored in every row's ``judge`` column (a label only).
    """
    from tqdm import tqdm

    seeds = {"bidirectional": [0], "randomized": list(range(8)), "single": [0], **(seeds or {})}
    rankers, oracles, budgets, caps = list(rankers), list(oracles), list(budgets), list(max_rounds)
    cells = [(c, r, o, b, m, s) for c in collections for r in rankers for o in oracles for b in budgets
             for m in caps for s in seeds.get(o, seeds["randomized"])]
    total = sum(len(c.qids) for c, *_ in cells)
    rows: list[Row] = []
    bar = tqdm(total=total, disable=not progress, desc="bench", unit="query")
    judge_of = {c.name: comparator_for(c) for c in collections}
    for coll, ranker, oracle, budget, cap, seed in cells:
        runs, batch = {}, []
        for qid in coll.qids:
            cands = coll.candidates[qid]
            recorder = RoundRecorder(judge_of[coll.name](qid))
            res = rerank(coll.queries[qid], cands, ranker=make_ranker(ranker), oracle=oracle, comparator=recorder,
                         budget=budget, top_k=top_k, seed=seed, max_rounds=cap)
            runs[qid] = ranking_to_run([cands[i].id for i in res.order])
            counts = {**res.counts(), "wall_time_s": round(res.wall_time_s, 4)}
            batch.append(Row(collection=coll.name, qid=qid, ranker=ranker, oracle=oracle, budget=row_cap(budget),
                             max_rounds=row_cap(cap), seed=seed, n=len(cands), top_k=top_k, exhausted=res.exhausted,
                             converged=res.converged, round_calls=" ".join(map(str, recorder.batches)),
                             resolved=f"{res.ranker}/{res.oracle}", judge=judge, **counts))
            bar.update(1)
        scores = ndcg_at_k(coll.qrels, runs, top_k)
        for row in batch:
            row.ndcg10 = scores.get(row.qid, 0.0)
        rows.extend(batch)
    bar.close()
    return rows


def open_rows(path: str | Path, mode: str):
    """A rows file opened for ``mode``, gzip or xz by its suffix, else plain: as text for ``r``/``w``, as bytes for
    ``rb``/``wb`` (for a parser that decodes the UTF-8 itself, as ``autotable.read_family``'s)."""
    name = str(path)
    text = {} if mode.endswith("b") else {"newline": "", "encoding": "utf-8"}
    mode = mode if text == {} else mode + "t"
    if name.endswith(".gz"):
        return gzip.open(path, mode, **text)
    if name.endswith(".xz"):  # a family grid's millions of rows: about a third of gzip's size
        return lzma.open(path, mode, **text)
    return open(path, mode.removesuffix("t"), **text)


#: The columns a family grid keeps (``write_csv(..., columns=SLIM_COLUMNS)``): enough for every table and CI.
SLIM_COLUMNS = ("judge", "collection", "qid", "ranker", "oracle", "budget", "max_rounds", "seed", "n", "top_k",
                "ndcg10", "calls", "comparisons", "rounds", "resolved")


def write_csv(rows: Sequence[Row], path: str | Path, columns: Sequence[str] | None = None) -> None:
    """Write the per-query rows as CSV (header = ``Row`` fields, or only ``columns``: ``read_csv`` gives the
    others their defaults); gzip- or xz-compressed when ``path`` ends in .gz or .xz."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    names = list(columns or Row.__dataclass_fields__)
    with open_rows(path, "w") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        writer.writerows({k: getattr(r, k) for k in names} for r in rows)


def read_csv(path: str | Path, keep: Callable[[str, str], bool] | None = None) -> list[Row]:
    """Read rows written by ``write_csv`` (plain, .gz or .xz). Columns a file lacks take their defaults, so files
    written before a field was added still load (their ``wall_s`` column is read as ``wall_time_s``).
    ``keep(ranker, oracle)``: which rows to load, as ``autotable.read_family``'s (default all); asked once per
    pair, and a row left out costs no ``Row``."""
    parse = {"int": int, "float": float, "str": str, "bool": lambda v: v == "True"}
    column = {f.name: parse[f.type] for f in fields(Row)}
    column["wall_s"] = float
    with open_rows(path, "r") as f:
        records = csv.reader(f)
        header = next(records, [])
        names = ["wall_time_s" if k == "wall_s" else k for k in header]
        types = [column[k] for k in header]
        pair = itemgetter(header.index("ranker"), header.index("oracle")) if keep else None
        wanted: dict[tuple[str, str], bool] = {}
        rows = []
        for rec in records:
            if pair is not None:
                key = pair(rec)
                if key not in wanted:
                    wanted[key] = keep(*key)
                if not wanted[key]:
                    continue
            rows.append(Row(**{k: t(v) for k, t, v in zip(names, types, rec)}))
        return rows
