#!/usr/bin/env bash
# The gzip bomb of issue 33 against a node of two CPU workers and two hook hosts serving the
# MLP (bench/gzip_bomb.py): what one costs the hook hosts in CPU, and a normal client's
# latency while four clients send it in a loop. Prints JSON. MAX_INFLATE_RATIO 0 shows the
# cost without the ratio limit.
#   bench/gzip_bomb.sh [BUILD_DIR] [SECONDS] [MAX_INFLATE_RATIO]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
source scripts/lib/node.sh
ferry_venv "$build"
ferry_scratch
mkdir "$dir/models"
cp -r examples/models/mlp "$dir/models/"
ferry_start_node "$build" "$dir" "bomb$$" "[frontend]
max_inflate_ratio = ${3:-100}"
hookhosts=$("${ctl[@]}" status | "$venv/bin/python" -c "import json,sys; print(','.join(str(c['pid']) for c in json.load(sys.stdin)['children'] if c['kind'] == 'hookhost'))")
"$venv/bin/python" bench/gzip_bomb.py "$address" "$hookhosts" --seconds "${2:-10}"
ferry_stop_node
