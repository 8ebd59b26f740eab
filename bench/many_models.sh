#!/usr/bin/env bash
# More models than memory (issue 29): 32 copies of the example MLP (2.7 MB of fp32 weights
# each, 86 MB in all) on a node of two CPU workers, open-loop arrivals at 70% of the node's
# capacity with Zipf(1.1) popularity across the models, three ways in one run:
#   resident  no weight budget: every model stays (the reference);
#   lru       [worker] weight_budget of a third of the weights per worker, LRU with floors;
#   naive     the same budget, every miss evicting every model (eviction = "all").
# Capacity is the resident node's closed-loop throughput on the same mix (32 in flight).
# Every answer is checked against the first answer to the same input (all copies alike).
# 768 connections: a client with fewer would run out of them while requests wait for loads
# (Little's law), and its hot models' requests would wait for a free connection, not for
# the server.
# A way whose queues grow without bound (its answers still pending 4x the run's length plus a
# minute after the arrivals end) is reported as "collapsed".
# Prints, and writes to BUILD_DIR/bench-results/many_models.json: per way, goodput, errors,
# the hottest 4 models' p99, overall p99, cold loads and evictions per second; and the lru
# way's hottest-4 p99 over the resident way's.
#   [WAYS="resident lru naive"] [RATE=req/s] [BUDGET=28MiB] bench/many_models.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-20}
models=32
budget=${BUDGET:-28MiB}  # 28MiB: 10 of the 32 MLPs, a third of their weights.
source scripts/lib/node.sh
ferry_venv "$build"
ferry_scratch
mkdir -p "$dir/models" "$build/bench-results"
names=()
for i in $(seq -w 0 $((models - 1))); do
  name="m$i"
  names+=("--model" "$name")
  mkdir "$dir/models/$name"
  cp examples/models/mlp/weights.safetensors "$dir/models/$name/"
  sed -e "s/^name = \"mlp\"/name = \"$name\"/" examples/models/mlp/manifest.toml \
    > "$dir/models/$name/manifest.toml"
done
load=("$build/bench/ferry-load" "${names[@]}" --zipf 1.1 --check --json --warmup 3)

# The sum of a /metrics family over every sample.
metric_sum() {
  curl -s "http://$(ferry_listen metrics)/metrics" |
    awk -v f="$1" '$1 ~ "^"f"[{ ]" {s += $NF} END {printf "%.6f\n", s}'
}

# run WAY EXTRA_TOML RATE: serves the mix at RATE req/s, writes $dir/WAY.json.
run() {
  local way=$1 extra=$2 rate=$3
  ferry_start_node "$build" "$dir" "many$$$way" "$extra"
  local loads0 evictions0 load_s0
  loads0=$(metric_sum ferry_weight_loads_total)
  evictions0=$(metric_sum ferry_weight_evictions_total)
  load_s0=$(metric_sum ferry_weight_load_seconds_total)
  # A way that cannot keep up queues without bound; past the limit it is reported as collapsed.
  local finished=true
  timeout $((seconds * 4 + 60)) "${load[@]}" --url "$address" --rate "$rate" --connections 768 \
    --seconds "$seconds" > "$dir/$way.load.json" || finished=false
  local loads1 evictions1 load_s1
  loads1=$(metric_sum ferry_weight_loads_total)
  evictions1=$(metric_sum ferry_weight_evictions_total)
  load_s1=$(metric_sum ferry_weight_load_seconds_total)
  ferry_stop_node
  python3 - "$dir/$way.load.json" "$way" "$loads0:$loads1" "$evictions0:$evictions1" \
    "$seconds" "$rate" "$load_s0" "$load_s1" "$finished" > "$dir/$way.json" <<'PY'
import json, sys
if sys.argv[9] != "true":
    print(json.dumps({"way": sys.argv[2], "offered_rps": float(sys.argv[6]), "collapsed": True}))
    sys.exit(0)
def delta(pair):
    a, b = pair.split(":")
    return float(b) - float(a)
loads = delta(sys.argv[3])
evictions = delta(sys.argv[4])
load_seconds = float(sys.argv[8]) - float(sys.argv[7])
run = json.load(open(sys.argv[1]))
level = run["levels"][0]
seconds = float(sys.argv[5]) + 3  # The warm-up's loads count too.
hot = level["per_model"][:4]
print(json.dumps({
    "way": sys.argv[2],
    "offered_rps": float(sys.argv[6]),
    "goodput_rps": level["throughput_rps"],
    "errors": level["errors"],
    "latency_us_p50": level["latency_us_p50"],
    "latency_us_p99": level["latency_us_p99"],
    "hot4_latency_us_p99": max(m["latency_us_p99"] for m in hot),
    "hot4_requests": sum(m["requests"] for m in hot),
    "loads_per_s": loads / seconds,
    "evictions_per_s": evictions / seconds,
    "load_ms_mean": 1e3 * load_seconds / loads if loads else 0.0,
}))
PY
}

# Capacity: the resident node, closed loop.
ferry_start_node "$build" "$dir" "cap$$" ""
capacity=$("${load[@]}" --url "$address" --concurrency 32 --seconds 5 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["throughput_rps"])')
ferry_stop_node
rate=${RATE:-$(python3 -c "print(round(0.7 * $capacity))")}
echo "capacity $capacity req/s; offering $rate req/s" >&2

ways=${WAYS:-resident lru naive}
for way in $ways; do
  case $way in
    resident) run resident "" "$rate" ;;
    lru) run lru "[worker]
weight_budget = \"$budget\"" "$rate" ;;
    naive) run naive "[worker]
weight_budget = \"$budget\"
eviction = \"all\"" "$rate" ;;
  esac
done

python3 - "$dir" "$capacity" "$budget" "$models" > "$build/bench-results/many_models.json" <<'PY'
import json, os, sys
d = sys.argv[1]
ways = {w: json.load(open(f"{d}/{w}.json")) for w in ("resident", "lru", "naive")
        if os.path.exists(f"{d}/{w}.json")}
def ratio(way):
    if way in ways and "resident" in ways and not ways[way].get("collapsed"):
        return ways[way]["hot4_latency_us_p99"] / ways["resident"]["hot4_latency_us_p99"]
    return None
out = {
    "bench": "many_models",
    "models": int(sys.argv[4]),
    "weight_budget_per_worker": sys.argv[3],
    "capacity_rps": float(sys.argv[2]),
    "ways": ways,
    "lru_hot4_p99_over_resident": ratio("lru"),
    "naive_hot4_p99_over_resident": ratio("naive"),
}
print(json.dumps(out, indent=1))
PY
cat "$build/bench-results/many_models.json"
