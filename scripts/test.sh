#!/bin/sh
# Installs what is missing, builds, and runs every test suite (unit, integration, fuzz replay).
# Extra arguments go to `meson test` (for example: --suite unit).
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh --test
(cd tests/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
(cd tests/kubernetes && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
(cd tests/mcp && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
(cd tests/e2b && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
# puppeteer-core drives Debian's /usr/bin/chromium: it never downloads a browser
(cd tests/playground && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >/dev/null)
[ -d build ] || meson setup build >/dev/null
meson compile -C build >/dev/null
meson test -C build --print-errorlogs "$@"
