#!/usr/bin/env bash
# What a plugin that loops forever costs the other models: the MLP's throughput over HTTP with
# and without one more client calling a model whose plugin spins in every call
# (bench/looping_plugin.py), on a node of two CPU workers and two hook hosts. Prints JSON with
# the ratio; run it twice to see the cost before ferryd marks the plugin failed
# (MAX_FAULTS = 1000) and with the default (3).
#   bench/looping_plugin.sh [BUILD_DIR] [SECONDS_PER_PHASE] [MAX_FAULTS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-20}
max_faults=${3:-3}
source scripts/lib/node.sh
ferry_venv "$build"
ferry_scratch
mkdir "$dir/models"
cp -r examples/models/mlp "$dir/models/"
ferry_escape_bundle "$build" "$dir" spin spin
ferry_start_node "$build" "$dir" "loop$$" "[hooks]
max_plugin_faults = $max_faults"
"$venv/bin/python" bench/looping_plugin.py "$address" "$dir/control.sock" "$build/ctl/ferryctl" \
  --seconds "$seconds"
ferry_stop_node
