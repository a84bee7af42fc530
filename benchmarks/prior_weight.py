"""How much should the first stage's order weigh in ``budget_depth``'s final order? The evidence for
``PRIOR_WEIGHT`` (``activeprp_core/rankers/budget_depth.py``, step 5).

For every cell of the N=100, K=10 grid that the goals read (B in {50, 100, ..., 500, none} x caps {none, 6, 10}),
each query is reranked once with ``auto``'s choice for the cell (``budget_depth`` and its oracle, from the shipped
table) with the weight 0 (``BudgetDepth(prior_weight=0)``: the plan's own order), and that order is then weighed
with the first stage's at each weight w of ``WEIGHTS`` (``borda(order, first stage, w)``: a candidate's place
plus w times its first-stage rank), and at each weight of ``SCALED`` times ``1 - flip_rate`` of the query's
``JudgeStats`` (labelled ``0.05f``: ``BudgetDepth.weight``, the default since the weight follows the flip rate).
The weight asks no question, so one rerank gives every weight's order, on the same answers.

Judges: the family's DL judges that beat the first stage (``ql-like`` and ``bundled-ql`` left out), ``weak`` and
``positional`` (answers that mostly follow the slot: flip rate 0.64), on three first stages: BM25 on DL19 + DL20,
the same candidates in all-MiniLM-L6-v2's order (``dl19-minilm``, ``dl20-minilm``, a dense first stage) and BM25 on
Cranfield's first 120 judged queries (relevant documents deep).
Judge seed 0 (``--seeds`` for more; the rerank's seed is the judge seed). nDCG@10 by ir-measures, the mean over
collections of per-query means.

Printed per first stage and weight: the change of nDCG@10 against the weight 0 over every (judge, seed, cap,
budget) cell (mean, least, most), and the largest fall of nDCG@10 as B grows from 50 to 500 per (judge, seed,
cap) curve (``regret.falls``'s reading: any budget to any later one), its mean and the curves above 0.2; then the
mean change per judge.

Command (from the repository root; about 28 CPU-minutes per judge seed, 15 min with 2 jobs), output in
``benchmarks/results/budget_depth/prior_weight.md``:

    python benchmarks/prior_weight.py --data ../shared/data --seeds 0 --jobs 2

``--rows OLD NEW`` instead compares two grids of the family cell by cell: ``NEW``'s ``budget_depth_prior/adaptive``
minus ``OLD``'s ``budget_depth/adaptive`` (the same answers: the weight asks nothing), per judge (mean, least and
most over the cells) and per cap and budget (mean over the judges). ``prior/unweighted/`` holds the
``budget_depth``/``adaptive`` rows of ``budget_depth/n100_k10/`` at caps none, 6 and 10 as they were before the weight
became the default. The command that wrote ``benchmarks/results/budget_depth/prior/change.md``:

    python benchmarks/prior_weight.py --rows benchmarks/results/budget_depth/prior/unweighted/rows.csv.xz \
        benchmarks/results/budget_depth/prior/n100_k10/rows.csv.xz
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages

from activeprp_bench.autotable import read_family  # noqa: E402
from activeprp_bench.datasets import load_named  # noqa: E402
from activeprp_bench.judges import build_judge  # noqa: E402
from activeprp_bench.regret import falls, label  # noqa: E402
from activeprp_cli.metrics import ndcg_at_k, ranking_to_run  # noqa: E402
from activeprp_core import rerank  # noqa: E402
from activeprp_core.rankers.auto import choose  # noqa: E402
from activeprp_core.rankers.budget_depth import BudgetDepth, borda  # noqa: E402

K = 10
WEIGHTS = (0.0, 0.03, 0.05, 0.07, 0.1)
BUDGETS = (50, 100, 150, 200, 250, 300, 350, 400, 450, 500, None)
CAPS = (None, 6, 10)
#: Weights also tried scaled by the share of both-order pairs whose winner did not flip (``1 - flip_rate`` of the
#: query's ``JudgeStats``), written ``0.05f``: ``BudgetDepth``'s step 5 since the weight follows the flip rate.
SCALED = (0.05, 0.07, 0.1)
JUDGES = ("calibrated", "soft-calibrated", "overconfident", "underconfident", "mild-bias", "strong-bias",
          "no-bias-noisy", "low-noise", "consistent", "doc-error", "qwen3-4b", "setwise-xl", "weak", "positional")
#: (label, collections, judged queries per collection (None: all))
STAGES = (("BM25, DL19 + DL20", ("dl19", "dl20"), None),
          ("MiniLM order, DL19 + DL20", ("dl19-minilm", "dl20-minilm"), None),
          ("BM25, Cranfield", ("cranfield",), 120))


def weights() -> list[str]:
    """The weights compared, as labels: ``WEIGHTS`` as they are, then ``SCALED`` with an ``f`` (flip-scaled)."""
    return [f"{w:g}" for w in WEIGHTS] + [f"{w:g}f" for w in SCALED]


def weight_of(label: str, flip_rate: float | None) -> float:
    """The weight a label stands for on a query whose judge flipped on ``flip_rate`` of its both-order pairs."""
    return BudgetDepth(prior_weight=float(label[:-1])).weight(flip_rate) if label.endswith("f") else float(label)


def curve(data: str, stage: int, judge: str, seed: int, cap: int | None) -> dict:
    """``{budget: {weight label: nDCG@10 in %}}`` of one (first stage, judge, seed, cap)."""
    _, names, queries = STAGES[stage]
    collections = [load_named(n, data).subset(queries) for n in names]
    out = {}
    for budget in BUDGETS:
        ranker, oracle = choose(100, K, budget, cap)
        if ranker != "budget_depth":
            raise RuntimeError(f"auto runs {ranker} at B={budget}, cap {cap}: this check is of budget_depth")
        per_collection = {w: [] for w in weights()}
        for coll in collections:
            runs = {w: {} for w in weights()}
            for qid in coll.qids:
                cands = coll.candidates[qid]
                result = rerank(coll.queries[qid], cands, ranker=BudgetDepth(prior_weight=0), oracle=oracle,
                                top_k=K, seed=seed, comparator=build_judge(judge, coll.qrels[qid], seed),
                                budget=budget, max_rounds=cap)
                for w in weights():  # step 5 of BudgetDepth over the plan's whole order
                    order = borda(result.order, sorted(result.order), weight_of(w, result.judge.flip_rate))
                    runs[w][qid] = ranking_to_run([cands[i].id for i in order])
            for w in weights():
                per_collection[w].append(statistics.fmean(ndcg_at_k(coll.qrels, runs[w], K).values()))
        out[budget] = {w: 100 * statistics.fmean(v) for w, v in per_collection.items()}
    return out


def largest_fall(curve: dict, weight: float) -> float:
    """The largest fall of ``curve``'s nDCG@10 at ``weight`` from any budget to a later one (``regret.falls``; 0
    when it never falls)."""
    cells = {(b, -1): {"w": v[weight]} for b, v in curve.items() if b is not None}
    return max([0.0, *(f[0] for f in falls({"judge": cells}, dict.fromkeys(cells, "w"), (0, float("inf"))))])


def compare_rows(old: str, new: str) -> None:
    """Print ``new``'s ``budget_depth_prior/adaptive`` minus ``old``'s ``budget_depth/adaptive``, per judge and per
    cell (the ``--rows`` mode)."""
    (nk, before), = read_family([old]).items()
    after = read_family([new], lambda r, o: True)[nk]
    delta = {j: {c: after.ndcg[j][c]["budget_depth_prior/adaptive"] - rows["budget_depth/adaptive"]
                 for c, rows in before.ndcg[j].items() if c in after.ndcg.get(j, {})}
             for j in before.ndcg if j in after.ndcg}
    print(f"## N={nk[0]}, K={nk[1]}: budget_depth_prior/adaptive minus budget_depth/adaptive (nDCG@{nk[1]} points)\n")
    print("| judge | cells | mean | least | most |\n|---|---:|---:|---:|---:|")
    for j, by_cell in sorted(delta.items()):
        v = list(by_cell.values())
        print(f"| {j} | {len(v)} | {statistics.fmean(v):+.2f} | {min(v):+.2f} | {max(v):+.2f} |")
    cells = sorted({c for by_cell in delta.values() for c in by_cell}, key=lambda c: (c[1], c[0] < 0, c[0]))
    print("\n| cap | B | mean over the judges |\n|---|---:|---:|")
    for b, cap in cells:
        print(f"| {label(cap)} | {label(b)} | "
              f"{statistics.fmean(by_cell[(b, cap)] for by_cell in delta.values() if (b, cap) in by_cell):+.2f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="the shared data directory (../shared/data)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="judge seeds (default: 0)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--rows", nargs=2, metavar=("OLD", "NEW"), help="compare two family grids instead (see above)")
    args = ap.parse_args(argv)
    if args.rows:
        return compare_rows(*args.rows)
    if not args.data:
        ap.error("--data is required (or --rows)")
    keys = list(itertools.product(range(len(STAGES)), JUDGES, args.seeds, CAPS))
    with ProcessPoolExecutor(args.jobs) as pool:
        curves = dict(zip(keys, pool.map(curve, itertools.repeat(args.data), *zip(*keys))))
    print("## N=100, K=10: budget_depth's final order weighed with the first stage's (nDCG@10 points)\n")
    print(f"Judges: {', '.join(JUDGES)}; judge seeds {' '.join(map(str, args.seeds))}; caps none, 6, 10; B in "
          "{50..500, none}. Change: against the weight 0, over every cell. Fall: the largest drop as B grows from "
          "50 to 500, per (judge, seed, cap).\n")
    print("| first stage | weight | change, mean | least | most | fall, mean | curves falling > 0.2 | largest fall |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s, (stage, _, _) in enumerate(STAGES):
        mine = {key: c for key, c in curves.items() if key[0] == s}
        for w in weights():
            change = [c[b][w] - c[b]["0"] for c in mine.values() for b in BUDGETS]
            fall = [largest_fall(c, w) for c in mine.values()]
            print(f"| {stage} | {w} | {statistics.fmean(change):+.2f} | {min(change):+.2f} | {max(change):+.2f} | "
                  f"{statistics.fmean(fall):.2f} | {sum(f > 0.2 for f in fall)}/{len(fall)} | {max(fall):.2f} |")
    print("\n### Mean change per judge (every cell and seed)\n")
    print("| first stage | judge | " + " | ".join(f"w={w}" for w in weights()[1:]) + " |")
    print("|---|---|" + "---:|" * (len(weights()) - 1))
    for (s, judge) in itertools.product(range(len(STAGES)), JUDGES):
        mine = [c for key, c in curves.items() if key[:2] == (s, judge)]
        per_w = [statistics.fmean(c[b][w] - c[b]["0"] for c in mine for b in BUDGETS) for w in weights()[1:]]
        print(f"| {STAGES[s][0]} | {judge} | " + " | ".join(f"{x:+.2f}" for x in per_w) + " |")


if __name__ == "__main__":
    main()
