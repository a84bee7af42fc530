"""Do a judge's answers show where a first stage's relevant documents sit? A check for a depth planned from the
answers instead of the budget alone.

After the plan over the first stage's top 40 (``budget_depth``/``adaptive`` at B=150 without a round cap, N=100,
K=10: ``mohajer_bubble`` over the top 40, then its confirmations), the share of the top-10 that comes from ranks
21-40 is what the answers say about the depth of the relevant documents. A depth rule could rerank deeper where
that share is high. It prints the share per first stage and judge (mean over queries and its quartiles, judge seed
0): BM25 on DL19 + DL20 (where the family's judges gain from depth), the same candidates in all-MiniLM-L6-v2's
order (``dl19-minilm``, ``dl20-minilm``: where they lose from it, ``benchmarks/results/heldout/README.md``) and BM25
on Cranfield's first 120 judged queries (relevant documents deepest).

The row ``(grades)`` is the same share for the top-10 of the top 40 sorted by the qrels' grades (ties in first-stage
order): where the relevant documents really sit.

A second signal, asked before any plan: the judge's mean answer that a candidate from ranks 41-100 beats one from
the top 10 (``PROBES`` random pairs per query, ``random.Random(qid)``; the row ``(grades)``: the share of those pairs
whose deep candidate has the higher grade).

A third, the same probe's contrast: how much less often a candidate from ranks 41-100 beats the top 10 than one
from ranks 11-40 does. A judge's noise draws both answers towards 1/2 alike, so where the first stage's relevance
falls off steeply the deep candidates should lose more often than the middle ones whatever the judge.

Command (from the repository root; about 20 s), output in ``benchmarks/results/heldout/depth_signal.md``:

    python benchmarks/depth_signal.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.datasets import load_named  # noqa: E402
from activeprp_bench.judges import build_judge  # noqa: E402
from activeprp_core import rerank  # noqa: E402

#: (label, collections, queries per collection (None: all), judges)
JUDGES = ("calibrated", "setwise-xl", "soft-calibrated", "weak", "doc-error", "strong-bias", "no-bias-noisy",
          "consistent")
STAGES = (("BM25, DL19 + DL20", ("dl19", "dl20"), None, JUDGES),
          ("MiniLM order, DL19 + DL20", ("dl19-minilm", "dl20-minilm"), None, JUDGES),
          ("BM25, Cranfield", ("cranfield",), 120, JUDGES))
K, SHALLOW, TOP, BUDGET, PROBES = 10, 20, 40, 150, 20


def deep_share(coll, qid: str, judge: str | None) -> float:
    """The share of the top-K from first-stage ranks past ``SHALLOW`` after ``BUDGET`` calls of ``judge`` (None:
    the top ``TOP`` sorted by grade)."""
    cands, grades = coll.candidates[qid], coll.qrels.get(qid, {})
    if judge is None:
        order = sorted(range(min(TOP, len(cands))), key=lambda i: (-grades.get(cands[i].id, 0), i))
    else:
        order = rerank(coll.queries[qid], cands, ranker="budget_depth", oracle="adaptive", top_k=K, seed=0,
                       comparator=build_judge(judge, grades, 0), budget=BUDGET).order
    return sum(i >= SHALLOW for i in order[:K]) / K


def deep_wins(coll, qid: str, judge: str | None, ranks: tuple[int, int | None] = (TOP, None)) -> float:
    """The mean answer of ``judge`` (None: by the grades) that a candidate of first-stage ``ranks`` (0-based, end
    excluded; default: past the top ``TOP``) beats one from the top K, over ``PROBES`` random pairs."""
    cands, grades, rng = coll.candidates[qid], coll.qrels.get(qid, {}), random.Random(qid)
    lo, hi = ranks
    pairs = [(cands[rng.randrange(K)], cands[rng.randrange(lo, hi or len(cands))]) for _ in range(PROBES)]
    if judge is None:
        return statistics.fmean(float(grades.get(d.id, 0) > grades.get(t.id, 0)) for t, d in pairs)
    return statistics.fmean(1.0 - p for p in build_judge(judge, grades, 0).compare(coll.queries[qid], pairs))


def contrast(coll, qid: str, judge: str | None) -> float:
    """``deep_wins`` of ranks K+1 to ``TOP`` less that of the ranks past ``TOP`` (the same top-K draws): how much
    less often the deep candidates win than the middle ones, which a judge's noise shrinks but does not shift."""
    return deep_wins(coll, qid, judge, (K, TOP)) - deep_wins(coll, qid, judge)


def table(title: str, signal, data: str) -> None:
    """Print ``signal(collection, qid, judge)`` per first stage (read from ``data``) and judge: mean over queries
    and its quartiles."""
    print(f"## {title}\n")
    print("| first stage | judge | queries | mean | q25 | median | q75 |\n|---|---|---:|---:|---:|---:|---:|")
    for label, names, queries, judges in STAGES:
        collections = [load_named(n, data).subset(queries) for n in names]
        for judge in (None, *judges):
            values = [signal(coll, qid, judge) for coll in collections for qid in coll.qids]
            q25, q50, q75 = statistics.quantiles(values, n=4)
            print(f"| {label} | {judge or '(grades)'} | {len(values)} | {statistics.fmean(values):.3f} | {q25:.2f} | "
                  f"{q50:.2f} | {q75:.2f} |")
    print()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the shared data directory (../shared/data)")
    args = ap.parse_args(argv)
    table(f"Share of the top-{K} from first-stage ranks {SHALLOW + 1}-{TOP} after B={BUDGET} (the top-{TOP} plan)",
          deep_share, args.data)
    table(f"Mean answer that a candidate from ranks {TOP + 1}-100 beats one from the top {K} "
          f"({PROBES} pairs per query)", deep_wins, args.data)
    table(f"The same for ranks {K + 1}-{TOP} less that for ranks {TOP + 1}-100 ({PROBES} pairs each)", contrast,
          args.data)


if __name__ == "__main__":
    main()
