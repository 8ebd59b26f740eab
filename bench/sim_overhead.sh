#!/usr/bin/env bash
# ferry's server overhead per request on the simulated backend: ferryd with one sim worker
# (every dispatch a fixed 100 us) and one hook host, ferry-load at one request in flight over
# HTTP; overhead = the answer's total server time minus its compute time: from the hook host's
# Submit (after the request's parse) to the answer joined (before its encoding), that is the
# checks, the copy into the arena, the ring hops and wake-ups both ways and the join. The
# parse and the encoding show in the latency, which the client measures.
#   bench/sim_overhead.sh [BUILD_DIR] [SECONDS] [RUNS] [--check]
#   FERRY_SPIN_US=200 bench/sim_overhead.sh ...   sets [hooks] spin_us (default: absent, so the
#                                                 hook host decides by its CPUs)
#   FERRY_WORKER_SPIN_US=200 bench/sim_overhead.sh ...  sets [worker] spin_us (default: absent,
#                                                 so the worker decides by its CPUs)
#   FERRY_PROTOCOL=grpc bench/sim_overhead.sh ...  over gRPC ModelInfer (JSON: sim_overhead_grpc.json)
#   FERRY_ENCODING=json bench/sim_overhead.sh ...  KServe JSON bodies both ways (sim_overhead_json.json)
#   FERRY_RATE=200 bench/sim_overhead.sh ...  open loop at this many requests/s instead of one in
#                                             flight; a run that falls under half the rate fails
# A run with any failed request exits 1: its figures would measure nothing.
# Prints each run's overhead p50 / p99 and the median of the p50s; JSON in
# BUILD_DIR/bench-results/sim_overhead.json. --check exits 1 when that median is over 50 us
# (issue 35's target). Each run also prints the medians of the overhead's parts the server
# reports: its checks and routing (validate), the worker's queue, and the rest (the hand-offs
# both ways and the join).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-3}
runs=${3:-3}
check=${4:-}
protocol=${FERRY_PROTOCOL:-http}
encoding=${FERRY_ENCODING:-binary}
out="$build/bench-results"
mkdir -p "$out"
dir=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir "$dir/models" && cp -r examples/models/mlp "$dir/models/mlp"
cat > "$dir/node.toml" <<TOML
[node]
name = "simoverhead$$"
devices = "cpu:1"
backend = "sim"
hookhosts = 1
model_repository = "$dir/models"
shm_size = "256MiB"
[node.listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[sim]
fixed_us = 100
per_row_us = 0
[hooks]
threads = 2
${FERRY_SPIN_US:+spin_us = $FERRY_SPIN_US}
[worker]
${FERRY_WORKER_SPIN_US:+spin_us = $FERRY_WORKER_SPIN_US}
TOML
"$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
pid=$!
address=
for _ in $(seq 300); do
  address=$("$build/ctl/ferryctl" --socket "$dir/control.sock" --json status 2>/dev/null |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["listen"][sys.argv[1]] if s["state"]=="ready" else "")' "$protocol" 2>/dev/null || true)
  [[ -n $address ]] && break
  sleep 0.1
done
[[ -n $address ]] || { echo "ferryd did not become ready"; cat "$dir/ferryd.log"; exit 1; }
for i in $(seq "$runs"); do
  "$build/bench/ferry-load" --protocol "$protocol" --encoding "$encoding" --url "$address" \
    --model mlp --concurrency 1 ${FERRY_RATE:+--rate $FERRY_RATE --connections 4} \
    --warmup 1 --seconds "$seconds" --json > "$dir/run$i.json"
done
name=sim_overhead$([[ $protocol == grpc ]] && echo _grpc || true)$([[ $encoding == json ]] && echo _json || true)$([[ -n ${FERRY_RATE:-} ]] && echo _rate || true)
python3 - "$dir" "$runs" "$out/$name.json" "$check" "${FERRY_RATE:-0}" <<'PY'
import json, statistics, sys
d, runs, out, check = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rate = float(sys.argv[5])
levels = [json.load(open(f"{d}/run{i + 1}.json"))["levels"][0] for i in range(runs)]
failed = sum(sum(l["errors"].values()) for l in levels)
if failed or any("overhead_us_p50" not in l for l in levels):
    print(f"{failed} request(s) failed, or the server reported no timings: nothing measured")
    sys.exit(1)
if rate and any(l["throughput_rps"] < rate / 2 for l in levels):
    print(f"the open loop did not hold {rate:.0f} requests/s: "
          + ", ".join(f"{l['throughput_rps']:.0f}" for l in levels))
    sys.exit(1)
for l in levels:
    print(f"overhead p50 {l['overhead_us_p50']:.0f} us  p99 {l['overhead_us_p99']:.0f} us  "
          f"latency p50 {l['latency_us_p50']:.0f} us  {l['throughput_rps']:.0f} req/s")
    if "overhead_parts_us_p50" in l:
        parts = l["overhead_parts_us_p50"]
        print("  parts p50: " + "  ".join(f"{k} {v:.0f} us" for k, v in parts.items()))
median = statistics.median(l["overhead_us_p50"] for l in levels)
summary = {"overhead_us_p50_median": median, "target_us": 50, "met": median <= 50}
print(json.dumps(summary))
json.dump({"runs": levels, "summary": summary}, open(out, "w"), indent=1)
sys.exit(1 if check == "--check" and median > 50 else 0)
PY
