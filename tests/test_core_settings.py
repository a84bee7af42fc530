"""``RerankSettings``, the one definition of the settings: its declarations, the online preset, and every setting
reaching every entry point.

``test_every_setting_reaches_every_entry_point`` sends each ``RerankSettings`` field, set to a value that no entry
point defaults to, through each entry point (the core functions, ``Reranking``, both wrappers, ``activeprp rerank``
and ``rerank-run``, Ray's ``rerank_dataset`` batch function, ``activeprp serve`` through ``create_app``) and finds
it in the result's ``stats()`` (the CLI's ``--json`` stats, the wrappers' run stats, Ray's output columns, the
service's ``meta.activeprp``). The values and the CLI flags are derived from the fields' declarations, so a new
setting is covered with no edit here.
"""

from __future__ import annotations

import asyncio
import json
import math
import os

import pytest

from activeprp_cli import main
from activeprp_core import Candidate, Reranking, RerankSettings, SimulatedComparator, arerank, arerank_many, rerank
from activeprp_core import rerank_many as core_rerank_many
from activeprp_core.engine import DONE
from activeprp_core.many import PER_REQUEST as MANY_PER_REQUEST
from activeprp_core.rankers.auto import AUTO
from activeprp_core.settings import (
    CAPS,
    DEFAULTS,
    FIELDS,
    ONLINE,
    PER_REQUEST,
    SPECS,
    Count,
    Flag,
    Seconds,
    check_setting,
)

LABELS = {f"d{i}": (i * 7) % 11 for i in range(9)}
QUERY = "which passage is best?"
BASE = {"budget": 20}  # the core entry points need a budget; the others start from their own defaults
#: what the entry points default to: the core, the online preset, the wrappers' top_n, rerank-run's budget, the
#: service's time budget
ENTRY_DEFAULTS = (DEFAULTS, ONLINE.as_dict(), {"top_k": 3}, BASE, {"budget": 100}, {"time_budget": 30.0})


def unusual(name: str):
    """A valid value of setting ``name`` that no entry point defaults to (from its declaration)."""
    check = SPECS[name].check
    if isinstance(check, Flag):
        options = [True, False]
    elif isinstance(check, Count):
        options = [7, 9, 4]
    elif isinstance(check, Seconds):
        options = [45.0, 60.0]
    else:
        options = [c for c in check.choices if c != AUTO]
    value = next(v for v in options if all(d.get(name) != v for d in ENTRY_DEFAULTS))
    return check_setting(name, value)


def candidates() -> list[Candidate]:
    return [Candidate(i, f"passage {i}", {"label": label}) for i, label in LABELS.items()]


def judge() -> SimulatedComparator:
    return SimulatedComparator(LABELS)


def core_kw(name, value) -> dict:
    return {**BASE, name: value}


def via_rerank(name, value):
    return rerank(QUERY, candidates(), comparator=judge(), **core_kw(name, value)).stats()


def via_arerank(name, value):
    return asyncio.run(arerank(QUERY, candidates(), comparator=judge(), **core_kw(name, value))).stats()


def via_rerank_many(name, value):
    (result,) = core_rerank_many([(QUERY, candidates())], comparator=judge(), **core_kw(name, value))
    return result.stats()


def via_arerank_many(name, value):
    async def collect():
        return [r async for r in arerank_many([(QUERY, candidates())], comparator=judge(), **core_kw(name, value))]

    (result,) = asyncio.run(collect())
    return result.stats()


def via_reranking(name, value):
    comparator = judge()
    reranking = Reranking(QUERY, candidates(), comparator=comparator, **core_kw(name, value))
    while (batch := reranking.next_batch()) is not DONE:
        reranking.send(comparator.compare(batch.query, batch.pairs))
    return reranking.result().stats()


def wrapper_kw(name, value) -> dict:
    return {"top_n" if name == "top_k" else name: value}


def via_langchain(name, value):
    pytest.importorskip("langchain_core", reason='pip install "activeprp[langchain]"')
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document

    from activeprp_integrations.langchain import ActivePRPRerank

    seen = []

    class Handler(BaseCallbackHandler):
        def on_chain_end(self, outputs, **kw):
            seen.append(outputs["stats"])

    docs = [Document(page_content=c.text, id=c.id) for c in candidates()]
    ActivePRPRerank(comparator=judge(), **wrapper_kw(name, value)).compress_documents(docs, QUERY,
                                                                                      callbacks=[Handler()])
    return seen[0]


def via_llama_index(name, value):
    pytest.importorskip("llama_index.core", reason='pip install "activeprp[llama-index]"')
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
    from llama_index.core.schema import NodeWithScore, TextNode

    from activeprp_integrations.llama_index import ActivePRPRerank

    debug = LlamaDebugHandler()
    reranker = ActivePRPRerank(comparator=judge(), callback_manager=CallbackManager([debug]), **wrapper_kw(name, value))
    reranker.postprocess_nodes([NodeWithScore(node=TextNode(id_=c.id, text=c.text)) for c in candidates()],
                               query_str=QUERY)
    ((_, end),) = debug.get_event_pairs(CBEventType.RERANKING)
    return end.payload["stats"]


def flags(name, value) -> list[str]:
    """The command-line form of one setting (as ``add_settings_args`` offers it)."""
    flag = name.replace("_", "-")
    if isinstance(SPECS[name].check, Flag):
        return [f"--{flag}" if value else f"--no-{flag}"]
    return [f"--{flag}", "none" if value is None else str(value)]


def via_cli_rerank(name, value, tmp_path, capsys):
    path = tmp_path / "cands.jsonl"
    path.write_text("".join(json.dumps({"id": c.id, "text": c.text, **c.metadata}) + "\n" for c in candidates()))
    assert main(["rerank", "--query", QUERY, "--candidates", str(path), "--comparator", "simulated", "--json",
                 *flags(name, value)]) == 0
    return json.loads(capsys.readouterr().out)["stats"]


def via_cli_rerank_run(name, value, tmp_path, capsys, monkeypatch):
    pytest.importorskip("ir_measures", reason='pip install "activeprp[eval]"')  # --qrels
    from activeprp_cli import rerank_run

    seen = []

    def recording(*args, **kwargs):
        for item in core_rerank_many(*args, **kwargs):
            seen.append(item.stats())
            yield item

    monkeypatch.setattr(rerank_run, "rerank_many", recording)
    files = {"run": "".join(f"q1 Q0 {c.id} {r} {10 - r} bm25\n" for r, c in enumerate(candidates(), 1)),
             "queries": f"q1\t{QUERY}\n", "corpus": "".join(f"{c.id}\t{c.text}\n" for c in candidates()),
             "qrels": "".join(f"q1 0 {c.id} {c.metadata['label'] % 4}\n" for c in candidates())}
    for key, text in files.items():
        (tmp_path / key).write_text(text)
    argv = ["rerank-run", *[x for key in files for x in (f"--{key}", str(tmp_path / key))], "--out",
            str(tmp_path / "out.run"), "--comparator", "simulated", "--no-progress", *flags(name, value)]
    assert main(argv) == 0, capsys.readouterr()
    (stats,) = seen
    return stats


def via_ray_batches(name, value):
    """Ray's ``rerank_dataset``: its argument check and the batch function its actors run (no cluster needed; a
    real Ray run is in tests/test_integrations_ray.py)."""
    pa = pytest.importorskip("pyarrow", reason='pip install "activeprp[ray]"')
    from activeprp_integrations import ray as adapter

    settings = adapter._check(judge, 1, 8, 4, 0.5, None, None, core_kw(name, value))
    table = pa.table({"query": [QUERY], "candidates": [[{"id": c.id, "text": c.text} for c in candidates()]]})
    out = adapter._Reranker(judge, settings, 4, use_async=False)(table).to_pylist()[0]
    assert out["error"] is None, out["error"]
    return out


def via_serve(name, value, monkeypatch):
    """``activeprp serve``: the setting as its flag, through ``create_app`` to a request's ``meta.activeprp`` (the
    server is not started: the test client drives the app the command built)."""
    pytest.importorskip("fastapi", reason='pip install "activeprp[serve]"')
    pytest.importorskip("prometheus_client", reason='pip install "activeprp[serve]"')
    from fastapi.testclient import TestClient

    from tests._serve_helpers import serve_command

    apps = serve_command(monkeypatch, ["--comparator", "simulated", *flags(name, value)])
    with TestClient(apps[0]) as client:
        response = client.post("/v2/rerank", json={"query": QUERY, "documents": [c.text for c in candidates()]})
    assert response.status_code == 200, response.text
    return response.json()["meta"]["activeprp"]


ENTRY_POINTS = {"rerank": via_rerank, "arerank": via_arerank, "rerank_many": via_rerank_many,
                "arerank_many": via_arerank_many, "Reranking": via_reranking, "langchain": via_langchain,
                "llama_index": via_llama_index, "cli_rerank": via_cli_rerank, "cli_rerank_run": via_cli_rerank_run,
                "ray": via_ray_batches, "serve": via_serve}


@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_setting_reaches_every_entry_point(entry, name, tmp_path, capsys, monkeypatch):
    value = unusual(name)
    run = ENTRY_POINTS[entry]
    extra = {"tmp_path": tmp_path, "capsys": capsys, "monkeypatch": monkeypatch}
    stats = run(name, value, **{k: v for k, v in extra.items() if k in run.__code__.co_varnames})
    assert stats[name] == value, (entry, name, stats[name], value)


def test_the_values_sent_are_not_defaults():
    """The test above is not vacuous: each value differs from every entry point's default (a dropped setting would
    come back as the default)."""
    for name in FIELDS:
        value = unusual(name)
        assert all(d.get(name) != value for d in ENTRY_DEFAULTS), name


def test_the_declarations_derive_the_lists():
    from dataclasses import fields

    from activeprp_core.types import RerankResult

    assert [f.name for f in fields(RerankResult) if f.metadata.get("setting")] == list(FIELDS)  # the echo
    assert MANY_PER_REQUEST == PER_REQUEST and {"budget", "max_rounds", "top_k", "seed"} <= set(PER_REQUEST)
    assert set(CAPS) <= set(PER_REQUEST) and {"budget", "max_rounds", "token_budget"} <= set(CAPS)
    assert (ONLINE.ranker, ONLINE.oracle, ONLINE.budget, ONLINE.max_rounds) == ("auto", "auto", 50, 6)
    from activeprp_core.rankers.auto import ONLINE_MAX_ROUNDS

    assert ONLINE.max_rounds == ONLINE_MAX_ROUNDS


def test_each_default_of_the_echo_and_the_breaker_has_one_home():
    import inspect
    from dataclasses import MISSING, fields

    from activeprp_core import errors, settings
    from activeprp_core.comparators.base import CallGuard
    from activeprp_core.types import RerankResult

    declared = {f.name: f.default for f in fields(RerankSettings)}
    echoed = {f.name: f.default for f in fields(RerankResult) if f.metadata.get("setting") and f.default is not MISSING}
    assert echoed and all(echoed[name] == declared[name] for name in echoed), (echoed, declared)
    assert settings.MAX_CONSECUTIVE_FAILURES is errors.MAX_CONSECUTIVE_FAILURES == 5
    assert declared["max_consecutive_failures"] == echoed["max_consecutive_failures"] == errors.MAX_CONSECUTIVE_FAILURES
    guard = inspect.signature(CallGuard).parameters["max_consecutive_failures"].default
    assert guard == errors.MAX_CONSECUTIVE_FAILURES


@pytest.mark.parametrize("bad, error, says", [
    (True, TypeError, "number of seconds"), ("3", TypeError, "number of seconds"), (math.inf, ValueError, "finite"),
    (math.nan, ValueError, "finite"), (-0.5, ValueError, ">= 0"), ([1], TypeError, "number of seconds")])
def test_time_budget_is_checked_like_the_other_settings(bad, error, says):
    with pytest.raises(error, match=says) as raised:
        RerankSettings(budget=1, time_budget=bad)
    assert "time_budget" in str(raised.value) and "None" in str(raised.value)


def test_time_budget_takes_seconds_and_none():
    assert RerankSettings(budget=1, time_budget=2).time_budget == 2.0
    assert RerankSettings(budget=1, time_budget=0).time_budget == 0.0
    assert RerankSettings(budget=1).time_budget is None


def test_of_checks_only_what_it_replaces():
    base = RerankSettings(budget=5)
    assert RerankSettings.of(base) is base
    assert RerankSettings.of(base, top_k=3) == RerankSettings(budget=5, top_k=3)
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        RerankSettings.of(base, top_k=0)
    with pytest.raises(TypeError, match="unknown setting"):
        RerankSettings.of(base, top=3)
    with pytest.raises(TypeError, match="needs budget"):
        RerankSettings.from_checked(top_k=3)


def test_a_ranker_name_is_checked_without_building_the_ranker(monkeypatch):
    from activeprp_core import rankers

    built = []

    class Counting(rankers.RANKERS["mohajer"]):
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

    monkeypatch.setitem(rankers.RANKERS, "mohajer", Counting)
    settings = RerankSettings(budget=10, ranker="mohajer")
    assert built == []
    rerank(QUERY, candidates(), settings, comparator=judge())
    assert built == [1]  # resolved once, where it is used


RECIPE_SERVE = """
import json
from fastapi.testclient import TestClient
from activeprp_core import SimulatedComparator
from activeprp_integrations.serve import create_app
with TestClient(create_app(SimulatedComparator({}))) as client:
    for body in ({}, {"first_n": 2}):
        r = client.post("/v2/rerank", json={"query": "q", "documents": ["a", "b", "c"], **body})
        print(json.dumps([r.status_code, r.json().get("meta", {}).get("activeprp", {}).get("first_n", "missing")]))
"""


def test_a_setting_added_as_the_architecture_page_says_reaches_a_serve_request(tmp_path):
    """docs/architecture.md's recipe: a setting is its field in settings.py and its echo in types.py, and every
    entry point follows. On a copy of the packages with exactly those two edits (a per-request ``first_n``), the
    service takes it in a body and echoes it; serve's body model listed the settings by hand, so every request
    was a 500 (``bodies.Limits.own_settings`` read a field the body did not have)."""
    pytest.importorskip("fastapi", reason='pip install "activeprp[serve]"')
    pytest.importorskip("prometheus_client", reason='pip install "activeprp[serve]"')
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package in ("activeprp_core", "activeprp_cli", "activeprp_integrations"):
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    edits = {"settings.py": ("    cache: bool = field(default=True,", "    first_n: int | None = field(default=None, "
                             "metadata=_setting(\n        Count(allow_none=True), 'only the first N are judged', "
                             "none='all', per_request=True))\n"),
             "types.py": ("    cache: bool = field(default=True, metadata=SETTING)",
                          "    first_n: int | None = field(default=None, metadata=SETTING)\n")}
    for name, (anchor, added) in edits.items():
        path = tmp_path / "activeprp_core" / name
        text = path.read_text(encoding="utf-8")
        assert text.count(anchor) == 1, name
        path.write_text(text.replace(anchor, added + anchor), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", RECIPE_SERVE], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [[200, None], [200, 2]]


def test_the_docs_say_which_k_each_online_entry_point_uses():
    """``ONLINE.top_k`` is 10 (``activeprp rerank``, ``serve``) and the wrappers' ``top_n`` 3; docs/judges.md's
    Defaults grouped all four under "a 20-document rerank at top_n 3". It says each K now, and that ``auto`` picks
    the same ranker and oracle for both at N=20, which this checks."""
    from pathlib import Path

    from activeprp_core.rankers.auto import choose
    from activeprp_integrations._common import DEFAULT_TOP_N

    page = (Path(__file__).resolve().parent.parent / "docs" / "judges.md").read_text(encoding="utf-8")
    defaults = " ".join(page.split("\n## Defaults\n", 1)[1].split("\n## ", 1)[0].split())
    assert f"the wrappers return top_n {DEFAULT_TOP_N} documents" in defaults
    assert f"`activeprp serve` rerank a top_k of {ONLINE.top_k}" in defaults
    online = (ONLINE.budget, ONLINE.max_rounds)
    assert f"picks the same ranker and oracle for K={ONLINE.top_k}" in defaults
    assert choose(20, ONLINE.top_k, *online) == choose(20, DEFAULT_TOP_N, *online)
