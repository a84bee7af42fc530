"""The bench grid over a family of judges, run in worker processes and cached on disk.

One *unit* is (judge, ranker, oracle): every budget, round cap and seed of that row over the collections. A
unit's rows are stored as JSON in ``CACHE/<judge>/<ranker>__<oracle>.json`` keyed by the cell and the setting
(collections, queries, depth, top_k, judge seed, and ``data_digest`` of the collections as loaded: a changed qrels,
query or candidate is another setting), so a re-run computes only the cells it has not stored and
``refresh`` names the judges and oracles whose stored rows are stale (e.g. after the oracles changed how they
read soft answers). Every judge of ``activeprp_bench.judges`` is a pure function of (seed, query, ordered pair),
so a unit's rows do not depend on which process ran it or in which order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

from .grid import Row, run_grid

_COLLS: dict[tuple, list] = {}


def _collections(data: str, names: tuple[str, ...], queries: int | None, depth: int | None) -> list:
    from .datasets import load_named

    key = (data, names, queries, depth)
    if key not in _COLLS:
        _COLLS[key] = [load_named(n, data).subset(queries, depth) for n in names]
    return _COLLS[key]


def data_digest(collections: Sequence) -> str:
    """A hex digest of what the grid reads from ``collections``: each one's name and, per judged query, its id,
    text, candidates (ids and texts, in order) and qrels."""
    h = hashlib.blake2b(digest_size=16)
    for c in collections:
        h.update(json.dumps([c.name, [[q, c.queries[q], [[d.id, d.text] for d in c.candidates[q]],
                                       sorted(c.qrels[q].items())] for q in c.qids]]).encode())
    return h.hexdigest()


def _cell_key(budget: int | None, cap: int | None, seed: int) -> str:
    return f"{-1 if budget is None else budget}/{-1 if cap is None else cap}/{seed}"


def _run_unit(job: dict) -> list[dict]:
    """Compute the missing cells of one unit and store the unit's file; returns its rows as dicts."""
    from .judges import comparator_for

    path, setting = Path(job["path"]), job["setting"]
    stored = json.loads(path.read_text(encoding="utf-8")) if path.is_file() and not job["refresh"] else {}
    if stored.get("setting") != setting:
        stored = {"setting": setting, "cells": {}}
    colls = _collections(job["data"], tuple(setting["collections"]), setting["queries"], setting["depth"])
    for budget, cap, seed in job["cells"]:
        key = _cell_key(budget, cap, seed)
        if key not in stored["cells"]:
            rows = run_grid(colls, comparator_for(job["judge"], setting["judge_seed"]), [job["ranker"]],
                            [job["oracle"]], [budget], {job["oracle"]: [seed]}, setting["top_k"], progress=False,
                            max_rounds=[cap], judge=job["label"])
            stored["cells"][key] = [asdict(r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, separators=(",", ":")), encoding="utf-8")
    return [r for budget, cap, seed in job["cells"] for r in stored["cells"][_cell_key(budget, cap, seed)]]


def run_family_grid(data: str, collections: Sequence[str], judges: Sequence[str], rankers: Sequence[str],
                    oracles: Sequence[str], budgets: Sequence[int | None], caps: Sequence[int | None],
                    seeds: dict[str, Sequence[int]], *, top_k: int = 10, queries: int | None = None,
                    depth: int | None = None, judge_seed: int = 0, cache: str | Path, jobs: int = 1,
                    refresh: Sequence[str] = (), tag: str = "") -> list[Row]:
    """``run_grid`` for every judge x ranker x oracle, in ``jobs`` processes, rows cached under ``cache``.

    Args:
        data: the data root (``load_named``). collections, queries, depth: as ``activeprp bench grid``.
        seeds: oracle seeds per oracle name (oracles not listed take ``seeds["randomized"]``).
        refresh: judge or oracle names whose stored rows are recomputed.
        tag: when set, every row's judge is labelled ``NAME@tag`` (and cached under that label): the same judge on
            other collections (e.g. ``calibrated@cranfield``) is then another member of the family.
    Returns:
        The rows in judge, ranker, oracle, budget, cap, seed order (the order of ``run_grid`` per unit).
    Raises:
        ValueError: ``jobs`` < 1.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    setting = {"collections": list(collections), "queries": queries, "depth": depth, "top_k": top_k,
               "judge_seed": judge_seed,
               "data": data_digest(_collections(str(data), tuple(collections), queries, depth))}
    label = (lambda judge: f"{judge}@{tag}") if tag else (lambda judge: judge)
    units = [{"path": str(Path(cache) / label(judge) / f"{ranker}__{oracle}.json"), "setting": setting,
              "data": str(data), "judge": judge, "label": label(judge), "ranker": ranker, "oracle": oracle,
              "refresh": judge in refresh or oracle in refresh,
              "cells": [(b, m, s) for b in budgets for m in caps for s in seeds.get(oracle, seeds["randomized"])]}
             for judge in judges for ranker in rankers for oracle in oracles]
    if jobs == 1:
        done = [_run_unit(u) for u in units]
    else:
        with get_context("fork").Pool(jobs) as pool:
            done = pool.map(_run_unit, units, chunksize=1)
    return [Row(**r) for rows in done for r in rows]


__all__ = ["data_digest", "run_family_grid"]
