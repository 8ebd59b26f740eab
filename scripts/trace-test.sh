#!/usr/bin/env bash
# The trace extension end to end (docs/frontend.md, "Tracing"): an OTLP/HTTP receiver
# (tests/clients/otlp_receiver.py) and a node of CPU workers and two hook hosts exporting to
# it, driven by tritonclient over HTTP and gRPC (tests/clients/trace_test.py).
#   scripts/trace-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models"
cp -r examples/models/mlp "$dir/models/"
"$venv/bin/python" tests/clients/otlp_receiver.py "$dir/port" "$dir/spans" &
receiver=$!
trap 'kill $receiver 2>/dev/null; if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [[ -s "$dir/port" ]] && break; sleep 0.05; done
ferry_start_node "$build" "$dir" "trace$$" "[trace]
otlp_endpoint = \"http://127.0.0.1:$(cat "$dir/port")/v1/traces\""
failures=0
"$venv/bin/python" tests/clients/trace_test.py "$address" "$(ferry_listen grpc)" "$dir/spans" \
  "$(ferry_listen metrics)" ||
  failures=$((failures + 1))
ferry_finish trace
