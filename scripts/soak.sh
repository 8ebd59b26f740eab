#!/usr/bin/env bash
# The chaos soak: a node (two CPU workers, two hook hosts) serving the example models, the
# hooked classifier and two hostile plugins (one whose create() tries to fork, one whose
# preprocess opens /etc/passwd), under load from tritonclient while a child is killed or
# stopped at random every 30 s (tests/soak/chaos_soak.py). Then ferryd is stopped and the
# node's shared memory must be gone. Prints the figures as JSON; exits 1 when a wrong answer,
# a hang, more failures per fault than requests in flight, a leaked shared-memory object or an
# unclean stop was seen.
#   scripts/soak.sh MINUTES [BUILD_DIR] [INTERVAL_SECONDS]
# CI runs it for 2 minutes; docs/benchmarks.md records a 30-minute run.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:?usage: scripts/soak.sh MINUTES [BUILD_DIR] [INTERVAL_SECONDS]}
build=$(realpath "${2:-build}")
interval=${3:-30}
venv="$build/client-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import tritonclient.http, numpy" 2>/dev/null; then
  /usr/bin/python3 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "tritonclient[http,grpc]" numpy; then
    echo "SKIPPED: tritonclient could not be installed from PyPI"
    exit 77
  fi
fi
dir=$(mktemp -d)
name="soak$$"
pid=""
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  rm -rf "$dir"
}
trap cleanup EXIT

mkdir "$dir/models"
cp -r examples/models/mlp examples/models/cnn "$dir/models/"
mkdir "$dir/models/cnn_classify"
cp examples/hooks/cnn_classify.toml "$dir/models/cnn_classify/manifest.toml"
cp examples/models/cnn/weights.safetensors "$build/examples/hooks/image_classify.so" \
  "$dir/models/cnn_classify/"
for hostile in "create fork" "open open"; do
  set -- $hostile
  bundle="$dir/models/hostile_$1"
  mkdir "$bundle"
  cp examples/models/mlp/weights.safetensors "$build/tests/plugins/escape.so" "$bundle/"
  sed -e "s/^name = \"mlp\"/name = \"hostile_$1\"/" examples/models/mlp/manifest.toml \
    > "$bundle/manifest.toml"
  config=$2
  [[ $1 == create ]] && config="create:$2"
  printf '\n[hooks]\nplugin = "escape.so"\nconfig = "%s"\n' "$config" >> "$bundle/manifest.toml"
done

cat > "$dir/node.toml" <<TOML
[node]
name = "$name"
devices = "cpu:2"
hookhosts = 2
model_repository = "$dir/models"
shm_size = "128MiB"
[node.listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
metrics = "127.0.0.1:0"
[supervisor]
control_socket = "$dir/control.sock"
[cpu]
pin = false
threads = 1
TOML
"$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/ferryd.log" 2>&1 &
pid=$!
ctl=("$build/ctl/ferryctl" --socket "$dir/control.sock" --json)
state=""
for _ in $(seq 300); do
  state=$("${ctl[@]}" status 2>/dev/null | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || true)
  [[ "$state" == ready ]] && break
  sleep 0.1
done
if [[ "$state" != ready ]]; then
  echo "soak: the node did not become ready"; cat "$dir/ferryd.log"; exit 1
fi
address=$("${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['listen']['http'])")

seconds=$(( minutes * 60 ))
rc=0
"$venv/bin/python" tests/soak/chaos_soak.py "$address" "$dir/control.sock" "$build/ctl/ferryctl" \
  --seconds "$seconds" --interval "$interval" || rc=1

# A clean stop, then nothing of the node left in /dev/shm.
kill -TERM "$pid"
stopped=0
for _ in $(seq 600); do
  if ! kill -0 "$pid" 2>/dev/null; then stopped=1; break; fi
  sleep 0.1
done
if (( stopped )); then
  wait "$pid" && code=0 || code=$?
  pid=""
else
  code="still running 60 s after SIGTERM"
fi
leaked=$(find /dev/shm -maxdepth 1 -name "ferry-$name*" | wc -l)
restarts=$(grep -c "died:" "$dir/ferryd.log" || true)
echo "{\"ferryd_exit\": \"$code\", \"leaked_shm_objects\": $leaked, \"child_deaths_logged\": $restarts}"
if [[ "$code" != 0 || "$leaked" != 0 ]]; then
  echo "soak: unclean stop or leaked shared memory"; tail -30 "$dir/ferryd.log"; rc=1
fi
if (( rc != 0 )); then
  echo "--- ferryd log (last 40 lines)"; tail -40 "$dir/ferryd.log"
fi
exit $rc
