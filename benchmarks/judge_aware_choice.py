"""Would a judge-aware ``auto`` cut the leave-one-judge-out (LOJO) regret? An offline check (issue 17).

The idea: ``rerank_many`` knows the judge's running ``JudgeStats`` after its first queries, so ``auto`` could
choose from the family judges that *look like* this one instead of from all of them. Here each judge of the N=100,
K=10 family grid (``benchmarks/results/family/n100_k10*``) is described by the ``JudgeStats`` of 5 DL19 queries
reranked with mohajer/bidirectional at B=100 (so that ``flip_rate`` is measured on every pair, not only on
re-asked ones): ``(first_slot_rate, flip_rate, soft_rate, mean_confidence)``. For each judge j left out, the k
other judges nearest to j in that space (Euclidean, unscaled) choose each cell's row with the shipped rule
(``regret_choice``, tolerance 1.0); the choice is scored on j. The static rule (all 12 others) is k=12.

Command (from the repository root; writes ``benchmarks/results/judge_aware/table.md``):

    python benchmarks/judge_aware_choice.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

from activeprp_bench.autotable import GOAL_BUDGETS_PER_N, GOAL_CAPS, family_means, regret, regret_choice
from activeprp_bench.datasets import load_trec_dl
from activeprp_bench.grid import read_csv
from activeprp_bench.judges import build_judge
from activeprp_core import rerank_many

ROOT = Path(__file__).resolve().parents[1]
GRIDS = [ROOT / "benchmarks/results/family/n100_k10/rows.csv.xz",
         ROOT / "benchmarks/results/family/n100_k10_adaptive/rows.csv.xz"]
GOAL_CELLS = [(round(r * 100), m) for r in GOAL_BUDGETS_PER_N for m in GOAL_CAPS]  # N=100's goal cells
FEATURES = ("first_slot_rate", "flip_rate", "soft_rate", "mean_confidence")
OUT = ROOT / "benchmarks/results/judge_aware"


def judge_features(name: str, collection, n_queries: int = 5) -> tuple[float, ...]:
    """The answer-weighted ``JudgeStats`` of ``n_queries`` reranks (mohajer/bidirectional, B=100, seed 0)."""
    judge = build_judge(name, collection.qrels, 0, queries=collection.queries)
    qids = list(collection.queries)[:n_queries]
    stats = [r.judge for r in rerank_many([(collection.queries[q], collection.candidates[q]) for q in qids],
                                          comparator=judge, ranker="mohajer", oracle="bidirectional", budget=100)]
    answers = sum(s.answers for s in stats)
    return tuple(sum((getattr(s, f) or 0.0) * s.answers for s in stats) / answers for f in FEATURES)


def prior_agreement(name: str, collection, n_queries: int = 5, pairs: int = 60) -> float:
    """Share of random candidate pairs (i above j in the first stage) whose two-order mean answer prefers i: how
    often the judge agrees with the first-stage order (a label-free hint of its accuracy, tried as a 5th feature)."""
    judge = build_judge(name, collection.qrels, 0, queries=collection.queries)
    rng, agree = random.Random(0), []
    for q in list(collection.queries)[:n_queries]:
        cands = collection.candidates[q]
        for _ in range(pairs):
            i, j = sorted(rng.sample(range(len(cands)), 2))
            p_ij, p_ji = judge.compare(collection.queries[q], [(cands[i], cands[j]), (cands[j], cands[i])])
            agree.append((p_ij + 1 - p_ji) / 2 > 0.5)
    return sum(agree) / len(agree)


def lojo_worst(scores, feats, k: int) -> dict[str, tuple[float, tuple[int, int]]]:
    """Per judge left out: its worst regret over the goal cells under the choice of its k nearest judges."""
    out = {}
    for j in scores:
        others = sorted((i for i in scores if i != j), key=lambda i: (math.dist(feats[i], feats[j]), i))[:k]
        choice = regret_choice({i: scores[i] for i in others}, tolerance=1.0)
        out[j] = max((regret(scores, j, c, n), c) for c, n in choice.items()
                     if c in GOAL_CELLS and c in scores[j] and n in scores[j][c])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the shared/data directory (trec-dl-2019)")
    args = p.parse_args()
    scores = family_means([r for g in GRIDS for r in read_csv(g)])[(100, 10)].ndcg
    dl19 = load_trec_dl(args.data / "trec-dl-2019", 2019)
    feats = {j: judge_features(j, dl19) for j in scores}
    agreement = {j: prior_agreement(j, dl19) for j in scores}
    lines = ["# Judge-aware `auto`: LOJO regret when the nearest judges choose (N=100, K=10)", "",
             "Command: `python benchmarks/judge_aware_choice.py --data ../shared/data` (see its docstring).", "",
             "## Each judge's `JudgeStats` (5 DL19 queries, mohajer/bidirectional, B=100)", "",
             "| judge | " + " | ".join(FEATURES) + " | agreement with the first stage |",
             "|---|" + "---:|" * (len(FEATURES) + 1)]
    lines += [f"| {j} | " + " | ".join(f"{v:.3f}" for v in (*feats[j], agreement[j])) + " |" for j in scores]
    lines += ["", "## LOJO worst regret over the goal cells (nDCG@10 points; goal: at most 0.5)", "",
              "| features | nearest judges k | worst (judge, cell) | median over judges | judges within 0.5 "
              "| within 2.0 |",
              "|---|---:|---|---:|---:|---:|"]
    with_agreement = {j: (*feats[j], agreement[j]) for j in scores}
    runs = [("JudgeStats", k) for k in (1, 2, 3, 5, 8, len(scores) - 1)] + [("+ agreement", 1), ("+ agreement", 2)]
    for space, k in runs:
        worst = lojo_worst(scores, with_agreement if space == "+ agreement" else feats, k)
        (top, cell), who = max((v, j) for j, v in worst.items())
        values = [v for v, _ in worst.values()]
        label = f"{k} (static)" if k == len(scores) - 1 else str(k)
        within = [f"{sum(v <= bound for v in values)}/{len(values)}" for bound in (0.5, 2.0)]
        lines.append(f"| {space} | {label} | {top:.2f} ({who}, B={cell[0]}, cap {cell[1]}) "
                     f"| {statistics.median(values):.2f} | {within[0]} | {within[1]} |")
        print(lines[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "table.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
