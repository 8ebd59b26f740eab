#!/usr/bin/env bash
# API keys end to end (docs/security.md): a node of CPU workers with [auth] required and two
# tenants (acme: the MLP only; globex: every model), called with curl and with tritonclient
# over HTTP and gRPC: no key 401, a wrong key 401, another tenant's model 403, the right key
# 200; a key added to a keys file works after SIGHUP and a removed one stops working; a keys
# file group-readable is refused at start.
#   scripts/auth-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models" "$dir/keys"
cp -r examples/models/mlp examples/models/cnn "$dir/models/"
umask 077
{ echo "# acme"; ferry_key_digest acme-key-1; } > "$dir/keys/acme"
ferry_key_digest globex-key > "$dir/keys/globex"
tenants="[auth]
required = true
open_endpoints = [\"health\"]
[tenants.acme]
models = [\"mlp\"]
keys_file = \"$dir/keys/acme\"
[tenants.globex]
models = [\"*\"]
keys_file = \"$dir/keys/globex\""
ferry_start_node "$build" "$dir" "auth$$" "$tenants"
grpc=$(ferry_listen grpc)
failures=0
expect() {  # expect CODE DESCRIPTION CURL_ARGS...
  local want=$1 what=$2; shift 2
  local got
  got=$(curl -s -o /dev/null -w '%{http_code}' "$@")
  if [[ "$got" == "$want" ]]; then echo "ok   $what ($got)"; else echo "FAIL $what: $got, not $want"; failures=$((failures + 1)); fi
}
body='{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":['$(seq -s, 0 783 | sed 's/[0-9]\+/0.1/g')']}]}'
infer=(-X POST -H 'Content-Type: application/json' -d "$body" "http://$address/v2/models/mlp/infer")
expect 401 "curl: no key" "${infer[@]}"
expect 401 "curl: a wrong key" -H "Authorization: Bearer acme-key-2" "${infer[@]}"
expect 401 "curl: not a bearer" -H "Authorization: Basic YWNtZQ==" "${infer[@]}"
expect 200 "curl: acme's key, its model" -H "Authorization: Bearer acme-key-1" "${infer[@]}"
expect 403 "curl: acme's key, the CNN" -H "Authorization: Bearer acme-key-1" "http://$address/v2/models/cnn"
expect 200 "curl: globex's key, the CNN" -H "Authorization: Bearer globex-key" "http://$address/v2/models/cnn"
expect 200 "curl: health is open" "http://$address/v2/health/ready"
expect 401 "curl: metadata is not" "http://$address/v2/models/mlp"
expect 403 "curl: the key's tenant and another named" -H "Authorization: Bearer acme-key-1" -H "Ferry-Tenant: globex" "${infer[@]}"
"$venv/bin/python" tests/clients/auth_clients_test.py "$address" "$grpc" || failures=$((failures + 1))

# A key added and one removed, live on SIGHUP.
{ echo "# acme, rotated"; ferry_key_digest acme-key-2; } > "$dir/keys/acme"
kill -HUP "$pid"
for _ in $(seq 100); do
  [[ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer acme-key-2' "${infer[@]}")" == 200 ]] && break
  sleep 0.1
done
expect 200 "after SIGHUP: the new key" -H "Authorization: Bearer acme-key-2" "${infer[@]}"
expect 401 "after SIGHUP: the removed key" -H "Authorization: Bearer acme-key-1" "${infer[@]}"
# A keys file others may read is refused by a reload (the node keeps its keys) ...
chmod 644 "$dir/keys/acme"
kill -HUP "$pid"
sleep 0.5
expect 200 "a reload refused keeps the keys" -H "Authorization: Bearer acme-key-2" "${infer[@]}"
grep -q "mode 0644" "$dir/ferryd.log" && echo "ok   the refused reload names the mode" ||
  { echo "FAIL the refused reload does not name the mode"; failures=$((failures + 1)); }
ferry_stop_node
# ... by ferryd --check, and at start.
if "$build/supervisor/ferryd" --check --config "$dir/node.toml" > "$dir/check.log" 2>&1 ||
   ! grep -q "chmod 600" "$dir/check.log"; then
  echo "FAIL ferryd --check passed a keys file of mode 0644"; cat "$dir/check.log"; failures=$((failures + 1))
else
  echo "ok   ferryd --check refuses a keys file of mode 0644"
fi
if "$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/refused.log" 2>&1; then
  echo "FAIL ferryd started with a keys file of mode 0644"; failures=$((failures + 1))
elif grep -q "chmod 600" "$dir/refused.log"; then
  echo "ok   ferryd refuses to start with a keys file of mode 0644"
else
  echo "FAIL ferryd's refusal does not say why:"; cat "$dir/refused.log"; failures=$((failures + 1))
fi
if (( failures > 0 )); then echo "$failures check(s) failed"; exit 1; fi
echo "all auth checks passed"
