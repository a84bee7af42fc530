"""The table behind ``ranker="auto"`` / ``oracle="auto"`` (``activeprp_core.rankers.auto``; layout documented
there), built by ``activeprp bench auto-table`` from benchmark grid rows: per (N, K) setting, budget/N and round
cap, the mean nDCG@K, rounds and calls of every core ranker x oracle and, for family grids (rows with a judge),
the row chosen by worst-case regret over the judges that beat the first stage.

The shipped table is rebuilt from the rows committed under ``benchmarks/results/`` by the command in its own
``source`` field (``tests/test_bench_autotable.py`` reruns it and compares); see docs/judges.md.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from activeprp_core.oracles import ORACLES
from activeprp_core.rankers import RANKERS

from .grid import Row, open_rows

if TYPE_CHECKING:
    import numpy as np

Cell = tuple[int, int]  # (budget, max_rounds) as in the rows; -1 = no cap
Scores = dict[str, dict[Cell, dict[str, float]]]  # judge -> cell -> "ranker/oracle" -> value

#: Rows whose worst regret is within this many nDCG points of the smallest one count as equally good; along the
#: budget axis the previous budget's choice is kept (see ``regret_choice``). 1.5 points is below the 95% CI
#: half-width of a difference between two rows of one judge (97 queries: 2-3 points), so rows closer than that are
#: not told apart by the judges' noise; 1.0 made the choice switch rows between budgets it cannot tell apart, and a
#: switch shows up as a fall of the default's nDCG as B grows (the rules compared: docs/judges.md).
TOLERANCE = 1.5
#: A judge *beats the first stage* when its ceiling (``CEILING``: every pair asked in both orders, no budget, no
#: round cap) is more than this many nDCG points above the first stage's order (``FIRST_STAGE`` rows). The table
#: is chosen over those judges only; the others are reported, not planned for (docs/judges.md).
MARGIN = 2.0
CEILING = ("allpairs/bidirectional", (-1, -1))
#: The grid label of the first stage's own order (``activeprp_bench.reference.FirstStage``): its rows give each
#: judge's baseline.
FIRST_STAGE = "first_stage"

#: The goal budgets as B/N (B in {N, 1.5N, 2.5N, 5N}): the "goal cells" columns of the reports.
GOAL_BUDGETS_PER_N = (1.0, 1.5, 2.5, 5.0)
#: The goal round caps (-1: no cap).
GOAL_CAPS = (-1, 6, 10)


def goal_cells(cells: Iterable[Cell], n: int, budgets_per_n: Sequence[float] = GOAL_BUDGETS_PER_N) -> list[Cell]:
    """The (budget, cap) cells of an N-candidate setting whose budget is one of ``budgets_per_n`` x N (the
    unlimited budget, -1, is none of them), in the order given."""
    return [c for c in cells if c[0] > 0 and round(c[0] / n, 4) in budgets_per_n]


def core_row(ranker: str, oracle: str) -> bool:
    """Whether ``ranker/oracle`` is a core ranker x oracle (``auto`` and bench variants are not)."""
    return ranker in RANKERS and ranker != "auto" and oracle in ORACLES and oracle != "auto"


# --- cell means of grid rows ------------------------------------------------------------------------------------

@dataclass
class Family:
    """The cell means of one (N, K) setting of a grid, per judge (``""`` for rows without one).

    Attributes:
        ndcg: judge -> cell -> ``ranker/oracle`` -> nDCG@K in %: per seed the mean over collections of the
            per-query means (the paper's macro mean), then the mean over seeds.
        rounds, calls: the same layout: mean per query over queries and seeds.
        first_stage: judge -> the nDCG@K (%) of the first stage's order (``FIRST_STAGE`` rows), where the grid
            has them.
    """

    ndcg: Scores = field(default_factory=dict)
    rounds: Scores = field(default_factory=dict)
    calls: Scores = field(default_factory=dict)
    first_stage: dict[str, float] = field(default_factory=dict)

    def ceiling(self, judge: str) -> float | None:
        """The judge's ``CEILING`` row (nDCG %), None when the grid lacks it."""
        name, cell = CEILING
        return self.ndcg.get(judge, {}).get(cell, {}).get(name)

    def beats_first_stage(self, judge: str, margin: float = MARGIN) -> bool | None:
        """Whether the judge's ceiling is more than ``margin`` points above the first stage; None when the grid
        lacks either row (the judge is then kept)."""
        ceiling, first = self.ceiling(judge), self.first_stage.get(judge)
        return None if ceiling is None or first is None else ceiling - first > margin

    def excluded(self, margin: float = MARGIN) -> list[str]:
        """The judges that do not beat the first stage (``beats_first_stage`` is False), sorted."""
        return sorted(j for j in self.ndcg if self.beats_first_stage(j, margin) is False)

    def kept(self, margin: float = MARGIN) -> Family:
        """This family without its ``excluded`` judges."""
        out = set(self.excluded(margin))

        def keep(by_judge: dict) -> dict:
            return {j: v for j, v in by_judge.items() if j not in out}

        return Family(keep(self.ndcg), keep(self.rounds), keep(self.calls), keep(self.first_stage))


#: The columns of a grid row the means need (``activeprp_bench.grid.SLIM_COLUMNS`` holds them all).
_KEY = ("judge", "n", "top_k", "ranker", "oracle", "budget", "max_rounds", "seed", "collection")
_VALUES = ("ndcg10", "calls", "rounds")
#: Bytes of CSV that ``read_family`` parses at a time (a batch of ~150k rows): the memory stays bounded.
_BLOCK_BYTES = 1 << 24


class _Means:
    """Sums of (nDCG, calls, rounds) per (judge, N, K, ranker, oracle, budget, cap, seed, collection), folded into
    ``Family`` objects by ``families``. The callers add only the rows that count (``FIRST_STAGE`` rows and the
    rows they keep)."""

    def __init__(self) -> None:
        self.sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])

    def add(self, key: tuple, ndcg: float, calls: float, rounds: float) -> None:
        s = self.sums[key]
        s[0] += ndcg
        s[1] += calls
        s[2] += rounds
        s[3] += 1

    def families(self) -> dict[tuple[int, int], Family]:
        cells: dict[tuple, dict] = defaultdict(lambda: {"seeds": defaultdict(list), "calls": 0.0, "rounds": 0.0,
                                                        "count": 0})
        for (judge, n, k, ranker, oracle, budget, cap, seed, _), (nd, ca, ro, count) in self.sums.items():
            c = cells[(judge, int(n), int(k), ranker, oracle, int(budget), int(cap))]
            c["seeds"][seed].append(nd / count)
            c["calls"], c["rounds"], c["count"] = c["calls"] + ca, c["rounds"] + ro, c["count"] + count
        out: dict[tuple[int, int], Family] = defaultdict(Family)
        for (judge, n, k, ranker, oracle, budget, cap), c in sorted(cells.items()):
            seeds = [sum(colls) / len(colls) for _, colls in sorted(c["seeds"].items())]
            ndcg = 100 * sum(seeds) / len(seeds)
            fam = out[(n, k)]
            if ranker == FIRST_STAGE:
                fam.first_stage[judge] = ndcg
            else:
                name, cell = f"{ranker}/{oracle}", (budget, cap)
                fam.ndcg.setdefault(judge, {}).setdefault(cell, {})[name] = ndcg
                fam.rounds.setdefault(judge, {}).setdefault(cell, {})[name] = c["rounds"] / c["count"]
                fam.calls.setdefault(judge, {}).setdefault(cell, {})[name] = c["calls"] / c["count"]
        return dict(sorted(out.items()))


def family_means(rows: Iterable[Row]) -> dict[tuple[int, int], Family]:
    """``(N, K) -> Family`` of grid ``rows`` (core ranker x oracle rows, and ``FIRST_STAGE`` rows)."""
    means = _Means()
    for r in rows:
        if r.ranker == FIRST_STAGE or core_row(r.ranker, r.oracle):
            means.add((r.judge, r.n, r.top_k, r.ranker, r.oracle, r.budget, r.max_rounds, r.seed, r.collection),
                      r.ndcg10, r.calls, r.rounds)
    return means.families()


def read_family(paths: Sequence[str | Path], keep: Callable[[str, str], bool] = core_row
                ) -> dict[tuple[int, int], Family]:
    """``family_means`` of the rows in ``paths`` (``rows.csv[.gz|.xz]`` written by ``activeprp bench grid``), read
    as columns (pyarrow's CSV reader, numpy sums; 3-4 times faster than Python's csv records, which were 15 times
    faster than ``grid.read_csv``'s ``Row`` objects; docs/testing.md). The sums are those of ``family_means`` bit for
    bit: each key's values are added one by one in file order (``numpy.add.at``), and the keys are the file's
    strings in the order they first appear. ``keep(ranker, oracle)`` says which rows count (default: the core
    ranker x oracle rows; bench variants such as ``parallel_mohajer_depth80`` with ``lambda r, o: True``); it is
    asked once per pair.

    Raises:
        KeyError: a file without one of the columns ``_KEY`` and ``_VALUES`` name (a file with the header alone
            has no rows).
        ValueError: a value that is not a number in an ``_VALUES`` column, an empty one included
            (``pyarrow.ArrowInvalid``).
    """
    means = _Means()
    means.sums.update(_read_sums(paths, keep))
    return means.families()


def _read_sums(paths: Sequence[str | Path], keep: Callable[[str, str], bool]) -> dict[tuple, list[float]]:
    """``_Means.sums`` of the kept rows of ``paths`` (key: the ``_KEY`` strings), in first-appearance order."""
    # numpy and pyarrow only here: the table's choice rules above stay importable without them
    import numpy as np
    import pyarrow as pa
    from pyarrow import csv as pcsv

    ids: dict[tuple[str, ...], int] = {}  # key -> its index in the sums, in the order the keys first appear
    sums = [np.zeros(0) for _ in _VALUES]
    counts = np.zeros(0, dtype=np.int64)
    wanted: dict[tuple[str, str], bool] = {}
    columns = {**dict.fromkeys(_KEY, pa.dictionary(pa.int32(), pa.string())), **dict.fromkeys(_VALUES, pa.float64())}
    read = pcsv.ReadOptions(block_size=_BLOCK_BYTES)
    parse = pcsv.ParseOptions(newlines_in_values=True)  # a quoted line break, as csv.reader reads it (no slower here)
    convert = pcsv.ConvertOptions(include_columns=list(columns), column_types=columns, null_values=[],
                                  strings_can_be_null=False, quoted_strings_can_be_null=False)
    ranker, oracle = _KEY.index("ranker"), _KEY.index("oracle")
    for path in paths:
        with open_rows(path, "r") as f:
            lines = csv.reader(f)
            header, first = next(lines, []), next(lines, None)
        if missing := [c for c in columns if c not in header]:
            raise KeyError(f"{path}: no column {', '.join(missing)} (a rows file of activeprp bench grid has them)")
        if first is None:  # a header alone: pyarrow cannot tell its columns without a line break after it
            continue
        with open_rows(path, "rb") as f:
            for batch in pcsv.open_csv(f, read_options=read, parse_options=parse, convert_options=convert):
                keys, inverse = _batch_keys([batch.column(name) for name in _KEY])
                index = np.full(len(keys), -1, dtype=np.int64)  # -1: a key whose rows do not count
                for u, key in keys.items():  # in the order the keys first appear in the batch
                    pair = (key[ranker], key[oracle])
                    if pair not in wanted:
                        wanted[pair] = pair[0] == FIRST_STAGE or keep(*pair)
                    if wanted[pair]:
                        index[u] = ids.setdefault(key, len(ids))
                rows = index[inverse]
                counted = rows >= 0
                rows = rows[counted]
                grow = len(ids) - len(counts)
                sums = [np.concatenate([s, np.zeros(grow)]) for s in sums]
                counts = np.concatenate([counts, np.zeros(grow, dtype=np.int64)])
                for s, name in zip(sums, _VALUES):  # add.at: one value after the other, in the rows' order
                    np.add.at(s, rows, batch.column(name).to_numpy()[counted])
                np.add.at(counts, rows, 1)
    return {key: [*v, n] for key, *v, n in zip(ids, *(s.tolist() for s in sums), counts.tolist())}


def _batch_keys(columns: list) -> tuple[dict[int, tuple[str, ...]], np.ndarray]:
    """The distinct keys of a batch's key ``columns`` (pyarrow dictionary arrays, one per ``_KEY`` name): ``(u ->
    key tuple of strings, in the order the keys first appear; each row's u, a numpy array)``."""
    import numpy as np

    code, radix = np.zeros(len(columns[0]), dtype=np.int64), 1  # one integer per row: the indices in mixed radix
    indices, dictionaries = [], []
    for column in columns:
        indices.append(column.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        dictionaries.append(column.dictionary.to_pylist())
        if radix * len(dictionaries[-1]) >= 1 << 62:  # renumber the codes so far densely before they overflow
            uniques, code = np.unique(code, return_inverse=True)
            radix = len(uniques)
        code = code * len(dictionaries[-1]) + indices[-1]
        radix *= len(dictionaries[-1])
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    at = first[order]
    keys = zip(*([d[i] for i in idx[at].tolist()] for d, idx in zip(dictionaries, indices)))
    return dict(zip(order.tolist(), keys)), inverse


# --- worst-case regret over a family of judges --------------------------------------------------------------------

def regret(scores: Scores, judge: str, cell: Cell, name: str) -> float:
    """The gap in nDCG points from ``name`` to the best row of ``judge`` at ``cell`` (>= 0)."""
    row = scores[judge][cell]
    return max(row.values()) - row[name]


def worst_regret(scores: Scores, cell: Cell, name: str) -> tuple[float, str]:
    """``(largest regret of name over the judges that measured cell, that judge)``."""
    return max((regret(scores, j, cell, name), j) for j in scores if cell in scores[j])


def budget_key(b: int) -> tuple[bool, int]:
    """Sort key of a budget: no budget (-1) is the largest."""
    return (b < 0, b)


def cells_by_cap(scores: Scores) -> dict[int, list[Cell]]:
    """Cap -> its cells along the budget axis, smallest budget first, no budget last."""
    cells = {c for by_cell in scores.values() for c in by_cell}
    return {m: sorted((c for c in cells if c[1] == m), key=lambda c: budget_key(c[0]))
            for m in sorted({c[1] for c in cells})}


def common_rows(scores: Scores, cell: Cell) -> set[str]:
    """The rows measured at ``cell`` on every judge that measured it."""
    return set.intersection(*(set(scores[j][cell]) for j in scores if cell in scores[j]))


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
    of the following budgets is taken (ties: the smaller largest worst regret over that run, then the name). This
    greedy makes the fewest changes any choice of eligible rows can make. Why the whole run breaks ties: the row
    serves every cell of its run, and two rows that differ by noise at the run's first cell (``budget_depth`` with
    ``adaptive`` or ``randomized`` under a round cap, which ask the same questions unless a judge shows
    positional) were otherwise told apart there alone.

    Raises:
        ValueError: a cell where no row was measured on every judge.
    """
    choice: dict[Cell, str] = {}
    for cells in cells_by_cap(scores).values():
        worst: list[dict[str, float]] = []
        for cell in cells:
            common = common_rows(scores, cell)
            if not common:
                raise ValueError(f"no ranker/oracle row was measured on every judge at budget, cap {cell}")
            worst.append({n: worst_regret(scores, cell, n)[0] for n in common})
        eligible = [{n for n, w in ws.items() if w <= min(ws.values()) + tolerance + 1e-9} for ws in worst]

        prev = None
        for i, cell in enumerate(cells):
            if prev not in eligible[i]:
                prev = min(eligible[i], key=lambda n: (-(run := _run(eligible, n, i)),
                                                       max(w[n] for w in worst[i:i + run]), n))
            choice[cell] = prev
    return choice


def single_row_choice(scores: Scores) -> dict[Cell, str]:
    """One ``ranker/oracle`` per round cap for every budget: the row (measured on every judge at every cell of
    that cap) whose largest worst regret over the cap's cells is smallest (ties: the name). No change along the
    budget axis at all. Raises ValueError where no row was measured everywhere."""
    choice: dict[Cell, str] = {}
    for cells in cells_by_cap(scores).values():
        common = set.intersection(*(common_rows(scores, c) for c in cells))
        if not common:
            raise ValueError(f"no ranker/oracle row was measured on every judge at every budget of cap {cells[0][1]}")
        best = min(sorted(common), key=lambda n: max(worst_regret(scores, c, n)[0] for c in cells))
        choice.update({c: best for c in cells})
    return choice


def fewest_rows_choice(scores: Scores, tolerance: float = TOLERANCE) -> dict[Cell, str]:
    """Per round cap, ``single_row_choice``'s one row when its largest worst regret over the cap's cells is within
    ``tolerance`` of ``regret_choice``'s, else ``regret_choice``'s rows: one ranker that plans for its budget is
    preferred where it serves as well as a bigger table, since rows closer than the tolerance are not told apart
    by the judges' noise and one row serves a judge left out of the build more evenly."""
    table, one = regret_choice(scores, tolerance), single_row_choice(scores)
    choice: dict[Cell, str] = {}
    for cells in cells_by_cap(scores).values():
        spread = [max(worst_regret(scores, c, pick[c])[0] for c in cells) for pick in (table, one)]
        pick = one if spread[1] <= spread[0] + tolerance + 1e-9 else table
        choice.update({c: pick[c] for c in cells})
    return choice


Rule = Callable[[Scores], dict[Cell, str]]
RULES = ("regret", "single", "fewest")
#: The rule of the shipped table (``activeprp bench auto-table``'s default ``--rule``): with a ranker that plans its
#: depth from the budget among the rows, ``regret`` keeps it nearly everywhere, and ``fewest`` is less stable when a
#: judge is left out (docs/judges.md).
RULE = "regret"


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


# --- the table --------------------------------------------------------------------------------------------------

def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _families(grid: Sequence[Row] | dict[tuple[int, int], Family]) -> dict[tuple[int, int], Family]:
    """The settings of ``grid`` (rows, or their ``family_means``) that hold a core row."""
    return {nk: f for nk, f in (grid if isinstance(grid, dict) else family_means(grid)).items() if f.ndcg}


def build_auto_table(grid: Sequence[Row] | dict[tuple[int, int], Family], source: str) -> dict:
    """The ``auto_table.json`` content from grid rows without judges (or their ``family_means``): per (N, K),
    cell and core ranker x oracle, ``values`` = [nDCG %, mean rounds, mean calls]; no ``choice``.

    Raises:
        ValueError: no row of a core ranker and oracle.
    """
    fams = _families(grid)
    if not fams:
        raise ValueError("no grid rows of a core ranker and oracle to build the auto table from")
    names = sorted({n for f in fams.values() for by_cell in f.ndcg.values() for row in by_cell.values() for n in row})
    settings = []
    for (n, k), fam in fams.items():
        cells = []
        for b, m in sorted({c for by_cell in fam.ndcg.values() for c in by_cell}):
            values: list = [None] * len(names)
            for judge in fam.ndcg:
                for name, nd in fam.ndcg[judge].get((b, m), {}).items():
                    values[names.index(name)] = [round(nd, 2), round(fam.rounds[judge][(b, m)][name], 1),
                                                 round(fam.calls[judge][(b, m)][name])]
            cells.append({"budget_per_n": None if b < 0 else round(b / n, 4), "max_rounds": None if m < 0 else m,
                          "values": values})
        settings.append({"n": n, "k": k, "cells": cells})
    return {"source": source, "metric": "nDCG@K (%), mean over collections of per-query means, then seeds; "
            "values: [nDCG, mean rounds, mean calls]", "rows": names, "settings": settings}


def build_regret_table(grid: Sequence[Row] | dict[tuple[int, int], Family], source: str,
                       tolerance: float = TOLERANCE, base: dict | None = None, rule: str = "regret",
                       margin: float = MARGIN) -> dict:
    """The ``auto_table.json`` content built from family grid rows (``Row.judge`` set; or their ``family_means``
    / ``read_family``) by the choice rule ``rule`` (``make_rule``; the shipped table's is ``RULE``) over the judges
    that beat the first stage
    (``Family.kept(margin)``).

    Each cell of the family grid stores its chosen row in ``choice`` (read by ``auto.choose`` for
    ``auto``/``auto``), its worst regret over those judges in ``worst_regret`` and, per row measured on every one
    of them, ``values`` = [mean over the judges of nDCG %, of mean rounds, of mean calls] (used when the ranker or
    the oracle is fixed). ``excluded`` (per setting) names the judges left out. Settings and round caps of
    ``base`` (a table in the same layout) that the family grid did not measure are kept as they are, their values
    moved onto the union of row names.

    Raises:
        ValueError: no core row, or a cell without a row measured on every judge.
    """
    fams = _families(grid)
    if not fams:
        raise ValueError("no grid rows of a core ranker and oracle to build the auto table from")
    names = sorted({n for f in fams.values() for by_cell in f.ndcg.values() for row in by_cell.values() for n in row}
                   | set((base or {}).get("rows", [])))
    settings: dict[tuple[int, int], dict] = {}
    for (n, k), fam in fams.items():
        kept = fam.kept(margin)
        scores = kept.ndcg
        choice = make_rule(rule, tolerance)(scores)
        cells = []
        for cell in sorted(choice, key=lambda c: (budget_key(c[0]), budget_key(c[1]))):
            b, m = cell
            judges = [j for j in scores if cell in scores[j]]
            values: list = [None] * len(names)
            for name in sorted(common_rows(scores, cell)):
                values[names.index(name)] = [round(_mean([kept.ndcg[j][cell][name] for j in judges]), 2),
                                             round(_mean([kept.rounds[j][cell][name] for j in judges]), 1),
                                             round(_mean([kept.calls[j][cell][name] for j in judges]))]
            cells.append({"budget_per_n": None if b < 0 else round(b / n, 4), "max_rounds": None if m < 0 else m,
                          "values": values, "choice": choice[cell],
                          "worst_regret": round(worst_regret(scores, cell, choice[cell])[0], 2)})
        settings[(n, k)] = {"n": n, "k": k, "excluded": fam.excluded(margin), "cells": cells}
    for s in (base or {}).get("settings", []):
        kept_setting = settings.setdefault((s["n"], s["k"]), {"n": s["n"], "k": s["k"], "cells": []})
        caps = {c["max_rounds"] for c in kept_setting["cells"]}  # a family-measured cap: its choices only
        for c in s["cells"]:
            if c["max_rounds"] not in caps:
                moved = dict(zip(base["rows"], c["values"]))
                kept_setting["cells"].append({**c, "values": [moved.get(name) for name in names]})
        kept_setting["cells"].sort(key=lambda c: (c["budget_per_n"] is None, c["budget_per_n"] or 0,
                                                  c["max_rounds"] is None, c["max_rounds"] or 0))
    metric = (f"cells with 'choice': the row chosen by worst-case regret over a family of judges that beat the "
              f"first stage by more than {margin} points ('excluded' per setting: those that do not; rule {rule}, "
              f"tolerance {tolerance} nDCG points, kept along the budget axis); values: [nDCG %, mean rounds, "
              "mean calls], means over those judges (cells without 'choice': the base table's values)")
    return {"source": source, "metric": metric, "rows": names,
            "settings": [settings[nk] for nk in sorted(settings)]}


def table_choice(table: dict, n: int, k: int, cells: Sequence[Cell]) -> dict[Cell, str]:
    """What ``auto``/``auto`` resolves to under ``table`` (``activeprp_core.rankers.auto.choose``) per cell."""
    from activeprp_core.rankers.auto import choose

    def cap(v: int) -> int | None:
        return None if v < 0 else v

    return {c: "/".join(choose(n, k, cap(c[0]), cap(c[1]), table=table)) for c in cells}
