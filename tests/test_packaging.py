"""What `pip install activeprp` brings: no dependency, typed, no framework or evaluation import on the core path."""

from __future__ import annotations

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


def test_core_api_and_cli_parser_import_no_optional_dependency():
    code = ("import sys, activeprp_core, activeprp_core.comparators, activeprp_core.cli as cli; cli.build_parser(); "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
