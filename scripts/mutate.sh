#!/usr/bin/env bash
# Mutation testing of one module against its tests (docs/testing.md records the scores).
# Not run by CI: each mutant rebuilds the module's tests.
#   scripts/mutate.sh MODULE [--per-file N] [--seed S]
# MODULE: descriptor ring config toml_reader safetensors manifest shape_inference backend
#         weight_cache.
# Installs universalmutator from PyPI into build-mutate/venv; builds build-mutate/ (CUDA off).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh >/dev/null
build="${FERRY_MUTATE_BUILD:-$root/build-mutate}"
if [[ ! -x "$build/venv/bin/mutate" ]]; then
  mkdir -p "$build"
  python3 -m venv "$build/venv"
  "$build/venv/bin/pip" install -q universalmutator
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_CUDA=OFF >/dev/null
PATH="$build/venv/bin:$PATH" python3 scripts/mutate.py "$@" --build "$build"
