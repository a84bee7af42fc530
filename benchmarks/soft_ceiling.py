"""How far can a soft judge's answers carry the default? Each ranker x oracle with no budget (converged), on the
soft answers, beside the default fed the same answers binarized at B=250 (issue 17 goal "soft answers": the
default at B=250 at least 2 nDCG@10 points above binarized).

The headroom compares two rows (a converged one on soft answers, the default at B=250 on binarized ones): what
any choice of ours could gain over the binarized default. It is not the default's own soft-vs-binarized gain,
which the goal asks for. Same set-up as ``soft_default.py``: DL19 + DL20 BM25 top-100, one ``rerank_many`` per
collection and seed (judge seed = oracle seed), K=10, seeds 0-2.

Usage (from the repository root; one process per judge, then the report):

    python benchmarks/soft_ceiling.py --judge soft-calibrated --out benchmarks/results/soft_default
    python benchmarks/soft_ceiling.py --report --out benchmarks/results/soft_default
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from soft_default import DATA, scores  # noqa: E402 (benchmarks/ is on sys.path when run as a script)

from activeprp_bench.datasets import load_trec_dl

RANKERS = ("mohajer", "mohajer_bubble", "parallel_mohajer", "heapsort", "quicksort", "bubblesort", "allpairs")
ORACLES = ("randomized", "bidirectional", "adaptive")
SEEDS = (0, 1, 2)
BINARIZED_AT = "250"  # the budget of the goal; its binarized default is read from soft_default's scores.json


def converged(judge: str) -> dict[str, float]:
    """Mean nDCG@10 x100 per ``ranker/oracle`` with no budget, over both collections and ``SEEDS``."""
    colls = [load_trec_dl(DATA / f"trec-dl-{year}", year).subset(None, 100) for year in (2019, 2020)]
    out = {}
    for ranker in RANKERS:
        for oracle in ORACLES:
            values = [v for seed in SEEDS for v in scores(colls, judge, None, seed, False, ranker, oracle)]
            out[f"{ranker}/{oracle}"] = 100 * sum(values) / len(values)
            print(judge, ranker, oracle, round(out[f"{ranker}/{oracle}"], 2), flush=True)
    return out


def report(out: Path) -> str:
    """The Markdown table from the ``ceiling_<judge>.json`` files and ``scores.json`` in ``out``."""
    defaults = json.loads((out / "scores.json").read_text())
    lines = ["| judge | binarized default, B=250 | best converged row, soft answers | headroom | 2nd best |",
             "|---|---:|---|---:|---|"]
    for path in sorted(out.glob("ceiling_*.json")):
        judge = path.stem.removeprefix("ceiling_")
        rows = sorted(json.loads(path.read_text()).items(), key=lambda kv: -kv[1])
        binarized = defaults[f"{judge}/{BINARIZED_AT}"]["binarized"]
        base = 100 * sum(binarized) / len(binarized)
        (best, top), (second, runner_up) = rows[0], rows[1]
        lines.append(f"| {judge} | {base:.2f} | {best} {top:.2f} | {top - base:+.2f} | {second} {runner_up:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--judge", help="one soft judge of the family (soft-calibrated, overconfident, underconfident)")
    p.add_argument("--report", action="store_true", help="write ceiling.md from the judges' JSON files")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.report:
        table = report(args.out)
        (args.out / "ceiling.md").write_text(
            "Command: `python benchmarks/soft_ceiling.py --judge J --out benchmarks/results/soft_default` per judge, "
            "then `--report` (see its docstring). Converged: no budget, no round cap; 7 rankers x randomized, "
            "bidirectional, adaptive; seeds 0-2; mean nDCG@10 x100 over DL19 + DL20 queries x seeds.\n\n" + table)
        print(table)
        return 0
    if not args.judge:
        p.error("give --judge NAME or --report")
    (args.out / f"ceiling_{args.judge}.json").write_text(json.dumps(converged(args.judge), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
