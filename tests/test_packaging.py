"""What `pip install activeprp` brings: no dependency, typed, no framework or evaluation import on the core path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("ir_measures", "pytrec_eval", "tqdm", "numpy", "torch", "transformers", "openai", "tenacity", "ray",
         "langchain_core", "llama_index", "matplotlib", "bm25s")


def test_the_base_install_has_no_dependency_and_ships_py_typed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == []
    extras = project["project"]["optional-dependencies"]
    assert any(d.startswith("ir-measures") for d in extras["eval"]) and "activeprp[eval]" in extras["bench"]
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["activeprp_core"]
    assert (ROOT / "activeprp_core" / "py.typed").is_file() and (ROOT / "activeprp_integrations" / "py.typed").is_file()


def test_core_and_its_commands_load_no_bench_integrations_or_optional_module(tmp_path):
    """``import activeprp_core`` (its comparators and CLI included) and the core commands ``rerank``,
    ``rerank-run`` and ``demo`` (simulated judge) load no module of ``activeprp_bench`` or
    ``activeprp_integrations`` and no optional dependency (``rerank-run --qrels`` and ``demo`` print nDCG@10: they
    may load the eval extra, ir-measures and tqdm, and nothing else); the whole parser, plugins included, loads no
    optional dependency either."""
    (tmp_path / "cands.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": "t", "label": i % 3}) + "\n"
                                                  for i in range(6)))
    (tmp_path / "run.txt").write_text("".join(f"q1 Q0 d{i} {i + 1} {9 - i} bm25\n" for i in range(6)))
    (tmp_path / "queries.tsv").write_text("q1\tthe query\n")
    (tmp_path / "corpus.tsv").write_text("".join(f"d{i}\tpassage {i}\n" for i in range(6)))
    (tmp_path / "qrels.txt").write_text("q1 0 d3 2\nq1 0 d5 1\n")
    ours = ("activeprp_bench", "activeprp_integrations")
    extras = ("ir_measures", "pytrec_eval", "tqdm", "numpy")  # the eval extra (ir-measures needs numpy)
    commands = {
        "rerank": ["rerank", "--query", "q", "--candidates", "cands.jsonl", "--comparator", "simulated"],
        "rerank-run": ["rerank-run", "--run", "run.txt", "--queries", "queries.tsv", "--corpus", "corpus.tsv",
                       "--qrels", "qrels.txt", "--comparator", "simulated", "--out", "out.run", "--no-progress"],
        "demo": ["demo", "--comparator", "simulated", "--queries", "1", "--candidates", "5", "--no-progress"],
    }
    code = ("import json, sys\n"
            "def loaded(): return sorted({m.split('.')[0] for m in sys.modules})\n"
            "import activeprp_core, activeprp_core.comparators, activeprp_core.cli as cli\n"
            "found = {}\n"
            "if sys.argv[1] == 'parser':\n    cli.build_parser()\n    found['parser'] = loaded()\n"
            "else:\n    cli.build_parser('rerank')\n    found['import'] = loaded()\n"
            f"    for name, argv in {commands!r}.items():\n"
            "        assert cli.main(argv) == 0, name\n        found[name] = loaded()\n"
            "open(sys.argv[1] + '.json', 'w').write(json.dumps(found))\n")
    found = {}
    for run in ("core", "parser"):
        subprocess.run([sys.executable, "-c", code, run], capture_output=True, text=True, check=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        found.update(json.loads((tmp_path / f"{run}.json").read_text()))
    for step, modules in found.items():
        allowed = extras if step in ("rerank-run", "demo") else ()
        banned = {*ours, *HEAVY} - {*allowed} if step != "parser" else set(HEAVY)
        assert sorted(banned & set(modules)) == [], step
    assert {"ir_measures", "tqdm"} <= set(found["demo"])  # the allowance above is needed, not vacuous
    assert set(found) == {"import", *commands, "parser"}
