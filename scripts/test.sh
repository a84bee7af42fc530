#!/usr/bin/env bash
# README's test command. Installs what only the tests need when it is missing, then runs pytest in the current
# Python environment with the arguments given (default: the whole suite; `bash scripts/test.sh -m "not slow"`
# leaves out the tests that load the bundled model or start a real server).
#   - README's set-up (scripts/install.sh), when some package of the `all` extra is missing;
#   - the `test` extra;
#   - llama-cpp-python's OpenAI-compatible server, the real endpoint of tests/test_comparators_openai.py: built
#     from source on first install (3-9 min on 2 cores), later served from pip's wheel cache. It is built for a
#     generic x86-64 CPU with AVX2 (GGML_NATIVE=OFF): the native build of 0.3.36 crashed (SIGSEGV) on its first
#     completion on this machine's CPU (AVX-512/AMX). Set CMAKE_ARGS to build it otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_SERVER="llama-cpp-python[server]==0.3.36"
if [ -n "$(python scripts/missing_requirements.py ".[all]")" ]; then
  bash scripts/install.sh
fi
mapfile -t missing < <(python scripts/missing_requirements.py ".[test]" "$LLAMA_SERVER")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "scripts/test.sh: installing ${missing[*]}"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" python -m pip install "${missing[@]}"
fi
exec python -m pytest "$@"
