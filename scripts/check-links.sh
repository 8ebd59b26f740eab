#!/usr/bin/env bash
# Checks that each executable links what it runs and nothing else (docs/architecture.md):
# ferryd no seccomp, dlopen, gRPC, oneDNN or hook host code; ferryctl no supervisor or hook
# host code; ferry-worker no gRPC or seccomp; ferry-hookhost no oneDNN or CUDA.
#   scripts/check-links.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/check-links.sh BUILD_DIR}
fail=0

# refuse BINARY WHAT PATTERN: fails when the binary's shared libraries, dynamic symbols or
# (demangled) symbols match PATTERN.
refuse() {
  local binary=$1 what=$2 pattern=$3
  local found
  found=$( { ldd "$binary" | awk '{print $1}'; nm -D "$binary"; nm -C "$binary" 2>/dev/null; } |
           grep -E "$pattern" | head -3 || true)
  if [[ -n "$found" ]]; then
    echo "FAIL $(basename "$binary") links $what:"
    sed 's/^/    /' <<<"$found"
    fail=1
  else
    echo "ok   $(basename "$binary") does not link $what"
  fi
}

# refuse_linked TARGET WHAT PATTERN: fails when the target's link line (the libraries CMake
# hands the linker; Ninja builds only) matches PATTERN.
refuse_linked() {
  local target=$1 what=$2 pattern=$3
  [[ -f "$build/build.ninja" ]] || return 0
  local found
  found=$(ninja -C "$build" -t commands "$target" | tail -1 | tr ' ' '\n' |
          grep -E '\.a$|\.so|^-l' | grep -E "$pattern" | head -3 || true)
  if [[ -n "$found" ]]; then
    echo "FAIL $(basename "$target")'s link line names $what:"
    sed 's/^/    /' <<<"$found"
    fail=1
  else
    echo "ok   $(basename "$target")'s link line does not name $what"
  fi
}

refuse_linked supervisor/ferryd "the hook host, seccomp, gRPC, dl or oneDNN" \
  'ferry_hookhost|ferry_frontend|seccomp|grpc|protobuf|-ldl|dnnl'
refuse_linked ctl/ferryctl "the supervisor or the hook host" \
  'ferry_supervisor|ferry_hookhost|ferry_frontend|systemd|seccomp|grpc'

ferryd="$build/supervisor/ferryd"
refuse "$ferryd" "seccomp" 'libseccomp|seccomp_'
# A statically linked sanitizer runtime (clang's) defines its own dlopen, an interceptor that
# every call would bind to: there the symbols cannot tell, and the normal build checks it.
if [[ -n "$(nm "$ferryd" 2>/dev/null | grep -E ' T __asan_init$' || true)" ]]; then
  echo "skip ferryd links dlopen: a sanitizer runtime is linked in (the normal build checks)"
else
  refuse "$ferryd" "dlopen" '\bdlopen\b'
fi
refuse "$ferryd" "gRPC or protobuf" 'libgrpc|libprotobuf'
refuse "$ferryd" "oneDNN or CUDA" 'libdnnl|libcuda|libcublas'
refuse "$ferryd" "the hook host or its front end" 'ferry::(hookhost|frontend)::'

ferryctl="$build/ctl/ferryctl"
refuse "$ferryctl" "the supervisor" 'ferry::supervisor::|libsystemd'
refuse "$ferryctl" "the hook host, gRPC or seccomp" 'ferry::hookhost::|libgrpc|libseccomp'

worker="$build/worker/ferry-worker"
refuse "$worker" "gRPC or seccomp" 'libgrpc|libseccomp|seccomp_'
refuse "$worker" "the hook host or the supervisor" 'ferry::(hookhost|supervisor|frontend)::'

hookhost="$build/hookhost/ferry-hookhost"
refuse "$hookhost" "oneDNN or CUDA" 'libdnnl|libcuda|libcublas|libgomp'
refuse "$hookhost" "the supervisor or the backends" 'ferry::supervisor::|ferry::cpu::|CpuBackend'
exit $fail
