#!/usr/bin/env bash
# Installs the built packages into a clean Debian 12 root (debootstrap from Debian's own
# packages, a chroot in a private mount namespace) and checks them there, as an operator's
# fresh host would run them: apt resolves every dependency the packages declare, the packaged
# node file passes `ferryd --check`, a CPU node started from the installed binaries as the
# ferry user serves a request (and its worker maps no CUDA), a GPU worker on this host without
# CUDA reports the missing library by name, the unit passes `systemd-analyze verify`, and
# `apt-get purge` removes what Debian policy says it should and keeps what it should keep.
#   scripts/check-install.sh BUILD_DIR
#   FERRY_DEBIAN_MIRROR=http://...   the mirror (default: deb.debian.org)
#   FERRY_ROOT_CACHE=DIR             keep the bare root's tarball there between runs
# Exit 77 (skipped) when not root or without debootstrap/unshare.
set -euo pipefail
build=$(realpath "$1")
here=$(cd "$(dirname "$0")/.." && pwd)
mirror=${FERRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [[ $(id -u) -ne 0 ]] || ! command -v debootstrap >/dev/null || ! command -v unshare >/dev/null; then
  echo "check-install: needs root, debootstrap and unshare: skipped"
  exit 77
fi
work=$(mktemp -d /var/tmp/ferry-install-XXXXXX)
# --one-file-system: never into a mount, should one outlive its namespace.
trap 'rm -rf --one-file-system "$work"' EXIT
root="$work/root"
step() { echo "== $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "packages"
(cd "$build" && cpack -G DEB -B "$work/debs" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
debs=("$work"/debs/*.deb)
ls "${debs[@]}" | xargs -n1 basename

step "a clean Debian 12 root"
cache=${FERRY_ROOT_CACHE:-}
if [[ -n "$cache" && -f "$cache/bookworm-minbase.tar" ]]; then
  mkdir -p "$root" && tar -xf "$cache/bookworm-minbase.tar" -C "$root"
else
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
  if [[ -n "$cache" ]]; then mkdir -p "$cache" && tar -cf "$cache/bookworm-minbase.tar" -C "$root" .; fi
fi
echo "deb $mirror bookworm main" >"$root/etc/apt/sources.list"
cp "${debs[@]}" "$root/tmp/"
ferry_deb=/tmp/$(basename "$work"/debs/ferry_*.deb)
cuda_deb=/tmp/$(basename "$work"/debs/ferry-cuda_*.deb)
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# Host-side helpers: free ports, JSON reading.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }
http=$(free_port); grpc=$(free_port); metrics=$(free_port)

# Everything inside runs in a private mount namespace: /proc, /dev and /dev/shm for the root
# vanish with it, whatever happens.
export root http grpc metrics here ferry_deb cuda_deb
unshare --mount --fork bash -euo pipefail -c '
mount --make-rprivate /
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
json_get() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

echo "== apt installs the packages and what they declare"
in_root apt-get update -qq
in_root apt-get install -y -qq --no-install-recommends "$ferry_deb" "$cuda_deb" \
  >/tmp/ferry-install-apt.log 2>&1 || { tail -30 /tmp/ferry-install-apt.log; fail "apt-get install"; }
in_root id ferry >/dev/null || fail "postinst did not create the ferry user"
[[ $(in_root stat -c %U /var/lib/ferry) == ferry ]] || fail "/var/lib/ferry not owned by ferry"
[[ -e "$root/usr/lib/ferry/backends/libferry_cuda.so" ]] || fail "ferry-cuda did not install its module"
if ls "$root"/usr/lib/x86_64-linux-gnu/libcublas* >/dev/null 2>&1; then fail "cuBLAS present: not a host without CUDA"; fi

echo "== ferryd --check on the packaged node file (one GPU listed, as on a GPU host)"
mkdir -p "$root/tmp/gpus/0000:17:00.0"
in_root ferryd --check --config /etc/ferry/node.toml --gpu-dir /tmp/gpus || fail "ferryd --check"
in_root ferryctl validate /etc/ferry/node.toml >/dev/null || fail "ferryctl validate"

echo "== systemd-analyze verify on the installed unit"
units=/usr/lib/systemd/system
out=$(in_root systemd-analyze verify $units/ferry.service $units/ferry-http.socket \
  $units/ferry-grpc.socket $units/ferry-metrics.socket 2>&1 || echo "exit status $?")
[[ -z "$out" ]] || { echo "$out"; fail "systemd-analyze verify"; }
echo "ferry.service and its sockets: clean"

node_file() {  # name devices socket
  cat <<EOF
[node]
name = "$1"
model_repository = "/var/lib/ferry/models"
devices = $2
hookhosts = 1
shm_size = "64MiB"
[node.listen]
http = "127.0.0.1:$http"
grpc = "127.0.0.1:$grpc"
metrics = "127.0.0.1:$metrics"
[supervisor]
control_socket = "$3"
restart_backoff_ms = 100
EOF
}
cp -r "$root/usr/share/doc/ferry/examples/models/mlp" "$root/var/lib/ferry/models/"
in_root chown -R ferry:ferry /var/lib/ferry/models
mkdir -p "$root/run/ferry" && in_root chown ferry:ferry /run/ferry

echo "== a CPU node from the installed binaries, as the ferry user, serves a request"
node_file "install-cpu-$$" "\"cpu:1\"" /run/ferry/cpu.sock >"$root/tmp/cpu.toml"
chmod 644 "$root/tmp/cpu.toml"
# exec all the way down (chroot, env, setpriv): $! is ferryd itself.
chroot "$root" env -i PATH=/usr/bin:/bin setpriv --reuid=ferry --regid=ferry --init-groups \
  /usr/bin/ferryd --config /tmp/cpu.toml \
  >/tmp/ferry-install-cpu.log 2>&1 &
ferryd=$!
ready=0
for _ in $(seq 1 300); do
  state=$(in_root ferryctl --socket /run/ferry/cpu.sock --json status 2>/dev/null | json_get "d[\"state\"]" 2>/dev/null || true)
  if [[ "$state" == ready ]]; then
    ready=1; break
  fi
  sleep 0.1
done
[[ $ready == 1 ]] || { cat /tmp/ferry-install-cpu.log; fail "the CPU node did not become ready"; }
body=$(/usr/bin/python3 -c "import json; print(json.dumps({\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[0.5]*784}]}))")
reply=$(curl -sf -H "Content-Type: application/json" -d "$body" "http://127.0.0.1:$http/v2/models/mlp/infer") ||
  { cat /tmp/ferry-install-cpu.log; fail "the request was not served"; }
values=$(json_get "len([v for v in d[\"outputs\"][0][\"data\"] if isinstance(v, float)])" <<<"$reply")
[[ $values == 10 ]] || fail "expected 10 logits, got: $reply"
echo "served: 10 logits"
status=$(in_root ferryctl --socket /run/ferry/cpu.sock --json status)
worker_pid=$(json_get "[c[\"pid\"] for c in d[\"children\"] if c[\"kind\"] == \"worker\"][0]" <<<"$status")
if grep -E "cuda|cublas" "/proc/$worker_pid/maps"; then fail "the CPU worker mapped CUDA"; fi
echo "the CPU worker (pid $worker_pid) maps no CUDA library"
kill -TERM $ferryd
wait $ferryd || { tail -5 /tmp/ferry-install-cpu.log; fail "ferryd did not stop cleanly"; }
echo "ferryd stopped cleanly on SIGTERM"

echo "== a GPU worker on this host without CUDA names the missing library"
node_file "install-gpu-$$" "[0]" /run/ferry/gpu.sock >"$root/tmp/gpu.toml"
chmod 644 "$root/tmp/gpu.toml"
chroot "$root" env -i PATH=/usr/bin:/bin setpriv --reuid=ferry --regid=ferry --init-groups \
  /usr/bin/ferryd --config /tmp/gpu.toml \
  --gpu-dir /tmp/gpus >/tmp/ferry-install-gpu.log 2>&1 &
ferryd=$!
reason=""
for _ in $(seq 1 300); do
  status=$(in_root ferryctl --socket /run/ferry/gpu.sock --json status 2>/dev/null || true)
  if [[ -n "$status" ]]; then
    reason=$(json_get "[c[\"last_exit\"] for c in d[\"children\"] if c[\"kind\"] == \"worker\"][0]" <<<"$status")
    [[ "$reason" == *libcublas* ]] && break
  fi
  sleep 0.1
done
echo "worker 0: $reason"
[[ "$reason" == *"device 0"*libcublas.so* ]] || { cat /tmp/ferry-install-gpu.log; fail "no clear reason"; }
kill -TERM $ferryd; wait $ferryd || true

echo "== purge"
in_root apt-get purge -y -qq ferry-cuda ferry >/tmp/ferry-install-purge.log 2>&1 ||
  { cat /tmp/ferry-install-purge.log; fail "apt-get purge"; }
for gone in /etc/ferry /usr/libexec/ferry /usr/lib/ferry /usr/bin/ferryd /run/ferry \
    /usr/lib/systemd/system/ferry.service; do
  [[ ! -e "$root$gone" ]] || fail "$gone left after purge"
done
[[ -d "$root/var/lib/ferry/models/mlp" ]] || fail "purge deleted the operator'"'"'s models"
in_root id ferry >/dev/null || fail "purge removed the ferry user (Debian keeps system users)"
in_root dpkg -s ferry >/dev/null 2>&1 && fail "ferry still known to dpkg"
rm -rf "$root/var/lib/ferry/models/mlp"
echo "purged: conffile, binaries, module, runtime directory gone; models and user kept"
'
step "installed, served, purged: all checks passed"
