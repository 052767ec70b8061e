#!/bin/sh
# The Debian package as an operator gets it: built with dpkg-buildpackage from this tree's
# tracked files in a scratch directory, checked by lintian (an error or a warning fails),
# unpacked with dpkg-deb -x and run from there (.ci/smoke_installed.py), and its systemd unit
# accepted by systemd-analyze verify without a word. Prints where the scratch directory is.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh --package
work=$(mktemp -d /tmp/kgw-package.XXXXXX)
echo "package: building in $work"

mkdir "$work/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/src"
if ! (cd "$work/src" && dpkg-buildpackage -us -uc -b) > "$work/build.log" 2>&1; then
    tail -n 60 "$work/build.log"
    exit 1
fi
deb=$(echo "$work"/kgw_*_*.deb)
echo "package: built $(basename "$deb")"

# its own tags are overridden with reasons (debian/kgw.lintian-overrides)
lintian --fail-on error,warning --info "$work"/kgw_*.changes

dpkg-deb -x "$deb" "$work/root"
/usr/bin/python3 .ci/smoke_installed.py "$work/root"

# verify checks that ExecStart's program and the Documentation= man page exist: the unpacked
# /usr/bin and man1 over the host's, in a mount namespace of its own
out=$(unshare --mount sh -c '
    for d in usr/bin usr/share/man/man1; do
        mount -t overlay overlay -o "lowerdir=$1/$d:/$d" "/$d"
    done
    exec systemd-analyze verify "$1/lib/systemd/system/kgw.service"' verify "$work/root" 2>&1) ||
    { echo "$out"; exit 1; }
[ -z "$out" ] || { echo "systemd-analyze verify: $out"; exit 1; }
echo "package: systemd-analyze verify accepts kgw.service"
