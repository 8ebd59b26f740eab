#!/usr/bin/env bash
# Three ferry nodes, each in its own network namespace, behind HAProxy in a fourth, joined by
# veth pairs on a bridge (docs/operations.md, "Several nodes"): the multi-host recipe on one
# machine. Nodes 1-3 serve the MLP; only nodes 2 and 3 serve the CNN. Through HAProxy, with
# ferry-load for the load and HAProxy's own counters (its runtime socket) for where requests
# went, it checks in order:
#   1. throughput through HAProxy against the nodes driven directly (alone, and all at once);
#   2. CNN requests reach only nodes 2 and 3;
#   3. the MLP unloaded from node 1 stops reaching it;
#   4. SIGKILL of node 2 under load fails at most the requests it held, and HAProxy routes
#      around it (no failure once its checks have run);
#   5. node 2 restarted is used again;
#   6. SIGTERM of node 3 under load (it drains, its agent answering "drain") loses nothing.
# Prints one JSON line of figures (docs/benchmarks.md). Needs root, ip and haproxy: exit 77
# (skipped) otherwise.
#   scripts/netns-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
[[ $(id -u) == 0 ]] || { echo "SKIPPED: network namespaces need root"; exit 77; }
command -v ip >/dev/null && command -v haproxy >/dev/null || { echo "SKIPPED: no ip or haproxy"; exit 77; }
tag=$$
net=10.213.47
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in 1 2 3 h; do ip netns del "fy$tag-$ns" 2>/dev/null || true; done
  ip link del "fb$tag" 2>/dev/null || true
  rm -rf "$dir" /dev/shm/ferry-netns"$tag"-*  # The segments of nodes killed, not stopped.
}
trap cleanup EXIT
fail() {
  echo "netns-test: $*"
  for f in "$dir"/n*/ferryd.log; do echo "== $f"; tail -n 5 "$f"; done
  tail -n 20 "$dir/haproxy.log" 2>/dev/null
  exit 1
}
ip netns add "fy$tag-h" 2>/dev/null && ip link add "fb$tag" type bridge 2>/dev/null ||
  { echo "SKIPPED: cannot create network namespaces and a bridge here"; exit 77; }
ip addr add "$net.254/24" dev "fb$tag"
ip link set "fb$tag" up
# Namespace $1 (1-3: node i at $net.i; h: HAProxy at $net.100) with a veth on the bridge.
join() {
  local ns="fy$tag-$1" address=$2
  [[ $1 == h ]] || ip netns add "$ns"
  ip link add "fv$tag-$1" type veth peer name eth0 netns "$ns"
  ip link set "fv$tag-$1" master "fb$tag" up
  ip netns exec "$ns" ip addr add "$address/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
}
for i in 1 2 3; do join "$i" "$net.$i"; done
join h "$net.100"

# Node i: ferryd in its namespace, on $net.i ports 8000-8003, its control socket in $dir/ni.
start_node() {
  local i=$1 d="$dir/n$1"
  ip netns exec "fy$tag-$i" "$build/supervisor/ferryd" --config "$d/node.toml" >> "$d/ferryd.log" 2>&1 &
  node_pid[$i]=$!
  pids+=("$!")
  for _ in $(seq 300); do
    [[ $("$build/ctl/ferryctl" --socket "$d/control.sock" --json status 2>/dev/null |
       /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null) == ready ]] && return
    sleep 0.1
  done
  fail "node $i did not become ready"
}
declare -a node_pid
for i in 1 2 3; do
  d="$dir/n$i"
  mkdir -p "$d/models"
  cp -r examples/models/mlp "$d/models/"
  (( i > 1 )) && cp -r examples/models/cnn "$d/models/"
  cat > "$d/node.toml" <<TOML
[node]
name = "netns$tag-$i"
devices = "cpu:1"
hookhosts = 1
model_repository = "$d/models"
shm_size = "64MiB"
[node.listen]
http = "$net.$i:8000"
grpc = "$net.$i:8001"
metrics = "$net.$i:8002"
agent = "$net.$i:8003"
[cpu]
pin = false
threads = 1
[supervisor]
control_socket = "$d/control.sock"
drain_notice_seconds = 3.5
TOML
  start_node "$i"
done
ctl() { "$build/ctl/ferryctl" --socket "$dir/n$1/control.sock" "${@:2}"; }

"$build/ctl/ferryctl" haproxy-config --node "$net.1:8000:8001:8003" --node "$net.2:8000:8001:8003" \
  --node "$net.3:8000:8001:8003" --bind-http "$net.100:9000" --bind-grpc "$net.100:9001" \
  --runtime-socket "$dir/haproxy.sock" > "$dir/haproxy.cfg"
haproxy -c -q -f "$dir/haproxy.cfg" || fail "haproxy -c refused the generated configuration"
ip netns exec "fy$tag-h" haproxy -db -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
pids+=("$!")
# Sessions HAProxy sent to server node$2 (0-based) of backend $1, from its runtime socket.
sessions() {
  /usr/bin/python3 - "$dir/haproxy.sock" "$1" "node$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError:  # HAProxy not listening yet.
    print(-1); sys.exit()
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
lines = data.decode().splitlines()
head = lines[0].lstrip("# ").split(",")
for line in lines[1:]:
    row = dict(zip(head, line.split(",")))
    if row.get("pxname") == sys.argv[2] and row.get("svname") == sys.argv[3]:
        print(row["stot"]); break
else:
    print(-1)
PY
}
load() {  # load URL MODEL CONCURRENCY SECONDS -> one JSON object
  "$build/bench/ferry-load" --url "$1" --model "$2" --concurrency "$3" --seconds "$4" --warmup 0.5 --json
}
field() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); r=d['levels'][0] if 'levels' in d else d; print($1)"; }
errors='sum(r["errors"].values())'
for _ in $(seq 100); do
  [[ $(sessions ferry_http_mlp 0) -ge 0 && $(curl -s -o /dev/null -w '%{http_code}' "http://$net.100:9000/v2/models/mlp/ready") == 200 ]] && break
  sleep 0.2
done
sleep 3  # Every check has run at least twice (rise 2).

# 1. Throughput: each node alone, all three at once directly, and through HAProxy.
alone=0
for i in 1 2 3; do
  load "$net.$i:8000" mlp 8 3 > "$dir/alone$i.json"
  (( $(field "$errors" < "$dir/alone$i.json") == 0 )) || fail "requests to node $i alone failed"
  alone=$(/usr/bin/python3 -c "print($alone + $(field 'r["throughput_rps"]' < "$dir/alone$i.json"))")
done
direct=()
for i in 1 2 3; do load "$net.$i:8000" mlp 8 3 > "$dir/direct$i.json" & direct+=("$!"); done
wait "${direct[@]}"
together=$(for i in 1 2 3; do field 'r["throughput_rps"]' < "$dir/direct$i.json"; done |
  /usr/bin/python3 -c 'import sys; print(sum(float(x) for x in sys.stdin))')
load "$net.100:9000" mlp 24 3 > "$dir/through.json"
(( $(field "$errors" < "$dir/through.json") == 0 )) || fail "requests through HAProxy failed"
through=$(field 'r["throughput_rps"]' < "$dir/through.json")

# 2. The CNN reaches only the nodes that serve it.
cnn_errors=$(load "$net.100:9000" cnn 4 2 | field "$errors")
(( cnn_errors == 0 )) || fail "$cnn_errors CNN requests failed"
[[ $(sessions ferry_http_cnn 0) == 0 ]] || fail "node 1 (no CNN) got CNN requests"
(( $(sessions ferry_http_cnn 1) > 0 && $(sessions ferry_http_cnn 2) > 0 )) || fail "the CNN did not reach nodes 2 and 3"

# 3. The MLP unloaded from node 1 stops reaching it once HAProxy's checks see it (fall 2).
# With drain_notice_seconds the model answers not ready first and serves on meanwhile, so
# HAProxy's checks see it leave before it is gone: nothing fails (without the notice about a
# third of the requests of the 2 s the checks take did, 404).
load "$net.100:9000" mlp 4 5 > "$dir/unload.json" &
loader=$!
sleep 1
ctl 1 unload mlp > /dev/null
wait "$loader"
sleep 1  # The notice (3.5 s from the unload) has passed: the model is gone from node 1.
during_unload=$(field "$errors" < "$dir/unload.json")
(( during_unload == 0 )) || fail "$during_unload MLP requests failed while node 1 unloaded it"
before=$(sessions ferry_http_mlp 0)
unload_errors=$(load "$net.100:9000" mlp 4 2 | field "$errors")
[[ $(sessions ferry_http_mlp 0) == "$before" ]] || fail "node 1 still got MLP requests after its unload"
(( unload_errors == 0 )) || fail "$unload_errors MLP requests failed after node 1's unload"
ctl 1 load mlp > /dev/null

# 4. SIGKILL of node 2 under load (nodes 1 and 3 serve the MLP too): at most the 4 requests
# in flight fail; once HAProxy's checks have run (fall 2 x 1 s), none.
load "$net.100:9000" mlp 4 5 > "$dir/kill.json" &
loader=$!
sleep 2
kill -KILL "${node_pid[2]}"
wait "$loader"
kill_errors=$(field "$errors" < "$dir/kill.json")
(( kill_errors <= 4 )) || fail "$kill_errors requests failed when node 2 was killed (4 in flight at most)"
after_kill=$(load "$net.100:9000" mlp 4 2 | field "$errors")
(( after_kill == 0 )) || fail "$after_kill requests failed after HAProxy's checks saw node 2 down"


# 5. Node 2 restarted is used again.
before=$(sessions ferry_http_mlp 1)
start_node 2
sleep 3
load "$net.100:9000" mlp 4 2 > /dev/null
(( $(sessions ferry_http_mlp 1) > before )) || fail "node 2 restarted got no MLP requests"

# 6. SIGTERM of node 3 under load: it drains (agent "drain", then its queue), nothing is lost.
load "$net.100:9000" mlp 4 8 > "$dir/drain.json" &
loader=$!
sleep 2
kill -TERM "${node_pid[3]}"
wait "$loader"
drain_errors=$(field "$errors" < "$dir/drain.json")
(( drain_errors == 0 )) || fail "$drain_errors requests failed while node 3 drained"
wait "${node_pid[3]}" || fail "node 3 did not stop cleanly after SIGTERM"

printf '{"nodes_alone_rps": %s, "nodes_together_rps": %s, "through_haproxy_rps": %s, "ratio_vs_alone": %s, "ratio_vs_together": %s, "failed_on_kill": %s, "failed_on_drain": %s, "failed_during_unload": %s, "failed_after_unload": %s}\n' \
  "$alone" "$together" "$through" "$(/usr/bin/python3 -c "print(round($through / $alone, 3))")" \
  "$(/usr/bin/python3 -c "print(round($through / $together, 3))")" "$kill_errors" "$drain_errors" "$during_unload" "$unload_errors"
echo "netns-test: passed"
