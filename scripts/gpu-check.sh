#!/usr/bin/env bash
# The GPU check, in two steps so it fits a short GPU lease:
#   scripts/gpu-check.sh build   on the development machine: a CUDA build for sm_90 into
#                                build-gpu/ (static libstdc++ and cudart; cuBLAS and the few
#                                Debian libraries copied into build-gpu/lib)
#   scripts/gpu-check.sh run     on the GPU machine: the CUDA tests, a GPU worker process
#                                against direct graph replay, then the benchmark against
#                                PyTorch on the same GPU; prints the table last.
# With a lent GPU: run `build` here, then the device tool's run with carry ["build-gpu"] and
# the command `scripts/gpu-check.sh run`.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  build)
    scripts/setup.sh
    cmake -S . -B build-gpu -G Ninja -DFERRY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
    cmake --build build-gpu -j "$(nproc)" --target cuda_backend_test cuda_tensor_ops_test ferry-gpu-bench ferry-node-bench ferry-worker \
      ferry_cuda_module
    # Shared libraries from Debian packages that another Linux may lack travel along;
    # glibc, the CUDA driver and cuBLAS are found on the GPU machine.
    mkdir -p build-gpu/lib
    for binary in build-gpu/worker/backends/cuda_backend_test \
                  build-gpu/worker/backends/cuda_tensor_ops_test build-gpu/bench/ferry-gpu-bench \
                  build-gpu/worker/ferry-worker build-gpu/bench/ferry-node-bench \
                  build-gpu/worker/libferry_cuda.so; do
      ldd "$binary" | awk '/=> \// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
          libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcublas*|libcuda.so*) ;;
          *) cp -L "$lib" build-gpu/lib/ ;;
        esac
      done
    done
    echo "build-gpu ready: $(du -sh build-gpu | cut -f1)"
    ;;
  run)
    cublas=$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 / {if (!f) print $NF; f = 1}' || true)
    [[ -n "$cublas" ]] || cublas=$(find / -name 'libcublas.so.13' -print -quit 2>/dev/null || true)
    # Only ferry's binaries see the carried libraries (PyTorch keeps the machine's own).
    # cuDNN (loaded at run time for convolutions) from the machine's nvidia-cudnn wheel, if any.
    cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' \
      2>/dev/null || true)
    libs="$PWD/build-gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):${cudnn:+$cudnn:}${LD_LIBRARY_PATH:-}"
    if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
      echo "no GPU here: nothing to check" >&2
      exit 1
    fi
    python3 scripts/make_examples.py --large >/dev/null
    out="${OUT:-build-gpu/out}"
    mkdir -p "$out"
    echo "== CUDA backend tests"
    LD_LIBRARY_PATH="$libs" timeout 300 build-gpu/worker/backends/cuda_backend_test 2>&1 |
      tee "$out/test.log" | tail -n 40 || echo "cuda_backend_test failed (exit ${PIPESTATUS[0]})"
    LD_LIBRARY_PATH="$libs" timeout 120 build-gpu/worker/backends/cuda_tensor_ops_test 2>&1 |
      tee "$out/tensor_ops.log" | tail -n 40 ||
      echo "cuda_tensor_ops_test failed (exit ${PIPESTATUS[0]})"
    echo "== benchmark"
    LD_LIBRARY_PATH="$libs" timeout 300 build-gpu/bench/ferry-gpu-bench --json >"$out/gpu.json"
    echo "== a GPU worker process against direct graph replay (issue 11)"
    LD_LIBRARY_PATH="$libs" timeout 240 build-gpu/bench/ferry-node-bench --gpu --rows 8 \
      --worker build-gpu/worker/ferry-worker --json >"$out/node.json" ||
      echo "ferry-node-bench failed (exit $?)"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('gpu worker:', d.get('gpu'))" \
      "$out/node.json" || true
    if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
      python3 bench/torch_bench.py --json >"$out/torch.json"
      python3 bench/gpu_table.py "$out/gpu.json" "$out/torch.json"
    else
      echo "(PyTorch with CUDA not found: no baseline)"
      python3 bench/gpu_table.py "$out/gpu.json"
    fi
    ;;
  *)
    echo "usage: scripts/gpu-check.sh build|run" >&2
    exit 2
    ;;
esac
