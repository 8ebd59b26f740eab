#!/usr/bin/env bash
# Builds ferry-sim if needed and runs one scenario:
#   scripts/sim.sh bench/scenarios/fairness.toml [--json]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ $# -lt 1 ]]; then
  echo "usage: scripts/sim.sh SCENARIO.toml [--json]" >&2
  exit 2
fi
"$root/scripts/setup.sh" >/dev/null
cmake -S "$root" -B "$root/build" -G Ninja >/dev/null
cmake --build "$root/build" --target ferry-sim >/dev/null
exec "$root/build/bench/ferry-sim" "$@"
