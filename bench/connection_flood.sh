#!/usr/bin/env bash
# Idle-connection floods (8,400 on gRPC, 2,000 on HTTP by default) against a node of two CPU
# workers and two hook hosts serving the MLP, and a normal client that must still be served
# on new connections (bench/connection_flood.py). Prints JSON.
#   bench/connection_flood.sh [BUILD_DIR] [GRPC_IDLE] [HTTP_IDLE]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
source scripts/lib/node.sh
ferry_venv "$build"
ferry_scratch
mkdir "$dir/models"
cp -r examples/models/mlp "$dir/models/"
ferry_start_node "$build" "$dir" "flood$$" ""
grpc=$("${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['listen']['grpc'])")
"$venv/bin/python" bench/connection_flood.py "$address" "$grpc" \
  --grpc-idle "${2:-8400}" --http-idle "${3:-2000}"
ferry_stop_node
