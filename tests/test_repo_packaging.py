"""What `pip install activeprp` brings: no dependency and typed packages (imports: test_repo_import_hygiene.py)."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_base_install_has_no_dependency_and_ships_py_typed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == []
    extras = project["project"]["optional-dependencies"]
    assert any(d.startswith("ir-measures") for d in extras["eval"]) and "activeprp[eval]" in extras["bench"]
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["activeprp_core"]
    assert (ROOT / "activeprp_core" / "py.typed").is_file() and (ROOT / "activeprp_integrations" / "py.typed").is_file()
