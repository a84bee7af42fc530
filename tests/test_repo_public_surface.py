"""The public surface is the contract: ``activeprp_core.__all__`` is small and every name in it is documented on
the contract page (docs/contract.md); names left out stay importable from their submodules."""

import importlib
import re
from pathlib import Path

import pytest

import activeprp_core
import activeprp_core.rankers

CONTRACT = (Path(__file__).parent.parent / "docs" / "contract.md").read_text(encoding="utf-8")


def test_all_is_at_most_25_names_each_on_the_contract_page():
    names = activeprp_core.__all__
    assert len(names) <= 25
    undocumented = [n for n in names if not re.search(rf"`[^`]*\b{re.escape(n)}\b[^`]*`", CONTRACT)]
    assert undocumented == []
    assert all(hasattr(activeprp_core, n) for n in names)


def test_comparator_closed_is_exported_with_the_other_errors():
    """``ComparatorClosed`` is public (drawn in the exception tree, raised out of ``rerank``) but was importable from
    ``activeprp_core.comparators`` only."""
    from activeprp_core import comparators

    assert "ComparatorClosed" in activeprp_core.__all__
    assert activeprp_core.ComparatorClosed is comparators.ComparatorClosed


def test_contract_page_shows_settings_and_token_budget():
    assert "RerankSettings(" in CONTRACT and "`token_budget`" in CONTRACT


def test_names_left_out_of_all_are_importable_from_their_submodules():
    where = {"activeprp_core.oracles": ["ORACLES", "BothOrders", "get_oracle", "BidirectionalOracle"],
             "activeprp_core.rankers": ["RANKERS", "RankContext", "get_ranker"],
             "activeprp_core.comparators": ["CallGuard", "SupportsCompare", "as_comparator"],
             "activeprp_core.types": ["Judgment"], "activeprp_core.budget": ["Budget", "CallBudget"],
             "activeprp_cli.rerank": ["ranking_settings"]}  # settings_from_args's former name
    for module, names in where.items():
        mod = importlib.import_module(module)
        assert [n for n in names if not hasattr(mod, n)] == []
        assert not set(names) & set(activeprp_core.__all__)


def test_rankers_all_lists_the_registry_and_the_rankers():
    public = set(activeprp_core.rankers.__all__)
    assert {"RANKERS", "get_ranker", "Ranker", "RankContext", "Schedule"} <= public
    assert {cls.__name__ for cls in activeprp_core.rankers.RANKERS.values()} <= public


def test_the_entry_points_show_every_setting_as_a_keyword():
    """``rerank(..., token_budget=...)`` & co.: each ``RerankSettings`` field is a keyword-only parameter of the
    entry points' signatures (they take them as ``**options``), with the field's default."""
    import dataclasses
    import inspect

    from activeprp_core import RerankSettings, arerank, arerank_many, rerank, rerank_many
    from activeprp_core.stream import arerank_stream

    for func in (rerank, arerank, rerank_many, arerank_many, arerank_stream):
        params = inspect.signature(func).parameters
        assert "options" not in params, func.__name__
        for field in dataclasses.fields(RerankSettings):
            assert params[field.name].kind is inspect.Parameter.KEYWORD_ONLY, (func.__name__, field.name)
            if field.default is not dataclasses.MISSING:
                assert params[field.name].default == field.default, (func.__name__, field.name)


def test_the_service_page_names_every_keyword_of_create_app():
    """docs/serve.md's list of ``create_app``'s keywords left out ``client_timeout`` and ``cache``."""
    import inspect

    from activeprp_integrations.serve import create_app

    page = (Path(__file__).parent.parent / "docs" / "serve.md").read_text(encoding="utf-8")
    paragraph = page[page.index("`create_app(comparator, settings=None, **options)` takes"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    keywords = [p.name for p in inspect.signature(create_app).parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert len(keywords) > 20 and [k for k in keywords if f"`{k}`" not in paragraph] == []


def test_the_exception_trees_draw_every_class_under_its_parent():
    """docs/errors.md and errors.py's docstring drew no ``LoopBlocked`` (a RuntimeError a sync caller meets) nor
    the RuntimeErrors of ``Reranking`` stepped out of order; each class drawn (``ComparatorClosed`` too) is a subclass
    of the one above it."""
    from activeprp_core import comparators, errors, slots

    known = {**{n: getattr(activeprp_core, n) for n in activeprp_core.__all__}, "LoopBlocked": slots.LoopBlocked,
             "ComparatorClosed": comparators.ComparatorClosed, "RuntimeError": RuntimeError}
    page = (Path(__file__).parent.parent / "docs" / "errors.md").read_text(encoding="utf-8")
    doc = errors.__doc__
    for text in (page[page.index("```\nActivePRPError"):page.index("```", page.index("ActivePRPError"))],
                 doc[doc.index("    ActivePRPError"):doc.index("Every ``ComparatorError``")]):
        drawn, parents = [], {}
        for line in text.splitlines():
            match = re.match(r"^\s*((?:[│ ] {3})*)(?:[├└]── )?((?:slots\.|comparators\.)?[A-Z]\w+)\b", line)
            if match and (("── " in line) or not line.strip().startswith("│")):
                depth = len(match.group(1)) // 4 + ("── " in line)
                name = match.group(2).removeprefix("slots.").removeprefix("comparators.")
                parents[depth] = name
                drawn.append(name)
                if depth:
                    assert issubclass(known[name], known[parents[depth - 1]]), (name, parents[depth - 1])
        assert {"ActivePRPError", "RankerError", "RuntimeError", "LoopBlocked", "ComparatorClosed"} <= set(drawn)
        assert set(drawn) <= set(known), drawn
        assert "(plain RuntimeError)" in text and "Reranking" in text


TYPED_CALLS = '''
from collections.abc import Sequence

from activeprp_core import Candidate, arerank, arerank_many, rerank, rerank_many
from activeprp_core.stream import arerank_stream
from activeprp_integrations.serve import create_app


class Judge:
    def compare(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[float | None]:
        return [0.5] * len(pairs)


class SureJudge:  # the natural annotation of a judge that always answers
    def compare(self, query: str, pairs: Sequence[tuple[Candidate, Candidate]]) -> list[float]:
        return [0.5] * len(pairs)


docs = [Candidate(id="a", text="b")]
reveal_type(rerank("q", docs, comparator=Judge(), budget=5))
rerank("q", docs, comparator=SureJudge(), budget=5)
list(rerank_many([("q", docs, {"budget": 20}), ("r", docs)], comparator=SureJudge(), budget=5))
arerank_many([("q", docs, {"budget": 20})], comparator=Judge(), budget=5)


async def awaited() -> None:
    reveal_type(await arerank("q", docs, comparator=Judge(), budget=5))


reveal_type(rerank_many([("q", docs)], comparator=Judge(), budget=5))
reveal_type(arerank_many([("q", docs)], comparator=Judge(), budget=5))
reveal_type(arerank_stream)
reveal_type(create_app)
rerank("q", docs, comparator=Judge(), budget=5).ordr
rerank(["q"], docs, comparator=Judge(), budget=5)
'''


def test_type_checkers_see_the_entry_points_signatures(tmp_path):
    """``activeprp_core`` ships ``py.typed``, but ``takes_settings`` (and ``serve_settings``) had no annotations,
    so to mypy ``rerank`` & co. were ``Any``: a misspelt attribute of the result, or a list as the query, passed.
    The packages' own modules are followed silently (their errors are not this test's) and third-party ones skipped
    (so the run stays short). The documented ``(query, candidates, own_settings)`` request of ``rerank_many`` /
    ``arerank_many`` and a judge annotated ``-> list[float]`` (``list`` is invariant) were errors to mypy (review
    s68h F3): the calls using them must pass."""
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")
    (tmp_path / "calls.py").write_text(TYPED_CALLS, encoding="utf-8")
    root = Path(activeprp_core.__file__).parent.parent  # a checkout (an editable install is invisible to mypy)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nfollow_imports = skip\nignore_missing_imports = True\n"
        + (f"mypy_path = {root}\n" if (root / "pyproject.toml").exists() else "")
        + "[mypy-activeprp_core.*,activeprp_cli.*,activeprp_integrations.*]\nfollow_imports = silent\n",
        encoding="utf-8")
    out, err, _ = api.run(["--config-file", str(tmp_path / "mypy.ini"), "--cache-dir", str(tmp_path / "cache"),
                           "--no-error-summary", "--hide-error-context", str(tmp_path / "calls.py")])
    assert err == "" and out.count(": error:") == 2, out
    revealed = re.findall(r'Revealed type is "(.*)"', out)
    assert len(revealed) == 6 and "Any" not in revealed, out
    assert revealed[0] == revealed[1] == "activeprp_core.types.RerankResult", out
    assert revealed[2].startswith("typing.Iterator[") and revealed[3].startswith("typing.AsyncIterator["), out
    assert revealed[4].startswith("def (requests:") and revealed[5].startswith("def (comparator: Any"), out
    assert '"RerankResult" has no attribute "ordr"' in out
    assert re.search(r'Argument 1 to "rerank" has incompatible type "list\[str\]"; expected "str"', out), out


def test_no_two_integration_modules_define_one_constant_name():
    """``BODY_FIELDS`` was the request-body fields of ``activeprp serve`` (``serve.bodies``: setting -> body field)
    and, in ``_chat_judge``, a framework model's fields that hold request-body dicts: one name, two meanings, in one
    package. The private one is ``BODY_DICTS`` now. A public constant (upper case) of ``activeprp_integrations`` is
    defined in one of its modules only."""
    import ast
    from collections import defaultdict

    root = Path(__file__).parent.parent / "activeprp_integrations"
    where = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper() and not target.id.startswith("_"):
                    where[target.id].add(path.relative_to(root).as_posix())
    assert {name: sorted(paths) for name, paths in where.items() if len(paths) > 1} == {}
