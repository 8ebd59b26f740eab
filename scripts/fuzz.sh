#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, -Wthread-safety) into build-fuzz/ and
# runs each for
# SECONDS (default 15), starting from its seed corpus. A crash fails the script and leaves
# the reproducer in build-fuzz/.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DFERRY_FUZZ=ON -DFERRY_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target safetensors_fuzz manifest_fuzz node_config_fuzz ferry_backends \
  ferry_hookhost descriptor_fuzz kserve_infer_fuzz grpc_infer_fuzz control_request_fuzz onnx_import_fuzz
# max_len reaches the crafted large inputs' classes (deep nesting, thousands of tensors);
# dictionaries give the mutator TOML and JSON structure; -timeout fails an input over 3 s of
# wall time (the CTest corpus replay holds each input to 1 s of CPU).
declare -A dict=([safetensors]=json.dict [manifest]=toml.dict [node_config]=toml.dict
                 [kserve_infer]=json.dict [control_request]=json.dict)
for target in safetensors manifest node_config descriptor kserve_infer grpc_infer control_request \
              onnx_import; do
  work=build-fuzz/corpus-$target
  mkdir -p "$work"
  args=(-max_total_time="$seconds" -max_len=262144 -timeout=3 -rss_limit_mb=2048 -print_final_stats=1)
  if [[ -n "${dict[$target]:-}" ]]; then
    args+=(-dict="../tests/fuzz/${dict[$target]}")
  fi
  echo "fuzz: $target for ${seconds}s"
  (cd build-fuzz && "./tests/fuzz/${target}_fuzz" "${args[@]}" "corpus-$target" \
      "../tests/fuzz/corpus/$target" 2>&1 | tail -n 3)
done
