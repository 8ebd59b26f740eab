#!/usr/bin/env bash
# Model versions end to end (docs/bundles.md, "Versions"): a repository with a versioned MLP
# (mlp/1..3, version_policy latest 2 in the newest manifest, each version's logits offset by
# its number) and the CNN in the single-version layout, a node of CPU workers and two hook
# hosts with a weight for the model and one for a version and model control on, driven by
# tritonclient over HTTP and gRPC and by ferryctl (tests/clients/versions_test.py).
#   scripts/versions-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models/mlp"
cp -r examples/models/cnn "$dir/models/"
for v in 1 2 3; do
  mkdir "$dir/models/mlp/$v"
  cp examples/models/mlp/weights.safetensors "$dir/models/mlp/$v/"
  # The directory's number is the version: the copied manifest's "version = 1" goes.
  sed -e '/^version = 1$/d' examples/models/mlp/manifest.toml > "$dir/models/mlp/$v/manifest.toml"
  "$venv/bin/python" scripts/lib/offset_bias.py "$dir/models/mlp/$v/weights.safetensors" "$v"
done
sed -i -e 's/^name = "mlp"$/name = "mlp"\nversion_policy = { latest = 2 }/' "$dir/models/mlp/3/manifest.toml"
settings='[frontend]
model_control = true
[scheduler.models.mlp]
weight = 2.0
[scheduler.models."mlp/3"]
weight = 3.0'
ferry_start_node "$build" "$dir" "versions$$" "$settings"
failures=0
# The node file names the versioned model and one version: both valid, as is a version bundle.
"$build/ctl/ferryctl" validate "$dir/node.toml" "$dir/models/mlp/2" > "$dir/validate.log" 2>&1 ||
  { echo "FAIL ferryctl validate:"; cat "$dir/validate.log"; failures=$((failures + 1)); }
"$venv/bin/python" tests/clients/versions_test.py "$address" "$(ferry_listen grpc)" "$dir/models" \
  "$build/ctl/ferryctl" "$dir/control.sock" || failures=$((failures + 1))
ferry_finish versions
