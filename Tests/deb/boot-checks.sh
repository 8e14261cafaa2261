#!/bin/bash
# The checks of a booted station (Tests/deb/test-boot.sh): run inside a root booted with systemd
# as PID 1, by the oneshot unit recd-boot-checks.service after multi-user.target, with recd's
# package installed by apt. Each check appends a line to $results:
#   ok NAME SECONDS DETAIL      or      FAIL NAME SECONDS DETAIL
# and the first failure ends the run. Whatever happened, the journal of the boot goes to
# $out/journal.txt and the last step powers the container off: the last check starts a
# recording and the power-off must finalize it (test-boot.sh checks the files afterwards).
#
# The station: the package's units as installed, /etc/recd/recd.toml (the conffile) changed as
# a site would, the paced PulseAudio device of ../../shared/TESTING.md (2) as `pacedmic`, its
# server's socket bind-mounted to /run/pa by the host (the unit's own RestrictAddressFamilies=
# AF_UNIX and file system rules are what let recd reach it).
set -uo pipefail
out=/srv/boot-check
results=$out/results
config=/etc/recd/recd.toml
recordings=/var/lib/recd/recordings
# Under qemu-user, test-boot.sh lifts every service's sandbox with a drop-in: the results say so.
sandbox="under its sandbox"
[[ ! -e /etc/systemd/system/service.d/50-qemu-user.conf ]] || sandbox="without its sandbox (emulated)"
boot=1
[[ -e $out/first-boot-done ]] && boot=2
[[ $boot == 2 ]] || : >"$results"
name=setup
check_started=$(date +%s.%N)

elapsed() { awk -v a="$check_started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
check() { name=$1; check_started=$(date +%s.%N); }
pass() { echo "ok $name $(elapsed) $*" >>"$results"; }
finish() {
    journalctl -b --no-pager -o short-monotonic >"$out/journal.txt" 2>&1
    systemctl --no-pager status recd.service >"$out/status.txt" 2>&1
    echo "end of boot $boot" >>"$results"
    sync
    systemctl poweroff --no-block
    exit 0
}
fail() {
    echo "FAIL $name $(elapsed) $*" >>"$results"
    finish
}
# wait_until SECONDS WHAT COMMAND...: polls COMMAND (every 50 ms) until it succeeds.
wait_until() {
    local seconds=$1 what=$2 deadline
    deadline=$(awk -v t="$(date +%s.%N)" -v s="$seconds" 'BEGIN { printf "%.3f", t + s }')
    shift 2
    until "$@" >/dev/null 2>&1; do
        awk -v t="$(date +%s.%N)" -v d="$deadline" 'BEGIN { exit !(t < d) }' || fail "no $what within $seconds s"
        sleep 0.05
    done
}
status_json() { recctl status --json 2>/dev/null; }
state() { status_json | jq -r '.state.name'; }
current_path() { status_json | jq -r '.state.recording.path // ""'; }
main_pid() { systemctl show -p MainPID --value recd.service; }
is_state() { [[ $(state) == "$1" ]]; }
# recording_in_new_file OLD: recording, into a file other than OLD.
recording_in_new_file() { [[ $(state) == recording && -n $(current_path) && $(current_path) != "$1" ]]; }
journal_since() { journalctl -u recd.service --since "@$1" --no-pager -o cat 2>/dev/null; }

# --- The second boot: the station comes back by itself ----------------------------------------
if [[ $boot == 2 ]]; then
    check reboot
    wait_until 60 "recd.service active after the boot" systemctl is-active --quiet recd.service
    systemctl is-active --quiet recd.socket || fail "recd.socket is $(systemctl is-active recd.socket) after the boot"
    before=$(cat "$out/recording-at-poweroff")
    [[ -f $before ]] || fail "the recording at power-off is not there finalized: no $before"
    [[ ! -e $before.part ]] || fail "$before.part after the power-off"
    wait_until 30 "recording again after the boot" recording_in_new_file "$before"
    pass "recd.service active after the boot; [autostart] recording again into $(current_path); $before finalized at power-off"
    check poweroff-again
    echo "$(current_path)" >"$out/recording-at-poweroff"
    pass "powering off while recording into $(current_path)"
    finish
fi

# --- apt install while systemd runs: the maintainer scripts start the units ----------------
check install
DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 "$out/recd.deb" >"$out/apt.log" 2>&1 ||
    fail "apt-get install ./recd.deb: $(tail -20 "$out/apt.log")"
[[ $(dpkg-query -W -f='${Status} ${Version}' recd) == "install ok installed $RECD_VERSION" ]] ||
    fail "recd $RECD_VERSION is not installed: $(dpkg-query -W -f='${Status} ${Version}' recd)"
systemctl is-active --quiet recd.socket || fail "recd.socket is $(systemctl is-active recd.socket) after the install"
wait_until 30 "recd.service active after the install" systemctl is-active --quiet recd.service
systemctl is-enabled --quiet recd.service || fail "recd.service is not enabled"
pass "recd $RECD_VERSION installed by apt; recd.socket and recd.service started and enabled by its scripts"

# The site's changes, as an administrator makes them.
check site
useradd -m -G recd alice && useradd -m bob || fail "could not add the users alice and bob"
grep -q '^#device = "default"$' "$config" || fail "$config has no '#device = \"default\"' line"
sed -i 's/^#device = "default"$/device = "pacedmic"/' "$config"
umask 077
printf 'control %s\nlisten %s\n' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" >/etc/recd/web-tokens
umask 022
chown recd-web /etc/recd/web-tokens
systemctl restart recd.service || fail "systemctl restart recd"
pass "device = \"pacedmic\", web-tokens, alice (group recd) and bob; recd restarted"

# --- recd.service through recd.socket ----------------------------------------------------------
check socket-activation
# After a reboot (this boot): enabled, both come up by themselves.
wait_until 60 "recd.service active" systemctl is-active --quiet recd.service
# Stopped, with its socket left listening: the next client starts it again through the socket.
systemctl stop recd.service
[[ $(systemctl is-active recd.service) == inactive ]] || fail "recd.service did not stop"
systemctl is-active --quiet recd.socket || fail "stopping recd.service stopped recd.socket"
runuser -u alice -- recctl status >"$out/status-alice.txt" 2>&1 || fail "recctl status as alice (group recd): $(cat "$out/status-alice.txt")"
systemctl is-active --quiet recd.service || fail "a client's connection to recd.socket did not start recd.service"
# Any thread but the main one, which has left through dispatch_main (its environ reads empty).
fds=$(cat /proc/"$(main_pid)"/task/*/environ 2>/dev/null | tr '\0' '\n' | sed -n 's/^LISTEN_FDNAMES=//p' | head -1)
[[ $fds == control ]] || fail "recd.service got LISTEN_FDNAMES='$fds' from systemd, not 'control'"
pass "started again by a connection to recd.socket (LISTEN_FDNAMES=$fds)"

check access
[[ -s $out/status-alice.txt ]] || fail "recctl status as alice printed nothing"
if runuser -u bob -- recctl status >"$out/status-bob.txt" 2>&1; then fail "bob (not in group recd) could connect"; fi
if runuser -u alice -- recctl start nope --duration 1 >"$out/start-alice.txt" 2>&1; then fail "alice (observe only) could start a recording"; fi
pass "alice (group recd) observes; bob (no group) cannot connect; alice cannot control"

# --- The system clock, as the sandbox lets recd see it -------------------------------------------
check clock
# ProtectClock= filters adjtimex out: recd asks systemd-timedated over the system bus, which
# reads the kernel's flag outside the sandbox (this machine's kernel: STA_UNSYNC, no NTP).
clock=$(recctl status --json | jq -c .clock) || fail "recctl status --json"
[[ $(jq -r .source <<<"$clock") == timedated ]] || fail "status.clock.source is not timedated: $clock"
kernel=$(busctl get-property org.freedesktop.timedate1 /org/freedesktop/timedate1 org.freedesktop.timedate1 NTPSynchronized) ||
    fail "busctl cannot ask timedated"
[[ $kernel == "b $(jq -r .synchronized <<<"$clock")" ]] || fail "recd says synchronized=$(jq -r .synchronized <<<"$clock"), timedated '$kernel'"
journalctl -b -u recd.service -o cat --no-pager | grep -q "systemd-timedated reads it" || fail "recd did not log where its clock's word comes from"
pass "status.clock.source timedated (through the system bus, recd $sandbox), synchronized as timedated says ($kernel)"

# --- A recording from the paced device, through the sandbox ------------------------------------
check paced-recording
timeout 60 recctl start boot-take --format wav --duration 2 --wait >"$out/take.txt" 2>&1 ||
    fail "recctl start --duration 2 --wait: $(cat "$out/take.txt"; journal_since "$(date -d '-70 sec' +%s)" | tail -5)"
[[ -f $recordings/boot-take.wav ]] || fail "no $recordings/boot-take.wav: $(ls "$recordings")"
# Its frames and its tone are checked outside, by ffmpeg (test-boot.sh).
pass "2 s from pacedmic (PulseAudio through /run/pa) into boot-take.wav"

# --- Reload ------------------------------------------------------------------------------------
check reload-valid
cp "$config" "$out/recd.toml.good"
sed -i 's/^#format = "wav"$/format = "flac"/' "$config"
grep -q '^format = "flac"$' "$config" || fail "could not set [recording] format in $config"
systemctl reload recd.service || fail "systemctl reload failed"
wait_until 30 "the reload's notice in the journal" sh -c "journalctl -u recd.service -o cat --no-pager | grep -q 'configuration reloaded'"
timeout 60 recctl start boot-reloaded --duration 1 --wait >"$out/take.txt" 2>&1 || fail "recctl start after reload: $(cat "$out/take.txt")"
[[ -f $recordings/boot-reloaded.flac ]] || fail "the reloaded format (flac) did not apply: $(ls "$recordings")"
cp "$config" "$out/recd.toml.flac"
pass "format = \"flac\" applied by systemctl reload: boot-reloaded.flac"

check reload-broken
recctl start boot-across-reload --format wav >"$out/take.txt" 2>&1 || fail "recctl start: $(cat "$out/take.txt")"
wait_until 30 "recording" is_state recording
before_path=$(current_path)
since=$(date +%s)
sed -i 's/^format = "flac"$/format = "mp9"/' "$config"
bad_line=$(grep -n '^format = "mp9"$' "$config" | cut -d: -f1)
systemctl reload recd.service || fail "systemctl reload (broken file) failed"
wait_until 30 "the refusal in systemctl status" sh -c "systemctl show -p StatusText --value recd.service | grep -q 'recd.toml:$bad_line'"
status_text=$(systemctl show -p StatusText --value recd.service)
journal_since "$since" | grep 'configuration not reloaded' | grep -q "recd.toml:$bad_line" ||
    fail "the journal does not give recd.toml:$bad_line: $(journal_since "$since")"
systemctl status recd.service --no-pager 2>&1 | grep -q "recd.toml:$bad_line" || fail "systemctl status does not show recd.toml:$bad_line"
[[ $(state) == recording && $(current_path) == "$before_path" ]] || fail "the recording was interrupted: $(state) $(current_path)"
# Still recording into the same file, and its time goes on.
at_refusal=$(status_json | jq -r '.currentTime')
wait_until 30 "the recording's time past $at_refusal s + 0.5" sh -c "recctl status --json | jq -e '.currentTime > $at_refusal + 0.5 and .state.recording.path == \"$before_path\"'"
cp "$out/recd.toml.flac" "$config"
systemctl reload recd.service
wait_until 30 "the refusal gone from systemctl status" sh -c "! systemctl show -p StatusText --value recd.service | grep -q 'not reloaded'"
recctl stop >"$out/stop.txt" 2>&1 || fail "recctl stop: $(cat "$out/stop.txt")"
pass "refused with 'recd.toml:$bad_line' in the journal and in systemctl status ('$status_text'); the recording went on past the refusal ($at_refusal s) in the same file, and the good file applied again"

# --- The journal: recd's own lines at their priorities -----------------------------------------
check journal
# Lines recd.service's processes wrote (not PID 1's own about the unit).
journalctl -b -u recd.service -o json --no-pager | jq -r 'select(._PID != "1") | "\(.PRIORITY) \(.MESSAGE)"' >"$out/recd-lines.txt"
[[ -s $out/recd-lines.txt ]] || fail "no lines of recd's in the journal"
# libdispatch's line: its manager thread (every Dispatch timer and signal source) asks for nice
# -4 when it starts, which recd.service's LimitNICE=-4 allows. systemd can give a service that
# limit only with CAP_SYS_RESOURCE, which a station's PID 1 has and this machine's containers
# do not (no process here has it): then each start of recd logs that one line, and nothing
# else of libdispatch's may appear (every other thread of recd asks for nice 0).
nice_limit=$(awk '/^Max nice priority/ { print $4 }' /proc/"$(main_pid)"/limits)
dispatch_lines=$(journalctl -b -u recd.service -o json --no-pager | jq -r 'select(.MESSAGE | tostring | startswith("Failed to set thread priority")) | ._PID')
if [[ $nice_limit == 24 ]]; then
    [[ -z $dispatch_lines ]] || fail "libdispatch's 'Failed to set thread priority' is in the journal although LimitNICE applied"
    dispatch_note="none of libdispatch's lines (LimitNICE=-4 applied)"
else
    [[ $(systemctl show -p LimitNICE --value recd.service) == 24 ]] || fail "recd.service does not ask for LimitNICE=-4"
    [[ -z $(sort <<<"$dispatch_lines" | uniq -d) ]] || fail "libdispatch's line more than once in one recd: $(sort <<<"$dispatch_lines" | uniq -c)"
    dispatch_note="libdispatch's manager-thread line once in each of $(grep -c . <<<"$dispatch_lines") starts (LimitNICE=-4 not applied here: RLIMIT_NICE $nice_limit, no CAP_SYS_RESOURCE)"
fi
foreign=$(grep -v -E '^[0-9] recd(\.[a-z.]+)?: ' "$out/recd-lines.txt" | grep -v '^5 Failed to set thread priority for worker thread: pqc=0x[0-9a-f]* errno=13$' || true)
[[ -z $foreign ]] || fail "lines in recd's journal that are not recd's own: $foreign"
# The priorities: the refused reload is an error (3), the reloads' notices 5, starts' info 6;
# `journalctl -p warning` shows exactly the lines at 4 and below.
grep -q '^3 recd: configuration not reloaded' "$out/recd-lines.txt" || fail "the refused reload is not at priority 3 (error): $(grep 'not reloaded' "$out/recd-lines.txt")"
grep -q '^5 recd: configuration reloaded' "$out/recd-lines.txt" || fail "the reload's notice is not at priority 5: $(grep 'reloaded' "$out/recd-lines.txt")"
warnings=$(journalctl -b -u recd.service -p warning -o json --no-pager | jq -r 'select(._PID != "1") | "\(.PRIORITY) \(.MESSAGE)"')
[[ $warnings == "$(grep '^[0-4] ' "$out/recd-lines.txt")" ]] || fail "journalctl -p warning: '$warnings'"
pass "$dispatch_note; $(wc -l <"$out/recd-lines.txt") lines, all recd's (priorities: $(cut -d' ' -f1 "$out/recd-lines.txt" | sort | uniq -c | awk '{ printf "%s×%s ", $2, $1 }')); -p warning: $(grep -c '^[0-4] ' "$out/recd-lines.txt") lines, exactly those at 4 and below"

# --- Autostart with segments: kill -9, restart, the watchdog ----------------------------------
check autostart
# The conffile's [autostart] and [segments] hold only comments: the keys go below their headers.
sed -i -e '/^\[autostart\]$/a enabled = true\nname = "station"' -e '/^\[segments\]$/a length = 60' "$config"
recd --check-config --system >"$out/check.txt" 2>&1 || fail "recd --check-config: $(cat "$out/check.txt")"
systemctl restart recd.service
wait_until 30 "autostart recording" sh -c '[ "$(recctl status --json | jq -r .state.name)" = recording ]'
pass "recording $(current_path) after a restart with [autostart]"

# resume_after WHAT COMMAND...: runs COMMAND, then waits for recording into a new file; the time.
resume_after() {
    local what=$1 old
    shift
    old=$(current_path)
    wait_until 30 "a second recorded in $old" sh -c "recctl status --json | jq -e '.currentTime > 1'"
    # These checks start recd more often than systemd's start limit allows (5 in 10 s, the
    # default recd.service keeps): the count starts again for each, as it would for an operator.
    systemctl reset-failed recd.service
    check "$what"
    "$@"
    wait_until 30 "recording again after $what" recording_in_new_file "$old"
    # How soon is the station's figure (the issue's target: 2 s), reported, not bounded: under
    # make test this root runs at a lower priority beside the suite (doc/packaging.md).
    pass "recording again after $(elapsed) s, into $(current_path) (was $old)"
}
resume_after kill-9 kill -9 "$(main_pid)"
resume_after restart systemctl restart recd.service
# SIGSTOP: no watchdog pings; after WatchdogSec systemd aborts recd and Restart= brings it back.
check watchdog
old=$(current_path)
pid=$(main_pid)
since=$(date +%s)
systemctl reset-failed recd.service
kill -STOP "$pid"
wait_until 60 "a new recd after the watchdog" sh -c "[ \"\$(systemctl show -p MainPID --value recd.service)\" != $pid ] && [ \"\$(recctl status --json | jq -r .state.name)\" = recording ]"
journalctl -u recd.service --since "@$since" --no-pager -o cat | grep -q 'Watchdog timeout' ||
    fail "no watchdog timeout in the journal: $(journalctl -u recd.service --since "@$since" --no-pager -o cat | tail -5)"
[[ ! -e $old.part ]] || fail "$old.part left after the watchdog's restart"
[[ -f $old ]] || fail "the interrupted $old was not repaired: $(ls -R "$recordings/station" | tail -5)"
pass "restarted by the watchdog after $(elapsed) s (WatchdogSec=$(systemctl show -p WatchdogUSec --value recd.service)); $old repaired at the next start"

# --- recd-web.socket: on demand, and gone when idle --------------------------------------------
check web
mkdir -p /etc/systemd/system/recd-web-proxy.service.d
cat >/etc/systemd/system/recd-web-proxy.service.d/test.conf <<'UNIT'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-socket-proxyd --exit-idle-time=3s /run/recd-web/http.sock
UNIT
systemctl daemon-reload
systemctl start recd-web.socket
[[ $(systemctl is-active recd-web.service) == inactive ]] || fail "recd-web.service runs before any connection"
page=$(curl -fsS --max-time 30 http://127.0.0.1:8090/) || fail "the page did not answer"
grep -qi '<html' <<<"$page" || fail "the page is not HTML: ${page:0:200}"
systemctl is-active --quiet recd-web-proxy.service || fail "recd-web-proxy.service is not active after a connection"
systemctl is-active --quiet recd-web.service || fail "recd-web.service is not active after a connection"
metrics=$(curl -fsS --max-time 30 http://127.0.0.1:8090/metrics) || fail "/metrics did not answer"
grep -q '^recd_' <<<"$metrics" || fail "/metrics has no recd_ series: ${metrics:0:300}"
# A picture of the 2 s take, rendered by recd-web under its sandbox and kept in its
# CacheDirectory= (/var/cache/recd-web): the second request is the cached file.
listen_token=$(awk '$1 == "listen" { print $2 }' /etc/recd/web-tokens)
picture_headers=$(curl -fsS --max-time 60 -D - -o /tmp/boot-take.png -H "Authorization: Bearer $listen_token" \
    "http://127.0.0.1:8090/api/picture/boot-take.wav?width=400") || fail "no picture of boot-take.wav"
[[ $(head -c 8 /tmp/boot-take.png | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || fail "the picture is not a PNG"
grep -qi '^recd-picture:' <<<"$picture_headers" || fail "the picture has no Recd-Picture header: $picture_headers"
cached=$(find /var/cache/recd-web -type f -name '*.png' | wc -l)
((cached >= 1)) || fail "no picture in /var/cache/recd-web: $(ls -laR /var/cache/recd-web 2>&1 | head -20)"
curl -fsS --max-time 30 -o /tmp/boot-take-again.png -H "Authorization: Bearer $listen_token" \
    "http://127.0.0.1:8090/api/picture/boot-take.wav?width=400" || fail "the second request for the picture failed"
cmp -s /tmp/boot-take.png /tmp/boot-take-again.png || fail "the second picture differs from the first"
wait_until 60 "recd-web-proxy and recd-web stopped when idle" sh -c \
    '[ "$(systemctl is-active recd-web-proxy.service)" = inactive ] && [ "$(systemctl is-active recd-web.service)" = inactive ]'
systemctl is-active --quiet recd-web.socket || fail "recd-web.socket stopped with them"
# recd-web: libdispatch's line as for recd (the journal check says why), at most once a process.
web_dispatch=$(journalctl -b -u recd-web.service -o json --no-pager | jq -r 'select(.MESSAGE | tostring | startswith("Failed to set thread priority")) | ._PID')
if [[ $nice_limit == 24 ]]; then
    [[ -z $web_dispatch ]] || fail "libdispatch's line in recd-web's journal although LimitNICE applies"
else
    [[ -z $(sort <<<"$web_dispatch" | uniq -d) ]] || fail "libdispatch's line more than once in one recd-web: $(sort <<<"$web_dispatch" | uniq -c)"
fi
pass "page, /metrics ($(grep -c '^recd_' <<<"$metrics") recd_ lines) and a picture of boot-take.wav ($(stat -c %s /tmp/boot-take.png) bytes, $cached in /var/cache/recd-web) through recd-web.socket, $sandbox; proxy and recd-web stopped by themselves when idle"

# --- recd-rtsp.socket: on demand, playing with a listen token, and gone when idle -------------
check rtsp
mkdir -p /etc/systemd/system/recd-rtsp.service.d
cat >/etc/systemd/system/recd-rtsp.service.d/test.conf <<'UNIT'
[Service]
ExecStart=
ExecStart=/usr/bin/recd-rtsp --system --exit-idle-time 3
UNIT
systemctl daemon-reload
systemctl start recd-rtsp.socket
[[ $(systemctl is-active recd-rtsp.service) == inactive ]] || fail "recd-rtsp.service runs before any connection"
token=$(awk '$1 == "listen" { print $2 }' /etc/recd/web-tokens)
rtp=$(python3 /srv/boot-check/rtp_check.py "rtsp://birdnet:$token@127.0.0.1:8554/live" 4) ||
    fail "playing rtsp://127.0.0.1:8554/live with the listen token: $rtp; $(journalctl -u recd-rtsp.service --no-pager -o cat | tail -5)"
systemctl is-active --quiet recd-rtsp.service || fail "recd-rtsp.service is not active after a connection"
echo "$rtp" >"$out/rtsp.json"
wait_until 60 "recd-rtsp stopped when idle" sh -c '[ "$(systemctl is-active recd-rtsp.service)" = inactive ]'
systemctl is-active --quiet recd-rtsp.socket || fail "recd-rtsp.socket stopped with it"
pass "played through recd-rtsp.socket $sandbox with a listen token ($(jq -r '"\(.packets) packets, \(.reports) sender reports, \(.srRatePPM // 0 | floor) ppm"' <<<"$rtp")); stopped by itself when idle"

# --- recd-rtsp.socket's mDNS announcement: while it listens, and only then ----------------------
check mdns
systemctl is-active --quiet avahi-daemon.service || systemctl start avahi-daemon.service || fail "avahi-daemon does not run"
[[ -s /etc/avahi/services/recd-rtsp.service ]] || fail "recd-rtsp.socket wrote no /etc/avahi/services/recd-rtsp.service"
browse() { timeout 10 avahi-browse --resolve --parsable --terminate --no-db-lookup _rtsp._tcp 2>/dev/null | grep '^=' | grep -F ';8554;'; }
wait_until 30 "recd's _rtsp._tcp announcement resolved by avahi-browse" browse
announced=$(browse | head -1)
for txt in '"path=/live"' '"codec=L16"' '"auth=digest"' '"transport=tcp"'; do
    grep -qF "$txt" <<<"$announced" || fail "the announcement lacks $txt: $announced"
done
systemctl stop recd-rtsp.socket
[[ ! -e /etc/avahi/services/recd-rtsp.service ]] || fail "the announcement outlived recd-rtsp.socket"
wait_until 30 "the announcement withdrawn" sh -c '! timeout 10 avahi-browse --resolve --parsable --terminate --no-db-lookup _rtsp._tcp 2>/dev/null | grep -q "^=.*;8554;"'
systemctl start recd-rtsp.socket
pass "announced by mDNS while recd-rtsp.socket listens ($(cut -d';' -f4 <<<"$announced"), $(cut -d';' -f10- <<<"$announced")); withdrawn when it stops"

# --- The sandbox as systemd applies it ---------------------------------------------------------
check exposure
line=""
for unit in recd.service recd-web.service recd-web-proxy.service recd-rtsp.service; do
    exposure=$(systemd-analyze security "$unit" --no-pager 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p')
    [[ -n $exposure ]] || fail "systemd-analyze security $unit gave no exposure"
    line+="$unit $exposure "
    echo "$unit $exposure" >>"$out/exposure.txt"
done
pass "$line"

# --- Power off while recording: the file is finalized before the container stops --------------
check poweroff
wait_until 30 "recording before power-off" is_state recording
echo "$(current_path)" >"$out/recording-at-poweroff"
pass "powering off while recording into $(current_path)"
touch "$out/first-boot-done"
finish
