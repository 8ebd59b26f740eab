#!/usr/bin/env bash
# Installs what ferry needs, builds it under the sanitizers, runs the fuzz targets briefly and
# the tests there, then builds it as users do and runs every test under CTest. Ends with
# CTest's summary; exits non-zero on any failure.
#   scripts/test.sh            builds into build-asan/ and build/
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

# The house's size limits, as a warning: files over about 600 lines, functions over about 80.
scripts/check-sizes.py || true

jobs=$(nproc)
fuzz_seconds=${FERRY_FUZZ_SECONDS:-15}
sanitize=${FERRY_SANITIZE:-1}

# The tests once more under AddressSanitizer + UndefinedBehaviorSanitizer (no recovery) with
# libstdc++'s assertions, so an unchecked optional, an out-of-range index or a use-after-free
# aborts a test instead of reading garbage. Unit and multi-process tests alike; CUDA off (no
# device). The chaos soak runs once, in the normal build (its load is Python's; the sanitizers
# add nothing to what it checks but time), and so do the Debian package's checks (a package
# of sanitizer builds is not one anyone installs). -O1 and line tables only (-g1: a
# sanitizer's report still names file and line) and no benchmark programs.
# With clang (scripts/setup.sh installs it) this is one build with the libFuzzer targets:
# scripts/fuzz.sh builds everything into build-asan and fuzzes each target briefly, and the
# tests run in that build. One sanitizer build instead of two saves about a third of this
# script's time; clang also compiles it faster than GCC. Without clang, GCC builds it.
#   FERRY_SANITIZE=0 scripts/test.sh        skips the sanitizer tests
#   FERRY_FUZZ_SECONDS=0 scripts/test.sh    skips fuzzing
if command -v clang++ >/dev/null; then
  if [[ "$sanitize" != 0 ]]; then
    FERRY_FUZZ_ALL=1 scripts/fuzz.sh "$fuzz_seconds" build-asan
  elif [[ "$fuzz_seconds" != 0 ]]; then
    scripts/fuzz.sh "$fuzz_seconds"
  fi
elif [[ "$sanitize" != 0 ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_CUDA=OFF \
    -DFERRY_BENCH=OFF -DFERRY_SANITIZE=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
  cmake --build build-asan -j "$jobs"
fi
if [[ "$sanitize" != 0 ]]; then
  (cd build-asan && ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
     ctest --output-on-failure -j "$jobs" --timeout 600 \
       -E "scheduler_targets_on_scenarios|chaos_soak|debian_package")
fi

# The normal build, optimized as users build it (-O2), with line tables only (-g1: a crash's
# backtrace still names file and line): full debug info made about a third of this build's
# compile time and no test reads it.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
cmake --build build -j "$jobs"
cd build
ctest --output-on-failure -j "$jobs" --timeout 600
