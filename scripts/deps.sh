#!/bin/sh
# Installs the Debian 12 packages kgw needs to build, run and test (only the missing ones).
# --test: also what the test suites use; --package: also what building and checking the
# Debian package, its unit and its alert rules use (docs/operations.md).
set -eu
PKGS="meson ninja-build pkg-config gcc libc6-dev libzmq3-dev libwebsockets-dev libwebsockets-evlib-uv libuv1-dev
libjansson-dev libsodium-dev uuid-dev libseccomp-dev libssl-dev python3-dev python3-ipykernel python3-jupyter-client"
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS jupyter-server python3-websockets python3-pytest python3-numpy python3-pandas python3-matplotlib python3-pip libsystemd-dev valgrind nodejs npm openssl clang libclang-rt-14-dev prometheus haproxy yamllint chromium pyflakes3"
fi
if [ "${1:-}" = "--package" ]; then
    PKGS="$PKGS debhelper dpkg-dev fakeroot lintian libsystemd-dev systemd prometheus python3-websockets"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# node and npm may come from outside Debian (for example nodesource); accept those
case " $missing " in *" nodejs "*) command -v node >/dev/null && missing=$(echo "$missing" | sed 's/ nodejs//');; esac
case " $missing " in *" npm "*) command -v npm >/dev/null && missing=$(echo "$missing" | sed 's/ npm//');; esac
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing:$missing" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || true
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
# prometheus is here for promtool, haproxy for the scale-out test's router (each test starts its
# own): a machine booted with systemd would also start the servers; chromium for the playground
# test (tests/playground drives it headless with puppeteer-core, which downloads no browser)
for s in prometheus haproxy; do
    case " $missing " in *" $s "*)
        [ -d /run/systemd/system ] && $SUDO systemctl disable --now "$s.service" >&2 || true;;
    esac
done
