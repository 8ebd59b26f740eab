#!/usr/bin/env bash
# Set up NVIDIA Triton Inference Server (from PyPI nvidia-pytriton, python backend only)
# serving ferry's example MLP, for side-by-side benchmarks.
#   usage: setup.sh VENV_DIR REPO_DIR
# env: MLP_WEIGHTS (default: examples/models/mlp/weights.safetensors of this checkout)
#      PYTRITON_VERSION (default 0.7.0)
# Idempotent: an existing venv with pytriton installed is reused; the model repository is rewritten.
set -euo pipefail
if [ $# -ne 2 ]; then echo "usage: $0 VENV_DIR REPO_DIR" >&2; exit 2; fi
VENV=$1
REPO=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WEIGHTS=${MLP_WEIGHTS:-$HERE/../../../examples/models/mlp/weights.safetensors}
WEIGHTS=$(realpath "$WEIGHTS")
PYTRITON_VERSION=${PYTRITON_VERSION:-0.7.0}
[ -f "$WEIGHTS" ] || { echo "weights not found: $WEIGHTS" >&2; exit 1; }

# The python backend stub links the system libpython3.11, so the venv must be Python 3.11
# from /usr/bin/python3 (not pyenv's), and the glibc must be >= 2.34 (Debian 12 is fine).
if [ ! -x "$VENV/bin/python" ]; then
    /usr/bin/python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import pytriton, numpy" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet "nvidia-pytriton==$PYTRITON_VERSION" numpy
fi
PYVER=$("$VENV/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
T=$("$VENV/bin/python" -c 'import pathlib, pytriton; print(pathlib.Path(pytriton.__file__).parent / "tritonserver")')
STUB=$T/python_backend_stubs/$PYVER/triton_python_backend_stub
[ -f "$STUB" ] || { echo "no python backend stub for Python $PYVER under $T" >&2; exit 1; }
cmp -s "$STUB" "$T/backends/python/triton_python_backend_stub" 2>/dev/null \
    || cp "$STUB" "$T/backends/python/triton_python_backend_stub"
chmod +x "$T/backends/python/triton_python_backend_stub"

mkdir -p "$REPO/mlp/1"
cat > "$REPO/mlp/config.pbtxt" <<CFG
name: "mlp"
backend: "python"
max_batch_size: 32
input [ { name: "input" data_type: TYPE_FP32 dims: [ 784 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "weights" value: { string_value: "$WEIGHTS" } }
CFG
cp "$HERE/model.py" "$REPO/mlp/1/model.py"
echo "venv:   $VENV"
echo "server: $T/bin/tritonserver"
echo "repo:   $REPO (weights $WEIGHTS)"
