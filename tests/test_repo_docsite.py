"""What the docs site shows, checked without mkdocs (review s68b): the API page (docs/api.md: mkdocstrings, which
reads the code statically with griffe) against the code at run time, and the pages (Python-Markdown) against what
GitHub shows."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
API_MODULES = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.M)
OPTIONS = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["plugins"][1]["mkdocstrings"][
    "handlers"]["python"]["options"]


@functools.cache
def _load(package: str):
    named = OPTIONS.get("extensions", ())
    extensions = griffe.load_extensions(*(e if e == "dataclasses" else str(ROOT / e) for e in named))
    module = griffe.load(package, search_paths=[str(ROOT)], try_relative_path=False, allow_inspection=False,
                         extensions=extensions)
    assert Path(module.filepath).is_relative_to(ROOT)
    return module


def static(path: str):
    """The module or object at dotted ``path`` as griffe reads it from this checkout (what the API page renders)."""
    top, _, rest = path.partition(".")
    return _load(top)[rest] if rest else _load(top)


def test_the_page_shows_rerank_settings_with_its_real_defaults_and_budget_required():
    """The page showed each ``RerankSettings`` default as the ``_setting(...)`` call that declared it, and
    ``budget`` as if optional (griffe sees a default only in ``dataclasses.field(default=...)``)."""
    from activeprp_core import RerankSettings

    shown = {p.name: p for p in static("activeprp_core.settings.RerankSettings.__init__").parameters}
    real = inspect.signature(RerankSettings).parameters
    assert list(shown) == ["self", *real]
    for name, param in real.items():
        assert shown[name].kind.name.lower() == param.kind.name.lower(), name
        if param.default is inspect.Parameter.empty:
            assert shown[name].default is None, name  # required: no default shown
        else:
            assert str(shown[name].default) == repr(param.default), name
    assert real["budget"].default is inspect.Parameter.empty


def _rendered_functions():
    """(dotted path, griffe function, run-time object) of each function and method the page renders."""
    for path in API_MODULES:
        try:
            module = importlib.import_module(path)
        except ImportError:  # an extra this environment lacks (the page is built without importing)
            continue
        for name in map(str, static(path).exports or ()):
            obj, runtime = static(path)[name], getattr(module, name)
            if obj.is_alias:
                obj = obj.final_target
            if obj.is_function:
                yield f"{path}.{name}", obj, runtime
            elif obj.is_class:
                for member in obj.all_members.values():
                    if member.is_function and member.name == "__init__" or not member.name.startswith("_"):
                        target = member.final_target if member.is_alias else member
                        if target.is_function:
                            yield f"{path}.{name}.{member.name}", target, getattr(runtime, member.name)


def test_the_page_shows_a_default_written_as_a_constants_name_as_its_value():
    """``rerank_many``, ``arerank_many`` and Ray's ``rerank_dataset`` showed ``max_active: int = DEFAULT_MAX_ACTIVE``
    (64), ``create_app`` the same text for 32, and the page renders neither constant (nor ``TOP_LOGPROBS``,
    ``MAX_CONCURRENCY``, serve's ``DEFAULT_MAX_QUEUE``, ...): scripts/griffe_defaults.py shows each value. Every
    default that is a number, a bool, None or a short string is shown as a value equal to the run-time one."""
    checked = set()
    for path, function, runtime in _rendered_functions():
        shown = {p.name: p.default for p in function.parameters}
        try:
            parameters = inspect.signature(runtime).parameters
        except (TypeError, ValueError):
            continue
        for name, param in parameters.items():
            plain = (type(param.default) in (int, float, bool, type(None))
                     or isinstance(param.default, str) and len(param.default) <= 24)
            if name in shown and param.default is not param.empty and plain:
                try:
                    value = eval(str(shown[name]), {"__builtins__": {}})
                except NameError:  # shown as a name
                    value = str(shown[name])
                assert value == param.default, f"{path}({name}=...)"
                checked.add(f"{path}({name}=...)")
    assert len(checked) > 100
    assert {f"activeprp_core.{f}(max_active=...)" for f in ("rerank_many", "arerank_many")} <= checked
    assert {"activeprp_core.RerankSettings.__init__(max_consecutive_failures=...)",
            "activeprp_integrations.serve.create_app(max_active=...)"} <= checked


def test_the_page_renders_exactly_each_modules_all_each_name_with_its_docstring():
    """The filter ``["!^_"]`` rendered 25 names outside the modules' ``__all__`` (serve's ``DEFAULT_MAX_ACTIVE = 32``
    among them); ``PRP_PROMPT``, ``QL_PROMPT`` (``#:`` comments) and LangChain's ``RANK_KEY``, ``SCORE_KEY`` (a tuple
    assignment) had no docstring griffe reads, so the page left them out (``show_if_no_docstring`` is off)."""
    assert OPTIONS["filters"] == "public"  # a module's __all__
    assert len(API_MODULES) >= 7
    undocumented = [f"{path}.{name}" for path in API_MODULES for name in map(str, static(path).exports or ())
                    if name not in static(path).members or not static(path)[name].docstring]
    assert undocumented == []


def test_the_page_renders_the_public_methods_the_wrappers_inherit_from_private_bases():
    """``from_openai`` and ``from_local_model`` (which docs/frameworks.md and the examples point to) come from the
    private ``_common.ComparatorFactories``, and the page showed neither (inherited members are off by default)."""
    factories = {name for name in static("activeprp_integrations._common.ComparatorFactories").members
                 if not name.startswith("_")}
    assert factories >= {"from_openai", "from_local_model"}
    assert set(OPTIONS["inherited_members"]) == factories
    for wrapper in ("langchain", "llama_index"):
        assert factories <= set(static(f"activeprp_integrations.{wrapper}.ActivePRPRerank").inherited_members)


def test_the_docs_extra_has_a_formatter_for_the_separate_signatures():
    """mkdocstrings formats a separate signature with Ruff or Black; the ``docs`` extra had neither, so each
    signature was one long line (the build said so at INFO level)."""
    import tomllib

    docs = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"][
        "docs"]
    assert OPTIONS["separate_signature"] is True
    assert {re.match(r"[\w-]+", req).group() for req in docs} & {"ruff", "black"}


def test_nested_list_items_are_indented_4_spaces_so_the_site_nests_them_as_github_does():
    """Python-Markdown (the site) nests a list item indented 4 spaces; GitHub nests one at 2 or 3 too. The site
    flattened architecture.md's 5 steps with their 15 sub-items into 20 steps, and judge-diagnostics.md's per-sort
    figures into siblings of the statement they break down."""
    shallow = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fenced = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fenced ^= line.startswith("```")
            if not fenced and re.match(r" {1,3}([-*+]|\d+\.) ", line):
                shallow.append(f"{page.name}:{number}")
    assert shallow == []


def test_the_user_docs_cite_no_internal_review_by_its_name():
    """A reader cannot follow "review s67a": the docs cite a file, a test or a benchmark for a claim instead."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    cited = {page.name: found for page in pages
             if (found := re.findall(r"\breview (?:s\d+[a-z]?|\d{4}[a-z]+)\b",
                                     " ".join(page.read_text(encoding="utf-8").split())))}
    assert cited == {}
