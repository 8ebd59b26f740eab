#!/bin/sh
# ferryctl import on hostile files: each must exit 2 with its reason and write nothing.
#   import_hostile.sh FERRYCTL GOOD.onnx
set -u
ferryctl=$1
good=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_refusal NAME FILE PATTERN [ARGS...]: exit 2, PATTERN on stderr, no bundle written.
expect_refusal() {
  name=$1 file=$2 pattern=$3
  shift 3
  timeout 20 "$ferryctl" import "$file" --out "$work/out-$name" "$@" 2>"$work/err" >/dev/null
  rc=$?
  [ "$rc" -eq 2 ] || fail "$name: exit $rc, expected 2 ($(cat "$work/err"))"
  grep -q "$pattern" "$work/err" || fail "$name: '$pattern' not in: $(cat "$work/err")"
  [ ! -e "$work/out-$name" ] || fail "$name: a bundle was written"
  echo "ok $name: $(head -c 200 "$work/err")"
}

size=$(wc -c <"$good")
head -c $((size / 2)) "$good" >"$work/truncated.onnx"
expect_refusal truncated "$work/truncated.onnx" "does not parse\|not computed\|not defined"
head -c 1000000 /dev/urandom >"$work/random.onnx"
expect_refusal random "$work/random.onnx" "does not parse\|opset"
: >"$work/empty.onnx"
expect_refusal empty "$work/empty.onnx" "opset 0"
mkfifo "$work/fifo.onnx"
expect_refusal fifo "$work/fifo.onnx" "not a regular file"
ln -s "$good" "$work/link.onnx"
expect_refusal symlink "$work/link.onnx" "symlink"
expect_refusal missing "$work/nope.onnx" "nope.onnx"
expect_refusal sizes "$good" "strictly ascending" --sizes 4,2
expect_refusal name "$good" "must equal the bundle directory" --name other
mkdir -p "$work/exists"
timeout 20 "$ferryctl" import "$good" --out "$work/exists" >/dev/null 2>"$work/err"
[ $? -eq 2 ] && grep -q "already exists" "$work/err" || fail "an existing directory was not refused"
echo "all hostile imports refused"
