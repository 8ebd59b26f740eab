#!/usr/bin/env bash
# Runs every CPU benchmark: each shipped scheduler scenario through ferry-sim (with its
# baselines), the decision-cost benchmark, the shared-memory hand-off benchmark, the worker
# process end to end (ferry-node-bench), CPU execution against PyTorch and imported ONNX models
# against onnxruntime. Tables go to the
# terminal; JSON to build/bench-results/. docs/benchmarks.md records the figures.
#   scripts/bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"  # The benchmarks read examples/ relative to the repository root.
"$root/scripts/setup.sh" >/dev/null
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" --target ferry-sim ferry-decision-bench ferry-shm-bench ferry-cpu-bench \
  ferry-host-dispatch-bench ferry-node-bench ferry-worker >/dev/null
out="$root/build/bench-results"
mkdir -p "$out"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
for scenario in "$root"/bench/scenarios/*.toml; do
  name=$(basename "$scenario" .toml)
  "$root/build/bench/ferry-sim" "$scenario"
  "$root/build/bench/ferry-sim" "$scenario" --json >"$out/$name.json"
  echo
done
"$root/build/bench/ferry-decision-bench"
"$root/build/bench/ferry-decision-bench" --json >"$out/decision.json"
echo
"$root/build/bench/ferry-shm-bench"
"$root/build/bench/ferry-shm-bench" --json --check >"$out/shm.json" ||
  echo "ferry-shm-bench: a target was missed (see $out/shm.json)"
echo
"$root/build/bench/ferry-host-dispatch-bench"
"$root/build/bench/ferry-host-dispatch-bench" --json >"$out/host_dispatch.json"
echo
for rows in 8 1; do
  "$root/build/bench/ferry-node-bench" --rows "$rows"
  "$root/build/bench/ferry-node-bench" --rows "$rows" --json >"$out/node_rows$rows.json"
done
echo
# CPU execution against PyTorch: bench-only packages (PyTorch on OpenBLAS), not needed to build.
if ! /usr/bin/python3 -c "import torch, threadpoolctl" 2>/dev/null ||
   ! dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q "install ok installed"; then
  apt-get install -y -qq --no-install-recommends python3-torch python3-threadpoolctl libopenblas0-pthread >/dev/null
fi
/usr/bin/python3 "$root/bench/cpu_vs_torch.py"
/usr/bin/python3 "$root/bench/cpu_vs_torch.py" --json >"$out/cpu_vs_torch.json"
echo
# Imported ONNX models against onnxruntime (PyPI, in its own virtual environment).
cmake --build "$root/build" --target ferryctl >/dev/null
venv="$root/build/ort-venv"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import onnxruntime" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check onnxruntime
fi
"$venv/bin/python" "$root/bench/vs_onnxruntime.py" --json | tee "$out/vs_onnxruntime.json"
echo "JSON written to $out"
