#!/usr/bin/env bash
# Where ferry's CPU goes per request, thread by thread: the node bench/vs_triton.sh measures
# (bench/mlp_node.sh: one CPU worker with one intra-op thread, one hook host, the example MLP)
# under one closed loop of ferry-load, with every thread's CPU time and context switches
# (named threads: common/thread_name.h), the client's CPU, the machine's idle share and the
# batches the worker executed, each divided by the requests executed.
#   bench/cpu_profile.sh [BUILD_DIR] [ENCODING] [CONCURRENCY] [SECONDS]
# ENCODING: grpc (default), binary or json (HTTP). JSON in
# BUILD_DIR/bench-results/cpu_profile_ENCODING_CONCURRENCY.json. To compare builds of one
# process, set FERRY_WORKER_BINARY or FERRY_HOOKHOST_BINARY to another ferry-worker or
# ferry-hookhost (e.g. one built from an earlier commit) and alternate runs with and without.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
encoding=${2:-grpc}
concurrency=${3:-32}
seconds=${4:-5}
out="$build/bench-results"
mkdir -p "$out"
dir=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
source bench/mlp_node.sh
write_mlp_node "$dir" "cpuprofile$$" 127.0.0.1:0 127.0.0.1:0
"$build/supervisor/ferryd" --config "$dir/node.toml" \
  ${FERRY_WORKER_BINARY:+--worker-binary "$FERRY_WORKER_BINARY"} \
  ${FERRY_HOOKHOST_BINARY:+--hookhost-binary "$FERRY_HOOKHOST_BINARY"} > "$dir/ferryd.log" 2>&1 &
pid=$!
listen=
for _ in $(seq 300); do
  listen=$("$build/ctl/ferryctl" --socket "$dir/control.sock" --json status 2>/dev/null |
    python3 -c 'import json,sys; s=json.load(sys.stdin); l=s["listen"]
print(l["http"], l["grpc"], l["metrics"]) if s["state"] == "ready" else None' 2>/dev/null || true)
  [[ -n $listen ]] && break
  sleep 0.1
done
[[ -n $listen ]] || { echo "ferryd did not become ready"; cat "$dir/ferryd.log"; exit 1; }
read -r http grpc metrics <<< "$listen"
load=("$build/bench/ferry-load" --model mlp --json)
if [[ $encoding == grpc ]]; then
  load+=(--protocol grpc --url "$grpc")
else
  load+=(--url "$http" --encoding "$encoding")
fi
# Warm: every thread started (the execution thread starts with the first batch), every
# cost learned, before the counters are read.
"${load[@]}" --concurrency "$concurrency" --seconds 1 > /dev/null
python3 bench/cpu_profile.py "$pid" "$metrics" "$out/cpu_profile_${encoding}_$concurrency.json" \
  -- "${load[@]}" --concurrency "$concurrency" --seconds "$seconds"
