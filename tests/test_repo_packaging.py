"""What `pip install activeprp` brings: no dependency and typed packages (imports: test_repo_import_hygiene.py), and
what the sdist holds: the library and its package data, no test suite it could not run (docs/testing.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    # activeprp_bench too: docs/judges.md documents its Python API (run_grid, Summary)
    for package in ("activeprp_core", "activeprp_integrations", "activeprp_bench"):
        assert "py.typed" in project["tool"]["setuptools"]["package-data"][package], package
        assert (ROOT / package / "py.typed").is_file(), package


#: the sdist's top-level entries besides the packages (activeprp_*); PKG-INFO and setup.cfg are added at packing
SDIST_TOP = {"LICENSE", "NOTICE", "MANIFEST.in", "README.md", "pyproject.toml"}
#: what only a clone has: the tests need all of it and ../shared beside it, so none of it ships
CLONE_ONLY = ("tests", "docs", "benchmarks", "examples", "scripts", ".ci")


def _sdist_files(egg_base: Path) -> set[str]:
    """The paths (relative to the repository root) that ``build_sdist`` packs: setuptools' manifest, SOURCES.txt,
    written by ``egg_info`` into ``egg_base`` (the checkout is left untouched; no network, no build isolation)."""
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "egg_info",
                    "--egg-base", str(egg_base)], cwd=ROOT, check=True, capture_output=True, timeout=120)
    listed = (egg_base / "activeprp.egg-info" / "SOURCES.txt").read_text().splitlines()
    return {p for p in listed if ".egg-info/" not in p}


def test_the_sdist_holds_the_library_and_its_data_but_no_test_suite(tmp_path):
    pytest.importorskip("setuptools", minversion="77")  # the build requirement; Python >= 3.12 venvs lack it
    files = _sdist_files(tmp_path)
    setuptools_cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    wanted = {p.relative_to(ROOT).as_posix() for pkg in ("activeprp_core", "activeprp_cli", "activeprp_integrations",
                                                         "activeprp_bench") for p in (ROOT / pkg).rglob("*.py")}
    wanted |= {p.relative_to(ROOT).as_posix() for pkg, globs in setuptools_cfg["package-data"].items()
               for g in globs for p in (ROOT / pkg).glob(g) if p.is_file()}
    assert {"activeprp_core/data/auto_table.json", "activeprp_cli/data/dl19_demo.jsonl",
            "activeprp_bench/data/bundled_ql_dl1920_top20.json.gz"} <= wanted
    assert not wanted - files, f"the sdist lacks {sorted(wanted - files)}"
    shipped_clone_only = sorted(p for p in files if p.split("/")[0] in CLONE_ONLY)
    assert not shipped_clone_only, f"the sdist ships files it cannot use: {shipped_clone_only[:5]}"
    assert {p.split("/")[0] for p in files} - SDIST_TOP <= {"activeprp_core", "activeprp_cli",
                                                           "activeprp_integrations", "activeprp_bench"}


def test_the_ms_marco_data_s_terms_ship_and_are_stated():
    """The wheel ships MS MARCO passages and queries (non-commercial research use only), but its metadata named only
    Apache-2.0 and no page said so (review s68c, finding 3). NOTICE is a license file (the wheel's METADATA lists it,
    licence scanners read it), names every shipped data file, and README, the demo's docs and each data folder's
    SOURCE.md state the terms."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "NOTICE" in project["project"]["license-files"]
    notice = " ".join((ROOT / "NOTICE").read_text(encoding="utf-8").split())
    data = [p.relative_to(ROOT).as_posix() for folder in ("activeprp_cli", "activeprp_bench")
            for p in (ROOT / folder / "data").iterdir() if p.name != "SOURCE.md"]
    assert len(data) == 3 and [p for p in data if p not in notice] == []
    for page in ("NOTICE", "README.md", "docs/benchmarks.md", "activeprp_cli/data/SOURCE.md",
                 "activeprp_bench/data/SOURCE.md"):
        assert "non-commercial research use only" in " ".join((ROOT / page).read_text(encoding="utf-8").split()), page


def test_the_classifiers_name_each_python_version_supported_and_no_licence():
    """pyproject had no classifiers (review s68c, finding 6): the Python versions are requires-python's minimum up
    to the newest, with every version .ci/run tests on among them; no ``License ::`` classifier (the PEP 639
    expression supersedes them, and setuptools refuses both); the docs' ``bench`` extra names the extras it pulls."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    prefix = "Programming Language :: Python :: 3."
    minors = sorted(int(c.removeprefix(prefix)) for c in project["classifiers"] if c.startswith(prefix))
    assert project["requires-python"] == f">=3.{minors[0]}" and minors == list(range(minors[0], minors[-1] + 1))
    tested = re.search(r"^for version in (.*); do$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE).group(1)
    assert {int(v.split(".")[1]) for v in tested.split()} <= set(minors) and minors[-1] >= 13
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    docs = " ".join((ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    bench = docs[docs.index("(the `bench` extra:"):docs.index(") runs rankers")]
    extras = project["optional-dependencies"]
    pulled = [e for r in extras["bench"] if r.startswith("activeprp[") for e in r[10:-1].split(",")]
    names = {re.match(r"[\w.-]+", r).group() for e in ["bench", *pulled] for r in extras[e]} - {"activeprp"}
    assert pulled == ["eval"] and [n for n in sorted(names) if n not in bench] == []


def _missing_requirements():
    """scripts/missing_requirements.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("missing_requirements", ROOT / "scripts" / "missing_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("installed", "missing"), [("1.18.2", True), ("1.19.0", False)])
def test_the_docs_extra_refuses_a_mkdocstrings_python_whose_public_filter_shows_names_outside_all(
        monkeypatch, installed, missing):
    """mkdocs.yml's ``filters: public`` hides the names outside ``__all__`` from mkdocstrings-python 1.19.0 on; up to
    1.18.2 the strict build was clean and the API page showed 28 names more (review s68i). The extra allowed 1.16.7."""
    module = _missing_requirements()
    real = module.metadata.version
    monkeypatch.setattr(module.metadata, "version",
                        lambda name: installed if name == "mkdocstrings-python" else real(name))
    docs = [req for req in module.project_requirements(["docs"]) if req.name == "mkdocstrings-python"]
    assert len(docs) == 1 and module.satisfied(docs[0]) is not missing


@pytest.mark.skipif(sys.platform == "win32", reason="a bash script")
def test_docs_sh_installs_a_docs_requirement_that_is_there_but_too_old(tmp_path):
    """scripts/docs.sh installed the extra only when an import failed, so an older mkdocstrings-python stayed. Run
    with a stand-in ``python`` that logs its arguments and says the handler is too old."""
    log = tmp_path / "python.log"
    stand_in = tmp_path / "bin" / "python"
    stand_in.parent.mkdir()
    stand_in.write_text('#!/usr/bin/env bash\necho "$*" >> "$LOG"\n'
                        'if [ "$1" = scripts/missing_requirements.py ]; then echo "mkdocstrings-python>=1.19"; fi\n')
    stand_in.chmod(0o755)
    env = {"PATH": f"{stand_in.parent}:/usr/bin:/bin", "LOG": str(log)}
    subprocess.run(["bash", str(ROOT / "scripts" / "docs.sh"), str(tmp_path / "site")], env=env, check=True,
                   capture_output=True, timeout=60)
    calls = log.read_text().splitlines()
    assert "-m pip install mkdocstrings-python>=1.19" in calls
    assert calls[-1] == f"-m mkdocs build --strict --site-dir {tmp_path / 'site'}"


#: review s68k's floors: (package, a release it found broken, the oldest it found working, what broke)
RAISED_FLOORS = [
    ("tenacity", "9.1.4", "9.2.1", "wait_exponential_jitter(multiplier=): TypeError on every OpenAI call"),
    ("fastapi", "0.131.0", "0.132", "strict_content_type: a body with no Content-Type was judged"),
    ("llama-index-core", "0.12.30", "0.12.31", "BaseNodePostprocessor.apostprocess_nodes"),
    ("transformers", "4.55.4", "4.56", "from_pretrained(dtype=): TypeError from the model's __init__"),
    ("gguf", "0.11.0", "0.13", "0.10: sentencepiece undeclared; 0.11: ndarray.newbyteorder, gone in numpy 2"),
    ("langchain-core", "1.0.0", "1.1", "BaseChatModel.profile: a reasoning model sent temperature=0 (400)"),
    ("langchain-openai", "1.0.0", "1.1", "ChatOpenAI's profile, as for langchain-core"),
    ("cohere", "5.8.0", "5.10", "ClientV2.rerank, README's client (5.8 has ClientV2 without it)"),
    ("ir-measures", "0.3.0", "0.3.1", "0.3.0 pins pytrec-eval-terrier==0.5.2, against >=0.5.6"),
]


@pytest.mark.parametrize(("name", "broken", "working", "why"), RAISED_FLOORS, ids=[f[0] for f in RAISED_FLOORS])
def test_each_floor_review_s68k_found_broken_is_raised_and_says_why(name, broken, working, why):
    """pyproject's floors allowed releases that fail the tests or crash (review s68k: tenacity 8.2 to 9.1.4 had no
    ``multiplier=``, FastAPI before 0.132 judged a body sent with no Content-Type, ...). Each extra naming the
    package now excludes the broken release, allows the working one, and a comment says what the floor is for."""
    from packaging.requirements import Requirement

    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = tomllib.loads(text)["project"]["optional-dependencies"]
    reqs = [Requirement(r) for deps in extras.values() for r in deps if Requirement(r).name == name]
    assert reqs, f"no extra names {name}"
    for req in reqs:
        assert req.specifier.contains(working) and not req.specifier.contains(broken), (str(req), why)
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    assert any(f"{name} {working}:" in c for c in comments), f"no comment says why {name}>={working}"
