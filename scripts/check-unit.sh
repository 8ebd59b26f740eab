#!/usr/bin/env bash
# Checks packaging/ferry.service with `systemd-analyze verify` (with ExecStart pointed at the
# built ferryd, since verify checks the binary exists). Any message fails. A copy with a
# deliberate error must produce a message, so this check is known to be able to fail.
#   scripts/check-unit.sh BUILD/supervisor/ferryd
set -euo pipefail
cd "$(dirname "$0")/.."
ferryd=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/good" "$dir/bad"
sed "s#/usr/bin/ferryd#$ferryd#" packaging/ferry.service > "$dir/good/ferry.service"
cp packaging/ferry-http.socket packaging/ferry-grpc.socket packaging/ferry-metrics.socket "$dir/good/"
sed 's/^Type=notify$/Type=notifyy/' "$dir/good/ferry.service" > "$dir/bad/ferry.service"
out=$(systemd-analyze verify "$dir/good/ferry.service" "$dir/good/ferry-http.socket" \
  "$dir/good/ferry-grpc.socket" "$dir/good/ferry-metrics.socket" 2>&1 || echo "exit status $?")
if [[ -n "$out" ]]; then
  echo "systemd-analyze verify packaging/ferry.service:"
  echo "$out"
  exit 1
fi
bad=$(systemd-analyze verify "$dir/bad/ferry.service" 2>&1 || true)
if [[ -z "$bad" ]]; then
  echo "systemd-analyze verify reported nothing for a broken unit: this check cannot fail"
  exit 1
fi
echo "packaging/ferry.service and its three .socket units: systemd-analyze verify clean"
