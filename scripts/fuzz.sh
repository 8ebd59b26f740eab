#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and runs each for
# SECONDS (default 15), starting from its seed corpus. A crash fails the script and leaves
# the reproducer in build-fuzz/.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFERRY_FUZZ=ON -DFERRY_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target safetensors_fuzz manifest_fuzz node_config_fuzz \
  descriptor_fuzz
for target in safetensors manifest node_config descriptor; do
  work=build-fuzz/corpus-$target
  mkdir -p "$work"
  echo "fuzz: $target for ${seconds}s"
  (cd build-fuzz && "./tests/fuzz/${target}_fuzz" -max_total_time="$seconds" -max_len=4096 \
      -print_final_stats=1 "corpus-$target" "../tests/fuzz/corpus/$target" 2>&1 | tail -n 3)
done
