"""Import hygiene: the core imports no framework and nothing from the packages above it.

One fresh interpreter imports every module of ``activeprp_core`` (a module whose optional dependency is not
installed here is passed over), builds the CLI parser, and imports the framework-free parts of
``activeprp_integrations``; then it lists which frameworks got loaded. The floors are read from the source: no
``import`` statement anywhere in ``activeprp_core`` (lazy ones inside functions included) names a package above
it (``activeprp_cli``, ``activeprp_integrations``, ``activeprp_bench``), and none in ``activeprp_cli`` names the
plugins above the command line (``activeprp_integrations``, ``activeprp_bench``: entry points find them). The one
exception is ``SCRIPTS``: ``activeprp_core/__main__.py`` runs the command line for ``python -m activeprp_core``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("langchain", "langchain_core", "langchain_classic", "langchain_openai", "llama_index", "ray", "torch",
              "transformers", "accelerate", "gguf", "openai", "tenacity", "cohere", "fastapi", "starlette", "uvicorn",
              "prometheus_client", "matplotlib", "pandas", "pyarrow", "bm25s")
# What `pip install activeprp` (no extra) must run without: the core API and the CLI parser load none of these.
OPTIONAL = ("numpy", "tqdm", "ir_measures", "pytrec_eval")
#: package -> the packages above it, which it must never import
ABOVE = {"activeprp_core": ("activeprp_cli", "activeprp_integrations", "activeprp_bench"),
         "activeprp_cli": ("activeprp_integrations", "activeprp_bench")}
#: scripts run with ``python -m``, never imported: ``python -m activeprp_core`` is the command line's spelling from
#: before it left the core, so it hands over to ``activeprp_cli``
SCRIPTS = (Path("activeprp_core/__main__.py"),)

SCRIPT = """
import importlib, json, pkgutil, sys
def loaded():
    return sorted({m.split(".")[0] for m in sys.modules} & set(WATCHED))
import activeprp_core, activeprp_core.comparators, activeprp_cli as cli
cli.build_parser()
api = loaded()
passed_over = []
for info in [*pkgutil.walk_packages(activeprp_core.__path__, "activeprp_core."),
             *pkgutil.walk_packages(cli.__path__, "activeprp_cli.")]:
    if not info.name.endswith("__main__"):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as err:
            passed_over.append([info.name, err.name])
core = loaded()
import activeprp_integrations, activeprp_integrations._common, activeprp_integrations.ray
print(json.dumps({"api": api, "core": core, "integrations": loaded(), "passed_over": passed_over}))
"""


def test_importing_the_core_loads_no_framework():
    watched = FRAMEWORKS + OPTIONAL
    out = subprocess.run([sys.executable, "-c", f"WATCHED = {watched!r}\n{SCRIPT}"], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=120).stdout
    got = json.loads(out)
    assert got["api"] == [], "activeprp_core, its comparators package and the CLI parser import optional packages"
    assert [m for m in got["core"] if m in FRAMEWORKS] == [], "a module of activeprp_core or _cli imports a framework"
    assert [m for m in got["integrations"] if m in FRAMEWORKS] == [], \
        "activeprp_integrations, ._common or .ray imports its framework at import time (import it lazily)"
    assert not [name for name, missing in got["passed_over"] if missing.startswith("activeprp")], got["passed_over"]


def _imports_above(package: str, root: Path = ROOT) -> list[str]:
    """``"path:line imports name"`` for every import statement under ``root/package`` that names a package above
    it (``ABOVE``)."""
    found = []
    for path in sorted(p for p in (root / package).rglob("*.py") if p.relative_to(root) not in SCRIPTS):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            found += [f"{path.relative_to(root)}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] in ABOVE[package]]
    return found


def test_the_scan_finds_an_import_above_the_floor(tmp_path):
    """The source scan below is not vacuous: it reports a lazy import inside a function."""
    pkg = tmp_path / "activeprp_core" / "comparators"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("def f():\n    import os\n    from activeprp_cli.trecfiles import read_run\n")
    assert _imports_above("activeprp_core", tmp_path) == [
        f"{Path('activeprp_core/comparators/x.py')}:3 imports activeprp_cli.trecfiles"]


def test_no_package_imports_one_above_it():
    assert {package: _imports_above(package) for package in ABOVE} == {package: [] for package in ABOVE}


def test_python_m_activeprp_core_runs_the_command_line():
    """The exception in ``SCRIPTS`` is what it says: ``python -m activeprp_core`` is the ``activeprp`` command."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)

    old, new = run("activeprp_core", "--help"), run("activeprp_cli", "--help")
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout and "usage: activeprp" in old.stdout
    bad = run("activeprp_core", "no-such-command")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def _module_imports(package: str = "activeprp_core", root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: the modules of package it imports at module level}`` (imports inside functions and under
    ``if TYPE_CHECKING`` are not run at import time and are left out)."""
    paths = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in paths and m != name and not name.startswith(m + ".")
                       and not m.startswith(name + ".")}
    return graph


def test_no_import_circle_inside_the_core():
    graph, cycles = _module_imports(), []

    def visit(module: str, path: list[str]) -> None:
        for nxt in sorted(graph[module]):
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, [*path, nxt])

    seen: set[str] = set()
    for module in sorted(graph):
        if module not in seen:
            seen.add(module)
            visit(module, [module])
    assert "activeprp_core.ledger" in graph["activeprp_core.reranking"]  # the scan reads relative imports
    assert cycles == []


def _floors(doc: Path = ROOT / "docs" / "architecture.md") -> dict[str, int]:
    """The floor of each module (``name.py``) and package (``name/*``) of ``activeprp_core`` in architecture.md's
    diagram: each line under the ``activeprp_core`` rule that names one is a floor, numbered from the bottom (0)."""
    diagram = doc.read_text(encoding="utf-8").split("```")[1]
    core = diagram.split("activeprp_core: the library", 1)[1].splitlines()[1:]
    rows = [names for line in core if (names := re.findall(r"\b(\w+)(?:\.py\b|/\*)", line))]
    return {name: level for level, names in enumerate(reversed(rows)) for name in names}


def test_no_module_of_the_core_imports_one_on_a_higher_floor():
    """architecture.md's diagram of the core's floors is what the imports do: every module is on a floor, and no
    module-level import reaches a higher one (``openai_chat`` imported ``settings`` for its bool check, and
    ``slots`` was drawn below the ``budget`` it imports)."""
    floors, graph = _floors(), _module_imports()
    assert floors["engine"] > floors["reranking"] > floors["ledger"] > floors["settings"] > floors["comparators"] \
        > floors["budget"] > floors["errors"] == 0, floors  # the diagram is read
    top = {module: module.split(".")[1] for module in graph if module.count(".")}
    top.pop("activeprp_core.__main__")  # a script (``SCRIPTS``)
    assert sorted(m for m, name in top.items() if name not in floors) == [], "modules the diagram does not place"
    up = [f"{m} (floor {floors[top[m]]}) imports {d} (floor {floors[top[d]]})" for m in sorted(top)
          for d in sorted(graph[m]) if d in top and floors[top[d]] > floors[top[m]]]
    assert up == []


def test_every_module_has_a_home_in_architecture_md():
    """Each module of the library, the command line and the integrations is named in docs/architecture.md (as
    ``name.py``, ``package/name`` or ``name.attribute``), so "where is it decided that a 429 is retried?" has a row:
    ``comparators/remote.py``, ``failures.py``, ``clients.py``, the chat judges, the wrappers and ``ray.py`` had
    none."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = []
    for package in ("activeprp_core", "activeprp_cli", "activeprp_integrations"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name, parent = path.stem, path.parent.name
            if name == "__init__":
                continue
            if not re.search(rf"(?<![\w.]){name}\.py\b|\b{parent}/{name}\b|`{name}\.\w", page):
                unnamed.append(str(path.relative_to(ROOT)))
    assert unnamed == []
