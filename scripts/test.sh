#!/usr/bin/env bash
# Installs what ferry needs, builds it, runs the fuzz targets briefly (when clang is present)
# and then every test under CTest. Ends with CTest's summary; exits non-zero on any failure.
#   scripts/test.sh            build into build/
#   FERRY_FUZZ_SECONDS=0 ...   skip fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

jobs=$(nproc)
fuzz_seconds=${FERRY_FUZZ_SECONDS:-15}
if command -v clang++ >/dev/null && [[ "$fuzz_seconds" != 0 ]]; then
  scripts/fuzz.sh "$fuzz_seconds"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$jobs"
cd build
ctest --output-on-failure -j "$jobs" --timeout 600
