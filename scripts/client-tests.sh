#!/usr/bin/env bash
# Clients ferry did not write against a node ferryd started (CPU workers, port 0): the Python
# tritonclient (HTTP and gRPC) and curl, on the example models and on ResNet-18 and a CNN
# exported from PyTorch and imported with `ferryctl import` (compared with onnxruntime). The
# virtual environment (tritonclient, numpy, onnxruntime from PyPI) is created once under the
# build tree and reused.
#   scripts/client-tests.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "$1")
venv="$build/client-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import tritonclient.http, tritonclient.grpc, numpy, onnxruntime" 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "tritonclient[http,grpc]" numpy onnxruntime; then
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
cp -r examples/models/mlp "$dir/models/mlp"
cp -r examples/models/cnn "$dir/models/cnn"
# Models from PyTorch, through ONNX, into the repository.
/usr/bin/python3 scripts/make_onnx_models.py "$dir/onnx" --models resnet18,cnn,text,encoder,bert >/dev/null
"$build/ctl/ferryctl" import "$dir/onnx/resnet18/model.onnx" --out "$dir/models/resnet18" --sizes 1,2,4
"$build/ctl/ferryctl" import "$dir/onnx/cnn/model.onnx" --out "$dir/models/torch_cnn" --sizes 1,2,8
"$build/ctl/ferryctl" import "$dir/onnx/text/model.onnx" --out "$dir/models/text" --sizes 1,2,8
"$build/ctl/ferryctl" import "$dir/onnx/encoder/model.onnx" --out "$dir/models/encoder" --sizes 1,2,8
"$build/ctl/ferryctl" import "$dir/onnx/bert/model.onnx" --out "$dir/models/bert" --sizes 1,2,8
# The encoder again, its clients sending text to the example tokenizer plugin.
"$build/ctl/ferryctl" import "$dir/onnx/encoder/model.onnx" --out "$dir/models/encoder_text" \
  --name encoder_text --sizes 1,2,8
cp "$build/examples/hooks/tokenizer.so" "$dir/models/encoder_text/"
printf '\n[hooks]\nplugin = "tokenizer.so"\nconfig = "seq=16 vocab=1000"\n[[hooks.inputs]]\nname = "text"\ndtype = "BYTES"\nshape = [-1]\n' \
  >> "$dir/models/encoder_text/manifest.toml"
# Starts ferryd on node file $1 (written under $dir with name $2 and the extra keys in $3 and
# $4: [node] keys, then tables); sets pid, address, grpc_address, metrics_address.
start_node() {
  cat > "$dir/$1" <<TOML
[node]
name = "$2"
hookhosts = 2
model_repository = "$dir/models"
shm_size = "64MiB"
$3
[node.listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/$2.sock"
[cpu]
pin = false
$4
TOML
  "$build/supervisor/ferryd" --config "$dir/$1" > "$dir/$2.log" 2>&1 &
  pid=$!
  ctl=("$build/ctl/ferryctl" --socket "$dir/$2.sock" --json)
  for _ in $(seq 300); do
    state=$("${ctl[@]}" status 2>/dev/null | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true)
    [[ "$state" == ready ]] && break
    sleep 0.1
  done
  if [[ "$state" != ready ]]; then
    echo "the node did not become ready:"; cat "$dir/$2.log"; exit 1
  fi
  listen() { "${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['listen']['$1'])"; }
  address=$(listen http)
  grpc_address=$(listen grpc)
  metrics_address=$(listen metrics)
  echo "node ready, HTTP on $address, gRPC on $grpc_address"
}

start_node node.toml "$name" 'devices = "cpu:2"' ""
"$venv/bin/python" tests/clients/tritonclient_test.py "$address" "$grpc_address"
"$venv/bin/python" tests/clients/onnx_served_test.py "$address" "$grpc_address" "$dir/onnx" \
  resnet18=resnet18 torch_cnn=cnn text=text encoder=encoder bert=bert
"$venv/bin/python" tests/clients/text_served_test.py "$address" "$grpc_address" \
  "$dir/onnx/encoder" encoder_text 16 1000

# The logging extension's change (tritonclient_test.py) reached every process.
for who in "ferry-worker" "hook host slot 0" "hook host slot 1"; do
  grep -q "$who.*log settings now\|log settings now.*$who" "$dir/$name.log" ||
    grep "log settings now" "$dir/$name.log" | grep -q "${who%% *}" ||
    { echo "logging: no 'log settings now' from $who"; grep "log settings" "$dir/$name.log"; exit 1; }
done

# Hostile logging bodies: nested as deep as the size allows, too large, not an object.
deep=$(printf '[%.0s' $(seq 2000); printf ']%.0s' $(seq 2000))
for body in "$deep" "{\"log_info\": true, \"pad\": \"$(printf 'x%.0s' $(seq 5000))\"}" '[]' '{}' 'nul'; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d "$body" "http://$address/v2/logging")
  [[ "$code" == 400 ]] || { echo "logging: a hostile body (${body:0:20}...) got $code"; exit 1; }
done
[[ "$(curl -s "http://$address/v2/logging")" == *'"log_verbose_level":0'* ]] ||
  { echo "logging: hostile bodies changed the settings"; exit 1; }

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

# Cancellation: one simulated worker taking 1.5 s per batch, so requests wait in its queue.
start_node cancel.toml "${name}c" 'devices = "cpu:1"
backend = "sim"' '[sim]
fixed_us = 1500000
per_row_us = 0
[scheduler]
discipline = "fifo"'
"$venv/bin/python" tests/clients/cancel_test.py "$address" "$grpc_address" "$metrics_address"
kill -TERM "$pid"
wait "$pid"
pid=""
