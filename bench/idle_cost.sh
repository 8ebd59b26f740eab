#!/usr/bin/env bash
# What an idle node costs: CPU (all of ferryd's processes together, as a share of one core)
# and resident memory (VmRSS, shared memory touched included), after it served a short burst
# so that every path it uses has been touched. ferryd as bench/vs_triton.sh runs it: one CPU
# worker, one hook host, the example MLP. When Triton is set up (bench/peers/triton, in
# BUILD_DIR/triton or FERRY_TRITON_DIR), the same is measured for it in the same run: the
# tritonserver process and its python backend stub, the same model, the same burst.
#   bench/idle_cost.sh [BUILD_DIR] [SECONDS] [--check]
#   FERRY_SPIN_US=200 FERRY_WORKER_SPIN_US=200 bench/idle_cost.sh ...  sets [hooks] and
#   [worker] spin_us (absent by default: both decide by their CPUs, polling with 4 or more)
# JSON in BUILD_DIR/bench-results/idle_cost.json; --check exits 1 when ferry idles above 1%
# of a core or, with Triton measured, above Triton's RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-10}
check=${3:-}
triton=${FERRY_TRITON_DIR:-$build/triton}
out="$build/bench-results"
mkdir -p "$out"
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
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
# The process `root` and its descendants.
tree() {
  local p=$1
  echo "$p"
  for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done
}
# "ticks rss_kib" summed over the processes given.
sample() {
  local ticks=0 rss=0
  for p in "$@"; do
    [[ -r /proc/$p/stat ]] || continue
    ticks=$((ticks + $(awk '{print $14 + $15}' /proc/"$p"/stat)))
    rss=$((rss + $(awk '/^VmRSS/ {print $2}' /proc/"$p"/status)))
  done
  echo "$ticks $rss"
}
# Serves a burst at `url`, waits, then measures for `seconds`: "cpu_percent rss_mib".
measure() {
  local url=$1 root=$2
  "$build/bench/ferry-load" --url "$url" --model mlp --concurrency 8 --warmup 0 --seconds 1 \
    > /dev/null
  sleep 2
  mapfile -t procs < <(tree "$root")
  read -r t0 _ < <(sample "${procs[@]}")
  sleep "$seconds"
  read -r t1 rss < <(sample "${procs[@]}")
  python3 -c "import os,sys; t=int(sys.argv[1]); print(100.0 * t / os.sysconf('SC_CLK_TCK') / float(sys.argv[2]), int(sys.argv[3]) / 1024)" \
    "$((t1 - t0))" "$seconds" "$rss"
}

mkdir "$dir/models" && cp -r examples/models/mlp "$dir/models/mlp"
cat > "$dir/node.toml" <<TOML
[node]
name = "idle$$"
devices = "cpu:1"
hookhosts = 1
model_repository = "$dir/models"
shm_size = "256MiB"
[node.listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[cpu]
threads = 1
pin = false
[hooks]
${FERRY_SPIN_US:+spin_us = $FERRY_SPIN_US}
[worker]
${FERRY_WORKER_SPIN_US:+spin_us = $FERRY_WORKER_SPIN_US}
TOML
"$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
ferryd=$!
pids+=("$ferryd")
for _ in $(seq 300); do
  address=$("$build/ctl/ferryctl" --socket "$dir/control.sock" --json status 2>/dev/null |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["listen"]["http"] if s["state"]=="ready" else "")' 2>/dev/null || true)
  [[ -n $address ]] && break
  sleep 0.1
done
[[ -n $address ]] || { echo "ferryd did not become ready"; cat "$dir/ferryd.log"; exit 1; }
read -r ferry_cpu ferry_rss < <(measure "$address" "$ferryd")
kill "$ferryd"; wait "$ferryd" 2>/dev/null || true; pids=()

triton_cpu=null triton_rss=null
if [[ -x $triton/venv/bin/python ]]; then
  bench/peers/triton/setup.sh "$triton/venv" "$triton/repo" > /dev/null
  bench/peers/triton/run.sh "$triton/venv" "$triton/repo" 38000 > "$dir/triton.log" 2>&1 &
  pids+=($!)
  wait_ready 127.0.0.1:38000 Triton
  read -r triton_cpu triton_rss < <(measure 127.0.0.1:38000 "${pids[0]}")
fi

python3 - "$out/idle_cost.json" "$seconds" "$ferry_cpu" "$ferry_rss" "$triton_cpu" "$triton_rss" "$check" <<'PY'
import json, sys
out, seconds, fc, fr, tc, tr, check = sys.argv[1:]
r = {"seconds": float(seconds), "ferry": {"cpu_percent_of_core": float(fc), "rss_mib": float(fr)}}
if tc != "null":
    r["triton"] = {"cpu_percent_of_core": float(tc), "rss_mib": float(tr)}
    r["rss_ratio"] = float(fr) / float(tr)
print(json.dumps(r))
json.dump(r, open(out, "w"), indent=1)
failed = float(fc) > 1.0 or (tc != "null" and float(fr) > float(tr))
sys.exit(1 if check == "--check" and failed else 0)
PY
