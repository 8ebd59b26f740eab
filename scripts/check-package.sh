#!/usr/bin/env bash
# Builds the Debian packages from a build tree (CPack) and inspects them: every file an
# operator needs is in ferry at its place, /etc/ferry/node.toml is a conffile, the maintainer
# scripts and dependencies are declared; ferry-cuda (built with CUDA) holds the CUDA module
# alone; no packaged ELF file carries an RPATH or RUNPATH, only the CUDA module needs a CUDA
# library; lintian reports no error or warning (packaging/lintian.md explains the rest).
#   scripts/check-package.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$build" && cpack -G DEB -B "$dir" >"$dir/cpack.log" 2>&1) || { cat "$dir/cpack.log"; exit 1; }
deb=$(ls "$dir"/ferry_*.deb)
cuda_deb=$(ls "$dir"/ferry-cuda_*.deb 2>/dev/null || true)
contents=$(dpkg-deb -c "$deb")
info=$(dpkg-deb -I "$deb")
fail=0
for path in ./usr/bin/ferryd ./usr/bin/ferryctl ./usr/libexec/ferry/ferry-worker \
    ./usr/libexec/ferry/ferry-hookhost ./usr/include/ferry/plugin.h \
    ./usr/lib/systemd/system/ferry.service ./usr/lib/sysusers.d/ferry.conf \
    ./usr/lib/tmpfiles.d/ferry.conf ./etc/ferry/node.toml ./usr/share/doc/ferry/README.md \
    ./usr/share/doc/ferry/docs/supervisor.md ./usr/share/doc/ferry/copyright \
    ./usr/share/doc/ferry/changelog.gz ./usr/share/man/man8/ferryd.8.gz \
    ./usr/share/man/man1/ferryctl.1.gz; do
  if ! grep -q " $path\$" <<<"$contents"; then
    echo "missing from the package: $path"
    fail=1
  fi
done
# The control files.
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
[[ "$conffiles" == "/etc/ferry/node.toml" ]] || { echo "conffiles: '$conffiles'"; fail=1; }
for field in "Package: ferry" "Depends: .*libseccomp2" "Depends: .*libsystemd0" \
    "Depends: .*libonnx1" "Depends: .*libdnnl2"; do
  grep -q "$field" <<<"$info" || { echo "control lacks '$field'"; fail=1; }
done
for script in postinst prerm postrm; do
  grep -q " $script\$" <<<"$info" || grep -q "$script" <<<"$info" || { echo "no $script"; fail=1; }
done
# Binaries are executable, the unit and configuration are not.
grep -q '^-rwxr-xr-x .* ./usr/bin/ferryd$' <<<"$contents" || { echo "ferryd not 0755"; fail=1; }
grep -q '^-rw-r--r-- .* ./etc/ferry/node.toml$' <<<"$contents" || { echo "node.toml not 0644"; fail=1; }
# The packaged node file is valid as shipped (its devices need GPUs: checked with cpu:1).
mkdir "$dir/models"
sed -e 's/^devices = "all".*/devices = "cpu:1"/' -e "s#/var/lib/ferry/models#$dir/models#" \
  "$(dirname "$0")/../packaging/node.toml" > "$dir/node.toml"
"$build/ctl/ferryctl" validate "$dir/node.toml" >/dev/null || { echo "packaged node.toml invalid"; fail=1; }
# ferry-cuda: the module and its docs, nothing else; it needs this very ferry.
if [[ -n "$cuda_deb" ]]; then
  cuda_files=$(dpkg-deb -c "$cuda_deb" | awk '$1 !~ /^d/ {print $NF}' | sort | tr '\n' ' ')
  want="./usr/lib/ferry/backends/libferry_cuda.so ./usr/share/doc/ferry-cuda/changelog.gz \
./usr/share/doc/ferry-cuda/copyright "
  [[ "$cuda_files" == "$want" ]] || { echo "ferry-cuda holds: $cuda_files"; fail=1; }
  version=$(dpkg-deb -f "$deb" Version)
  grep -q "^Depends: ferry (= $version)" <<<"$(dpkg-deb -f "$cuda_deb")" ||
    { echo "ferry-cuda does not depend on ferry (= $version)"; fail=1; }
  ! grep -q "libexec\|/usr/bin" <<<"$cuda_files" || { echo "ferry-cuda holds binaries"; fail=1; }
fi
# Every packaged ELF file: no RPATH/RUNPATH (a path of the build machine), and CUDA libraries
# needed only by the CUDA module.
mkdir "$dir/unpacked"
for d in "$deb" $cuda_deb; do dpkg-deb -x "$d" "$dir/unpacked"; done
elves=0
while IFS= read -r -d '' file; do
  head -c 4 "$file" | grep -q $'\x7fELF' || continue
  elves=$((elves + 1))
  dynamic=$(readelf -d "$file")
  if grep -q "RPATH\|RUNPATH" <<<"$dynamic"; then
    echo "${file#"$dir/unpacked"}: $(grep "RPATH\|RUNPATH" <<<"$dynamic")"
    fail=1
  fi
  if [[ "$file" != */libferry_cuda.so ]] && grep -q "NEEDED.*\[libcu" <<<"$dynamic"; then
    echo "${file#"$dir/unpacked"} needs CUDA: $(grep "NEEDED.*libcu" <<<"$dynamic")"
    fail=1
  fi
done < <(find "$dir/unpacked" -type f -print0)
[[ $elves -ge 4 ]] || { echo "only $elves ELF files found"; fail=1; }
# lintian: no error and no warning (informational tags are explained in packaging/lintian.md).
if command -v lintian >/dev/null; then
  tags=$(lintian $deb $cuda_deb 2>&1 | grep -E "^[EW]: " || true)
  [[ -z "$tags" ]] || { echo "lintian:"; echo "$tags"; fail=1; }
fi
if [[ $fail -ne 0 ]]; then
  exit 1
fi
echo "$(basename "$deb"): $(grep -c . <<<"$contents") entries, conffiles and maintainer scripts present"
echo "$elves ELF files without RPATH/RUNPATH; CUDA only in the module; lintian: no E/W tags"
