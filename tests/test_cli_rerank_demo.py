"""``activeprp rerank`` and ``activeprp demo`` end to end (in-process; the bundled model loads once per process)."""

from __future__ import annotations

import json
import re

import pytest

from activeprp_core.cli import main
from activeprp_core.cli.demo import load_demo_queries
from activeprp_core.cli.rerank import read_candidates


@pytest.fixture
def candidates_file(tmp_path):
    row = load_demo_queries()[0]
    path = tmp_path / "cands.jsonl"
    lines = [json.dumps({"docid": h["docid"], "content": h["content"], "label": row["qrels"].get(h["docid"], 0)})
             for h in row["hits"][:6]]
    path.write_text("\n".join(lines) + "\n")
    return row, path


def test_read_candidates_keeps_extra_fields_and_rejects_bad_lines(tmp_path, candidates_file):
    row, path = candidates_file
    cands = read_candidates(str(path))
    assert [c.id for c in cands] == [h["docid"] for h in row["hits"][:6]]
    assert cands[0].metadata == {"label": row["qrels"].get(cands[0].id, 0)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "text": "x"}\n{"title": "no id"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_candidates(str(bad))


def test_rerank_simulated_prints_top_k_by_label(candidates_file, capsys):
    row, path = candidates_file
    assert main(["rerank", "--query", row["query"], "--candidates", str(path), "--comparator", "simulated",
                 "--ranker", "allpairs", "--budget", "100", "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    ranked = [line.split()[1] for line in out[1:4]]
    grades = sorted((row["qrels"].get(h["docid"], 0) for h in row["hits"][:6]), reverse=True)
    assert [row["qrels"].get(d, 0) for d in ranked] == grades[:3]
    stats = out[-1]
    assert stats.startswith("stats: ") and "calls=15" in stats and "budget=100" in stats


def test_rerank_bundled_json_output(candidates_file, capsys):
    row, path = candidates_file
    assert main(["rerank", "--query", row["query"], "--candidates", str(path), "--budget", "5", "--top-k", "2",
                 "--passage-tokens", "32", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in out["top"]] == [1, 2]
    assert out["top"][0]["score"] > out["top"][1]["score"]
    assert out["stats"]["calls"] <= 5 and out["stats"]["failed_calls"] == 0 and out["stats"]["prompt_tokens"] > 0


def test_demo_prints_settings_and_ndcg(capsys):
    assert main(["demo", "--queries", "1", "--candidates", "4", "--budget", "4", "--passage-tokens", "32",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 TREC DL 2019 queries x 4 BM25 candidates, passages cut to 32 tokens" in out and "budget=4" in out
    mean = re.search(r"mean NDCG@10: BM25 ([0-9.]+) -> reranked ([0-9.]+)", out)
    assert mean and all(0.0 <= float(v) <= 1.0 for v in mean.groups())
    row = next(line for line in out.splitlines() if line.strip().startswith(load_demo_queries()[0]["qid"]))
    calls = int(row.split()[-3])
    assert 0 < calls <= 4


def test_bundled_demo_data_is_small_and_judged():
    rows = load_demo_queries()
    assert len(rows) == 10 and all(len(r["hits"]) == 30 and r["qrels"] for r in rows)
    assert all(any(g > 0 for g in r["qrels"].values()) for r in rows)


def test_rerank_reports_an_unbuildable_comparator(candidates_file, capsys, monkeypatch):
    row, path = candidates_file
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["rerank", "--query", "q", "--candidates", str(path), "--comparator", "openai", "--model", "m"])
    assert code == 2 and "OPENAI_API_KEY" in capsys.readouterr().err

