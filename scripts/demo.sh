#!/usr/bin/env bash
# Shows ferry serving on this machine (no GPU needed): builds ferry, starts ferryd on the
# shipped example node (two CPU workers, two sandboxed hook hosts, the example MLP and CNN),
# calls it over HTTP as any KServe v2 client would, sends a burst of concurrent requests to
# both models, shows the batch sizes they ran in and each model's share of compute time,
# calls the example pipeline (the CNN as two chained models) beside the CNN served whole, kills
# a worker and watches ferryd bring it back, and stops the node cleanly. On the way it exports
# ResNet-18 from PyTorch to ONNX, imports it (ferryctl import) and loads it on the running node.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target ferryd ferryctl ferry-worker ferry-hookhost ferry-load \
  ferry-sim image_classify >/dev/null

dir=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

# The repository: the example models, the hooked classifier (the CNN behind image_classify.so)
# and the example pipeline with its two stages (docs/hookhost.md, "Pipelines").
mkdir -p "$dir/models"
cp -r examples/models/mlp examples/models/cnn "$dir/models/"
bundle() {  # NAME MANIFEST [WEIGHTS_OF]
  mkdir -p "$dir/models/$1"
  cp "$2" "$dir/models/$1/manifest.toml"
  if [[ -n "${3:-}" ]]; then cp "examples/models/$3/weights.safetensors" "$dir/models/$1/"; fi
}
bundle cnn_classify examples/hooks/cnn_classify.toml cnn
bundle cnn_features examples/pipelines/cnn_features.toml cnn
bundle cnn_head examples/pipelines/cnn_head.toml cnn
bundle image_pipeline examples/pipelines/image_pipeline.toml
cp build/examples/hooks/image_classify.so "$dir/models/cnn_classify/"
cp build/examples/hooks/image_classify.so "$dir/models/image_pipeline/"

# The example node file, with this run's control socket, free ports and absolute paths.
sed -e "s#^model_repository = .*#model_repository = \"$dir/models\"#" \
    -e 's#^http = .*#http = "127.0.0.1:0"#' -e 's#^grpc = .*#grpc = "127.0.0.1:0"#' \
    -e 's#^metrics = .*#metrics = "127.0.0.1:0"#' -e "s#^name = \"example\"#name = \"demo$$\"#" \
    examples/node.toml > "$dir/node.toml"
printf '\n[supervisor]\ncontrol_socket = "%s/control.sock"\n' "$dir" >> "$dir/node.toml"
ctl=(build/ctl/ferryctl --socket "$dir/control.sock")
# A field of `ferryctl --json status`, e.g. state, or listen.http.
status() {
  "${ctl[@]}" --json status 2>/dev/null | python3 -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v[k]
print(v)' "$1" 2>/dev/null || true
}

echo "== ferryctl validate: the example node file and bundles"
build/ctl/ferryctl validate examples/node.toml examples/models/*

echo
echo "== ferryd starts the node (log in $dir/ferryd.log)"
build/supervisor/ferryd --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [[ $(status state) == ready ]] && break
  sleep 0.1
done
"${ctl[@]}" status
address=$(status listen.http)

echo
echo "== one request with curl: POST http://$address/v2/models/mlp/infer (JSON tensors)"
row=$(printf '0.5,%.0s' $(seq 783))0.5
curl -sS -X POST "http://$address/v2/models/mlp/infer" \
  -d "{\"id\":\"demo-1\",\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,784],\"data\":[$row]}]}" \
  | python3 -c 'import json,sys; r=json.load(sys.stdin); o=r["outputs"][0]
print("  id", r["id"], "->", o["name"], o["shape"], [round(x, 3) for x in o["data"]])
print("  server timings (us):", {k: v for k, v in r["parameters"].items()})'

echo
echo "== the example pipeline: one UINT8 image through cnn_features then cnn_head (two models"
echo "   chained by the plugin's run), beside cnn_classify (the same CNN as one model)"
pixels=$(python3 -c 'print(",".join(str((i * 37) % 256) for i in range(32 * 32 * 3)))')
for model in image_pipeline cnn_classify; do
  curl -sS -X POST "http://$address/v2/models/$model/infer" \
    -d "{\"inputs\":[{\"name\":\"image\",\"datatype\":\"UINT8\",\"shape\":[1,32,32,3],\"data\":[$pixels]}]}" \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); o={t["name"]: t["data"] for t in r["outputs"]}
print("  %-15s classes %s scores %s" % (sys.argv[1], o["classes"], [round(x, 4) for x in o["scores"]]))' "$model"
done

echo
echo "== a real model: ResNet-18 from torchvision (seeded weights), exported by PyTorch to ONNX,"
echo "   imported with ferryctl import into the repository and loaded on the running node"
/usr/bin/python3 scripts/make_onnx_models.py "$dir/onnx" --models resnet18 --batch 1 >/dev/null
build/ctl/ferryctl import "$dir/onnx/resnet18/model.onnx" --out "$dir/models/resnet18" \
  --sizes 1,2,4,8 | sed 's/^/   /'
"${ctl[@]}" load resnet18 | sed 's/^/   /'
"${ctl[@]}" infer resnet18 --input "$dir/onnx/resnet18/input.npy" --output-dir "$dir" \
  | sed 's/^/   /' | head -n 4
/usr/bin/python3 - "$dir/output.npy" "$dir/onnx/resnet18/output.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
print("   top-5 classes %s, PyTorch's %s; max |ferry - PyTorch| = %.1e"
      % (list(np.argsort(-got[0])[:5]), list(np.argsort(-want[0])[:5]), np.abs(got - want).max()))
PY

echo
echo "== text in: a BERT-style encoder (PyTorch, seeded) imported, behind the example tokenizer"
echo "   plugin: clients send sentences as BYTES, the plugin (sandboxed) makes ids and a mask"
/usr/bin/python3 scripts/make_onnx_models.py "$dir/onnx" --models encoder --batch 1 >/dev/null
build/ctl/ferryctl import "$dir/onnx/encoder/model.onnx" --out "$dir/models/encoder" \
  --name encoder --sizes 1,2,4,8 | sed 's/^/   /'
cp build/examples/hooks/tokenizer.so "$dir/models/encoder/"
cat >>"$dir/models/encoder/manifest.toml" <<'TOML'

[hooks]
plugin = "tokenizer.so"
config = "seq=16 vocab=1000"

[[hooks.inputs]]
name = "text"
dtype = "BYTES"
shape = [-1]
TOML
"${ctl[@]}" load encoder | sed 's/^/   /'
curl -sS -X POST "http://$address/v2/models/encoder/infer" \
  -d '{"inputs":[{"name":"text","datatype":"BYTES","shape":[2],"data":["ferry serves real models","text reaches the encoder through a plugin"]}]}' \
  | python3 -c 'import json,sys; r=json.load(sys.stdin); o=r["outputs"][0]
print("   %s %s: %s" % (o["name"], o["shape"], [round(x, 4) for x in o["data"]]))'

echo
echo "== a burst: 16 clients at once for 3 s, alternating the MLP and the CNN (binary tensors)"
build/bench/ferry-load --url "$address" --model mlp --model cnn --concurrency 16 --seconds 3 \
  --warmup 0.5 &
load=$!
sleep 1.5
echo "   per-model rates and compute shares meanwhile (ferryctl top, one 1 s sample):"
"${ctl[@]}" top --iterations 1 --interval 1 | sed 's/^/   /'
wait "$load"

echo
echo "== every scheduler counter (ferryctl metrics)"
"${ctl[@]}" metrics

echo
echo "== a worker is killed (SIGKILL); ferryd repairs its shared memory and restarts it"
worker=$("${ctl[@]}" --json status | python3 -c 'import json,sys
print([c["pid"] for c in json.load(sys.stdin)["children"] if c["kind"] == "worker"][0])')
kill -KILL "$worker"
sleep 0.2
for _ in $(seq 100); do
  [[ $(status state) == ready ]] && break
  sleep 0.1
done
"${ctl[@]}" status | sed -n '1,8p'

echo
echo "== the scheduler: 3 models weighted 2:1:1, one 10x costlier per row, all saturated"
echo "   (ferry-sim, virtual time; shares should read 0.50 / 0.25 / 0.25)"
build/bench/ferry-sim bench/scenarios/fairness.toml | awk -v RS= '/^ferry/ {print; print ""}'

echo "== SIGTERM: hook hosts drain, then workers, then the segment is removed"
kill -TERM "$pid"
wait "$pid"
pid=""
tail -n 6 "$dir/ferryd.log"
