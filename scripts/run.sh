#!/bin/sh
# Installs what is missing, builds, and starts kgw (extra arguments go to kgw, see --help):
# the server, the sandbox's init and the fork server, as docs/architecture.md describes them.
set -eu
cd "$(dirname "$0")/.."
B=${KGW_BUILD_DIR:-build}
./scripts/deps.sh
[ -d "$B" ] || meson setup "$B" --buildtype=release >/dev/null
# a build directory configured before python3-dev was installed has no fork server target yet
meson introspect "$B" --targets | grep -q '"name": "kgw-zygote"' ||
    meson setup --reconfigure "$B" >/dev/null
meson compile -C "$B" kgw kgw-sandbox-init kgw-zygote >/dev/null
exec "./$B/kgw" "$@"
