"""Do the committed grids still come out of today's code?

Each committed ``activeprp bench grid`` output (a directory under ``benchmarks/results/`` with ``config.json`` and
``rows.csv.gz`` or ``rows.csv.xz``) is re-run from its own arguments (``config.json``'s ``argv``) on the first
``--queries`` judged queries of each collection, and its rows are compared with the committed rows of the same
queries: every column the committed file has, wall time left out (a query's rows do not depend on the other
queries, so a subset reproduces the full run's rows). ``--rankers`` / ``--oracles`` re-run only those of the grid's
rankers and oracles, so that more queries of a few cells cost little (a grid with none of them is skipped). A
bundled-model grid re-runs from a copy of its committed ``answers.sqlite``. One markdown line per grid: rows
compared, rows that differ, the first difference. Exit status 1 when any row differs.

One query per collection (the default) can miss a change: Table 1's PAC+Bubble rows whose ``ties`` moved (commit
``76deec4``) are at DL19 query positions 14-42 and DL20 3-49. The last command above re-runs the rankers that ask
a pair in both slot orders in one round on more queries (tests/test_bench_rows_reproduce.py does so for Table 1).

Command (from the repository root; the committed grids' figures in docs/ and README quote these rows):

    python benchmarks/rows_reproduce.py --data ../shared/data                 # every committed grid
    python benchmarks/rows_reproduce.py --data ../shared/data benchmarks/results/sim_dl1920
    python benchmarks/rows_reproduce.py --data ../shared/data --queries 8 --rankers pac_bubble --oracles bidirectional
    python benchmarks/rows_reproduce.py benchmarks/results/sim_dl1920 --data ../shared/data --queries 8 \\
        --rankers pac_bubble --oracles bidirectional    # grid directories first: --oracles takes the names after it
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, not an installed copy

from activeprp_bench.grid import VARIANTS, open_rows, read_csv  # noqa: E402
from activeprp_cli import main as activeprp  # noqa: E402
from activeprp_core.settings import SPECS  # noqa: E402

#: ``argv`` options this script sets itself (each takes one value).
REPLACED = {"--out", "--data", "--queries", "--rows-cache", "--cache", "--jobs"}
#: Columns not compared: measured, not computed.
MEASURED = {"wall_s", "wall_time_s"}
KEY = ("judge", "collection", "qid", "ranker", "oracle", "budget", "max_rounds", "seed")
#: ``--rankers`` / ``--oracles`` choices (bench grid's): a grid directory written after them is refused, not taken for
#: a name, which left no grid named and so re-ran every grid.
RANKERS, ORACLES = sorted({*SPECS["ranker"].check.choices, *VARIANTS}), SPECS["oracle"].check.choices


def committed_grids(root: Path = ROOT / "benchmarks" / "results") -> list[Path]:
    """The directories under ``root`` holding a grid's ``config.json`` and rows (not a ``--from-csv`` report)."""
    out = []
    for config in sorted(root.rglob("config.json")):
        c = json.loads(config.read_text())
        if c.get("bench_mode") == "grid" and not c.get("from_csv") and rows_file(config.parent):
            out.append(config.parent)
    return out


def rows_file(grid: Path) -> Path | None:
    return next((p for p in (grid / "rows.csv.xz", grid / "rows.csv.gz") if p.exists()), None)


def rerun_argv(argv: list[str], data: str, queries: int | None, out: Path, jobs: int,
               only: dict[str, list[str]] | None = None) -> list[str]:
    """``argv`` with the options of ``REPLACED`` set for this re-run; a ``--sim-params`` file given by an absolute
    path of another checkout is read from this one (its path from ``benchmarks/``). ``only``: options of many values
    (``{"--rankers": [...]}``) that replace the grid's own."""
    only = only or {}
    kept, it, dropping = [], iter(argv), False
    for a in it:
        dropping = a in only or (dropping and not a.startswith("--"))
        if dropping:
            continue
        if a in REPLACED:
            next(it, None)
        elif a != "--no-progress":
            kept.append(a)
    kept += [x for option, values in only.items() for x in (option, *values)]
    for i, a in enumerate(kept[:-1]):
        if a == "--sim-params" and not Path(kept[i + 1]).exists() and "benchmarks/" in kept[i + 1]:
            kept[i + 1] = str(ROOT / ("benchmarks/" + kept[i + 1].split("benchmarks/", 1)[1]))
    extra = ["--jobs", str(jobs)] if "--judges" in kept or "--judge" in kept else []
    every = [] if queries is None else ["--queries", str(queries)]  # None: every judged query
    return [*kept, "--data", data, *every, "--out", str(out), "--no-progress", *extra]


def rerun(grid: Path, data: str, queries: int | None, jobs: int, only: dict[str, list[str] | None] | None = None
          ) -> list | None:
    """The rows of ``grid`` re-run from its ``config.json`` on ``queries`` judged queries per collection (None:
    every one), reading its committed ``answers.sqlite`` (a copy), only its cells of ``only``'s ``--rankers`` /
    ``--oracles`` when given; None when it has none of them."""
    config = json.loads((grid / "config.json").read_text())
    wanted = {}
    for option, names in (only or {}).items():
        if names is not None:
            wanted[option] = [n for n in names if n in config[option[2:]]]  # the grid's own, as parsed
            if not wanted[option]:
                return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grid"
        out.mkdir()
        if (grid / "answers.sqlite").exists():
            shutil.copy(grid / "answers.sqlite", out / "answers.sqlite")
        with contextlib.redirect_stdout(io.StringIO()):
            status = activeprp(rerun_argv(config["argv"], data, queries, out, jobs, wanted))
        if status:
            raise SystemExit(f"{grid}: the re-run exited with {status}")
        return read_csv(rows_file(out))


def grid_queries(grid: Path) -> int | None:
    """The ``--queries`` the grid was run with (None: every judged query)."""
    argv = json.loads((grid / "config.json").read_text())["argv"]
    return int(argv[argv.index("--queries") + 1]) if "--queries" in argv else None


def compare(grid: Path, data: str, queries: int, jobs: int, rankers: list[str] | None = None,
            oracles: list[str] | None = None) -> tuple[int, int, str]:
    """``(rows compared, rows that differ, the first difference)`` of ``grid`` re-run on ``queries`` queries, only
    its cells of ``rankers`` and ``oracles`` when given (``(0, 0, "")`` when it has none)."""
    fresh = rerun(grid, data, queries, jobs, {"--rankers": rankers, "--oracles": oracles})
    if fresh is None:
        return 0, 0, ""
    with open_rows(rows_file(grid), "r") as f:
        header = f.readline().strip().split(",")
    columns = [c for c in header if c not in MEASURED and c not in KEY]
    key = [c for c in KEY if c in header]
    queried = {(r.collection, r.qid) for r in fresh}
    old = {tuple(getattr(r, c) for c in key): r for r in read_csv(rows_file(grid)) if (r.collection, r.qid) in queried}
    differ, first = 0, ""
    for r in fresh:
        k = tuple(getattr(r, c) for c in key)
        was = old.get(k)
        diffs = ["missing"] if was is None else [
            f"{c} {getattr(was, c)} -> {getattr(r, c)}" for c in columns
            if (abs(getattr(was, c) - getattr(r, c)) > 1e-9 if c == "ndcg10" else getattr(was, c) != getattr(r, c))]
        if diffs:
            differ += 1
            first = first or f"{dict(zip(key, k))}: {'; '.join(diffs)}"
    return len(fresh), differ, first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grids", nargs="*", type=Path, help="grid directories (default: every committed grid)")
    ap.add_argument("--data", required=True, help="the collections (../shared/data)")
    ap.add_argument("--queries", type=int, default=1, help="judged queries per collection to re-run (default 1)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for a family grid (default 2)")
    ap.add_argument("--rankers", nargs="+", metavar="NAME", choices=RANKERS, help="re-run only these rankers")
    ap.add_argument("--oracles", nargs="+", metavar="NAME", choices=ORACLES, help="re-run only these oracles")
    args = ap.parse_args(argv)
    stale = 0
    print("| grid | rows compared | rows that differ | first difference |\n|---|---:|---:|---|")
    for grid in args.grids or committed_grids():
        if not (grid / "config.json").is_file():
            raise SystemExit(f"{grid}: no config.json, so not a bench grid output (pass the directory that holds "
                             "config.json and rows.csv.gz or rows.csv.xz)")
        n, differ, first = compare(grid.resolve(), str(Path(args.data).resolve()), args.queries, args.jobs,
                                   args.rankers, args.oracles)
        stale += differ > 0
        print(f"| {grid.resolve().relative_to(ROOT)} | {n} | {differ} | {first or '-'} |", flush=True)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
