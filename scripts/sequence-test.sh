#!/usr/bin/env bash
# Sequences (stateful models) end to end (docs/bundles.md, "Sequences"): a node of two CPU
# workers and two hook hosts serving the example accumulator (examples/sequences), and a copy
# of it bounded to 2 live sequences per worker and 1 s of idleness, driven by tritonclient's
# sequence_id / sequence_start / sequence_end over HTTP, gRPC and a gRPC stream
# (tests/clients/sequence_test.py).
#   scripts/sequence-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models/tight"
cp -r examples/sequences/accumulator "$dir/models/"
cp examples/sequences/accumulator/weights.safetensors "$dir/models/tight/"
sed -e 's/^name = "accumulator"/name = "tight"/' -e 's/^max_sequences = 64 /max_sequences = 2 /' \
    -e 's/^max_sequence_idle_us = 5000000 /max_sequence_idle_us = 1000000 /' \
    examples/sequences/accumulator/manifest.toml > "$dir/models/tight/manifest.toml"
ferry_start_node "$build" "$dir" "seq$$" ""
failures=0
"$venv/bin/python" tests/clients/sequence_test.py "$address" "$(ferry_listen grpc)" \
  "$(ferry_listen metrics)" ||
  failures=$((failures + 1))
ferry_finish sequences
