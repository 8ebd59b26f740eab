#!/usr/bin/env bash
# Runs every CPU benchmark: each shipped scheduler scenario through ferry-sim (with its
# baselines), the decision-cost benchmark and the shared-memory hand-off benchmark. Tables go to the terminal; JSON to
# build/bench-results/. docs/benchmarks.md records the figures.
#   scripts/bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" >/dev/null
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" --target ferry-sim ferry-decision-bench ferry-shm-bench >/dev/null
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
"$root/build/bench/ferry-shm-bench" --json >"$out/shm.json"
echo "JSON written to $out"
