#!/usr/bin/env bash
# Builds the Debian package from a build tree (CPack) and inspects it: every file an
# operator needs is in it at its place, /etc/ferry/node.toml is a conffile, the maintainer
# scripts and dependencies are declared.
#   scripts/check-package.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$build" && cpack -G DEB -B "$dir" >/dev/null)
deb=$(ls "$dir"/ferry_*.deb)
contents=$(dpkg-deb -c "$deb")
info=$(dpkg-deb -I "$deb")
fail=0
for path in ./usr/bin/ferryd ./usr/bin/ferryctl ./usr/libexec/ferry/ferry-worker \
    ./usr/libexec/ferry/ferry-hookhost ./usr/include/ferry/plugin.h \
    ./usr/lib/systemd/system/ferry.service ./usr/lib/sysusers.d/ferry.conf \
    ./usr/lib/tmpfiles.d/ferry.conf ./etc/ferry/node.toml ./usr/share/doc/ferry/README.md \
    ./usr/share/doc/ferry/docs/supervisor.md; do
  if ! grep -q " $path\$" <<<"$contents"; then
    echo "missing from the package: $path"
    fail=1
  fi
done
# The control files.
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
[[ "$conffiles" == "/etc/ferry/node.toml" ]] || { echo "conffiles: '$conffiles'"; fail=1; }
for field in "Package: ferry" "Depends: .*libseccomp2" "Depends: .*libsystemd0"; do
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
if [[ $fail -ne 0 ]]; then
  exit 1
fi
echo "$(basename "$deb"): $(grep -c . <<<"$contents") entries, conffiles and maintainer scripts present"
