#!/bin/sh
# The Debian package under systemd as pid 1, on a machine that does not boot systemd: this host
# booted in a systemd-nspawn container over a throwaway overlay of / (nothing is written to the
# host), the .deb installed with dpkg -i, the service driven with systemctl. By hand, not in
# .ci/run (it boots the host's whole OS, and needs root and systemd-container):
#   .ci/service-container.sh /tmp/kgw-package.XXXXXX/kgw_0.1.0_amd64.deb
# Checks: installed, the unit is enabled and skipped (no key yet); with a key it starts as
# Type=notify with its status line and runs a sandboxed kernel through the fork server (1+1);
# reload rereads the keys; stop is clean; a reinstall restarts it; removal stops it and keeps
# /etc/kgw/keys; purge removes /etc/kgw.
set -eu
deb=$(readlink -f "$1")
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v systemd-nspawn >/dev/null || apt-get install -y -qq --no-install-recommends systemd-container
name=kgw-service-test
work=$(mktemp -d /tmp/kgw-container.XXXXXX)

# a cgroup of its own in every hierarchy, so that the container's systemd manages a subtree
cgdirs=""
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -f "$h/cgroup.procs" ] || continue
    case "$h" in */cpuset/) continue ;; esac  # its cpus and mems would need setting up
    if [ "$(stat -f -c %T "$h")" = cgroup2fs ]; then
        rel=$(sed -n 's/^0:://p' /proc/self/cgroup)
    else
        rel=$(awk -F: -v h="$(basename "$h")" '{
            n = split($2, c, ",")
            for (i = 1; i <= n; i++) if ($2 == h || c[i] == h || c[i] == "name=" h) print $3
        }' /proc/self/cgroup | head -n 1)
    fi
    d="${h%/}${rel%/}/$name"
    mkdir -p "$d" && echo $$ > "$d/cgroup.procs" && cgdirs="$d $cgdirs"
done
cleanup() {
    if [ -n "${leader:-}" ]; then
        kill "$nspawn" 2>/dev/null || true
        wait "$nspawn" 2>/dev/null || true
    fi
    for d in $cgdirs; do  # back where it was, then the subtree goes
        echo $$ > "${d%/*}/cgroup.procs" 2>/dev/null || true
        find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    rm -rf "$work" "$work.log"
}
trap cleanup EXIT

unshare --mount --propagation private sh -eu -c '
    work=$1 deb=$2 name=$3
    mount -t tmpfs -o size=4g tmpfs "$work"
    mkdir "$work/u" "$work/w" "$work/root"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$work/u,workdir=$work/w" "$work/root"
    cp "$deb" "$work/root/root/kgw.deb"
    cp "$4/.ci/smoke_installed.py" "$4/.ci/check_run.py" "$work/root/root/"
    rm -f "$work/root/etc/machine-id" "$work/root/usr/sbin/policy-rc.d"
    exec systemd-nspawn -q -D "$work/root" --private-network --register=no --keep-unit \
        -M "$name" -b' container "$work" "$deb" "$name" "$repo" > "$work.log" 2>&1 < /dev/null &
nspawn=$!
for i in $(seq 60); do
    leader=$(pgrep -P "$nspawn" -x systemd || true)
    [ -n "$leader" ] && break
    sleep 1
done
[ -n "$leader" ] || { cat "$work.log"; echo "service-container: no systemd in the container" >&2; exit 1; }
C() { nsenter -t "$leader" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
C systemctl is-system-running --wait >/dev/null || true
# a container's cgroup v1 controllers are read-only; kgw needs memory, pids and cpu
for h in memory pids cpu; do
    C sh -c "[ -d /sys/fs/cgroup/$h ] && mount -o remount,bind,rw /sys/fs/cgroup/$h || true"
done
check() { echo "service-container: $*"; }
expect() { [ "$1" = "$2" ] || { echo "service-container: $3: '$1', expected '$2'" >&2; C journalctl -u kgw --no-pager | tail -n 30; exit 1; }; }

C dpkg -i /root/kgw.deb >/dev/null 2>&1
expect "$(C systemctl is-enabled kgw)" enabled "after install"
expect "$(C systemctl show kgw -p ConditionResult --value)" no "before a key exists"
check "installed, enabled, skipped without a key"

C sh -c 'umask 077; kgw keygen --tenant ops > /root/ops.key; tail -n 1 /root/ops.key > /etc/kgw/keys'
C systemctl start kgw
expect "$(C systemctl show kgw -p ActiveState --value)" active "after start"
expect "$(C systemctl show kgw -p StatusText --value)" "listening on 127.0.0.1 port 8888" "status"
C /usr/bin/python3 - <<'EOF'
import asyncio, json, sys
sys.path.insert(0, "/root")
import smoke_installed as S
key = open("/root/ops.key").read().split()[0]
base = "http://127.0.0.1:8888"
st, _, body = S.get(base + "/api/kernels", key, "POST", {"name": "python3"})
assert st == 201, (st, body)
kid = json.loads(body)["id"]
assert asyncio.run(S.one_plus_one("ws://127.0.0.1:8888", key, kid)) == ("2", "ok")
assert S.get(f"{base}/api/kernels/{kid}", key, "DELETE")[0] == 204
assert json.loads(S.get(base + "/api")[2])["sandbox"] == "enabled"
EOF
check "started (Type=notify, status line), a sandboxed kernel ran 1+1"

C sh -c 'kgw keygen --tenant two | tail -n 1 >> /etc/kgw/keys'
C systemctl reload kgw
C journalctl -u kgw --no-pager | grep -q "key file reloaded (2 keys, were 1)" ||
    { echo "service-container: reload did not reread the keys" >&2; exit 1; }
check "reload rereads the key file"

pid=$(C systemctl show kgw -p MainPID --value)
C dpkg -i /root/kgw.deb >/dev/null
expect "$(C systemctl show kgw -p ActiveState --value)" active "after a reinstall"
[ "$(C systemctl show kgw -p MainPID --value)" != "$pid" ] ||
    { echo "service-container: a reinstall did not restart kgw" >&2; exit 1; }
check "a reinstall restarts the service"

C systemctl stop kgw
expect "$(C systemctl show kgw -p Result --value)" success "stop"
expect "$(C systemctl show kgw -p ExecMainStatus --value)" 0 "exit status after stop"
check "stop: SIGTERM, exit 0"

C systemctl start kgw
C dpkg -r kgw >/dev/null
expect "$(C systemctl show kgw -p ActiveState --value)" inactive "after removal"
C test -s /etc/kgw/keys || { echo "service-container: removal lost the keys" >&2; exit 1; }
C dpkg --purge kgw >/dev/null
C test ! -e /etc/kgw || { echo "service-container: purge left /etc/kgw" >&2; exit 1; }
check "removal stops it and keeps the keys; purge removes /etc/kgw"

C systemctl poweroff || true
wait "$nspawn" || true
leader=""
echo "service-container: all checks passed under systemd $(systemctl --version | awk 'NR == 1 { print $2 }')"
