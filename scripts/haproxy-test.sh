#!/usr/bin/env bash
# Two ferry nodes behind HAProxy, configured by `ferryctl haproxy-config`: node A serves the
# MLP, node B the MLP and the CNN. Checks, with curl through HAProxy: every CNN request reaches
# B (A is not ready for it), MLP requests reach both, and while A drains (its agent answers
# `drain`) no MLP request fails. Exit 77 (skipped) without haproxy or tritonclient's venv.
#   scripts/haproxy-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
command -v haproxy >/dev/null || { echo "SKIPPED: no haproxy"; exit 77; }
source scripts/lib/node.sh
ferry_venv "$build"
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$dir" /dev/shm/ferry-hapa$$* /dev/shm/ferry-hapb$$*  # Segments of nodes killed.
}
trap cleanup EXIT
fail() { echo "haproxy-test: $*"; for f in "$dir"/*/ferryd.log; do tail -n 5 "$f"; done; cat "$dir/haproxy.log"; exit 1; }

nodes=()
for node in a b; do
  mkdir -p "$dir/$node/models"
  cp -r examples/models/mlp "$dir/$node/models/"
  [[ $node == b ]] && cp -r examples/models/cnn "$dir/$node/models/"
  # Stopping, a node tells HAProxy first (its agent answers "drain") and serves on meanwhile.
  ferry_start_node "$build" "$dir/$node" "hap$node$$" "drain_notice_seconds = 2.5"
  pids+=("$pid")
  http=$(ferry_listen http); grpc=$(ferry_listen grpc); agent=$(ferry_listen agent)
  nodes+=(--node "127.0.0.1:${http##*:}:${grpc##*:}:${agent##*:}")
  eval "ctl_$node=(\"\${ctl[@]}\")"
done
free_port() { "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
"$build/ctl/ferryctl" haproxy-config "${nodes[@]}" --bind-http "127.0.0.1:$port" \
  --bind-grpc "127.0.0.1:$(free_port)" --runtime-socket "$dir/haproxy.sock" > "$dir/haproxy.cfg"
grep -q "backend ferry_http_cnn" "$dir/haproxy.cfg" || fail "no backend for the CNN"
haproxy -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
pids+=("$!")

# Health checks every second: wait until both nodes serve the MLP through HAProxy.
mlp=$(printf '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[%s0]}]}' "$(printf '0,%.0s' $(seq 783))")
cnn=$(printf '{"inputs":[{"name":"image","datatype":"FP32","shape":[1,3,32,32],"data":[%s0]}]}' "$(printf '0,%.0s' $(seq 3071))")
infer() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' \
  --data-binary "$2" "http://127.0.0.1:$port/v2/models/$1/infer" || true; }
served() {  # requests node $1's workers served for model $2
  local -n c="ctl_$1"
  "${c[@]}" metrics | "$venv/bin/python" -c "import json,sys; print(sum(m['requests_served'] for w in json.load(sys.stdin)['workers'] for m in w['models'] if m['model']=='$2'))"
}
for _ in $(seq 50); do [[ $(infer mlp "$mlp") == 200 ]] && break; sleep 0.2; done
sleep 3  # Every check has run at least twice (rise 2).

for i in $(seq 20); do code=$(infer cnn "$cnn"); [[ $code == 200 ]] || fail "a CNN request was answered $code"; done
for i in $(seq 40); do [[ $(infer mlp "$mlp") == 200 ]] || fail "an MLP request was not served"; done
sleep 0.2
[[ $(served a cnn) == 0 ]] || fail "node A got a CNN request"
(( $(served b cnn) >= 20 )) || fail "node B did not serve the CNN requests"
(( $(served a mlp) > 0 && $(served b mlp) > 0 )) || fail "the MLP requests did not reach both nodes"

# Node A drains: its agent says so, HAProxy stops sending to it, no request fails.
# Requests go on through the notice, A's stop and after it (6 s).
"${ctl_a[@]}" drain >/dev/null
sent=0
end=$((SECONDS + 6))
while (( SECONDS < end )); do
  code=$(infer mlp "$mlp")
  [[ $code == 200 ]] || fail "an MLP request was answered $code while A drained"
  sent=$((sent + 1))
  sleep 0.02
done
kill -0 "${pids[0]}" 2>/dev/null && fail "node A still runs 6 s after its drain"
echo "haproxy-test: CNN only on B ($(served b cnn) requests), MLP on both, $sent served while A drained and stopped"
