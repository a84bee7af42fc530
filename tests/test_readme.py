"""README.md and the docs pages: README's limits (issue 19: at most 200 lines, the LangChain drop-in within the
first 60), links that resolve, Python blocks that parse, and a nav that names existing pages. The docs site's
`mkdocs build --strict` (scripts/docs.sh) checks links and anchors too; these tests run without mkdocs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_readme_is_at_most_200_lines_with_the_langchain_drop_in_in_the_first_60():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:60])
    assert "ActivePRPRerank(llm=" in head
    assert "ContextualCompressionRetriever(base_compressor=" in head


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_to_existing_files(page):
    targets = [t.split("#")[0] for t in LINK.findall(page.read_text(encoding="utf-8"))]
    local = [t for t in targets if t and not t.startswith(("http://", "https://", "mailto:"))]
    missing = [t for t in local if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


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
