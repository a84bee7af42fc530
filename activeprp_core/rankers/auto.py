"""``auto``: the ranker and oracle chosen from measured data for (N, K, budget, max_rounds).

The table ``activeprp_core/data/auto_table.json`` is written by ``activeprp bench auto-table`` from benchmark
grids (rows of every ranker x oracle x budget x round cap); the command that rebuilds it from the rows in the
repository is the file's ``source`` (docs/judges.md). Its layout::

    {"source": str, "metric": str, "rows": ["ranker/oracle", ...],
     "settings": [{"n": N, "k": K, "excluded": [judge, ...] (optional),
                   "cells": [{"budget_per_n": float | null, "max_rounds": int | null,
                              "values": [[ndcg_percent, mean_rounds, mean_calls] | null, ...],
                              "choice": "ranker/oracle" (optional), "worst_regret": float (optional)}]}]}

(``values[i]`` belongs to ``rows[i]``; null where the grid did not run that row. ``choice``, where present, is
the row chosen by worst-case regret over a family of judges that beat the first stage (``excluded``: those that
do not); it wins whenever it fits the ranker/oracle asked for.) Nothing in this module is a hand-set threshold.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

from ..oracles import get_oracle
from .base import RankContext, Ranker, Schedule

AUTO = "auto"
TABLE = "auto_table.json"


def __getattr__(name: str) -> Any:
    """``ONLINE_MAX_ROUNDS``: the round cap of the online preset, ``activeprp_core.settings.ONLINE.max_rounds``
    (read from there: the settings import this module)."""
    if name == "ONLINE_MAX_ROUNDS":
        from ..settings import ONLINE

        return ONLINE.max_rounds
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def load_table() -> dict[str, Any]:
    """The table shipped in ``activeprp_core/data`` (read once)."""
    text = resources.files("activeprp_core").joinpath("data", TABLE).read_text(encoding="utf-8")
    return json.loads(text)


def check_table(table: Any) -> dict[str, Any]:
    """``table`` unchanged when it has the layout above as far as ``choose`` and ``activeprp bench auto-table``
    read it: ``rows`` of ``ranker/oracle`` names; ``settings``, at least one, each with ``n`` and ``k`` (integers
    >= 1) and at least one cell; each cell's ``budget_per_n`` (a number >= 0 or null), ``max_rounds`` (an integer
    >= 0 or null), ``values`` (one per row: null or [nDCG %, rounds, calls], at least one not null) and, where
    present, ``choice`` (a string). For a table read from a user's file.

    Raises:
        ValueError: the first place that is wrong, e.g. ``settings[0].cells[2].values: expected 27 entries (one
            per row), got 3``.
    """
    def need(ok: bool, where: str, expected: str, got: Any) -> None:
        if not ok:
            shown = repr(got)
            raise ValueError(f"{where}: expected {expected}, got {shown if len(shown) <= 60 else shown[:57] + '...'}")

    def number(x: Any, integer: bool = False) -> bool:
        return isinstance(x, int if integer else (int, float)) and not isinstance(x, bool) and x >= 0

    need(isinstance(table, dict), "the table", "a JSON object with 'rows' and 'settings'", table)
    rows, settings = table.get("rows"), table.get("settings")
    need(isinstance(rows, list), "rows", "a list of 'ranker/oracle' names", rows)
    for i, row in enumerate(rows):
        need(isinstance(row, str) and len(row.split("/")) == 2 and all(row.split("/")), f"rows[{i}]",
             "'ranker/oracle'", row)
    need(isinstance(settings, list) and settings != [], "settings", "a list of at least one setting", settings)
    for i, setting in enumerate(settings):
        at = f"settings[{i}]"
        need(isinstance(setting, dict), at, "an object with 'n', 'k' and 'cells'", setting)
        for key in ("n", "k"):
            need(number(setting.get(key), integer=True) and setting[key] >= 1, f"{at}.{key}", "an integer >= 1",
                 setting.get(key))
        cells = setting.get("cells")
        need(isinstance(cells, list) and cells != [], f"{at}.cells", "a list of at least one cell", cells)
        for j, cell in enumerate(cells):
            where = f"{at}.cells[{j}]"
            need(isinstance(cell, dict), where, "an object with 'budget_per_n', 'max_rounds' and 'values'", cell)
            per_n, cap, values = cell.get("budget_per_n"), cell.get("max_rounds"), cell.get("values")
            need(per_n is None or number(per_n), f"{where}.budget_per_n", "a number >= 0 or null", per_n)
            need(cap is None or number(cap, integer=True), f"{where}.max_rounds", "an integer >= 0 or null", cap)
            need(isinstance(values, list) and len(values) == len(rows), f"{where}.values",
                 f"a list of {len(rows)} entries (one per row)", values)
            for v, value in enumerate(values):
                need(value is None or (isinstance(value, list) and len(value) == 3 and all(map(number, value))),
                     f"{where}.values[{v}]", "null or [nDCG %, rounds, calls]", value)
            need(any(value is not None for value in values), f"{where}.values", "at least one not null", values)
            need(isinstance(cell.get("choice", ""), str), f"{where}.choice", "a 'ranker/oracle' name",
                 cell.get("choice"))
    return table


def _name(x: Any) -> str:
    return x if isinstance(x, str) else getattr(x, "name", type(x).__name__)


def _floor(values: list, wanted: float | None) -> Any:
    """The largest of ``values`` <= ``wanted`` (None = unlimited, largest of all; below all: the smallest).
    ``values`` may hold None for "no cap", which counts as larger than any number."""
    finite = sorted(v for v in values if v is not None)
    if wanted is None:
        return None if None in values else finite[-1]
    below = [v for v in finite if v <= wanted]
    return below[-1] if below else (finite[0] if finite else None)


def choose(n: int, k: int, budget: int | None, max_rounds: int | None, ranker: Any = AUTO, oracle: Any = AUTO,
           table: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """Resolve ``"auto"`` ranker and/or oracle for one query from the measured table.

    Args:
        n: candidates (N); k: top-K; budget: the call cap (None = unlimited); max_rounds: the round cap (None =
            unlimited).
        ranker, oracle: ``"auto"`` (for the ranker also an ``Auto()`` instance), a name or an instance; a value
            other than ``"auto"`` is returned unchanged and restricts the choice of the other one (e.g. the best
            ranker for ``oracle="bidirectional"``).
        table: a table in the layout above (default: the shipped one).

    Lookup: the (N, K) setting nearest in log scale; the largest measured round cap <= max_rounds, then among
    that cap's cells the largest measured budget/N <= budget/N (each the smallest when below all; unlimited maps
    to the unlimited column); then the cell's ``choice`` when it fits, else the row with the highest nDCG, ties
    to fewer rounds, then fewer calls. An oracle outside the table (e.g. ``single`` or an ``Oracle`` instance) is
    matched by its calls per pair: one call reads the ``randomized`` rows, two the ``bidirectional`` ones; a
    ranker outside the table reads every row.

    Returns:
        ``(ranker, oracle)``: names (or the instances passed in), never ``"auto"``.
    """
    if isinstance(ranker, Ranker) and ranker.name == AUTO:  # an ``Auto()`` instance: resolved as the name is
        ranker = AUTO
    if ranker != AUTO and oracle != AUTO:
        return ranker, oracle
    table = table or load_table()
    near = min(table["settings"], key=lambda s: abs(math.log(max(n, 1) / s["n"])) + abs(math.log(max(k, 1) / s["k"])))
    cells = near["cells"]
    ratio = None if budget is None else budget / max(n, 1)
    cap = _floor([c["max_rounds"] for c in cells], max_rounds)
    per_n = _floor([c["budget_per_n"] for c in cells if c["max_rounds"] == cap], ratio)
    cell = next(c for c in cells if c["budget_per_n"] == per_n and c["max_rounds"] == cap)
    values = cell["values"]
    entries = [(key.split("/"), value) for key, value in zip(table["rows"], values) if value is not None]
    if ranker != AUTO and any(r == _name(ranker) for (r, _), _ in entries):
        entries = [e for e in entries if e[0][0] == _name(ranker)]
    if oracle != AUTO:
        name = _name(oracle)
        if not any(o == name for (_, o), _ in entries):
            name = "bidirectional" if get_oracle(oracle).calls_per_pair > 1 else "randomized"
        entries = [e for e in entries if e[0][1] == name]
    choice = cell.get("choice") or ""
    chosen = ([e for e in entries if "/".join(e[0]) == choice]  # the stored choice, else its ranker's row
              or [e for e in entries if e[0][0] == choice.split("/")[0]])
    (best_ranker, best_oracle), _ = max(chosen or entries, key=lambda e: (e[1][0], -e[1][1], -e[1][2]))
    return (best_ranker if ranker == AUTO else ranker), (best_oracle if oracle == AUTO else oracle)


class Auto(Ranker):
    """The ranker ``choose`` picks for this query's N, K, budget and round cap, given the oracle's calls per
    pair. The engine resolves ``ranker="auto"`` and an ``Auto()`` instance itself (``choose``), so that
    ``RerankResult.ranker`` names the choice and the chosen ranker's ``plans_rounds_for`` holds; ``schedule`` serves
    a caller that drives the ranker without the engine."""

    name = AUTO

    def choose(self, ctx: RankContext) -> Ranker:
        """The ranker ``choose`` picks for ``ctx`` (N, K, the caps left at the start, the oracle's calls per pair)."""
        from . import get_ranker

        oracle = "bidirectional" if ctx.calls_per_pair > 1 else "randomized"
        return get_ranker(choose(ctx.n, ctx.k, ctx.caps.calls_left, ctx.caps.rounds_left, AUTO, oracle)[0])

    def plans_rounds_for(self, ctx: RankContext) -> bool:
        return self.choose(ctx).plans_rounds_for(ctx)

    def planned_rounds(self, ctx: RankContext) -> int | None:
        return self.choose(ctx).planned_rounds(ctx)

    def schedule(self, ctx: RankContext) -> Schedule:
        return (yield from self.choose(ctx).schedule(ctx))
