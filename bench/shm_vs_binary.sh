#!/usr/bin/env bash
# System shared memory against binary HTTP (docs/benchmarks.md, "Client shared memory"): a node
# of CPU workers and two hook hosts with [frontend] system_shared_memory = true serving a relu
# over rows of 256 Ki floats (1 MiB a row), then bench/shm_vs_binary.py with tritonclient:
# 1 MiB and 16 MiB inputs, both ways alternating in the same run.
#   bench/shm_vs_binary.sh [BUILD_DIR] [ARGS for shm_vs_binary.py, e.g. --json --rounds 6]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "${1:-build}"
shift || true
mkdir -p "$dir/models/wide"
cat > "$dir/models/wide/manifest.toml" <<'TOML'
# relu over 1 MiB rows: the least a model can do with a large tensor.
name = "wide"
version = 1
precision = "fp32"
[[inputs]]
name = "x"
dtype = "FP32"
shape = [-1, 262144]
[[outputs]]
name = "y"
dtype = "FP32"
shape = [-1, 262144]
[batching]
sizes = [1, 16]
[[program]]
op = "relu"
input = "x"
output = "y"
TOML
# No weights: an empty safetensors file (its 8-byte header length, then "{}" padded).
printf '\x08\x00\x00\x00\x00\x00\x00\x00{}      ' > "$dir/models/wide/weights.safetensors"
ferry_start_node "$build" "$dir" "shmbench$$" $'[frontend]\nsystem_shared_memory = true'
failures=0
"$venv/bin/python" bench/shm_vs_binary.py "$address" "$@" || failures=$((failures + 1))
ferry_finish "shared-memory benchmark"
