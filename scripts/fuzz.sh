#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan with no recovery, libstdc++'s
# assertions, -Wthread-safety) into BUILD_DIR (default build-fuzz/) and runs each for SECONDS
# (default 15; 0 builds only), starting from its seed corpus. A crash fails the script and
# leaves the reproducer in BUILD_DIR.
#   scripts/fuzz.sh [SECONDS] [BUILD_DIR]
#   FERRY_FUZZ_ALL=1 scripts/fuzz.sh ...   builds every target in BUILD_DIR, not only the fuzz
#                                          targets: scripts/test.sh's sanitizer pass runs its
#                                          tests in the same build (one build for both).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
build=${2:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DFERRY_FUZZ=ON -DFERRY_CUDA=OFF \
  -DFERRY_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
targets=(safetensors manifest node_config descriptor kserve_infer grpc_infer control_request
         onnx_import)
if [[ "${FERRY_FUZZ_ALL:-0}" == 1 ]]; then
  cmake --build "$build" -j "$(nproc)"
else
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]/%/_fuzz}"
fi
# max_len reaches the crafted large inputs' classes (deep nesting, thousands of tensors);
# dictionaries give the mutator TOML and JSON structure; -timeout fails an input over 3 s of
# wall time (the CTest corpus replay holds each input to 1 s of CPU).
declare -A dict=([safetensors]=json.dict [manifest]=toml.dict [node_config]=toml.dict
                 [kserve_infer]=json.dict [control_request]=json.dict)
[[ "$seconds" == 0 ]] && exit 0
source_dir=$(pwd)
# fuzz TARGET: runs one target for SECONDS; its output goes to BUILD_DIR/fuzz-TARGET.log.
fuzz() {
  local target=$1
  mkdir -p "$build/corpus-$target"
  local args=(-max_total_time="$seconds" -max_len=262144 -timeout=3 -rss_limit_mb=2048
              -print_final_stats=1)
  if [[ -n "${dict[$target]:-}" ]]; then
    args+=(-dict="$source_dir/tests/fuzz/${dict[$target]}")
  fi
  (cd "$build" && "./tests/fuzz/${target}_fuzz" "${args[@]}" "corpus-$target" \
      "$source_dir/tests/fuzz/corpus/$target") > "$build/fuzz-$target.log" 2>&1
}
# One target per CPU at a time (each libFuzzer run is one process on one CPU); a failed one
# fails the script once all have run, with its log's end.
failed=()
for ((i = 0; i < ${#targets[@]}; i += $(nproc))); do
  batch=("${targets[@]:i:$(nproc)}")
  pids=()
  for target in "${batch[@]}"; do
    echo "fuzz: $target for ${seconds}s"
    fuzz "$target" &
    pids+=($!)
  done
  for j in "${!batch[@]}"; do
    if ! wait "${pids[$j]}"; then
      failed+=("${batch[$j]}")
    fi
    echo "fuzz: ${batch[$j]} done"
    tail -n 3 "$build/fuzz-${batch[$j]}.log" | sed 's/^/  /'
  done
done
if ((${#failed[@]} > 0)); then
  for target in "${failed[@]}"; do
    echo "fuzz: $target FAILED (reproducer in $build/; the log's end:)"
    tail -n 40 "$build/fuzz-$target.log"
  done
  exit 1
fi
