#!/usr/bin/env bash
# Builds the docs site (mkdocs.yml: the docs/ pages, README.md as the home page, the API reference from the
# docstrings) with `mkdocs build --strict`, so a broken link, anchor or reference fails. Installs first what the
# `docs` extra of pyproject.toml needs and this environment lacks or has too old (an older mkdocstrings-python
# builds a clean page that shows names outside __all__). Usage: bash scripts/docs.sh [SITE_DIR] (default: a
# temporary directory, removed afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
# The extra's requirements only: `pip install -e .[docs]` would re-point an existing editable install.
mapfile -t missing < <(python scripts/missing_requirements.py ".[docs]")
if [ "${#missing[@]}" -gt 0 ]; then
    echo "scripts/docs.sh: installing ${missing[*]}"
    python -m pip install "${missing[@]}"
fi
if [ $# -ge 1 ]; then
    site="$1"
else
    site="$(mktemp -d)"
    trap 'rm -rf "$site"' EXIT
fi
NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --site-dir "$site"
