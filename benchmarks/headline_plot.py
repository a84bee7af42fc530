"""README's headline plot: nDCG@10 against LLM calls per query, the default (``ranker="auto"``, ``oracle="auto"``)
against the paper's sorting baselines and Mohajer, from committed grid rows (no ranker is run).

Reads the N=100, K=10 rows of TREC DL 2019 + 2020 (BM25 top 100, the simulated judge calibrated to the paper's
Flan-T5-XL, 8 seeds) of ``benchmarks/results/latency_auto/n100_k10`` (auto/auto) and
``benchmarks/results/latency_dl1920/core`` (the other rankers), at budgets 100-500; x is the mean number of calls a
query used (at most the budget), y the mean nDCG@10 over queries and seeds. Both are pooled: the mean over all 97
queries of DL19 and DL20 together (``POOLED``), not Table 1's mean of the two collections' means. Writes
``ndcg_vs_calls.png`` and ``points.md`` (the plotted means) into ``--out``.

Run from the repository root: ``python benchmarks/headline_plot.py --out benchmarks/results/headline`` (needs the
``bench`` extra: matplotlib, numpy; a few seconds).
"""

from __future__ import annotations

import argparse
import csv
import gzip
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
AUTO_ROWS = RESULTS / "latency_auto" / "n100_k10" / "rows.csv.gz"
CORE_ROWS = RESULTS / "latency_dl1920" / "core" / "rows.csv.gz"
BUDGETS = (100, 150, 200, 250, 300, 350, 400, 450, 500)
#: (ranker, oracle, max_rounds; -1 = no round cap) -> label; the default first.
LINES = {
    ("auto", "auto", -1): "auto / auto (the default), no round cap",
    ("auto", "auto", 6): "auto / auto, max_rounds=6 (the wrappers' cap)",
    ("mohajer", "bidirectional", -1): "Mohajer, bidirectional",
    ("mohajer", "randomized", -1): "Mohajer, randomized",
    ("bubblesort", "bidirectional", -1): "BubbleSort, bidirectional",
    ("bubblesort", "randomized", -1): "BubbleSort, randomized",
    ("heapsort", "bidirectional", -1): "HeapSort, bidirectional",
    ("heapsort", "randomized", -1): "HeapSort, randomized",
    ("quicksort", "bidirectional", -1): "QuickSort, bidirectional",
    ("quicksort", "randomized", -1): "QuickSort, randomized",
}
#: how the means are taken, said in ``points.md``: elsewhere (Table 1) a figure is the mean of the DL19 and DL20 means.
POOLED = ("pooled means over all 97 queries of DL19 and DL20 together (and the seeds), not Table 1's mean of the "
          "DL19 and DL20 means")
COLORS = {"auto": "black", "mohajer": "tab:red", "bubblesort": "tab:blue", "heapsort": "tab:green",
          "quicksort": "tab:orange"}


def means(paths: list[Path]) -> dict[tuple, dict[int, tuple[float, float]]]:
    """``{(ranker, oracle, max_rounds): {budget: (mean calls, mean nDCG@10)}}`` over the rows of ``LINES``."""
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for path in paths:
        with gzip.open(path, "rt", newline="") as f:
            for row in csv.DictReader(f):
                key = (row["ranker"], row["oracle"], int(row["max_rounds"]))
                budget = int(row["budget"])
                if key in LINES and budget in BUDGETS:
                    acc = sums[(*key, budget)]
                    acc[0] += float(row["calls"])
                    acc[1] += float(row["ndcg10"])
                    acc[2] += 1
    out: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
    for (*key, budget), (calls, ndcg, n) in sums.items():
        out[tuple(key)][budget] = (calls / n, ndcg / n)
    missing = [LINES[k] for k in LINES if len(out.get(k, {})) != len(BUDGETS)]
    if missing:
        raise SystemExit(f"no rows at every budget {BUDGETS} for: {missing}")
    return out


def plot(points: dict[tuple, dict[int, tuple[float, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.6), dpi=110)
    for key, label in LINES.items():
        ranker, oracle, cap = key
        xs, ys = zip(*(points[key][b] for b in BUDGETS))
        default = ranker == "auto"
        ax.plot(xs, [100 * y for y in ys], label=label, color=COLORS[ranker], marker="o" if default else ".",
                linewidth=2.4 if default else 1.2, linestyle=":" if cap != -1 else "--" if oracle == "randomized"
                else "-")
    ax.set_xlabel("LLM calls per query (mean; budgets 100-500)")
    ax.set_ylabel("nDCG@10 (%)")
    ax.set_title("TREC DL 2019+2020, BM25 top 100, simulated Flan-T5-XL judge", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no matplotlib version stamp: the file changes only with data
    plt.close(fig)


def table(points: dict[tuple, dict[int, tuple[float, float]]]) -> str:
    head = "| ranker / oracle | " + " | ".join(f"B={b}" for b in BUDGETS) + " |\n"
    head += "|---|" + "---:|" * len(BUDGETS) + "\n"
    rows = [f"| {LINES[k]} | " + " | ".join(f"{100 * points[k][b][1]:.2f} ({points[k][b][0]:.0f})" for b in BUDGETS)
            + " |" for k in LINES]
    return ("nDCG@10 (%) and, in brackets, the mean calls per query, as plotted in `ndcg_vs_calls.png` "
            f"(`python benchmarks/headline_plot.py --out benchmarks/results/headline`); {POOLED}.\n\n"
            + head + "\n".join(rows) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="directory for ndcg_vs_calls.png and points.md")
    args = p.parse_args(argv)
    points = means([AUTO_ROWS, CORE_ROWS])
    args.out.mkdir(parents=True, exist_ok=True)
    plot(points, args.out / "ndcg_vs_calls.png")
    (args.out / "points.md").write_text(table(points), encoding="utf-8")
    print(f"wrote {args.out / 'ndcg_vs_calls.png'} and {args.out / 'points.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
