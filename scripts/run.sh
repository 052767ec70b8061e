#!/bin/sh
# Installs what is missing, builds, and starts kgw (extra arguments go to kgw, see --help).
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -d build ] || meson setup build --buildtype=release >/dev/null
meson compile -C build kgw kgw-sandbox-init >/dev/null
exec ./build/kgw "$@"
