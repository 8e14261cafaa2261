#!/usr/bin/env bash
# Checks recd's systemd units against a built recd binary:
#   1. `systemd-analyze verify` accepts each unit pair (service + socket) of the system and
#      the user instance without printing anything on stderr;
#   2. the system service's exposure level (`systemd-analyze security`) is at most 1.5;
#   3. the same for the web page's units (recd-web.socket, recd-web-proxy.service, which holds the
#      port, and recd-web.service, beside recd in the same directory) and RTSP's (recd-rtsp.socket,
#      recd-rtsp.service): each service's exposure is at most 1.5 too.
# The user services' exposure is printed for information only.
#
# Usage: Tests/units/check-units.sh PATH-TO-RECD
# Any executable works as PATH-TO-RECD (e.g. /bin/true): only its existence is checked (and
# of recd-web next to it, if there is one; else PATH-TO-RECD stands for it too).
# Needs systemd-analyze (Debian package systemd); systemd need not be running.
set -euo pipefail

readonly max_exposure=1.5
readonly max_web_exposure=1.5
# The ExecStart= path as written in the units (`make install` rewrites its /usr/local).
readonly unit_binary=/usr/local/bin/recd

fail() {
    printf 'check-units: FAIL: %s\n' "$*" >&2
    exit 1
}

if [[ $# -ne 1 ]]; then
    printf 'usage: %s PATH-TO-RECD\n' "${0##*/}" >&2
    exit 2
fi
[[ -f $1 && -x $1 ]] || fail "$1 is not an executable file"
command -v systemd-analyze >/dev/null ||
    fail "systemd-analyze not found (Debian package systemd)"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Units name the binary by a path without spaces or quotes, so point ExecStart= at a
# symlink to the binary under test, whatever its path.
mkdir "$work/bin"
ln -s "$(realpath "$1")" "$work/bin/recd"
for helper in recd-web recd-rtsp; do
    helper_binary="$(dirname "$1")/$helper"
    [[ -x $helper_binary ]] || helper_binary=$1
    ln -s "$(realpath "$helper_binary")" "$work/bin/$helper"
done

# copy_units SOURCE-DIR DEST-DIR: copies recd.service and recd.socket, with ExecStart= of
# the service pointing to the binary under test.
copy_units() {
    local source=$1 dest=$2 unit
    mkdir -p "$dest"
    cp "$source/recd.socket" "$source/recd-web.socket" "$source/recd-web-proxy.service" "$source/recd-rtsp.socket" "$dest/"
    unit=$(<"$source/recd.service")
    grep -q "^ExecStart=$unit_binary " <<<"$unit" ||
        fail "$source/recd.service: no 'ExecStart=$unit_binary ...' line to rewrite"
    printf '%s\n' "${unit//"$unit_binary"/"$work/bin/recd"}" >"$dest/recd.service"
    for helper in web rtsp; do
        unit=$(<"$source/recd-$helper.service")
        grep -q "^ExecStart=$unit_binary-$helper " <<<"$unit" ||
            fail "$source/recd-$helper.service: no 'ExecStart=$unit_binary-$helper ...' line to rewrite"
        printf '%s\n' "${unit//"$unit_binary-$helper"/"$work/bin/recd-$helper"}" >"$dest/recd-$helper.service"
    done
}

copy_units "$repo/systemd" "$work/system"
copy_units "$repo/systemd/user" "$work/user"

# verify_pair LABEL DIR [systemd-analyze options]: verify exits 0 on unknown keys and
# other warnings, so any output on stderr counts as a failure.
verify_pair() {
    local label=$1 dir=$2 status=0
    shift 2
    systemd-analyze "$@" verify --man=no "$dir/recd.service" "$dir/recd.socket" "$dir/recd-web.service" \
        "$dir/recd-web.socket" "$dir/recd-web-proxy.service" "$dir/recd-rtsp.service" "$dir/recd-rtsp.socket" \
        2>"$work/verify.err" >/dev/null || status=$?
    if [[ -s $work/verify.err || $status -ne 0 ]]; then
        cat "$work/verify.err" >&2
        fail "systemd-analyze verify of the $label units (exit status $status)"
    fi
    printf 'check-units: verify %s units: ok\n' "$label"
}

verify_pair system "$work/system"
# A user manager needs a runtime directory (%t); use a private one.
mkdir -m 0700 "$work/runtime"
XDG_RUNTIME_DIR="$work/runtime" verify_pair user "$work/user" --user

# exposure DIR SERVICE [systemd-analyze options]: prints the service's overall exposure level.
exposure() {
    local dir=$1 service=$2 report level
    shift 2
    report=$(systemd-analyze "$@" security --offline=true --no-pager "$dir/$service.service")
    level=$(sed -n "s/.*Overall exposure level for $service\.service: \([0-9][0-9.]*\).*/\1/p" \
        <<<"$report")
    [[ -n $level ]] || fail "no 'Overall exposure level' in systemd-analyze security output"
    printf '%s\n' "$level"
}

system_level=$(exposure "$work/system" recd)
user_level=$(XDG_RUNTIME_DIR="$work/runtime" exposure "$work/user" recd --user)
for service in recd-web recd-web-proxy recd-rtsp; do
    web_level=$(exposure "$work/system" "$service")
    printf 'check-units: exposure of the system %s.service: %s (maximum %s)\n' "$service" "$web_level" "$max_web_exposure"
    awk -v level="$web_level" -v max="$max_web_exposure" 'BEGIN { exit !(level + 0 <= max + 0) }' ||
        fail "system $service.service exposure $web_level is above $max_web_exposure"
done
printf 'check-units: exposure of the system recd.service: %s (maximum %s)\n' \
    "$system_level" "$max_exposure"
printf 'check-units: exposure of the user recd.service: %s (information only)\n' \
    "$user_level"

awk -v level="$system_level" -v max="$max_exposure" \
    'BEGIN { exit !(level + 0 <= max + 0) }' ||
    fail "system recd.service exposure $system_level is above $max_exposure"
printf 'check-units: ok\n'
