# Shell helpers for scripts that start a node of CPU workers on free ports (source it).
#
#   ferry_begin BUILD          -> $build (absolute), $venv and $dir: ferry_venv, ferry_scratch
#   ferry_venv BUILD           -> $venv: a venv with tritonclient and numpy (exit 77 without PyPI)
#   ferry_scratch              -> $dir: a scratch directory, removed at exit, and the node
#                                 started in it ($pid) killed if it still runs
#   ferry_start_node BUILD DIR NAME TOML_EXTRA [LISTEN_EXTRA]
#                              -> $pid (ferryd), $ctl (ferryctl command array), $address (HTTP)
#     writes DIR/node.toml ([node] NAME, two CPU workers and two hook hosts, DIR/models,
#     ports 0 (HTTP, gRPC, metrics, agent), the control socket DIR/control.sock, then
#     TOML_EXTRA, whose first keys are [supervisor]'s; LISTEN_EXTRA: more [node.listen] keys)
#     and waits until ready.
#   ferry_listen KEY           -> the node's bound address for KEY (http, grpc, agent)
#   ferry_key_digest KEY       -> the line a keys file holds for API key KEY (sha256:HEX)
#   ferry_stop_node            -> $stop_code: ferryd's exit status after SIGTERM ("timeout"
#                                 when it still runs 60 s later)
#   ferry_finish WHAT          stops the node; with $failures > 0 or a bad exit, prints the
#                              end of ferryd's log and exits 1, else says "WHAT tests passed"

ferry_begin() {
  build=$(realpath "$1")
  ferry_venv "$build"
  ferry_scratch
}

ferry_venv() {
  venv="$1/client-venv"
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import tritonclient.http, numpy" 2>/dev/null; then
    /usr/bin/python3 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
    if ! "$venv/bin/pip" install -q --disable-pip-version-check "tritonclient[http,grpc]" numpy; then
      echo "SKIPPED: tritonclient could not be installed from PyPI"
      exit 77
    fi
  fi
}

ferry_scratch() {
  dir=$(mktemp -d)
  pid=""
  trap 'if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi; rm -rf "$dir"' EXIT
}

ferry_start_node() {
  local build=$1 dir=$2 name=$3 extra=$4 state=""
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
agent = "127.0.0.1:0"
${5:-}
[cpu]
pin = false
threads = 1
[supervisor]
control_socket = "$dir/control.sock"
$extra
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
  address=$("${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['listen']['http'])")
}

ferry_key_digest() {
  printf '%s' "$1" | sha256sum | awk '{print "sha256:" $1}'
}

ferry_listen() {
  "${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(json.load(sys.stdin)['listen']['$1'])"
}

ferry_stop_node() {
  kill -TERM "$pid"
  for _ in $(seq 600); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" && stop_code=0 || stop_code=$?
      pid=""
      return
    fi
    sleep 0.1
  done
  stop_code=timeout
}

ferry_finish() {
  ferry_stop_node
  [[ "$stop_code" == 0 ]] || { echo "FAIL ferryd exited $stop_code"; failures=$((failures + 1)); }
  if ((failures > 0)); then
    echo "ferryd's log:"; tail -60 "$dir/ferryd.log"
    exit 1
  fi
  echo "$1 tests passed"
}

# A bundle NAME in DIR/models: the example MLP behind BUILD's escape test plugin doing CONFIG.
ferry_escape_bundle() {
  local build=$1 dir=$2 name=$3 config=$4 bundle="$2/models/$3"
  mkdir -p "$bundle"
  cp examples/models/mlp/weights.safetensors "$build/tests/plugins/escape.so" "$bundle/"
  sed -e "s/^name = \"mlp\"/name = \"$name\"/" examples/models/mlp/manifest.toml > "$bundle/manifest.toml"
  printf '\n[hooks]\nplugin = "escape.so"\nconfig = "%s"\n' "$config" >> "$bundle/manifest.toml"
}
