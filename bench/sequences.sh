#!/usr/bin/env bash
# Server-held sequence state against client-carried state (docs/benchmarks.md, "Sequences"):
# a node of two CPU workers and two hook hosts serving the example accumulator
# (examples/sequences: the state kept by the worker) and "carried", the same program without
# [sequence] (the client sends the state and gets it back), then bench/sequences.py with
# tritonclient over gRPC, both ways alternating in the same run.
#   bench/sequences.sh [BUILD_DIR] [ARGS for sequences.py, e.g. --json --rounds 6]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "${1:-build}"
shift || true
mkdir -p "$dir/models/carried"
cp -r examples/sequences/accumulator "$dir/models/"
cp examples/sequences/accumulator/weights.safetensors "$dir/models/carried/"
sed -e 's/^name = "accumulator"/name = "carried"/' -e '/^\[sequence\]/,$d' \
  examples/sequences/accumulator/manifest.toml > "$dir/models/carried/manifest.toml"
ferry_start_node "$build" "$dir" "seqbench$$" ""
failures=0
"$venv/bin/python" bench/sequences.py "$(ferry_listen grpc)" "$@" || failures=$((failures + 1))
ferry_finish "sequence benchmark"
