#!/usr/bin/env bash
# Shows ferry working on this machine. Today: builds ferry, validates the shipped example
# node file and model bundles, shows that a broken node file is refused with every error
# named, and runs the worker's scheduler in virtual time against its baselines. Later issues
# grow this into a running node serving the examples.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target ferryctl ferryd ferry-sim >/dev/null

echo "== ferryctl validate examples/node.toml examples/models/*"
build/ctl/ferryctl validate examples/node.toml examples/models/* 2>&1

echo
echo "== ferryd --check on the example node file"
build/supervisor/ferryd --check --config examples/node.toml 2>&1

echo
echo "== a broken node file is refused (exit 2), every error named"
set +e
build/ctl/ferryctl validate tests/data/bad_node.toml 2>&1
code=$?
set -e
echo "exit code: $code"
[[ $code -eq 2 ]]

echo
echo "== the scheduler: 3 models weighted 2:1:1, one 10x costlier per row, all saturated"
echo "   (ferry-sim, virtual time; shares should read 0.50 / 0.25 / 0.25)"
build/bench/ferry-sim bench/scenarios/fairness.toml | awk -v RS= '/^(ferry|baseline: round robin)/ {print; print ""}'

