#!/usr/bin/env bash
# ferry against Triton on this machine, same client (ferry-load), same MLP weights, same run.
# Triton: the python backend computing the MLP with numpy (OpenBLAS, one thread), dynamic
# batching up to 32, one instance (bench/peers/triton). ferry: ferryd with one CPU worker (one
# intra-op thread) and one hook host. Both on CPU: this machine has no GPU.
#   bench/vs_triton.sh [BUILD_DIR] [SECONDS] [ROUNDS]
# JSON in BUILD_DIR/bench-results/vs_triton.json. Each round measures Triton, then ferry (so
# the servers alternate over the rounds; default 3 rounds): for each encoding, HTTP with
# binary tensors, HTTP with KServe JSON bodies (9 significant digits per float, JSON answers,
# as curl and most HTTP clients send) and gRPC, closed loop at 1, 8 and 32 requests in
# flight, then open loop at 80% of Triton's closed-loop peak on that encoding in that round,
# for p99 at equal load. Prints every level, each round's ratios and their medians.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-5}
rounds=${3:-3}
work=${FERRY_TRITON_DIR:-$build/triton}
out="$build/bench-results"
mkdir -p "$out" "$work"
bench/peers/triton/setup.sh "$work/venv" "$work/repo" >/dev/null
dir=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
wait_ready() {
  for _ in $(seq 300); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://$1/v2/health/ready") == 200 ]] && return 0
    sleep 0.1
  done
  echo "$2 did not become ready"; return 1
}
load=("$build/bench/ferry-load" --model mlp --warmup 1 --seconds "$seconds" --json)
peak() {
  python3 -c 'import json,sys; print(int(0.8 * max(l["throughput_rps"] for l in json.load(open(sys.argv[1]))["levels"])))' "$1"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# One server's levels: SERVER ROUND HTTP_ADDRESS GRPC_ADDRESS; the open-loop rates come from
# Triton's files of the same round.
measure() {
  local server=$1 round=$2 http=$3 grpc=$4 prefix="$dir/r$2_$1"
  for encoding in binary json grpc; do
    local args=(--url "$http" --encoding "$encoding")
    [[ $encoding == grpc ]] && args=(--protocol grpc --url "$grpc")
    "${load[@]}" "${args[@]}" --label "$server" --concurrency 1,8,32 > "${prefix}_$encoding.json"
    local rate
    rate=$(peak "$dir/r${round}_triton_$encoding.json")
    "${load[@]}" "${args[@]}" --label "$server" --rate "$rate" --connections 64 \
      > "${prefix}_${encoding}_rate.json"
  done
}

source bench/mlp_node.sh
write_mlp_node "$dir" "vstriton$$" 127.0.0.1:29000 127.0.0.1:29001
for round in $(seq "$rounds"); do
  bench/peers/triton/run.sh "$work/venv" "$work/repo" 28000 > "$dir/triton.log" 2>&1 &
  pid=$!
  wait_ready 127.0.0.1:28000 Triton
  measure triton "$round" 127.0.0.1:28000 127.0.0.1:28001
  stop
  "$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
  pid=$!
  wait_ready 127.0.0.1:29000 ferry
  measure ferry "$round" 127.0.0.1:29000 127.0.0.1:29001
  stop
done

python3 bench/vs_triton_report.py "$dir" "$rounds" "$out/vs_triton.json"
