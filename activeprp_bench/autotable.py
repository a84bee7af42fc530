"""The table behind ``ranker="auto"`` / ``oracle="auto"`` (``activeprp_core.rankers.auto``), built from
benchmark grid rows: per (N, K) setting, budget/N and round cap, the mean nDCG@K, rounds and calls of every
core ranker x oracle."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

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
