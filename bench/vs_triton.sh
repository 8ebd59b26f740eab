#!/usr/bin/env bash
# ferry against Triton on this machine, same client (ferry-load), same MLP weights, same run.
# Triton: the python backend computing the MLP with numpy (OpenBLAS, one thread), dynamic
# batching up to 32, one instance (bench/peers/triton). ferry: ferryd with one CPU worker (one
# intra-op thread) and one hook host. Both on CPU: this machine has no GPU.
#   bench/vs_triton.sh [BUILD_DIR] [SECONDS]      JSON in BUILD_DIR/bench-results/vs_triton.json
# Closed loop at 1, 8 and 32 requests in flight, then open loop at the same offered rate for
# both (80% of Triton's closed-loop peak), for p99 at equal load; over HTTP, then the same over
# gRPC (each protocol's rate from Triton's peak on it); and over HTTP with KServe JSON bodies
# (9 significant digits per float, JSON answers), as curl and most HTTP clients send.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
seconds=${2:-5}
work=${FERRY_TRITON_DIR:-$build/triton}
out="$build/bench-results"
mkdir -p "$out" "$work"
bench/peers/triton/setup.sh "$work/venv" "$work/repo" >/dev/null
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
load=("$build/bench/ferry-load" --model mlp --warmup 1 --seconds "$seconds" --json)

# Triton.
bench/peers/triton/run.sh "$work/venv" "$work/repo" 28000 > "$dir/triton.log" 2>&1 &
pids+=($!)
wait_ready 127.0.0.1:28000 Triton
"${load[@]}" --url 127.0.0.1:28000 --label triton --concurrency 1,8,32 > "$dir/triton.json"
peak=$(python3 -c 'import json,sys; print(max(l["throughput_rps"] for l in json.load(open(sys.argv[1]))["levels"]))' "$dir/triton.json")
rate=$(python3 -c "print(int($peak * 0.8))")
"${load[@]}" --url 127.0.0.1:28000 --label triton --rate "$rate" --connections 64 > "$dir/triton_rate.json"
"${load[@]}" --encoding json --url 127.0.0.1:28000 --label triton --concurrency 1,8,32 > "$dir/triton_json.json"
json_peak=$(python3 -c 'import json,sys; print(max(l["throughput_rps"] for l in json.load(open(sys.argv[1]))["levels"]))' "$dir/triton_json.json")
json_rate=$(python3 -c "print(int($json_peak * 0.8))")
"${load[@]}" --encoding json --url 127.0.0.1:28000 --label triton --rate "$json_rate" --connections 64 > "$dir/triton_json_rate.json"
"${load[@]}" --protocol grpc --url 127.0.0.1:28001 --label triton --concurrency 1,8,32 > "$dir/triton_grpc.json"
grpc_peak=$(python3 -c 'import json,sys; print(max(l["throughput_rps"] for l in json.load(open(sys.argv[1]))["levels"]))' "$dir/triton_grpc.json")
grpc_rate=$(python3 -c "print(int($grpc_peak * 0.8))")
"${load[@]}" --protocol grpc --url 127.0.0.1:28001 --label triton --rate "$grpc_rate" --connections 64 > "$dir/triton_grpc_rate.json"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()

# ferry.
mkdir "$dir/models" && ln -s "$PWD/examples/models/mlp" "$dir/models/mlp"
cat > "$dir/node.toml" <<TOML
[node]
name = "vstriton$$"
devices = "cpu:1"
hookhosts = 1
model_repository = "$dir/models"
shm_size = "256MiB"
[node.listen]
http = "127.0.0.1:29000"
grpc = "127.0.0.1:29001"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[cpu]
threads = 1
pin = false
[hooks]
threads = 2
TOML
"$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
pids+=($!)
wait_ready 127.0.0.1:29000 ferry
"${load[@]}" --url 127.0.0.1:29000 --label ferry --concurrency 1,8,32 > "$dir/ferry.json"
"${load[@]}" --url 127.0.0.1:29000 --label ferry --rate "$rate" --connections 64 > "$dir/ferry_rate.json"
"${load[@]}" --encoding json --url 127.0.0.1:29000 --label ferry --concurrency 1,8,32 > "$dir/ferry_json.json"
"${load[@]}" --encoding json --url 127.0.0.1:29000 --label ferry --rate "$json_rate" --connections 64 > "$dir/ferry_json_rate.json"
"${load[@]}" --protocol grpc --url 127.0.0.1:29001 --label ferry --concurrency 1,8,32 > "$dir/ferry_grpc.json"
"${load[@]}" --protocol grpc --url 127.0.0.1:29001 --label ferry --rate "$grpc_rate" --connections 64 > "$dir/ferry_grpc_rate.json"

python3 - "$dir" "$out/vs_triton.json" <<'PY'
import json, sys
d, out = sys.argv[1], sys.argv[2]
names = [f"{s}{p}" for p in ("", "_json", "_grpc") for s in ("triton", "ferry")]
r = {k: json.load(open(f"{d}/{k}{x}.json")) for n in names for k, x in ((n, ""), (n + "_rate", ""))}
print(f"{'level':<12} {'server':<12} {'req/s':>8} {'p50 us':>8} {'p99 us':>8} {'overhead p50':>13} {'errors':>7}")
for name in names:
    for l in r[name]["levels"] + r[name + "_rate"]["levels"]:
        level = ("rate " if l["mode"] == "rate" else "conc ") + str(int(l["offered"]))
        server = name.replace("_", " ") if "_" in name else name + " http"
        print(f"{level:<12} {server:<12} {l['throughput_rps']:>8.0f} {l['latency_us_p50']:>8.0f} "
              f"{l['latency_us_p99']:>8.0f} {str(int(l['overhead_us_p50'])) if 'overhead_us_p50' in l else '-':>13} "
              f"{sum(l['errors'].values()):>7}")
peak = lambda k: max(l["throughput_rps"] for l in r[k]["levels"])
p99 = lambda k: r[k]["levels"][0]["latency_us_p99"]
summary = {
    "throughput_ratio_at_saturation": peak("ferry") / peak("triton"),
    "p99_ratio_at_equal_rate": p99("ferry_rate") / p99("triton_rate"),
    "offered_rate": r["ferry_rate"]["levels"][0]["offered"],
    "grpc_throughput_ratio_at_saturation": peak("ferry_grpc") / peak("triton_grpc"),
    "grpc_p99_ratio_at_equal_rate": p99("ferry_grpc_rate") / p99("triton_grpc_rate"),
    "grpc_offered_rate": r["ferry_grpc_rate"]["levels"][0]["offered"],
    "json_throughput_ratio_at_1": r["ferry_json"]["levels"][0]["throughput_rps"] /
                                  r["triton_json"]["levels"][0]["throughput_rps"],
    "json_throughput_ratio_at_32": r["ferry_json"]["levels"][2]["throughput_rps"] /
                                   r["triton_json"]["levels"][2]["throughput_rps"],
    "json_p99_ratio_at_32": r["ferry_json"]["levels"][2]["latency_us_p99"] /
                            r["triton_json"]["levels"][2]["latency_us_p99"],
    "json_p99_ratio_at_equal_rate": p99("ferry_json_rate") / p99("triton_json_rate"),
    "json_offered_rate": r["ferry_json_rate"]["levels"][0]["offered"],
}
print(json.dumps(summary))
json.dump({"results": r, "summary": summary}, open(out, "w"), indent=1)
PY
