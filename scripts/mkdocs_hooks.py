"""MkDocs hooks: the site's home page (``index.md``) is README.md itself, so it has one source, and the plots that
the pages show come from ``benchmarks/results/`` itself, so they have one copy.

README links the pages as ``docs/<page>.md`` and the docs pages the plots as ``../benchmarks/results/...png`` so
that both work on GitHub. On the site the pages sit next to the home page and the plots are copied to
``benchmarks/results/...`` under the site root, so the prefixes are rewritten before MkDocs validates the links
(``mkdocs build --strict``). Only the plots some page shows are copied.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

_DOCS_LINK = re.compile(r"\]\(docs/")
_PLOT = re.compile(r"\]\((?:\.\./)?(benchmarks/results/[^)\s]+\.png)\)")


def _readme(config) -> str:
    return (Path(config["config_file_path"]).parent / "README.md").read_text(encoding="utf-8")


def on_files(files, config):
    root = Path(config["config_file_path"]).parent
    files.append(File.generated(config, "index.md", content=_DOCS_LINK.sub("](", _readme(config))))
    pages = [_readme(config), *(p.read_text(encoding="utf-8") for p in Path(config["docs_dir"]).glob("*.md"))]
    for plot in sorted({m for text in pages for m in _PLOT.findall(text)}):
        files.append(File(plot, src_dir=str(root), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    """A docs page's ``../benchmarks/results/`` becomes the site's ``benchmarks/results/`` (relative to the page's
    own directory on the site: the site root for every page here)."""
    return markdown.replace("](../benchmarks/results/", "](benchmarks/results/")
