#!/usr/bin/env bash
# The repository extension end to end (docs/frontend.md, "Repository"): a node of CPU workers
# and two hook hosts with [frontend] model_control on and [auth] required (tenant ops an
# admin, acme not), driven by tritonclient over HTTP and gRPC (tests/clients/repository_test.py):
# who may, unload and load with Triton's semantics, a bundle added while the node runs, a
# config override, hostile names and bodies. (A node without model_control refusing both:
# tests/clients/tritonclient_test.py.)
#   scripts/repository-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models" "$dir/keys"
cp -r examples/models/mlp examples/models/cnn "$dir/models/"
umask 077
ferry_key_digest ops-key > "$dir/keys/ops"
ferry_key_digest acme-key > "$dir/keys/acme"
umask 022
settings="[frontend]
tenants = [\"ops\", \"acme\"]
model_control = true
[auth]
required = true
open_endpoints = []
[tenants.ops]
models = [\"*\"]
admin = true
keys_file = \"$dir/keys/ops\"
[tenants.acme]
models = [\"*\"]
keys_file = \"$dir/keys/acme\""
ferry_start_node "$build" "$dir" "repo$$" "$settings"
failures=0
"$venv/bin/python" tests/clients/repository_test.py "$address" "$(ferry_listen grpc)" "$dir/models" ||
  failures=$((failures + 1))
# The config override's max_batch_size became the MLP's cap on every worker.
caps=$("${ctl[@]}" status | "$venv/bin/python" -c '
import json, sys
def walk(x):
    if isinstance(x, dict):
        if x.get("model") == "mlp" and "effective_max_batch" in x:
            yield x["effective_max_batch"]
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)
print(sorted(walk(json.load(sys.stdin))))')
[[ "$caps" == "[2, 2]" ]] || { echo "FAIL the MLP's cap after the config override: $caps"; failures=$((failures + 1)); }
grep -q "repository: load 'mlp_new' answered OK" "$dir/ferryd.log" ||
  { echo "FAIL ferryd did not log the load's answer"; failures=$((failures + 1)); }
ferry_finish repository
