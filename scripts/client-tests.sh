#!/usr/bin/env bash
# Clients ferry did not write against a node ferryd started (CPU workers, port 0): the Python
# tritonclient (HTTP and gRPC) and curl. The virtual environment (tritonclient, numpy from PyPI) is
# created once under the build tree and reused.
#   scripts/client-tests.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "$1")
venv="$build/client-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import tritonclient.http, tritonclient.grpc, numpy" 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "tritonclient[http,grpc]" numpy; then
    # No PyPI here: reported as skipped (CTest SKIP_RETURN_CODE), never as passed.
    echo "SKIPPED: tritonclient could not be installed from PyPI"
    exit 77
  fi
fi
dir=$(mktemp -d)
name="clients$$"
cleanup() {
  [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir "$dir/models"
ln -s "$PWD/examples/models/mlp" "$dir/models/mlp"
ln -s "$PWD/examples/models/cnn" "$dir/models/cnn"
cat > "$dir/node.toml" <<TOML
[node]
name = "$name"
devices = "cpu:2"
hookhosts = 2
model_repository = "$dir/models"
shm_size = "64MiB"
[node.listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[cpu]
pin = false
TOML
"$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
pid=$!
ctl=("$build/ctl/ferryctl" --socket "$dir/control.sock" --json)
for _ in $(seq 300); do
  state=$("${ctl[@]}" status 2>/dev/null | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true)
  [[ "$state" == ready ]] && break
  sleep 0.1
done
if [[ "$state" != ready ]]; then
  echo "the node did not become ready:"; cat "$dir/ferryd.log"; exit 1
fi
address=$("${ctl[@]}" status | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["listen"]["http"])')
grpc_address=$("${ctl[@]}" status | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["listen"]["grpc"])')
echo "node ready, HTTP on $address, gRPC on $grpc_address"

"$venv/bin/python" tests/clients/tritonclient_test.py "$address" "$grpc_address"

# curl: JSON in, JSON out; health; an error body.
out=$(curl -sS -X POST "http://$address/v2/models/mlp/infer" -H 'Content-Type: application/json' \
  -d "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,784],\"data\":[$(printf '0,%.0s' $(seq 783))0]}]}")
grep -q '"name":"logits"' <<<"$out" || { echo "curl infer: $out"; exit 1; }
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$address/v2/health/ready")
[[ "$code" == 200 ]] || { echo "curl ready: $code"; exit 1; }
err=$(curl -s "http://$address/v2/models/nosuch/ready" -w ' %{http_code}')
[[ "$err" == *"404" && "$err" == *'"error"'* ]] || { echo "curl unknown model: $err"; exit 1; }
echo "curl checks passed"
kill -TERM "$pid"
wait "$pid"
pid=""
