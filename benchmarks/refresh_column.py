"""Refresh one column of a committed grid's rows after the code changed what it counts, and nothing else.

The grid is re-run from its own arguments (``config.json``'s ``argv``, its ``--queries`` included) with its
committed answer cache (``rows_reproduce.rerun``), only its cells of ``--rankers`` and ``--oracles``. Each re-run
row must equal its committed row in every column but ``--column`` and the wall time; then that column is written
into the committed rows file, and the file's other bytes stay as they were. Any other difference stops the script
and changes nothing: that is a change of behaviour, to be re-run and explained, not refreshed.

Command (from the repository root), as used for ``ties`` after commit ``76deec4`` (rows_reproduce.md):

    python benchmarks/refresh_column.py benchmarks/results/sim_dl1920 --data ../shared/data --column ties \\
        --rankers pac_bubble --oracles bidirectional
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from rows_reproduce import KEY, MEASURED, ORACLES, RANKERS, grid_queries, rerun, rows_file

from activeprp_bench.grid import Row, open_rows


def refresh(path: Path, fresh: Sequence[Row], column: str) -> int:
    """Write ``column`` of the ``fresh`` rows into the rows file ``path`` (its other cells and rows kept as they
    are); returns how many rows changed.

    Raises:
        SystemExit: a fresh row not in the file, or one that differs from it in another column (nothing written).
    """
    with open_rows(path, "r") as f:
        records = list(csv.reader(f))
    header, body = records[0], records[1:]
    key = [header.index(c) for c in KEY if c in header]
    at = header.index(column)
    checked = [i for i, c in enumerate(header) if c not in MEASURED and c != column]
    index = {tuple(r[i] for i in key): r for r in body}
    changed = 0
    for row in fresh:
        new = [str(getattr(row, c)) for c in header]
        was = index.get(tuple(new[i] for i in key))
        if was is None:
            raise SystemExit(f"{path}: a re-run row is not among the committed rows: {new}")
        other = [header[i] for i in checked if was[i] != new[i]]
        if other:
            raise SystemExit(f"{path}: a re-run row differs in {other}, not only in {column}: "
                             f"{dict(zip(header, was))} -> {dict(zip(header, new))}")
        changed += was[at] != new[at]
        was[at] = new[at]
    if changed:
        with open_rows(path, "w") as f:
            csv.writer(f).writerows(records)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grids", nargs="+", type=Path, help="grid directories")
    ap.add_argument("--data", required=True, help="the collections (../shared/data)")
    ap.add_argument("--column", required=True, help="the column to refresh (e.g. ties)")
    ap.add_argument("--rankers", nargs="+", required=True, metavar="NAME", choices=RANKERS,
                    help="the cells' rankers")
    ap.add_argument("--oracles", nargs="+", required=True, metavar="NAME", choices=ORACLES,
                    help="the cells' oracles")
    args = ap.parse_args(argv)
    for grid in args.grids:
        fresh = rerun(grid.resolve(), str(Path(args.data).resolve()), grid_queries(grid), 1,
                      {"--rankers": args.rankers, "--oracles": args.oracles})
        if fresh is None:
            print(f"{grid}: none of these cells", flush=True)
            continue
        print(f"{grid}: {refresh(rows_file(grid), fresh, args.column)} of {len(fresh)} re-run rows changed "
              f"{args.column}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
