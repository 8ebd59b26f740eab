#!/bin/sh
# ferry as a KServe ServingRuntime (deploy/kubernetes/servingruntime.yaml): serves the bundles
# KServe's storage initializer put in REPOSITORY (default /mnt/models) with the KServe v2
# protocol on 8000 (HTTP) and 8001 (gRPC). FERRY_DEVICES picks the workers ("all" for every
# GPU the pod was given; default "cpu:1"). --print-config writes the node file and exits.
#   ferry-kserve-entrypoint [--print-config] [REPOSITORY]
set -eu
print=0
if [ "${1:-}" = "--print-config" ]; then
  print=1
  shift
fi
repository=${1:-/mnt/models}
config=${FERRY_CONFIG_OUT:-/tmp/ferry-node.toml}
cat > "$config" <<TOML
[node]
name = "kserve"
devices = "${FERRY_DEVICES:-cpu:1}"
hookhosts = ${FERRY_HOOKHOSTS:-2}
model_repository = "$repository"
shm_size = "${FERRY_SHM_SIZE:-512MiB}"
[node.listen]
http = "0.0.0.0:8000"
grpc = "0.0.0.0:8001"
metrics = "0.0.0.0:8002"
[supervisor]
control_socket = "/tmp/ferry-control.sock"
drain_notice_seconds = 5
TOML
if [ "$print" = 1 ]; then
  cat "$config"
  exit 0
fi
exec /usr/bin/ferryd --config "$config" --log-format json
