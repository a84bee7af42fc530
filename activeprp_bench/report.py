"""Aggregation, Markdown tables and plots of benchmark rows (the layout of the paper's Table 1 / A.1)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from math import isnan, nan
from pathlib import Path

import numpy as np

from activeprp_core.budget import check_count

from .grid import PAPER_BUDGETS, Row
from .instrumented import CALL_LATENCY_S, CALLS_IN_FLIGHT
from .stats import bootstrap_ci, macro_diff_test, paired_bootstrap

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

#: Table 1's setting: every judged query of TREC DL19 and DL20, their top 100 BM25 candidates, nDCG@10, no round cap.
PAPER_QUERIES = {"dl19": 43, "dl20": 54}
PAPER_DEPTH = 100


def paper_setting(rows: Sequence[Row]) -> bool:
    """Whether ``rows`` are of Table 1's setting, so that its values are a fair bracket beside theirs: the
    collections are DL19 and DL20 with all their judged queries (``PAPER_QUERIES``), every query reranks
    ``PAPER_DEPTH`` candidates into an nDCG@10, and no row has a round cap. Judged from the rows alone, so that a
    ``--from-csv`` remake decides as the run did."""
    queries: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.n != PAPER_DEPTH or r.top_k != 10 or r.max_rounds != -1:
            return False
        queries[r.collection].add(r.qid)
    return {c: len(q) for c, q in queries.items()} == PAPER_QUERIES


Key = tuple[str, str, int, int]  # (ranker, oracle, budget, max_rounds); -1 = no cap


def modelled_wall_s(round_calls: str, latency_s: float = CALL_LATENCY_S, in_flight: int = CALLS_IN_FLIGHT) -> float:
    """Wall time of one rerank when every call takes ``latency_s`` seconds and at most ``in_flight`` calls run
    at once: the rounds run one after another, a round of c calls takes ceil(c / in_flight) waves.

    Args:
        round_calls: the calls of each round, space-separated (``Row.round_calls``).
    """
    return latency_s * sum(-(-int(c) // in_flight) for c in round_calls.split())


def row_wall_s(row: Row, latency_s: float = CALL_LATENCY_S, in_flight: int = CALLS_IN_FLIGHT) -> float:
    """``modelled_wall_s`` of one row, or NaN when the row ran rounds but holds no per-round calls: rows read back
    from a file written with ``SLIM_COLUMNS`` (or from a rows cache seeded from one). A row of no rounds (the prior
    order) takes 0.0 s."""
    if row.rounds and not row.round_calls:
        return nan
    return modelled_wall_s(row.round_calls, latency_s, in_flight)


class Summary:
    """Aggregates of grid rows per (ranker, oracle, budget, max_rounds).

    nDCG@10 is macro-averaged like the paper's Table 1: the mean over collections of the mean over their
    queries, per seed; ``ndcg`` holds ``(mean, ci_low, ci_high)`` over seeds (bootstrap, 10k resamples).
    ``calls`` / ``rounds`` / ``wall``: mean per query over queries and seeds (``wall``: ``modelled_wall_s`` at
    ``latency_s`` and ``in_flight``; NaN, printed ``n/a``, when a row lacks its per-round calls: ``row_wall_s``);
    ``rounds_max``: the worst query's rounds. ``per_query``: the seed-averaged
    nDCG@10 of every (collection, qid), for paired tests. ``resolved``: the concrete ranker/oracle choices
    (``auto`` rows), most frequent first.
    """

    def __init__(self, rows: Sequence[Row], rng: np.random.Generator, resamples: int = 10_000,
                 latency_s: float = CALL_LATENCY_S, in_flight: int = CALLS_IN_FLIGHT) -> None:
        groups: dict[Key, list[Row]] = defaultdict(list)
        for r in rows:
            groups[(r.ranker, r.oracle, r.budget, r.max_rounds)].append(r)
        self.keys = sorted(groups)
        self.latency_s, self.in_flight = latency_s, in_flight  # what ``wall`` models
        self.ndcg: dict[Key, tuple[float, float, float]] = {}
        self.calls: dict[Key, float] = {}
        self.rounds: dict[Key, float] = {}
        self.rounds_max: dict[Key, int] = {}
        self.wall: dict[Key, float] = {}
        self.resolved: dict[Key, list[str]] = {}
        self.per_query: dict[Key, dict[tuple[str, str], float]] = {}
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
            self.rounds_max[key] = max(r.rounds for r in rs)
            self.wall[key] = float(np.mean([row_wall_s(r, latency_s, in_flight) for r in rs]))
            counts = Counter(r.resolved for r in rs if r.resolved)
            self.resolved[key] = [name for name, _ in counts.most_common()]
            self.per_query[key] = {q: float(np.mean(v)) for q, v in by_query.items()}

    def axes(self) -> tuple[list[tuple[str, str, int]], list[int]]:
        """The (ranker, oracle, max_rounds) rows (oracle-major, paper order first, no cap first) and the budget
        columns."""
        order = list(LABELS)
        rows = sorted({(r, o, m) for r, o, _, m in self.keys},
                      key=lambda p: (p[1], order.index(p[0]) if p[0] in order else len(order), p[0],
                                     p[2] < 0, p[2]))
        return rows, sorted({b for _, _, b, _ in self.keys}, key=lambda b: (b < 0, b))

    def front(self) -> list[Key]:
        """The Pareto front of the cells: no other cell has fewer or equal mean calls and mean rounds and an
        equal or higher mean nDCG, with one of them strictly better. Cells with identical figures (e.g. a cap
        that did not bind) appear once, the smallest budget and cap. Sorted by rounds, then calls."""
        def dominates(a: Key, b: Key) -> bool:
            ge = (self.calls[a] <= self.calls[b] and self.rounds[a] <= self.rounds[b]
                  and self.ndcg[a][0] >= self.ndcg[b][0])
            gt = (self.calls[a] < self.calls[b] or self.rounds[a] < self.rounds[b]
                  or self.ndcg[a][0] > self.ndcg[b][0])
            return ge and gt

        front = [b for b in self.keys if not any(dominates(a, b) for a in self.keys)]
        seen: dict[tuple[float, float, float], Key] = {}
        for key in sorted(front, key=lambda k: (k[2] < 0, k[2], k[3] < 0, k[3])):
            seen.setdefault((self.calls[key], self.rounds[key], self.ndcg[key][0]), key)
        return sorted(seen.values(), key=lambda k: (self.rounds[k], self.calls[k]))


def _label(ranker: str) -> str:
    return LABELS.get(ranker, ranker)


def _budget(b: int) -> str:
    return "inf" if b < 0 else str(b)


def _figure(value: float) -> str:
    return "n/a" if isnan(value) else f"{value:.1f}"


def _row_label(ranker: str, cap: int, caps: set[int]) -> str:
    return _label(ranker) + (f" (max_rounds {_budget(cap)})" if len(caps) > 1 else "")


def markdown_table(s: Summary, what: str = "ndcg", paper: bool = True) -> str:
    """A Markdown table: rows ranker x oracle (x max_rounds when the grid has several), columns budgets.
    ``what``: ``ndcg`` (``mean ±CI half-width`` in %, with the paper's Table 1 value in brackets when ``paper``
    and one exists), ``calls``, ``rounds`` or ``wall`` (per query). Raises ValueError for another ``what``."""
    if what not in ("ndcg", "calls", "rounds", "wall"):
        raise ValueError(f"what must be ndcg, calls, rounds or wall, got {what!r}")
    rows, budgets = s.axes()
    caps = {m for _, _, m in rows}
    lines = ["| Oracle | Ranker | " + " | ".join(_budget(b) for b in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for ranker, oracle, cap in rows:
        cells = []
        for b in budgets:
            key = (ranker, oracle, b, cap)
            if key not in s.ndcg:
                cells.append("")
            elif what == "ndcg":
                mean, lo, hi = s.ndcg[key]
                cell = f"{100 * mean:.2f}" + (f"±{100 * (hi - lo) / 2:.2f}" if hi > lo else "")
                ref = PAPER_TABLE1.get((ranker, oracle))
                if paper and ref and b in PAPER_BUDGETS and cap < 0:
                    cell += f" ({ref[PAPER_BUDGETS.index(b)]:.2f})"
                cells.append(cell)
            else:
                cells.append(_figure(getattr(s, what)[key]))
        lines.append(f"| {oracle} | {_row_label(ranker, cap, caps)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pareto_table(s: Summary) -> str:
    """The Pareto front (``Summary.front``) as a Markdown table: rounds (mean, worst query), calls, nDCG (%),
    modelled wall time per query, and the cell."""
    lines = ["| rounds (mean / max) | calls | nDCG (%) | wall s | ranker | oracle | budget | max_rounds | runs as |",
             "|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for key in s.front():
        ranker, oracle, budget, cap = key
        lines.append(f"| {s.rounds[key]:.1f} / {s.rounds_max[key]} | {s.calls[key]:.1f} | {100 * s.ndcg[key][0]:.2f} "
                     f"| {_figure(s.wall[key])} | {_label(ranker)} | {oracle} | {_budget(budget)} | {_budget(cap)} "
                     f"| {', '.join(s.resolved[key][:2])} |")
    return "\n".join(lines)


def paired_table(s: Summary, a: str, b: str, rng: np.random.Generator, resamples: int = 10_000) -> str:
    """Paired bootstrap over queries (both collections pooled, seed-averaged per query) of ranker ``a`` vs
    ``b`` per oracle, round cap and budget, as the paper's Tables A.2/A.3: ``↑``/``↓`` significant (p < 0.05),
    ``=`` not, with the mean difference in nDCG points."""
    rows, budgets = s.axes()
    settings = sorted({(o, m) for _, o, m in rows}, key=lambda p: (p[0], p[1] < 0, p[1]))
    caps = {m for _, m in settings}
    lines = ["| Oracle | A vs B | " + " | ".join(_budget(x) for x in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for oracle, cap in settings:
        cells = []
        for budget in budgets:
            qa, qb = s.per_query.get((a, oracle, budget, cap)), s.per_query.get((b, oracle, budget, cap))
            if not qa or not qb:
                cells.append("")
                continue
            common = sorted(set(qa) & set(qb))
            diff, p = paired_bootstrap([qa[q] for q in common], [qb[q] for q in common], rng, resamples)
            arrow = "=" if p >= 0.05 else ("↑" if diff > 0 else "↓")
            cells.append(f"{arrow} ({100 * diff:+.1f})")
        if any(cells):
            label = f"{_label(a)} vs {_label(b)}" + (f" (max_rounds {_budget(cap)})" if len(caps) > 1 else "")
            lines.append(f"| {oracle} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_cell(spec: str) -> Key:
    """``(ranker, oracle, budget, max_rounds)`` of ``spec`` = ``ranker/oracle/budget/max_rounds``, a budget or cap
    of -1, ``none`` or ``inf`` as -1 (no cap).

    Raises:
        ValueError: not four parts, or a budget or cap that is not an integer >= -1 or a word for no cap.
    """
    parts = spec.split("/")
    if len(parts) != 4 or not all(parts):
        raise ValueError(f"a cell is ranker/oracle/budget/max_rounds, got {spec!r}")
    try:
        budget, cap = (-1 if p.lower() in ("none", "inf", "-1") else check_count(int(p), "budget")
                       for p in parts[2:])
    except ValueError:
        raise ValueError(f"a cell's budget and max_rounds are integers >= 0 or none, got {spec!r}") from None
    return parts[0], parts[1], budget, cap


def cell(s: Summary, spec: str) -> Key:
    """The cell named by ``spec`` = ``ranker/oracle/budget/max_rounds`` (-1 or ``none`` = no cap). ``best/*/B/R``
    names the cell of the highest mean nDCG among the rows at budget B and cap R other than ``auto``.

    Raises:
        ValueError: a malformed spec, or no such cell in the grid.
    """
    ranker, oracle, budget, cap = parse_cell(spec)
    if ranker == "best":
        rows = [k for k in s.keys if k[2:] == (budget, cap) and "auto" not in k[:2]]
        if not rows:
            raise ValueError(f"no cell at budget {budget}, max_rounds {cap}")
        return max(rows, key=lambda k: s.ndcg[k][0])
    if (ranker, oracle, budget, cap) not in s.ndcg:
        raise ValueError(f"no cell {spec!r} in the grid")
    return ranker, oracle, budget, cap


def compare_table(s: Summary, specs: Sequence[str], rng: np.random.Generator, resamples: int = 10_000) -> str:
    """Paired comparisons of two cells each (``"A:B"``, cells as in ``cell``) over the queries both cover
    (seed-averaged per query), in nDCG points: the macro means of A and B (``Summary.ndcg``), their difference
    A - B (the macro mean of the per-query differences: A - B of the columns beside it when both cover the same
    queries) with its 95% CI and two-sided p-value from one paired bootstrap within each collection
    (``stats.macro_diff_test``), and the mean/worst rounds of A."""
    lines = ["| A | B | A | B | A - B | 95% CI | p | A rounds (mean / max) |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for spec in specs:
        a, b = (cell(s, x) for x in spec.split(":"))
        qa, qb = s.per_query[a], s.per_query[b]
        common = sorted(set(qa) & set(qb))
        diffs = [[100 * (qa[q] - qb[q]) for q in common if q[0] == coll] for coll in sorted({q[0] for q in common})]
        mean, lo, hi, p = macro_diff_test(diffs, rng, resamples)
        name = "/".join
        lines.append(f"| {name(map(str, a))} | {name(map(str, b))} | {100 * s.ndcg[a][0]:.2f} | "
                     f"{100 * s.ndcg[b][0]:.2f} | {mean:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {p:.3f} | "
                     f"{s.rounds[a]:.1f} / {s.rounds_max[a]} |")
    return "\n".join(lines)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: The most legend entries ``plot`` draws inside the last panel; more go beside it, 25 to a column.
LEGEND_INSIDE = 12


def _log_scale(ax, values) -> None:
    """A log x axis, or a symmetric log one (linear below 1) where a value is 0: a cell that made no call (budget
    0, round cap 0) has 0 rounds, which a log axis drops with a warning."""
    if min(values, default=1) > 0:
        ax.set_xscale("log")
    else:
        ax.set_xscale("symlog", linthresh=1)


def plot(s: Summary, path: str | Path, x: str = "budget", top_k: int = 10) -> None:
    """PNG: nDCG@``top_k`` (%) against the budget (``x="budget"``) or against mean rounds per query
    (``x="rounds"``), one panel per oracle, one line per ranker (and round cap), CI bands for multi-seed rows.
    On the budget axis a cell without a budget (budget -1) has no x: it is a dotted horizontal line in its
    ranker's colour, labelled "no budget" in the legend; on the rounds axis it is a point like the others. A legend
    of more than ``LEGEND_INSIDE`` entries goes beside the panels."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    rows, budgets = s.axes()
    oracles = sorted({o for _, o, _ in rows})
    caps = {m for _, _, m in rows}
    fig, axes = plt.subplots(1, len(oracles), figsize=(6 * len(oracles), 4.2), squeeze=False, sharey=True)
    unlimited = False  # a no-budget level drawn: the legend explains the dotted lines
    for ax, oracle in zip(axes[0], oracles):
        for ranker, _, cap in [r for r in rows if r[1] == oracle]:
            keys = [(ranker, oracle, b, cap) for b in budgets if (ranker, oracle, b, cap) in s.ndcg]
            drawn = [k for k in keys if k[2] >= 0] if x == "budget" else keys
            xs = [k[2] if x == "budget" else s.rounds[k] for k in drawn]
            ys = np.array([s.ndcg[k] for k in drawn]).reshape(-1, 3) * 100
            (line,) = ax.plot(xs, ys[:, 0], marker="o", ms=3, label=_row_label(ranker, cap, caps))
            ax.fill_between(xs, ys[:, 1], ys[:, 2], alpha=0.2)
            if x == "budget" and (ranker, oracle, -1, cap) in s.ndcg:
                ax.axhline(100 * s.ndcg[(ranker, oracle, -1, cap)][0], color=line.get_color(), ls=":", lw=1.2)
                unlimited = True
        ax.set_title(f"{oracle} oracle")
        ax.set_xlabel("LLM-call budget per query" if x == "budget" else "sequential rounds per query (mean)")
        if x == "rounds":
            _log_scale(ax, [s.rounds[k] for k in s.keys])
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"nDCG@{top_k} (%)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    if unlimited:
        handles.append(Line2D([], [], color="0.3", ls=":", lw=1.2))
        labels.append("no budget (dotted, in the line's colour)")
    outside = len(labels) > LEGEND_INSIDE  # a long legend would cover the lines: beside the last panel
    axes[0][-1].legend(handles, labels, fontsize=7 if len(caps) > 1 else 8,
                       **({"loc": "upper left", "bbox_to_anchor": (1.02, 1), "ncol": -(-len(labels) // 25)}
                          if outside else {}))
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, **({"bbox_inches": "tight"} if outside else {}))
    plt.close(fig)


def pareto_plot(s: Summary, path: str | Path) -> None:
    """PNG: every cell as a point, nDCG (%) against mean calls (left) and against mean rounds (right, log),
    the Pareto front (``Summary.front``) drawn on top and labelled."""
    plt = _pyplot()
    front = s.front()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, what in zip(axes, ("calls", "rounds")):
        values = getattr(s, what)
        ax.scatter([values[k] for k in s.keys], [100 * s.ndcg[k][0] for k in s.keys], s=8, c="0.75",
                   label="all cells")
        ax.scatter([values[k] for k in front], [100 * s.ndcg[k][0] for k in front], s=18, c="C3",
                   label="Pareto front (calls, rounds, nDCG)")
        for k in front:
            ax.annotate(f"{k[0]}/{k[1][:3]}", (values[k], 100 * s.ndcg[k][0]), fontsize=6,
                        xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("LLM calls per query (mean)" if what == "calls" else "sequential rounds per query (mean)")
        if what == "rounds":
            _log_scale(ax, [values[k] for k in s.keys])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("nDCG (%)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
