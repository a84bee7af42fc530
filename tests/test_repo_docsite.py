"""What the docs site's API page (docs/api.md: mkdocstrings, which reads the code statically with griffe) shows,
checked against the code at run time, without mkdocs (review s68b)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parent.parent


def static(package: str):
    """``package`` as griffe reads it from this checkout (what the API page renders)."""
    module = griffe.load(package, search_paths=[str(ROOT)], try_relative_path=False, allow_inspection=False)
    assert Path(module.filepath).is_relative_to(ROOT)
    return module


def test_the_page_shows_rerank_settings_with_its_real_defaults_and_budget_required():
    """The page showed each ``RerankSettings`` default as the ``_setting(...)`` call that declared it, and
    ``budget`` as if optional (griffe sees a default only in ``dataclasses.field(default=...)``)."""
    from activeprp_core import RerankSettings

    shown = {p.name: p for p in static("activeprp_core")["settings.RerankSettings"]["__init__"].parameters}
    real = inspect.signature(RerankSettings).parameters
    assert list(shown) == ["self", *real]
    for name, param in real.items():
        assert shown[name].kind.name.lower() == param.kind.name.lower(), name
        if param.default is inspect.Parameter.empty:
            assert shown[name].default is None, name  # required: no default shown
        elif name != "max_consecutive_failures":  # shown as its constant's name, MAX_CONSECUTIVE_FAILURES
            assert str(shown[name].default) == repr(param.default), name
    assert real["budget"].default is inspect.Parameter.empty
