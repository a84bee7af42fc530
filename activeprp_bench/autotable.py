"""The table behind ``ranker="auto"`` / ``oracle="auto"`` (``activeprp_core.rankers.auto``), built from
benchmark grid rows: per (N, K) setting, budget/N and round cap, the mean nDCG@K, rounds and calls of every
core ranker x oracle."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from activeprp_core.oracles import ORACLES
from activeprp_core.rankers import RANKERS

from .grid import Row
from .report import Summary


def build_auto_table(rows: Sequence[Row], source: str) -> dict:
    """The ``auto_table.json`` content (layout in ``activeprp_core.rankers.auto``) from grid ``rows``.

    Rows are grouped into settings by (N, top_k); rankers or oracles outside the core registries (``auto``,
    benchmark variants) are left out. nDCG is the Summary's
    macro mean (mean over collections of the per-query means, then over seeds), in %.

    Raises:
        ValueError: no row of a core ranker and oracle.
    """
    groups: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for r in rows:
        if r.ranker in RANKERS and r.ranker != "auto" and r.oracle in ORACLES:
            groups[(r.n, r.top_k)].append(r)
    if not groups:
        raise ValueError("no grid rows of a core ranker and oracle to build the auto table from")
    names = sorted({(r.ranker, r.oracle) for group in groups.values() for r in group})
    settings = []
    for (n, k), group in sorted(groups.items()):
        summary = Summary(group, np.random.default_rng(0), resamples=1)
        cells: dict[tuple[int, int], list] = defaultdict(lambda: [None] * len(names))
        for ranker, oracle, budget, cap in summary.keys:
            key = (ranker, oracle, budget, cap)
            cells[(budget, cap)][names.index((ranker, oracle))] = [
                round(100 * summary.ndcg[key][0], 2), round(summary.rounds[key], 1), round(summary.calls[key])]
        settings.append({"n": n, "k": k, "cells": [
            {"budget_per_n": None if budget < 0 else round(budget / n, 4), "max_rounds": None if cap < 0 else cap,
             "values": cells[(budget, cap)]} for budget, cap in sorted(cells)]})
    return {"source": source, "metric": "nDCG@K (%), mean over collections of per-query means, then seeds; "
            "values: [nDCG, mean rounds, mean calls]", "rows": [f"{r}/{o}" for r, o in names], "settings": settings}


# --- worst-case regret over a family of judges (issue 17, item 5) ------------------------------------------------

Cell = tuple[int, int]  # (budget, max_rounds) as in the rows; -1 = no cap
Scores = dict[str, dict[Cell, dict[str, float]]]  # judge -> cell -> "ranker/oracle" -> mean nDCG@K (%)

#: Rows whose worst regret is within this many nDCG points of the smallest one count as equally good; along the
#: budget axis the previous budget's choice is then kept (see ``regret_choice``). One point is below the 95% CI
#: half-width of a difference between two rows of one judge (97 queries, 2-3 points), and of {0, 0.25, 0.5, 1}
#: it gave the smallest leave-one-judge-out regret on the family grid (benchmarks/results/family/README.md).
TOLERANCE = 1.0

#: Issue 17's goal budgets as B/N (B in {N, 1.5N, 2.5N, 5N}): the "goal cells" columns of the reports.
GOAL_BUDGETS_PER_N = (1.0, 1.5, 2.5, 5.0)
#: Issue 17's goal round caps (-1: no cap).
GOAL_CAPS = (-1, 6, 10)


def goal_cells(cells: Iterable[Cell], n: int, budgets_per_n: Sequence[float] = GOAL_BUDGETS_PER_N) -> list[Cell]:
    """The (budget, cap) cells of an N-candidate setting whose budget is one of ``budgets_per_n`` x N (the
    unlimited budget, -1, is none of them), in the order given."""
    return [c for c in cells if c[0] > 0 and round(c[0] / n, 4) in budgets_per_n]


def _core(r: Row) -> bool:
    return r.ranker in RANKERS and r.ranker != "auto" and r.oracle in ORACLES and r.oracle != "auto"


def family_summaries(rows: Sequence[Row]) -> dict[tuple[int, int], dict[str, Summary]]:
    """``(N, K) -> judge -> Summary`` of the core ranker x oracle rows of a family grid (``Row.judge``)."""
    groups: dict[tuple[int, int], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if _core(r):
            groups[(r.n, r.top_k)][r.judge].append(r)
    return {nk: {j: Summary(rs, np.random.default_rng(0), resamples=1) for j, rs in sorted(by_j.items())}
            for nk, by_j in sorted(groups.items())}


def scores_of(summaries: dict[str, Summary]) -> Scores:
    """Mean nDCG@K in % (macro over collections, then seeds) per judge, cell and ``ranker/oracle``."""
    out: Scores = {}
    for judge, s in summaries.items():
        cells: dict[Cell, dict[str, float]] = defaultdict(dict)
        for r, o, b, m in s.keys:
            cells[(b, m)][f"{r}/{o}"] = 100 * s.ndcg[(r, o, b, m)][0]
        out[judge] = dict(cells)
    return out


def regret(scores: Scores, judge: str, cell: Cell, name: str) -> float:
    """The gap in nDCG points from ``name`` to the best row of ``judge`` at ``cell`` (>= 0)."""
    row = scores[judge][cell]
    return max(row.values()) - row[name]


def worst_regret(scores: Scores, cell: Cell, name: str) -> tuple[float, str]:
    """``(largest regret of name over the judges that measured cell, that judge)``."""
    return max((regret(scores, j, cell, name), j) for j in scores if cell in scores[j])


def _budget_key(b: int) -> tuple[bool, int]:
    return (b < 0, b)  # no budget (-1) is the largest


def _cells(scores: Scores) -> dict[int, list[Cell]]:
    """Cap -> its cells along the budget axis, smallest budget first, no budget last."""
    cells = {c for by_cell in scores.values() for c in by_cell}
    return {m: sorted((c for c in cells if c[1] == m), key=lambda c: _budget_key(c[0]))
            for m in sorted({c[1] for c in cells})}


def _run(eligible: Sequence[set[str]], name: str, i: int) -> int:
    """How many cells from ``i`` on in a row ``name`` stays eligible."""
    return next((j - i for j in range(i, len(eligible)) if name not in eligible[j]), len(eligible) - i)


def regret_choice(scores: Scores, tolerance: float = TOLERANCE) -> dict[Cell, str]:
    """The ``ranker/oracle`` of each cell chosen by worst-case regret over the judges, with few changes along the
    budget axis.

    Rule: at each cell, the candidates are the rows measured on every judge that measured the cell; a row is
    *eligible* when its worst regret (its largest gap to a judge's best row) is within ``tolerance`` points of
    the smallest worst regret. Per round cap, walking up the budgets (no budget last), the previous budget's
    choice is kept while it stays eligible; otherwise the eligible row that stays eligible over the longest run
    of the following budgets is taken (ties: smaller worst regret here, then the name). This greedy makes the
    fewest changes any choice of eligible rows can make.

    Raises:
        ValueError: a cell where no row was measured on every judge.
    """
    choice: dict[Cell, str] = {}
    for cells in _cells(scores).values():
        worst: list[dict[str, float]] = []
        for cell in cells:
            judges = [j for j in scores if cell in scores[j]]
            common = set.intersection(*(set(scores[j][cell]) for j in judges))
            if not common:
                raise ValueError(f"no ranker/oracle row was measured on every judge at budget, cap {cell}")
            worst.append({n: worst_regret(scores, cell, n)[0] for n in common})
        eligible = [{n for n, w in ws.items() if w <= min(ws.values()) + tolerance + 1e-9} for ws in worst]

        prev = None
        for i, cell in enumerate(cells):
            if prev not in eligible[i]:
                prev = min(eligible[i], key=lambda n: (-_run(eligible, n, i), worst[i][n], n))
            choice[cell] = prev
    return choice


def single_row_choice(scores: Scores) -> dict[Cell, str]:
    """One ``ranker/oracle`` per round cap for every budget: the row (measured on every judge at every cell of
    that cap) whose largest worst regret over the cap's cells is smallest (ties: the name). No change along the
    budget axis at all. Raises ValueError where no row was measured everywhere."""
    choice: dict[Cell, str] = {}
    for cells in _cells(scores).values():
        common = set.intersection(*(set(scores[j][c]) for c in cells for j in scores if c in scores[j]))
        if not common:
            raise ValueError(f"no ranker/oracle row was measured on every judge at every budget of cap {cells[0][1]}")
        best = min(sorted(common), key=lambda n: max(worst_regret(scores, c, n)[0] for c in cells))
        choice.update({c: best for c in cells})
    return choice


def fewest_rows_choice(scores: Scores, tolerance: float = TOLERANCE) -> dict[Cell, str]:
    """Per round cap, ``single_row_choice``'s one row when its largest worst regret over the cap's cells is within
    ``tolerance`` of ``regret_choice``'s, else ``regret_choice``'s rows (issue 17: one ranker that plans for its
    budget is preferred where it serves as well as a bigger table). The same tolerance as ``regret_choice``'s:
    rows closer than that are not told apart by the judges' noise, and a row that serves every budget of a cap
    also serves a judge left out of the build more evenly (``lojo_regret``; ``benchmarks/results/family/``)."""
    table, one = regret_choice(scores, tolerance), single_row_choice(scores)
    choice: dict[Cell, str] = {}
    for cells in _cells(scores).values():
        spread = [max(worst_regret(scores, c, pick[c])[0] for c in cells) for pick in (table, one)]
        pick = one if spread[1] <= spread[0] + tolerance + 1e-9 else table
        choice.update({c: pick[c] for c in cells})
    return choice


Rule = Callable[[Scores], dict[Cell, str]]
RULES = ("regret", "single", "fewest")
#: The rule of the shipped table (``activeprp bench auto-table``'s default ``--rule``).
RULE = "fewest"


def make_rule(name: str, tolerance: float = TOLERANCE) -> Rule:
    """The choice rule ``name``: ``regret`` (``regret_choice`` at ``tolerance``), ``single``
    (``single_row_choice``) or ``fewest`` (``fewest_rows_choice`` at ``tolerance``). Raises ValueError for
    another name."""
    if name == "regret":
        return lambda scores: regret_choice(scores, tolerance)
    if name == "single":
        return single_row_choice
    if name == "fewest":
        return lambda scores: fewest_rows_choice(scores, tolerance)
    raise ValueError(f"unknown choice rule {name!r}; choose one of {', '.join(RULES)}")


def lojo_regret(scores: Scores, tolerance: float = TOLERANCE, rule: Rule | None = None
                ) -> dict[str, dict[Cell, float]]:
    """Leave-one-judge-out regret: for each judge j, the choice made from the other judges (``rule``, default
    ``regret_choice`` at ``tolerance``), evaluated on j at every cell j measured. Needs at least two judges
    (ValueError otherwise)."""
    if len(scores) < 2:
        raise ValueError("leave-one-judge-out needs at least two judges")
    rule = rule or (lambda s: regret_choice(s, tolerance))
    out: dict[str, dict[Cell, float]] = {}
    for j in scores:
        choice = rule({i: s for i, s in scores.items() if i != j})
        out[j] = {c: regret(scores, j, c, n) for c, n in choice.items() if c in scores[j] and n in scores[j][c]}
    return out


def choice_changes(choice: dict[Cell, str]) -> dict[int, int]:
    """Per round cap, how many times the chosen row changes along the budget axis (no budget last)."""
    out = {}
    for m in sorted({c[1] for c in choice}):
        seq = [choice[c] for c in sorted((c for c in choice if c[1] == m), key=lambda c: _budget_key(c[0]))]
        out[m] = sum(a != b for a, b in zip(seq, seq[1:]))
    return out


def table_choice(table: dict, n: int, k: int, cells: Sequence[Cell]) -> dict[Cell, str]:
    """What ``auto``/``auto`` resolves to under ``table`` (``activeprp_core.rankers.auto.choose``) per cell."""
    from activeprp_core.rankers.auto import choose

    def cap(v: int) -> int | None:
        return None if v < 0 else v

    return {c: "/".join(choose(n, k, cap(c[0]), cap(c[1]), table=table)) for c in cells}


def build_regret_table(rows: Sequence[Row], source: str, tolerance: float = TOLERANCE,
                       base: dict | None = None, rule: str = "regret") -> dict:
    """The ``auto_table.json`` content built from family grid rows (``Row.judge`` set) by the choice rule
    ``rule`` (``make_rule``; default ``regret_choice`` at ``tolerance``).

    Each cell of the family grid stores its chosen row in ``choice`` (read by ``auto.choose`` for
    ``auto``/``auto``), its worst regret in ``worst_regret`` and, per row measured on every judge, ``values`` =
    [mean over judges of nDCG %, of mean rounds, of mean calls] (used when the ranker or the oracle is fixed).
    Settings and round caps of ``base`` (a table in the same layout) that the family grid did not measure are
    kept as they are, their values moved onto the union of row names; at a round cap the family grid measured,
    only its cells count (a budget between two of them reads the lower one's choice).

    Raises:
        ValueError: no core row, or a cell without a row measured on every judge.
    """
    fams = family_summaries(rows)
    if not fams:
        raise ValueError("no grid rows of a core ranker and oracle to build the auto table from")
    names = sorted({n for s in fams.values() for sc in scores_of(s).values() for c in sc.values() for n in c}
                   | set((base or {}).get("rows", [])))
    settings: dict[tuple[int, int], dict] = {}
    for (n, k), summaries in fams.items():
        scores = scores_of(summaries)
        choice = make_rule(rule, tolerance)(scores)
        cells = []
        for cell in sorted(choice, key=lambda c: (_budget_key(c[0]), _budget_key(c[1]))):
            b, m = cell
            judged = [(j, s) for j, s in summaries.items() if cell in scores[j]]
            values: list = [None] * len(names)
            for name in set.intersection(*(set(scores[j][cell]) for j, _ in judged)):
                key = (*name.split("/"), b, m)
                values[names.index(name)] = [round(float(np.mean([100 * s.ndcg[key][0] for _, s in judged])), 2),
                                             round(float(np.mean([s.rounds[key] for _, s in judged])), 1),
                                             round(float(np.mean([s.calls[key] for _, s in judged])))]
            cells.append({"budget_per_n": None if b < 0 else round(b / n, 4), "max_rounds": None if m < 0 else m,
                          "values": values, "choice": choice[cell],
                          "worst_regret": round(worst_regret(scores, cell, choice[cell])[0], 2)})
        settings[(n, k)] = {"n": n, "k": k, "cells": cells}
    for s in (base or {}).get("settings", []):
        old_names = base["rows"]
        kept = settings.setdefault((s["n"], s["k"]), {"n": s["n"], "k": s["k"], "cells": []})
        caps = {c["max_rounds"] for c in kept["cells"]}  # a family-measured cap: its choices only (no mixing)
        for c in s["cells"]:
            if c["max_rounds"] not in caps:
                moved = dict(zip(old_names, c["values"]))
                kept["cells"].append({**c, "values": [moved.get(name) for name in names]})
        kept["cells"].sort(key=lambda c: (c["budget_per_n"] is None, c["budget_per_n"] or 0,
                                          c["max_rounds"] is None, c["max_rounds"] or 0))
    metric = (f"cells with 'choice': the row chosen by worst-case regret over a family of judges (rule {rule}, "
              f"tolerance {tolerance} nDCG points, kept along the budget axis); "
              "values: [nDCG %, mean rounds, mean calls], "
              "means over the judges (cells without 'choice': the base table's values)")
    return {"source": source, "metric": metric, "rows": names,
            "settings": [settings[nk] for nk in sorted(settings)]}


def _b(v: int) -> str:
    return "none" if v < 0 else str(v)


def diff_ci(summary: Summary, a: tuple, b: tuple, rng: np.random.Generator) -> tuple[float, float, float]:
    """``(mean, low, high)`` in nDCG points of row key ``a`` minus row key ``b`` (each ``(ranker, oracle, budget,
    cap)``) on one judge: paired bootstrap over queries within each collection, macro mean
    (``stats.macro_diff_ci``, 10k resamples, 95%).

    Raises:
        KeyError: a key the judge's grid lacks.
    """
    from .stats import macro_diff_ci

    qa, qb = summary.per_query[a], summary.per_query[b]
    return macro_diff_ci([[100 * (qa[q] - qb[q]) for q in qa if q[0] == coll] for coll in sorted({q[0] for q in qa})],
                         rng)


def _ci(summaries: dict[str, Summary], judge: str, cell: Cell, best: str, name: str, rng) -> str:
    """``regret [low, high]``: ``diff_ci`` of the judge's best row minus ``name`` at ``cell``."""
    return "{:.2f} [{:.2f}, {:.2f}]".format(*diff_ci(summaries[judge], (*best.split("/"), *cell),
                                                     (*name.split("/"), *cell), rng))


def regret_bias(summary: Summary, cell: Cell, name: str, rng: np.random.Generator, resamples: int = 1000
                ) -> tuple[float, float, float]:
    """How much of a judge's ``regret`` at ``cell`` is the winner's curse: the best row is the largest of the
    cell's noisy means, so its in-sample gap to ``name`` is biased upwards. Resampling the queries (within each
    collection, macro mean, as ``scores_of``), in nDCG points:

    Returns:
        ``(regret, corrected, floor)``: the in-sample regret; the bootstrap bias-corrected one, 2 x regret minus
        its mean over the resamples (Efron and Tibshirani, *An Introduction to the Bootstrap*, 1993, sec. 10.3);
        and the *floor*, the mean over the resamples of the gap from the resample's best row to the full sample's
        best row: the regret this estimator shows even for the judge's own best row.
    Raises:
        ValueError: ``name`` not measured at ``cell``.
    """
    keys = [k for k in summary.keys if (k[2], k[3]) == cell]
    col = [f"{r}/{o}" for r, o, _, _ in keys].index(name)
    queries = sorted(summary.per_query[keys[0]])
    values = 100 * np.array([[summary.per_query[k][q] for k in keys] for q in queries])
    groups = [np.array([i for i, q in enumerate(queries) if q[0] == c]) for c in sorted({q[0] for q in queries})]

    def means(picks: list[np.ndarray]) -> np.ndarray:
        return np.mean([values[ix].mean(axis=0) for ix in picks], axis=0)

    full = means(groups)
    best = int(np.argmax(full))
    boot = np.array([means([ix[rng.integers(0, ix.size, ix.size)] for ix in groups]) for _ in range(resamples)])
    top = boot.max(axis=1)
    in_sample = float(full.max() - full[col])
    return in_sample, 2 * in_sample - float((top - boot[:, col]).mean()), float((top - boot[:, best]).mean())


def _regret_or_nan(scores: Scores, judge: str, cell: Cell, name: str) -> float:
    return regret(scores, judge, cell, name) if name in scores[judge].get(cell, {}) else float("nan")


def _worst_of(reg: dict[Cell, float], cells: Sequence[Cell]) -> tuple[float, Cell | None]:
    vals = [(reg[c], c) for c in cells if c in reg and reg[c] == reg[c]]
    return max(vals, default=(float("nan"), None))


def _falls(scores: Scores, pick: dict[Cell, str], span: tuple[float, float]):
    """Every fall of the picked row's nDCG as the budget grows within ``span``: ``(points, judge, cap as printed,
    earlier cell, later cell)`` per judge, cap and pair of budgets (a tie's largest names the same cap as ever);
    cells without a pick, or whose pick the judge lacks, are skipped."""
    for cells in _cells(scores).values():
        cells = [c for c in cells if c[0] > 0 and span[0] <= c[0] <= span[1]]
        for j in scores:
            vals = [(scores[j][c][pick[c]], c) for c in cells if c in pick and pick[c] in scores[j].get(c, {})]
            yield from ((a - b, j, _b(ca[1]), ca, cb) for i, (a, ca) in enumerate(vals) for b, cb in vals[i + 1:])


def largest_fall(scores: Scores, pick: dict[Cell, str], span: tuple[float, float]) -> tuple[float, str, str]:
    """The largest fall of the picked row's nDCG as the budget grows within ``span`` (min, max budget), over
    judges and caps: ``(points, judge, cap)``; 0 when it never falls."""
    fall, judge, cap, *_ = max(_falls(scores, pick, span), default=(0.0, "", "none"))
    return (fall, judge, cap) if fall > 0 else (0.0, "", "none")


def fall_ci(summary: Summary, pick: dict[Cell, str], span: tuple[float, float], rng: np.random.Generator
            ) -> tuple[float, float, float, Cell, Cell] | None:
    """One judge's largest fall of the picked row's nDCG as the budget grows within ``span``, with its paired
    bootstrap CI (``diff_ci``): ``(points, low, high, earlier cell, later cell)``; None when it never falls."""
    scores = scores_of({"judge": summary})
    fall, _, _, ca, cb = max(_falls(scores, pick, span), default=(0.0, "", "", None, None))
    if fall <= 0:
        return None
    mean, low, high = diff_ci(summary, (*pick[ca].split("/"), *ca), (*pick[cb].split("/"), *cb), rng)
    return mean, low, high, ca, cb


def cell_minimax(scores: Scores, cell: Cell) -> tuple[float, str, str]:
    """The least worst regret any row measured on every judge reaches at ``cell``, in-sample: ``(points, its
    worst judge, row)``. A lower bound on the worst regret of any choice among these rows there, LOJO or not."""
    judges = [j for j in scores if cell in scores[j]]
    names = set.intersection(*(set(scores[j][cell]) for j in judges))
    return min((*worst_regret({j: scores[j] for j in judges}, cell, name), name) for name in sorted(names))


def rules_tried(scores: Scores, goal: Sequence[Cell], span: tuple[float, float], tolerance: float = TOLERANCE,
                tolerances: Sequence[float] = (0.0, 0.25, 0.5, 1.0), rule: str = RULE) -> str:
    """Markdown table comparing choice rules on one (N, K) setting: ``regret_choice`` at several tolerances,
    ``single_row_choice`` and ``fewest_rows_choice`` (``rule`` at ``tolerance`` is marked shipped); per rule its
    changes along the budget axis, its in-sample worst regret and its leave-one-judge-out worst regret (goal cells
    and all cells) and its largest fall as B grows in ``span``."""

    def shipped(name: str, t: float | None = None) -> str:
        return " (shipped)" if name == rule and t in (None, tolerance) else ""

    rules: dict[str, Rule] = {f"regret_choice, tolerance {t}{shipped('regret', t)}":
                              (lambda s, t=t: regret_choice(s, t)) for t in dict.fromkeys([*tolerances, tolerance])}
    rules[f"single_row_choice (one row per cap){shipped('single')}"] = single_row_choice
    rules[f"fewest_rows_choice, tolerance {tolerance}{shipped('fewest')}"] = (
        lambda s: fewest_rows_choice(s, tolerance))
    lines = ["Rules tried (worst = max over judges and cells of the regret, nDCG points; LOJO = the rule applied "
             "without judge j, evaluated on j):", "",
             "| rule | changes per cap | worst, goal cells | LOJO worst, goal cells | LOJO worst, all cells "
             "| largest fall, goal B range |", "|---|---|---:|---:|---:|---:|"]
    for label, rule in rules.items():
        choice, lojo = rule(scores), lojo_regret(scores, rule=rule)
        changes = ", ".join(f"{_b(m)}: {c}" for m, c in choice_changes(choice).items())
        worst_goal = max(worst_regret(scores, c, choice[c])[0] for c in goal or choice)
        lojo_goal = max((r for reg in lojo.values() for c, r in reg.items() if c in goal), default=float("nan"))
        lojo_all = max(r for reg in lojo.values() for r in reg.values())
        lines.append(f"| {label} | {changes} | {worst_goal:.2f} | {lojo_goal:.2f} | {lojo_all:.2f} | "
                     f"{largest_fall(scores, choice, span)[0]:.2f} |")
    return "\n".join(lines)


def regret_report(rows: Sequence[Row], tolerance: float = TOLERANCE, reference: dict | None = None,
                  goal_budgets_per_n: Sequence[float] = GOAL_BUDGETS_PER_N, seed: int = 0,
                  rule: str = "regret") -> str:
    """Markdown: per (N, K) setting of a family grid, the regret-built choice per cell with its worst and
    leave-one-judge-out (LOJO) regret, what ``reference`` (an auto table; default the shipped one) resolves to
    and its regret, per-judge worst regrets with paired bootstrap CIs over queries (10k resamples, 95%), the
    choice changes along the budget axis, the best single-row policies and the largest drop of the chosen row's
    nDCG as the budget grows (per judge). ``goal_budgets_per_n``: the budgets (as B/N) of the "goal" columns."""
    from activeprp_core.rankers.auto import load_table

    reference = reference or load_table()
    parts = []
    for (n, k), summaries in family_summaries(rows).items():
        rng = np.random.default_rng([seed, n, k])  # a setting's CIs do not move when another setting is added
        scores = scores_of(summaries)
        judges = list(scores)
        chooser = make_rule(rule, tolerance)
        choice = chooser(scores)
        lojo = lojo_regret(scores, rule=chooser) if len(judges) > 1 else {}
        today = table_choice(reference, n, k, list(choice))
        goal = goal_cells(choice, n, goal_budgets_per_n)

        parts.append(f"## N={n}, K={k}: {len(judges)} judges ({', '.join(judges)}), nDCG@{k} points\n\n"
                     f"Rule `{rule}` (`activeprp_bench.autotable.make_rule`): worst-case regret over the judges, "
                     f"tolerance {tolerance}, kept along the budget axis. `today` = what the "
                     "reference auto table resolves to. Regret = the judge's best row minus the chosen row; "
                     "worst = max over judges [that judge]; LOJO = the choice made without judge j, evaluated on "
                     "j, max over j.\n")
        lines = ["| cap | B | today | today worst | regret choice | worst | LOJO worst |",
                 "|---|---:|---|---:|---|---:|---:|"]
        for cell in sorted(choice, key=lambda c: (_budget_key(c[1]), _budget_key(c[0]))):
            tw = max(((_regret_or_nan(scores, j, cell, today[cell]), j) for j in judges if cell in scores[j]),
                     default=(float("nan"), ""))
            w, wj = worst_regret(scores, cell, choice[cell])
            lw = max(((lojo[j][cell], j) for j in lojo if cell in lojo[j]), default=(float("nan"), ""))
            lines.append(f"| {_b(cell[1])} | {_b(cell[0])} | {today[cell]} | {tw[0]:.2f} [{tw[1]}] | "
                         f"{choice[cell]} | {w:.2f} [{wj}] | {lw[0]:.2f} [{lw[1]}] |")
        parts.append("\n".join(lines))
        ch_new, ch_today = choice_changes(choice), choice_changes(today)
        parts.append("Choice changes along the budget axis per cap: " + ", ".join(
            f"cap {_b(m)}: today {ch_today[m]}, regret-built {ch_new[m]}" for m in ch_new))
        # per judge: worst over all cells and over the goal cells, with the CI at the worst cell
        lines = [f"| judge | today worst (all cells) | today worst, goal cells B/N in {list(goal_budgets_per_n)} "
                 "[CI] | LOJO worst (all cells) | LOJO worst, goal cells [CI] |", "|---|---:|---:|---:|---:|"]
        for j in judges:
            treg = {c: _regret_or_nan(scores, j, c, today[c]) for c in choice if c in scores[j]}
            cols = []
            for reg, names in ((treg, today), (lojo.get(j, {}), None)):
                a, _ = _worst_of(reg, list(reg))
                g, gc = _worst_of(reg, goal)
                if gc is None:
                    cols += [f"{a:.2f}", "-"]
                    continue
                name = names[gc] if names else chooser({i: s for i, s in scores.items() if i != j})[gc]
                best = max(scores[j][gc], key=scores[j][gc].get)
                cols += [f"{a:.2f}", f"{_ci(summaries, j, gc, best, name, rng)} at B={_b(gc[0])} cap {_b(gc[1])}"]
            lines.append(f"| {j} | " + " | ".join(cols) + " |")
        parts.append("\n".join(lines))
        # single rows used everywhere, against the table
        common = set.intersection(*(set(scores[j][c]) for j in judges for c in choice if c in scores[j]))
        fixed = sorted((max(worst_regret(scores, c, name)[0] for c in goal or choice),
                        max(worst_regret(scores, c, name)[0] for c in choice), name) for name in common)[:5]
        parts.append("Single rows used in every cell (worst regret over the judges; goal cells, all cells): " +
                     "; ".join(f"{name} {g:.2f}, {a:.2f}" for g, a, name in fixed) +
                     f". Regret-built table: {max(worst_regret(scores, c, choice[c])[0] for c in goal or choice):.2f},"
                     f" {max(worst_regret(scores, c, choice[c])[0] for c in choice):.2f}.")
        span = (min(goal_budgets_per_n) * n, max(goal_budgets_per_n) * n)
        drops = [f"{label} " + "{:.2f} [{}, cap {}]".format(*largest_fall(scores, pick, span))
                 for label, pick in (("today", today), ("regret-built", choice))]
        parts.append(f"Largest fall of the default's nDCG@{k} as B grows over B/N {min(goal_budgets_per_n)}-"
                     f"{max(goal_budgets_per_n)} (any judge, any cap): " + ", ".join(drops) + ".")
        if len(judges) > 1:
            parts.append(rules_tried(scores, goal, span, tolerance, rule=rule))
    return "\n\n".join(parts) + "\n"
