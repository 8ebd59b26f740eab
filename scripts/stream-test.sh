#!/usr/bin/env bash
# Decoupled streaming end to end (docs/hooks.md, "Decoupled pipelines"): a node of CPU
# workers and two hook hosts serving the example MLP and the row_stream pipeline
# (examples/hooks/row_stream.c: one response per row), driven by tritonclient's gRPC stream
# API (tests/clients/stream_test.py).
#   scripts/stream-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models/row_stream"
cp -r examples/models/mlp "$dir/models/"
cp examples/pipelines/row_stream.toml "$dir/models/row_stream/manifest.toml"
cp "$build/examples/hooks/row_stream.so" "$dir/models/row_stream/"
ferry_start_node "$build" "$dir" "stream$$" $'[frontend]\nsystem_shared_memory = true'
failures=0
"$venv/bin/python" tests/clients/stream_test.py "$address" "$(ferry_listen grpc)" ||
  failures=$((failures + 1))
ferry_finish stream
