#!/usr/bin/env bash
# TLS end to end (docs/security.md, "TLS"): certificates made here with openssl (a CA, a
# server certificate for 127.0.0.1, client certificates "alice" and "bob"), then two nodes of
# CPU workers.
#   1. TLS: curl with the CA answers over HTTPS, plain HTTP to the TLS port gets no answer,
#      a client that does not trust the CA fails; tritonclient over HTTPS and gRPC with TLS;
#      a renewed certificate serves new connections after SIGHUP, a mismatched key is refused
#      by the reload (the old certificate stays); a key file others may read, or a key that
#      is not the certificate's, is refused at start and by ferryd --check.
#   2. Mutual TLS with [auth] required: alice's certificate is tenant acme (the MLP only):
#      200 on the MLP, 403 on the CNN (curl and tritonclient gRPC); bob's certificate (the
#      right CA, no tenant) 401; no certificate: the handshake fails.
#   scripts/tls-test.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/node.sh
ferry_begin "$1"
mkdir -p "$dir/models" "$dir/tls"
cp -r examples/models/mlp examples/models/cnn "$dir/models/"
umask 077
tls="$dir/tls"
quiet() { "$@" > /dev/null 2>&1; }
# CA, server (SAN 127.0.0.1), clients; EC P-256 keys.
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/O=ferry tests/CN=ferry test CA" -keyout "$tls/ca.key" -out "$tls/ca.pem"
issue() {  # issue NAME SUBJECT SERIAL EXTENSIONS
  quiet openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
    -keyout "$tls/$1.key" -out "$tls/$1.csr"
  printf '%s\n' "$4" > "$tls/$1.ext"
  quiet openssl x509 -req -in "$tls/$1.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -days 1 \
    -set_serial "$3" -extfile "$tls/$1.ext" -out "$tls/$1.pem"
}
issue server "/O=ferry tests/CN=localhost" 16 "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
issue renewed "/O=ferry tests/CN=localhost" 17 "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
issue alice "/O=ferry tests/CN=alice" 32 "extendedKeyUsage=clientAuth"
issue bob "/O=ferry tests/CN=bob" 33 "extendedKeyUsage=clientAuth"
cp "$tls/server.pem" "$tls/cert.pem"
cp "$tls/server.key" "$tls/key.pem"

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }
expect() {  # expect CODE DESCRIPTION CURL_ARGS...
  local want=$1 what=$2; shift 2
  local got
  got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" || true)
  if [[ "$got" == "$want" ]]; then pass "$what ($got)"; else fail "$what: $got, not $want"; fi
}
serial() {  # The serial of the certificate the server at $1 presents to a new connection.
  openssl s_client -connect "$1" -CAfile "$tls/ca.pem" < /dev/null 2> /dev/null |
    openssl x509 -noout -serial 2> /dev/null | cut -d= -f2
}
body='{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":['$(seq -s, 0 783 | sed 's/[0-9]\+/0.1/g')']}]}'

# 1. TLS.
ferry_start_node "$build" "$dir" "tls$$" "" "tls_cert = \"$tls/cert.pem\"
tls_key = \"$tls/key.pem\""
grpc=$(ferry_listen grpc)
https=(--cacert "$tls/ca.pem")
expect 200 "curl with the CA: health" "${https[@]}" "https://$address/v2/health/ready"
expect 200 "curl with the CA: JSON infer" "${https[@]}" -X POST -H 'Content-Type: application/json' \
  -d "$body" "https://$address/v2/models/mlp/infer"
expect 000 "plain HTTP to the TLS port: no answer" "http://$address/v2/health/ready"
expect 000 "a client without the CA: refused" "https://$address/v2/health/ready"
"$venv/bin/python" - "$address" "$grpc" "$tls" <<'PY' || failures=$((failures + 1))
import sys
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
address, grpc_address, tls = sys.argv[1:]
x = np.full((1, 784), 0.1, np.float32)
http = httpclient.InferenceServerClient(address, ssl=True, ssl_options={"ca_certs": f"{tls}/ca.pem"})
inp = httpclient.InferInput("input", [1, 784], "FP32")
inp.set_data_from_numpy(x)
out = http.infer("mlp", [inp]).as_numpy("logits")
assert out.shape == (1, 10), out.shape
print("ok   tritonclient over HTTPS")
grpc = grpcclient.InferenceServerClient(grpc_address, ssl=True, root_certificates=f"{tls}/ca.pem")
inp = grpcclient.InferInput("input", [1, 784], "FP32")
inp.set_data_from_numpy(x)
out = grpc.infer("mlp", [inp], client_timeout=30).as_numpy("logits")
assert out.shape == (1, 10), out.shape
print("ok   tritonclient over gRPC with TLS")
PY
[[ "$(serial "$address")" == 10 ]] && pass "the certificate served is serial 0x10" ||
  fail "the certificate served is not serial 0x10: $(serial "$address")"
cp "$tls/renewed.pem" "$tls/cert.pem"
cp "$tls/renewed.key" "$tls/key.pem"
kill -HUP "$pid"
for _ in $(seq 100); do [[ "$(serial "$address")" == 11 ]] && break; sleep 0.1; done
[[ "$(serial "$address")" == 11 ]] && pass "after SIGHUP new connections get the renewed certificate" ||
  fail "after SIGHUP the certificate is still serial $(serial "$address")"
expect 200 "after SIGHUP: served" "${https[@]}" "https://$address/v2/health/ready"
cp "$tls/alice.key" "$tls/key.pem"  # Not the certificate's key: the reload is refused.
kill -HUP "$pid"
for _ in $(seq 50); do grep -q "does not match" "$dir/ferryd.log" && break; sleep 0.1; done
grep -q "reload refused" "$dir/ferryd.log" && [[ "$(serial "$address")" == 11 ]] &&
  pass "a reload with a mismatched key is refused; the node keeps its certificate" ||
  fail "a reload with a mismatched key: $(grep -c 'reload refused' "$dir/ferryd.log") refusals, serial $(serial "$address")"
cp "$tls/renewed.key" "$tls/key.pem"
ferry_stop_node
chmod 644 "$tls/key.pem"
if "$build/supervisor/ferryd" --check --config "$dir/node.toml" > "$dir/check.log" 2>&1 ||
   ! grep -q "chmod 600" "$dir/check.log"; then
  fail "ferryd --check passed a TLS key of mode 0644"
else
  pass "ferryd --check refuses a TLS key of mode 0644"
fi
if "$build/supervisor/ferryd" --config "$dir/node.toml" > "$dir/refused.log" 2>&1; then
  fail "ferryd started with a TLS key of mode 0644"
elif grep -q "chmod 600" "$dir/refused.log"; then
  pass "ferryd refuses to start with a TLS key of mode 0644"
else
  fail "ferryd's refusal does not say why: $(cat "$dir/refused.log")"
fi
chmod 600 "$tls/key.pem"
cp "$tls/alice.key" "$tls/key.pem"  # A key that is not the certificate's.
if "$build/supervisor/ferryd" --check --config "$dir/node.toml" > "$dir/check.log" 2>&1 ||
   ! grep -q "does not match" "$dir/check.log"; then
  fail "ferryd --check passed a key that does not match the certificate"
else
  pass "ferryd --check refuses a key that does not match the certificate"
fi
cp "$tls/renewed.key" "$tls/key.pem"

# 2. Mutual TLS: the certificate is the tenant.
ferry_start_node "$build" "$dir" "mtls$$" "[auth]
required = true
open_endpoints = []
[tenants.acme]
models = [\"mlp\"]
tls_subjects = [\"CN=alice,O=ferry tests\"]" "tls_cert = \"$tls/cert.pem\"
tls_key = \"$tls/key.pem\"
tls_client_ca = \"$tls/ca.pem\""
grpc=$(ferry_listen grpc)
alice=("${https[@]}" --cert "$tls/alice.pem" --key "$tls/alice.key")
bob=("${https[@]}" --cert "$tls/bob.pem" --key "$tls/bob.key")
infer=(-X POST -H 'Content-Type: application/json' -d "$body" "https://$address/v2/models/mlp/infer")
expect 200 "mTLS: alice's certificate (acme) infers on the MLP" "${alice[@]}" "${infer[@]}"
expect 403 "mTLS: alice's certificate, the CNN" "${alice[@]}" "https://$address/v2/models/cnn"
expect 401 "mTLS: bob's certificate (no tenant)" "${bob[@]}" "${infer[@]}"
expect 000 "mTLS: no certificate, no handshake" "${https[@]}" "${infer[@]}"
"$venv/bin/python" - "$grpc" "$tls" <<'PY' || failures=$((failures + 1))
import sys
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException
grpc_address, tls = sys.argv[1:]
client = grpcclient.InferenceServerClient(grpc_address, ssl=True, root_certificates=f"{tls}/ca.pem",
                                          private_key=f"{tls}/alice.key",
                                          certificate_chain=f"{tls}/alice.pem")
x = np.full((1, 784), 0.1, np.float32)
inp = grpcclient.InferInput("input", [1, 784], "FP32")
inp.set_data_from_numpy(x)
out = client.infer("mlp", [inp], client_timeout=30).as_numpy("logits")
assert out.shape == (1, 10), out.shape
print("ok   mTLS over gRPC: alice's certificate infers on the MLP")
try:
    client.get_model_metadata("cnn")
    print("FAIL mTLS over gRPC: alice's certificate reached the CNN")
    sys.exit(1)
except InferenceServerException as e:
    assert "PERMISSION_DENIED" in str(e.status()), e
    print("ok   mTLS over gRPC: alice's certificate, the CNN: PERMISSION_DENIED")
PY
ferry_stop_node
if (( failures > 0 )); then echo "$failures check(s) failed"; cat "$dir/ferryd.log" | tail -30; exit 1; fi
echo "all TLS checks passed"
