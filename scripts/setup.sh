#!/usr/bin/env bash
# Installs exactly the Debian packages ferry's build and tests need. Idempotent: a second run
# installs nothing and does not touch the network when everything is present.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libboost-dev            # Boost.Interprocess (header-only)
  libtomlplusplus-dev     # node files and manifests
  libcli11-dev            # command lines
  libspdlog-dev libfmt-dev
  doctest-dev             # unit tests
  nlohmann-json3-dev      # safetensors headers, --json output
  libsimdjson-dev         # KServe JSON infer bodies (On-Demand API)
  libseccomp-dev          # hook host sandbox
  zlib1g-dev              # gzip/deflate request and response bodies
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # the gRPC front end
  libssl-dev              # OpenSSL: SHA-256 of API keys, TLS on the front end
  openssl                 # the TLS test's certificates (scripts/tls-test.sh)
  libsystemd-dev          # sd_notify
  libdnnl-dev             # oneDNN: the CPU backend's dense and conv2d kernels
  libonnx-dev             # ONNX's protobuf classes: ferryctl import reads model.onnx
  libonnx-testdata        # ONNX's backend node tests, run against the importer (tests)
  python3-onnx python3-torch python3-torchvision  # models exported to ONNX (tests, demo)
  python3-yaml            # the Kubernetes manifests' check (tests)
  ocl-icd-opencl-dev      # dnnl-config.cmake looks for OpenCL (Debian builds oneDNN with it)
  python3                 # example generator
  python3-venv curl       # client tests: tritonclient from PyPI in a venv, and curl
  systemd                 # systemd-analyze verify of the unit (tests)
  dpkg-dev fakeroot       # the Debian package (CPack) and its inspection (tests)
  lintian                 # the packages' policy check (tests)
  debootstrap             # a clean Debian 12 root the packages are installed into (tests)
  prometheus              # promtool check metrics on ferryd's /metrics (tests)
  haproxy                 # checks the configuration ferryctl haproxy-config writes (tests)
  clang libclang-rt-14-dev  # libFuzzer for the fuzz targets, -Wthread-safety analysis
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
