"""The regret report of a family grid (``activeprp bench grid --judges``' ``tables.md``, ``activeprp bench
auto-table --report``): per (N, K) setting, the choice of ``autotable``'s rule per cell, its worst and
leave-one-judge-out regret over the judges that beat the first stage, what a reference table resolves to, the
excluded judges' regret, paired bootstrap CIs over queries, choice changes along the budget axis and the rules
compared. nDCG points throughout."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

import numpy as np

from .autotable import (
    GOAL_BUDGETS_PER_N,
    MARGIN,
    RULE,
    TOLERANCE,
    Cell,
    Rule,
    Scores,
    budget_key,
    cells_by_cap,
    common_rows,
    core_row,
    family_means,
    fewest_rows_choice,
    goal_cells,
    make_rule,
    regret,
    regret_choice,
    single_row_choice,
    table_choice,
    worst_regret,
)
from .grid import Row
from .report import Summary


def family_summaries(rows: Sequence[Row]) -> dict[tuple[int, int], dict[str, Summary]]:
    """``(N, K) -> judge -> Summary`` of the core ranker x oracle rows of a family grid (``Row.judge``): the
    per-query nDCG behind the CIs."""
    groups: dict[tuple[int, int], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if core_row(r.ranker, r.oracle):
            groups[(r.n, r.top_k)][r.judge].append(r)
    return {nk: {j: Summary(rs, np.random.default_rng(0), resamples=1) for j, rs in sorted(by_j.items())}
            for nk, by_j in sorted(groups.items())}


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
        seq = [choice[c] for c in sorted((c for c in choice if c[1] == m), key=lambda c: budget_key(c[0]))]
        out[m] = sum(a != b for a, b in zip(seq, seq[1:]))
    return out


def label(v: int) -> str:
    """A budget or cap as printed: ``none`` for -1."""
    return "none" if v < 0 else str(v)


def diff_ci(summary: Summary | Sequence[Summary], a: tuple, b: tuple, rng: np.random.Generator
            ) -> tuple[float, float, float]:
    """``(mean, low, high)`` in nDCG points of row key ``a`` minus row key ``b`` (each ``(ranker, oracle, budget,
    cap)``) on one judge: paired bootstrap over queries within each collection, macro mean
    (``stats.macro_diff_ci``, 10k resamples, 95%). ``summary``: the judge's ``Summary``, or one per noise
    realisation of the judge, whose per-query differences are averaged first (over the queries all of them hold).

    Raises:
        KeyError: a key the judge's grid lacks.
    """
    from .stats import macro_diff_ci

    runs = [summary] if isinstance(summary, Summary) else list(summary)
    pairs = [(s.per_query[a], s.per_query[b]) for s in runs]
    queries = [q for q in pairs[0][0] if all(q in qa and q in qb for qa, qb in pairs)]  # the first one's order
    diff = {q: 100 * float(np.mean([qa[q] - qb[q] for qa, qb in pairs])) for q in queries}
    return macro_diff_ci([[d for q, d in diff.items() if q[0] == coll] for coll in sorted({q[0] for q in diff})], rng)


def _ci(summaries: dict[str, Summary], judge: str, cell: Cell, best: str, name: str, rng) -> str:
    """``regret [low, high]``: ``diff_ci`` of the judge's best row minus ``name`` at ``cell``."""
    return "{:.2f} [{:.2f}, {:.2f}]".format(*diff_ci(summaries[judge], (*best.split("/"), *cell),
                                                     (*name.split("/"), *cell), rng))


def _regret_or_nan(scores: Scores, judge: str, cell: Cell, name: str) -> float:
    return regret(scores, judge, cell, name) if name in scores[judge].get(cell, {}) else float("nan")


def _worst_of(reg: dict[Cell, float], cells: Sequence[Cell]) -> tuple[float, Cell | None]:
    vals = [(reg[c], c) for c in cells if c in reg and reg[c] == reg[c]]
    return max(vals, default=(float("nan"), None))


def falls(scores: Scores, pick: dict[Cell, str], span: tuple[float, float]) -> Iterator[tuple]:
    """Every fall of the picked row's nDCG as the budget grows within ``span``: ``(points, judge, cap as printed,
    earlier cell, later cell)`` per judge, cap and pair of budgets; cells without a pick, or whose pick the judge
    lacks, are skipped."""
    for cells in cells_by_cap(scores).values():
        cells = [c for c in cells if c[0] > 0 and span[0] <= c[0] <= span[1]]
        for j in scores:
            vals = [(scores[j][c][pick[c]], c) for c in cells if c in pick and pick[c] in scores[j].get(c, {})]
            yield from ((a - b, j, label(ca[1]), ca, cb) for i, (a, ca) in enumerate(vals) for b, cb in vals[i + 1:])


def mean_scores(realisations: Sequence[Scores], caps: Sequence[int] | None = None) -> Scores:
    """``judge -> cell -> row -> nDCG``, the mean over ``realisations`` (one ``Scores`` per noise realisation of
    the same judges) of the judges, cells and rows that every realisation has; ``caps``: the round caps kept (as
    stored, -1 = none; default all)."""
    first, rest = realisations[0], realisations[1:]
    return {j: {c: {r: float(np.mean([v] + [o[j][c][r] for o in rest]))
                    for r, v in rows.items() if all(r in o.get(j, {}).get(c, {}) for o in rest)}
                for c, rows in by_cell.items() if caps is None or c[1] in caps}
            for j, by_cell in first.items() if all(j in o for o in rest)}


def largest_fall(scores: Scores, pick: dict[Cell, str], span: tuple[float, float]) -> tuple[float, str, str]:
    """The largest fall of the picked row's nDCG as the budget grows within ``span`` (min, max budget), over
    judges and caps: ``(points, judge, cap)``; 0 when it never falls."""
    fall, judge, cap, *_ = max(falls(scores, pick, span), default=(0.0, "", "none"))
    return (fall, judge, cap) if fall > 0 else (0.0, "", "none")


def rules_tried(scores: Scores, goal: Sequence[Cell], span: tuple[float, float], tolerance: float = TOLERANCE,
                tolerances: Sequence[float] = (0.0, 0.5, 1.0, 1.5, 2.0), rule: str = RULE) -> str:
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
    for name, choose in rules.items():
        choice, lojo = choose(scores), lojo_regret(scores, rule=choose)
        changes = ", ".join(f"{label(m)}: {c}" for m, c in choice_changes(choice).items())
        worst_goal = max(worst_regret(scores, c, choice[c])[0] for c in goal or choice)
        lojo_goal = max((r for reg in lojo.values() for c, r in reg.items() if c in goal), default=float("nan"))
        lojo_all = max(r for reg in lojo.values() for r in reg.values())
        lines.append(f"| {name} | {changes} | {worst_goal:.2f} | {lojo_goal:.2f} | {lojo_all:.2f} | "
                     f"{largest_fall(scores, choice, span)[0]:.2f} |")
    return "\n".join(lines)


def _judge_lines(scores: Scores, judges: Sequence[str], summaries: dict[str, Summary], choice: dict[Cell, str],
                 today: dict[Cell, str], lojo: dict[str, dict[Cell, float]], chooser: Rule, goal: Sequence[Cell],
                 goal_budgets_per_n: Sequence[float], rng: np.random.Generator) -> str:
    """Per judge: worst regret over all cells and over the goal cells, with the CI at the worst cell, of the
    reference table (``today``) and of the rule's choice made without the judge (LOJO; for a judge outside
    ``lojo``, e.g. an excluded one, the choice made from the kept judges)."""
    lines = [f"| judge | today worst (all cells) | today worst, goal cells B/N in {list(goal_budgets_per_n)} "
             "[CI] | LOJO worst (all cells) | LOJO worst, goal cells [CI] |", "|---|---:|---:|---:|---:|"]
    for j in judges:
        treg = {c: _regret_or_nan(scores, j, c, today[c]) for c in choice if c in scores[j]}
        without = choice if j not in lojo else chooser({i: s for i, s in scores.items() if i != j and i in lojo})
        lreg = lojo.get(j) or {c: _regret_or_nan(scores, j, c, without[c]) for c in choice if c in scores[j]}
        cols = []
        for reg, names in ((treg, today), (lreg, without)):
            a, _ = _worst_of(reg, list(reg))
            g, gc = _worst_of(reg, goal)
            if gc is None:
                cols += [f"{a:.2f}", "-"]
                continue
            best = max(scores[j][gc], key=scores[j][gc].get)
            cols += [f"{a:.2f}", f"{_ci(summaries, j, gc, best, names[gc], rng)} at B={label(gc[0])} cap "
                     f"{label(gc[1])}"]
        lines.append(f"| {j} | " + " | ".join(cols) + " |")
    return "\n".join(lines)


def regret_report(rows: Sequence[Row], tolerance: float = TOLERANCE, reference: dict | None = None,
                  goal_budgets_per_n: Sequence[float] = GOAL_BUDGETS_PER_N, seed: int = 0,
                  rule: str = "regret", margin: float = MARGIN) -> str:
    """Markdown: per (N, K) setting of a family grid, the choice of ``rule`` per cell over the judges that beat
    the first stage (``autotable.Family.kept``) with its worst and leave-one-judge-out (LOJO) regret, what
    ``reference`` (an auto table; default the shipped one) resolves to and its regret, per-judge worst regrets
    with paired bootstrap CIs over queries (10k resamples, 95%; the excluded judges in a table of their own), the
    choice changes along the budget axis, the best single-row policies and the largest drop of the chosen row's
    nDCG as the budget grows. ``goal_budgets_per_n``: the budgets (as B/N) of the "goal" columns."""
    from activeprp_core.rankers.auto import load_table

    reference = reference or load_table()
    summaries_of, fams = family_summaries(rows), family_means(rows)
    parts = []
    for (n, k), summaries in summaries_of.items():
        rng = np.random.default_rng([seed, n, k])  # a setting's CIs do not move when another setting is added
        fam = fams[(n, k)]
        everyone, excluded = fam.ndcg, fam.excluded(margin)
        scores = fam.kept(margin).ndcg
        judges = list(scores)
        chooser = make_rule(rule, tolerance)
        choice = chooser(scores)
        lojo = lojo_regret(scores, rule=chooser) if len(judges) > 1 else {}
        today = table_choice(reference, n, k, list(choice))
        goal = goal_cells(choice, n, goal_budgets_per_n)

        kept_note = (f"; excluded (ceiling within {margin} points of the first stage or below it): "
                     f"{', '.join(excluded)}" if excluded else "")
        parts.append(f"## N={n}, K={k}: {len(judges)} judges ({', '.join(judges)}){kept_note}, nDCG@{k} points\n\n"
                     f"Rule `{rule}` (`activeprp_bench.autotable.make_rule`): worst-case regret over the judges, "
                     f"tolerance {tolerance}, kept along the budget axis. `today` = what the "
                     "reference auto table resolves to. Regret = the judge's best row minus the chosen row; "
                     "worst = max over judges [that judge]; LOJO = the choice made without judge j, evaluated on "
                     "j, max over j.\n")
        lines = ["| cap | B | today | today worst | regret choice | worst | LOJO worst |",
                 "|---|---:|---|---:|---|---:|---:|"]
        for cell in sorted(choice, key=lambda c: (budget_key(c[1]), budget_key(c[0]))):
            tw = max(((_regret_or_nan(scores, j, cell, today[cell]), j) for j in judges if cell in scores[j]),
                     default=(float("nan"), ""))
            w, wj = worst_regret(scores, cell, choice[cell])
            lw = max(((lojo[j][cell], j) for j in lojo if cell in lojo[j]), default=(float("nan"), ""))
            lines.append(f"| {label(cell[1])} | {label(cell[0])} | {today[cell]} | {tw[0]:.2f} [{tw[1]}] | "
                         f"{choice[cell]} | {w:.2f} [{wj}] | {lw[0]:.2f} [{lw[1]}] |")
        parts.append("\n".join(lines))
        ch_new, ch_today = choice_changes(choice), choice_changes(today)
        parts.append("Choice changes along the budget axis per cap: " + ", ".join(
            f"cap {label(m)}: today {ch_today[m]}, regret-built {ch_new[m]}" for m in ch_new))
        args = (summaries, choice, today, lojo, chooser, goal, goal_budgets_per_n, rng)
        parts.append(_judge_lines(scores, judges, *args))
        if excluded:
            parts.append("Judges that do not beat the first stage: not in the choice, their loss reported:\n\n"
                         + _judge_lines(everyone, excluded, *args))
        common = set.intersection(*(common_rows(scores, c) for c in choice))
        fixed = sorted((max(worst_regret(scores, c, name)[0] for c in goal or choice),
                        max(worst_regret(scores, c, name)[0] for c in choice), name) for name in common)[:5]
        parts.append("Single rows used in every cell (worst regret over the judges; goal cells, all cells): " +
                     "; ".join(f"{name} {g:.2f}, {a:.2f}" for g, a, name in fixed) +
                     f". Regret-built table: {max(worst_regret(scores, c, choice[c])[0] for c in goal or choice):.2f},"
                     f" {max(worst_regret(scores, c, choice[c])[0] for c in choice):.2f}.")
        span = (min(goal_budgets_per_n) * n, max(goal_budgets_per_n) * n)
        drops = [f"{name} " + "{:.2f} [{}, cap {}]".format(*largest_fall(scores, pick, span))
                 for name, pick in (("today", today), ("regret-built", choice))]
        parts.append(f"Largest fall of the default's nDCG@{k} as B grows over B/N {min(goal_budgets_per_n)}-"
                     f"{max(goal_budgets_per_n)} (any judge, any cap): " + ", ".join(drops) + ".")
        if len(judges) > 1:
            parts.append(rules_tried(scores, goal, span, tolerance, rule=rule))
    return "\n\n".join(parts) + "\n"
