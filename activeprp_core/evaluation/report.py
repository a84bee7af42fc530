"""Aggregation, Markdown tables and plots of benchmark rows (the layout of the paper's Table 1 / A.1)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .grid import Row
from .stats import bootstrap_ci, paired_bootstrap

LABELS = {"bubblesort": "BubbleSort", "heapsort": "HeapSort", "quicksort": "QuickSort", "pac_bubble": "PAC + Bubble",
          "mohajer_bubble": "Mohajer + Bubble", "mohajer": "Mohajer"}
#: Paper Table 1 (Flan-T5-XL, mean of DL19 and DL20 nDCG@10 in %), budgets 100..500.
PAPER_TABLE1: dict[tuple[str, str], list[float]] = {
    ("bubblesort", "bidirectional"): [49.27, 49.27, 56.43, 56.43, 56.42, 56.98, 60.25, 60.30, 60.51],
    ("heapsort", "bidirectional"): [6.81, 6.13, 6.13, 9.28, 23.04, 41.84, 54.29, 62.81, 68.21],
    ("quicksort", "bidirectional"): [55.93, 55.89, 55.87, 56.20, 56.20, 56.20, 56.40, 56.59, 56.68],
    ("pac_bubble", "bidirectional"): [49.27, 49.27, 49.27, 49.27, 57.52, 60.59, 60.61, 60.61, 60.61],
    ("mohajer_bubble", "bidirectional"): [30.12, 30.12, 62.34, 64.80, 66.09, 66.28, 66.83, 67.02, 67.02],
    ("mohajer", "bidirectional"): [30.12, 30.12, 62.34, 64.80, 66.09, 66.28, 66.81, 66.96, 66.96],
    ("bubblesort", "randomized"): [55.90, 56.10, 59.82, 59.68, 61.95, 62.03, 64.04, 64.00, 65.42],
    ("heapsort", "randomized"): [6.58, 16.46, 50.17, 65.80, 68.50, 68.41, 68.34, 68.53, 68.71],
    ("quicksort", "randomized"): [54.49, 54.71, 55.26, 56.20, 57.56, 58.95, 59.81, 61.87, 63.76],
    ("pac_bubble", "randomized"): [49.27, 57.02, 60.01, 60.01, 60.01, 60.01, 60.01, 60.01, 60.01],
    ("mohajer_bubble", "randomized"): [61.36, 65.84, 67.66, 67.59, 68.14, 68.25, 68.08, 68.08, 68.08],
    ("mohajer", "randomized"): [61.36, 65.84, 67.66, 68.00, 68.00, 68.00, 68.00, 68.00, 68.00],
}
PAPER_BUDGETS = list(range(100, 501, 50))


class Summary:
    """Aggregates of grid rows per (ranker, oracle, budget).

    nDCG@10 is macro-averaged like the paper's Table 1: the mean over collections of the mean over their
    queries, per seed; ``ndcg`` holds ``(mean, ci_low, ci_high)`` over seeds (bootstrap, 10k resamples).
    ``calls`` / ``rounds``: mean per query over queries and seeds. ``per_query``: the seed-averaged nDCG@10 of
    every (collection, qid), for paired tests.
    """

    def __init__(self, rows: Sequence[Row], rng: np.random.Generator, resamples: int = 10_000) -> None:
        groups: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
        for r in rows:
            groups[(r.ranker, r.oracle, r.budget)].append(r)
        self.keys = sorted(groups)
        self.ndcg: dict[tuple[str, str, int], tuple[float, float, float]] = {}
        self.calls: dict[tuple[str, str, int], float] = {}
        self.rounds: dict[tuple[str, str, int], float] = {}
        self.per_query: dict[tuple[str, str, int], dict[tuple[str, str], float]] = {}
        for key, rs in groups.items():
            by_seed: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            by_query: dict[tuple[str, str], list[float]] = defaultdict(list)
            for r in rs:
                by_seed[r.seed][r.collection].append(r.ndcg10)
                by_query[(r.collection, r.qid)].append(r.ndcg10)
            seed_means = [np.mean([np.mean(v) for v in colls.values()]) for colls in by_seed.values()]
            self.ndcg[key] = bootstrap_ci(seed_means, rng, resamples)
            self.calls[key] = float(np.mean([r.calls for r in rs]))
            self.rounds[key] = float(np.mean([r.rounds for r in rs]))
            self.per_query[key] = {q: float(np.mean(v)) for q, v in by_query.items()}

    def axes(self) -> tuple[list[tuple[str, str]], list[int]]:
        """The (ranker, oracle) rows (oracle-major, paper order first) and the budget columns."""
        order = list(LABELS)
        pairs = sorted({(r, o) for r, o, _ in self.keys},
                       key=lambda p: (p[1], order.index(p[0]) if p[0] in order else len(order), p[0]))
        return pairs, sorted({b for _, _, b in self.keys})


def _label(ranker: str) -> str:
    return LABELS.get(ranker, ranker)


def _budget(b: int) -> str:
    return "inf" if b < 0 else str(b)


def markdown_table(s: Summary, what: str = "ndcg", paper: bool = True) -> str:
    """A Markdown table: rows ranker x oracle, columns budgets. ``what``: ``ndcg`` (``mean ±CI half-width``
    in %, with the paper's Table 1 value in brackets when ``paper`` and one exists), ``calls`` or ``rounds``
    (per query). Raises ValueError for another ``what``."""
    if what not in ("ndcg", "calls", "rounds"):
        raise ValueError(f"what must be ndcg, calls or rounds, got {what!r}")
    pairs, budgets = s.axes()
    lines = ["| Oracle | Ranker | " + " | ".join(_budget(b) for b in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for ranker, oracle in pairs:
        cells = []
        for b in budgets:
            key = (ranker, oracle, b)
            if key not in s.ndcg:
                cells.append("")
            elif what == "ndcg":
                mean, lo, hi = s.ndcg[key]
                cell = f"{100 * mean:.2f}" + (f"±{100 * (hi - lo) / 2:.2f}" if hi > lo else "")
                ref = PAPER_TABLE1.get((ranker, oracle))
                if paper and ref and b in PAPER_BUDGETS:
                    cell += f" ({ref[PAPER_BUDGETS.index(b)]:.2f})"
                cells.append(cell)
            else:
                cells.append(f"{(s.calls if what == 'calls' else s.rounds)[key]:.1f}")
        lines.append(f"| {oracle} | {_label(ranker)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(s: Summary, a: str, b: str, rng: np.random.Generator, resamples: int = 10_000) -> str:
    """Paired bootstrap over queries (both collections pooled, seed-averaged per query) of ranker ``a`` vs
    ``b`` per oracle and budget, as the paper's Tables A.2/A.3: ``↑``/``↓`` significant (p < 0.05), ``=`` not,
    with the mean difference in nDCG points."""
    pairs, budgets = s.axes()
    oracles = sorted({o for _, o in pairs})
    lines = ["| Oracle | A vs B | " + " | ".join(_budget(x) for x in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for oracle in oracles:
        cells = []
        for budget in budgets:
            qa, qb = s.per_query.get((a, oracle, budget)), s.per_query.get((b, oracle, budget))
            if not qa or not qb:
                cells.append("")
                continue
            common = sorted(set(qa) & set(qb))
            diff, p = paired_bootstrap([qa[q] for q in common], [qb[q] for q in common], rng, resamples)
            arrow = "=" if p >= 0.05 else ("↑" if diff > 0 else "↓")
            cells.append(f"{arrow} ({100 * diff:+.1f})")
        lines.append(f"| {oracle} | {_label(a)} vs {_label(b)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(s: Summary, path: str | Path, x: str = "budget") -> None:
    """PNG: nDCG@10 (%) against the budget (``x="budget"``) or against mean rounds per query
    (``x="rounds"``), one panel per oracle, one line per ranker, CI bands for multi-seed rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs, budgets = s.axes()
    oracles = sorted({o for _, o in pairs})
    fig, axes = plt.subplots(1, len(oracles), figsize=(6 * len(oracles), 4.2), squeeze=False, sharey=True)
    for ax, oracle in zip(axes[0], oracles):
        for ranker in [r for r, o in pairs if o == oracle]:
            keys = [(ranker, oracle, b) for b in budgets if (ranker, oracle, b) in s.ndcg]
            xs = [k[2] if x == "budget" else s.rounds[k] for k in keys]
            ys = np.array([s.ndcg[k] for k in keys]) * 100
            ax.plot(xs, ys[:, 0], marker="o", ms=3, label=_label(ranker))
            ax.fill_between(xs, ys[:, 1], ys[:, 2], alpha=0.2)
        ax.set_title(f"{oracle} oracle")
        ax.set_xlabel("LLM-call budget per query" if x == "budget" else "sequential rounds per query (mean)")
        if x == "rounds":
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("nDCG@10 (%)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
