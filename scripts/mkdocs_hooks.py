"""MkDocs hook: the site's home page (``index.md``) is README.md itself, so it has one source.

README links the pages as ``docs/<page>.md`` so that they work on GitHub; on the site those pages sit next to the
home page, so the prefix is dropped before MkDocs validates the links (``mkdocs build --strict``).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

_DOCS_LINK = re.compile(r"\]\(docs/")


def on_files(files, config):
    readme = Path(config["config_file_path"]).parent / "README.md"
    files.append(File.generated(config, "index.md", content=_DOCS_LINK.sub("](", readme.read_text(encoding="utf-8"))))
    return files
