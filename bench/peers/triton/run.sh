#!/usr/bin/env bash
# Start Triton (set up by setup.sh) in the foreground.
#   usage: run.sh VENV_DIR REPO_DIR HTTP_PORT     (grpc on HTTP_PORT+1, metrics on HTTP_PORT+2)
# Extra arguments after HTTP_PORT are passed to tritonserver.
set -euo pipefail
if [ $# -lt 3 ]; then echo "usage: $0 VENV_DIR REPO_DIR HTTP_PORT" >&2; exit 2; fi
VENV=$(realpath "$1")
REPO=$(realpath "$2")
PORT=$3
T=$("$VENV/bin/python" -c 'import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent / "tritonserver")')
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export PATH=$VENV/bin:$PATH
# The stub embeds the system libpython; make it import the venv's numpy (bundled OpenBLAS),
# not Debian's python3-numpy (reference BLAS).
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export OPENBLAS_NUM_THREADS=1
exec "$T/bin/tritonserver" \
    --model-repository="$REPO" --backend-directory="$T/backends" \
    --http-port "$PORT" --grpc-port $((PORT + 1)) --metrics-port $((PORT + 2)) \
    --log-verbose 0 --log-info false --log-warning true --log-error true \
    --disable-auto-complete-config --strict-readiness true \
    --allow-gpu-metrics false --pinned-memory-pool-byte-size 0 "${@:4}"
