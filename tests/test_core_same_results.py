"""Same results (issue 18): explicit rankers and oracles give the orders, calls and rounds recorded before the
refactor on a subset of the DL19 + DL20 grid (the full grid: ``python benchmarks/same_results.py``)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "same_results.py"
spec = importlib.util.spec_from_file_location("same_results", SCRIPT)
same_results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_results)


def test_subset_of_the_grid_matches_the_fixture():
    fixture = same_results.read_fixture()
    queries = fixture["queries"]
    names = sorted(queries)[::24]  # 5 queries of both collections
    got = same_results.compute(queries, names)
    assert len(got) == len(same_results.cells()) == 162
    assert same_results.differences(fixture["results"], got) == []
