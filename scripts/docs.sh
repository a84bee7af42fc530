#!/usr/bin/env bash
# Builds the docs site (mkdocs.yml: the docs/ pages, README.md as the home page, the API reference from the
# docstrings) with `mkdocs build --strict`, so a broken link, anchor or reference fails. Installs the `docs` extra
# of pyproject.toml first when it is missing. Usage: bash scripts/docs.sh [SITE_DIR] (default: a temporary
# directory, removed afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python -c "import material, mkdocstrings_handlers.python, ruff" 2>/dev/null; then
    # The extra's requirements only: `pip install -e .[docs]` would re-point an existing editable install.
    mapfile -t reqs < <(python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"], sep="\n")')
    python -m pip install "${reqs[@]}"
fi
if [ $# -ge 1 ]; then
    site="$1"
else
    site="$(mktemp -d)"
    trap 'rm -rf "$site"' EXIT
fi
NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --site-dir "$site"
