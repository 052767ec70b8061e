#!/bin/sh
# Runs a command (kgw) under the restrictions of a systemd unit (kgw.service) as far as they can
# be reproduced without systemd as pid 1: a KGW_WRAPPER for the integration suite, so that every
# test proves the unit's hardening leaves kgw and its sandbox working.
#   .ci/unit-restrictions.sh UNIT COMMAND [ARG...]
# Reproduced: CapabilityBoundingSet, AmbientCapabilities (empty), NoNewPrivileges
# (setpriv); ProtectSystem=strict, ProtectHome, RuntimeDirectory, LogsDirectory, ReadWritePaths
# (a private mount namespace). Not reproduced, and said so: the seccomp-based settings and
# PrivateTmp (the tests hand kgw files in /tmp, which stays writable here). A hardening setting
# this script does not know fails it, so the unit cannot outgrow what is tested.
set -eu
unit=$1
shift
[ -r "$unit" ] || { echo "unit-restrictions: cannot read $unit" >&2; exit 2; }

# the value of a [Service] setting (the last one wins, as in systemd)
setting() {
    sed -n "/^\[Service\]/,/^\[/{s/^$1=//p}" "$unit" | tail -n 1
}

caps="" nnp="" rw="/tmp" protect_system="" protect_home=""
known="User Delegate TasksMax LimitNOFILE Type Environment EnvironmentFile ExecStart ExecReload
KillMode TimeoutStopSec Restart RestartSec RuntimeDirectoryMode LogsDirectoryMode"
not_reproduced="PrivateTmp RestrictAddressFamilies RestrictRealtime SystemCallArchitectures
LockPersonality"
for key in $(sed -n '/^\[Service\]/,/^\[/{s/^\([A-Za-z]*\)=.*/\1/p}' "$unit" | sort -u); do
    value=$(setting "$key")
    case "$key" in
    CapabilityBoundingSet)
        for c in $value; do
            c=$(echo "${c#CAP_}" | tr 'A-Z' 'a-z')
            caps="$caps,+$c"
        done ;;
    AmbientCapabilities) [ -z "$value" ] || { echo "unit-restrictions: $key=$value" >&2; exit 2; } ;;
    NoNewPrivileges) [ "$value" = yes ] && nnp="--no-new-privs" ;;
    ProtectSystem) protect_system=$value ;;
    ProtectHome) protect_home=$value ;;
    RuntimeDirectory) for d in $value; do rw="$rw /run/$d"; done ;;
    LogsDirectory) for d in $value; do rw="$rw /var/log/$d"; done ;;
    ReadWritePaths) rw="$rw $value" ;;
    *)
        if echo "$not_reproduced" | grep -qw "$key"; then
            echo "unit-restrictions: $key=$value is not reproduced here" >&2
        elif ! echo "$known" | grep -qw "$key"; then
            echo "unit-restrictions: unknown setting $key=$value: teach this script" >&2
            exit 2
        fi ;;
    esac
done
case "$protect_system" in strict|"") ;; *) echo "unit-restrictions: ProtectSystem=$protect_system" >&2; exit 2;; esac
case "$protect_home" in yes|"") ;; *) echo "unit-restrictions: ProtectHome=$protect_home" >&2; exit 2;; esac

# In a mount namespace of its own: the writable paths bound onto themselves first, then every
# other mount read-only but the API file systems (/proc, /sys with /sys/fs/cgroup, /dev), then
# empty read-only directories over /home, /root and /run/user.
exec unshare --mount --propagation slave /bin/sh -eu -c '
rw=$1 protect_system=$2 protect_home=$3 caps=$4 nnp=$5
shift 5
for d in $rw; do
    case "$d" in /run/*) mkdir -p "$d" ;; esac  # as systemd makes a RuntimeDirectory
    [ -d "$d" ] && mount --bind "$d" "$d"
done
if [ "$protect_system" = strict ]; then
    findmnt -rn -o TARGET | while read -r m; do
        case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
        for d in $rw; do [ "$m" = "$d" ] && continue 2; done
        mount -o remount,bind,ro "$m"
    done
fi
if [ "$protect_home" = yes ]; then
    for d in /home /root /run/user; do
        [ -d "$d" ] && mount -t tmpfs -o ro,mode=0755,size=4k tmpfs "$d"
    done
fi
exec setpriv $nnp --bounding-set="-all$caps" --inh-caps=-all --ambient-caps=-all -- "$@"
' unit-restrictions "$rw" "$protect_system" "$protect_home" "$caps" "$nnp" "$@"
