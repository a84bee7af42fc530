"""benchmarks/token_budget.py --out: the table and rows go where they are told, not into the repository's
benchmarks/results/token_budget (a re-run to check the committed table used to overwrite it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from activeprp_core import Candidate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import token_budget  # noqa: E402


def test_out_writes_there_and_leaves_the_committed_files(tmp_path, monkeypatch):
    cands = [Candidate(f"d{i}", f"passage {i} " * 20) for i in range(8)]
    labels = {f"d{i}": i % 3 for i in range(8)}
    monkeypatch.setattr(token_budget, "load", lambda n: [("a query", cands, labels)])
    monkeypatch.setattr(token_budget, "CAPS", (2_000,))
    committed = {p.name: p.read_bytes() for p in token_budget.OUT.iterdir()}
    assert token_budget.main(["--oracles", "bidirectional", "--out", str(tmp_path / "tb")]) == 0
    rows = json.loads((tmp_path / "tb" / "rows.json").read_text())
    assert {r["ranker"] for r in rows} == {r for r in token_budget.RANKERS if r != "auto"}
    assert all(r["queries"] == 1 and r["token_budget"] == 2_000 for r in rows)
    assert any(r["capped"] for r in rows)  # the cap did refuse questions: the table has shares to report
    assert "| ranker | oracle | token_budget |" in (tmp_path / "tb" / "table.md").read_text()
    assert {p.name: p.read_bytes() for p in token_budget.OUT.iterdir()} == committed
