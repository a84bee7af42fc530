"""MkDocs hook: the site's home page is README.md itself (one source), with its ``docs/`` links made relative.

README links the pages as ``docs/<page>.md`` so that they work on GitHub; on the site those pages sit next to the
home page, so the prefix is dropped before MkDocs validates the links (``mkdocs build --strict``).
"""

from __future__ import annotations

import re
from pathlib import Path

_DOCS_LINK = re.compile(r"\]\(docs/")


def on_page_read_source(page, config):
    if page.file.src_uri != "index.md":
        return None
    readme = Path(config["config_file_path"]).parent / "README.md"
    return _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))
