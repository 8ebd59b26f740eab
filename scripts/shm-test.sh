#!/usr/bin/env bash
# The system shared-memory extension end to end (docs/frontend.md, "Shared memory"): a node of
# CPU workers and two hook hosts serving the example MLP with [frontend]
# system_shared_memory = true, driven by tritonclient's shared-memory helpers over HTTP and
# gRPC (tests/clients/shm_test.py).
#   scripts/shm-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models"
cp -r examples/models/mlp "$dir/models/"
ferry_start_node "$build" "$dir" "shm$$" $'[frontend]\nsystem_shared_memory = true\ntenants = ["acme"]'
failures=0
"$venv/bin/python" tests/clients/shm_test.py "$address" "$(ferry_listen grpc)" ||
  failures=$((failures + 1))
ferry_finish "shared memory"
