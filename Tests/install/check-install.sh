#!/usr/bin/env bash
# Checks `make install` and `make uninstall` in a staging directory (DESTDIR), PREFIX=/usr:
#   1. binaries, completions, man pages, units, sysusers.d and the config land where they belong;
#   2. completions and man pages are generated from the command definitions: bash completes
#      `recctl wa` to `watch`, every shell's script names `watch`, recctl.watch(1) documents
#      --until, and recctl(1) lists the exit codes;
#   3. the units' ExecStart= names $PREFIX/bin/recd;
#   4. installing again keeps a changed recd.toml and puts the shipped one next to it as
#      recd.toml.example;
#   5. uninstall removes everything except that changed recd.toml.
#
# Usage: Tests/install/check-install.sh   (builds in release mode on first use: minutes)
# Needs man (man-db) to render the pages.
set -euo pipefail

fail() {
    printf 'check-install: FAIL: %s\n' "$*" >&2
    exit 1
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
readonly prefix=/usr

make -C "$repo" --no-print-directory install DESTDIR="$stage" PREFIX="$prefix" >"$stage.log" 2>&1 ||
    { cat "$stage.log" >&2; fail "make install failed"; }
rm -f "$stage.log"

# 1. Where everything goes.
expected=(
    etc/recd/recd.toml
    usr/bin/recctl
    usr/bin/recd
    usr/bin/recd-web
    usr/bin/recd-rtsp
    usr/lib/systemd/system/recd-rtsp.service
    usr/lib/systemd/system/recd-rtsp.socket
    usr/lib/systemd/system/recd-web-proxy.service
    usr/lib/systemd/system/recd-web.service
    usr/lib/systemd/system/recd-web.socket
    usr/lib/systemd/system/recd.service
    usr/lib/systemd/system/recd.socket
    usr/lib/systemd/user/recd-rtsp.service
    usr/lib/systemd/user/recd-rtsp.socket
    usr/lib/systemd/user/recd-web-proxy.service
    usr/lib/systemd/user/recd-web.service
    usr/lib/systemd/user/recd-web.socket
    usr/lib/systemd/user/recd.service
    usr/lib/systemd/user/recd.socket
    usr/lib/sysusers.d/recd.conf
    usr/lib/tmpfiles.d/recd.conf
    usr/share/bash-completion/completions/recctl
    usr/share/bash-completion/completions/recd
    usr/share/bash-completion/completions/recd-web
    usr/share/bash-completion/completions/recd-rtsp
    usr/share/fish/vendor_completions.d/recctl.fish
    usr/share/fish/vendor_completions.d/recd.fish
    usr/share/man/man1/recctl.1
    usr/share/man/man1/recctl.watch.1
    usr/share/man/man1/recd.1
    usr/share/man/man1/recd-web.1
    usr/share/man/man1/recd-rtsp.1
    usr/share/man/man5/recd.toml.5
    usr/share/zsh/site-functions/_recctl
    usr/share/zsh/site-functions/_recd
)
for file in "${expected[@]}"; do
    [[ -f $stage/$file ]] || fail "$file was not installed"
done
for tool in recd recctl recd-web recd-rtsp; do
    [[ -x $stage/usr/bin/$tool ]] || fail "usr/bin/$tool is not executable"
done
# The release build, not some other: recctl a static PIE (no program interpreter), both without
# the symbol table a plain Swift link exports, both starting.
readelf -lW "$stage/usr/bin/recctl" | grep -q "Requesting program interpreter" &&
    fail "usr/bin/recctl is not a static executable"
readelf -hW "$stage/usr/bin/recctl" | grep -q "DYN (Position-Independent" || fail "usr/bin/recctl is not position-independent"
for tool in recd recctl recd-rtsp; do
    exported=$(readelf --dyn-syms -W "$stage/usr/bin/$tool" | awk '$7 != "UND" && $7 ~ /^[0-9]+$/' | wc -l)
    (( exported < 100 )) || fail "usr/bin/$tool exports $exported symbols"
    "$stage/usr/bin/$tool" --version >/dev/null || fail "usr/bin/$tool --version failed"
done
for command in status start stop pause resume cancel watch ls info rm mv devices version; do
    [[ -f $stage/usr/share/man/man1/recctl.$command.1 ]] || fail "no man page for recctl $command"
done

# 2. Generated from the command definitions.
completions=$stage/usr/share/bash-completion/completions/recctl
words=$(bash -c 'source "$1"; COMP_WORDS=(recctl wa); COMP_CWORD=1; COMP_LINE="recctl wa"; COMP_POINT=9
                 _recctl recctl wa recctl; echo "${COMPREPLY[*]}"' _ "$completions")
[[ $words == watch ]] || fail "bash completes 'recctl wa' to '$words', not 'watch'"
for script in "$completions" "$stage/usr/share/zsh/site-functions/_recctl" \
    "$stage/usr/share/fish/vendor_completions.d/recctl.fish"; do
    grep -q watch "$script" || fail "${script#"$stage"/} does not mention watch"
done
page() { MANWIDTH=200 man -l "$stage/usr/share/man/man1/$1" 2>/dev/null | tr -s ' \n' ' '; }
page recctl.watch.1 | grep -q -- 'recctl watch .*--until state' || fail "recctl.watch.1 does not document --until"
page recctl.1 | grep -q 'Exit status: 0 success; 1 the daemon refused the request or the recording failed; 3 nothing is recording (stop, pause, resume, cancel, split); 64 wrong usage; 69 cannot connect to recd.' ||
    fail "recctl.1 does not list the exit codes"
page recd.1 | grep -q -- '--device' || fail "recd.1 does not document --device"
page recd.1 | grep -q 'Exit status: 0 after SIGTERM' || fail "recd.1 does not list the exit codes"
# No page for ArgumentParser's implicit help subcommand, and no subcommand in recd's synopsis.
ls "$stage/usr/share/man/man1" | grep -q '\.help\.1$' && fail "a stub help page was installed"
grep -q '^\.Ar subcommand$' "$stage/usr/share/man/man1/recd.1" && fail "recd.1 shows a subcommand"
# recd.toml(5), made from etc/recd.toml: every key by its dotted name.
MANWIDTH=200 man -l "$stage/usr/share/man/man5/recd.toml.5" 2>/dev/null | grep -q 'retention.grace = "10m"' ||
    fail "recd.toml.5 does not document retention.grace"

# 3. The units run the installed binary.
for unit in system/recd.service user/recd.service system/recd-web.service user/recd-web.service; do
    grep -qx "ExecStart=$prefix/bin/recd\(-web\)\? --\(system\|user\)\( --unix-socket .*/recd-web/http.sock\)\?" "$stage/usr/lib/systemd/$unit" ||
        fail "$unit: $(grep ExecStart= "$stage/usr/lib/systemd/$unit")"
done
! grep -rq /usr/local "$stage/usr/lib/systemd" || fail "a unit still names /usr/local"

# 4. A changed configuration survives a second install.
printf 'device = "hw:1,0"\n' >>"$stage/etc/recd/recd.toml"
changed=$(cat "$stage/etc/recd/recd.toml")
make -C "$repo" --no-print-directory install DESTDIR="$stage" PREFIX="$prefix" >/dev/null 2>&1 ||
    fail "second make install failed"
[[ $(cat "$stage/etc/recd/recd.toml") == "$changed" ]] || fail "install overwrote a changed recd.toml"
cmp -s "$repo/etc/recd.toml" "$stage/etc/recd/recd.toml.example" || fail "no recd.toml.example next to it"

# 5. Uninstall leaves only the changed configuration.
make -C "$repo" --no-print-directory uninstall DESTDIR="$stage" PREFIX="$prefix" >/dev/null 2>&1 ||
    fail "make uninstall failed"
left=$(cd "$stage" && find . -type f | sort)
[[ $left == ./etc/recd/recd.toml ]] || fail "uninstall left: $left"

echo "check-install: OK (${#expected[@]} files checked, installed to and removed from a staging tree)"
