#!/usr/bin/env bash
# Shows ferry working on this machine. Today: builds ferry, validates the shipped example
# node file and model bundles, shows that a broken node file is refused with every error
# named, runs the worker's scheduler in virtual time against its baselines, starts a
# ferry-worker process that serves requests pushed over the shared-memory rings, and runs the
# hook host's request flow (plugins, gateway, rings) against a worker. Later issues grow this
# into a node clients call over HTTP and gRPC.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh >/dev/null
cmake -S . -B build -G Ninja >/dev/null
cmake --build build -j "$(nproc)" --target ferryctl ferryd ferry-sim ferry-worker ferry-node-bench \
  ferry-hookhost ferry-hookhost-bench image_classify >/dev/null

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


echo
echo "== a ferry-worker process serving over shared memory (simulated executor and the CPU"
echo "   executor on the example MLP), driven as a hook host would drive it"
build/bench/ferry-node-bench --seconds 1 --rows 8

echo
echo "== the hook host's request flow: uint8 images through the example classifier plugin"
echo "   (preprocess, a ferry-worker, top-3 postprocess), against the plugins alone"
build/bench/ferry-hookhost-bench --seconds 0.5 --light 300
