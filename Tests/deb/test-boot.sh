#!/usr/bin/env bash
# The package as a station runs it: installed with apt into a clean root of its Debian release,
# the root booted with systemd as PID 1 (systemd-nspawn), and the checks of boot-checks.sh run
# inside it by a oneshot unit after multi-user.target (`make test-boot`, part of `make test` for
# the host's package; `make test-packages` for every package, the arm64 one under qemu-user;
# doc/packaging.md). What runs inside: recd.service up through recd.socket and started again by
# a client, access by group, a recording from a paced device through the sandbox, reload with a
# good and a broken recd.toml, recd's journal lines and their priorities, [autostart] with
# segments after kill -9, restart and the watchdog, recd-web.socket on demand and idle, the
# units' exposure, and a power-off while recording. Outside, afterwards: every file the station
# wrote is complete and decodes (ffmpeg), the 2 s take holds exactly 96000 frames of the tone.
#
#   1. a bookworm/trixie root (mmdebstrap minbase: systemd, dbus, the ALSA pulse plugin, curl,
#      jq, Avahi for the mDNS check) with the package's Depends already in it, so that the boot needs no network; cached
#      as a tarball under ~/.cache/recd-test-deb (rebuilt when a week old or when the Depends
#      change);
#   2. the package copied in, pacedmic in /etc/asound.conf, the checks' unit;
#   3. a paced PulseAudio server on this machine with a 440 Hz tone (../../shared/TESTING.md, 2),
#      its socket's directory bind-mounted to /run/pa;
#   4. the boot: systemd-nspawn -b, no network of its own. The checks install the package with
#      apt while systemd runs, make the site's changes (recd.toml's device, web-tokens, the
#      users alice in group recd and bob), check, and power the container off;
#   5. afterwards, here: the files.
#
# Usage: Tests/deb/test-boot.sh recd_VERSION_ARCH.deb [bookworm|trixie]   (as root)
# Environment: RECD_TEST_DEB_CACHE (default ~/.cache/recd-test-deb), RECD_TEST_DEB_KEEP=1 keeps
# the root for a look afterwards; RECD_TEST_BOOT_TIMEOUT (seconds, default 300; 1800 under qemu).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
script=test-boot
source "$here/package-test.sh"
take_package systemd-nspawn mmdebstrap systemd-nspawn dpkg-deb ffmpeg ffprobe pulseaudio pactl parec python3 findmnt -- "$@"
timeout_seconds=${RECD_TEST_BOOT_TIMEOUT:-300}
[[ $arch == "$(dpkg --print-architecture)" ]] || timeout_seconds=${RECD_TEST_BOOT_TIMEOUT:-1800}

# --- 1. The root, with the package's Depends ---------------------------------------------------
# Depends as package names: the first of each set of alternatives, versions dropped.
depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/[[:space:]]//g' | grep . | sort -u | paste -sd, -)
include=systemd,systemd-sysv,dbus,libasound2-plugins,curl,jq,procps,python3,avahi-daemon,avahi-utils,$depends
cache=${RECD_TEST_DEB_CACHE:-$HOME/.cache/recd-test-deb}
mkdir -p "$cache"
base=$cache/boot-$suite-$arch-$(md5sum <<<"$include" | cut -c1-12).tar
started=$SECONDS
if [[ ! -s $base ]] || [[ -n $(find "$base" -mtime +7) ]]; then
    step "building a bootable $suite $arch root with mmdebstrap (cached in $base)"
    rm -f "$base.new"
    mmdebstrap --quiet --variant=minbase --arch="$arch" --aptopt='Acquire::Check-Valid-Until "false"' \
        --include="$include" --format=tar "$suite" "$base.new" || fail "mmdebstrap could not build a $suite $arch root"
    mv "$base.new" "$base"
    find "$cache" -name "boot-$suite-$arch-*.tar" ! -path "$base" -delete
else
    step "using the cached bootable $suite $arch root $base"
fi

work=$(mktemp -d /var/tmp/recd-test-boot.XXXXXX)
root=$work/root
pa=$work/pa
pa_pid= parec_pid= binfmt_entry=
cleanup() {
    local status=$?
    [[ -z $binfmt_entry ]] || echo -1 >"$binfmt_entry" 2>/dev/null || true
    [[ -z $parec_pid ]] || { kill "$parec_pid" 2>/dev/null || true; wait "$parec_pid" 2>/dev/null || true; }
    [[ -z $pa_pid ]] || { kill "$pa_pid" 2>/dev/null || true; wait "$pa_pid" 2>/dev/null || true; }
    if findmnt -rn -o TARGET | grep -qF "$work/"; then
        printf 'test-boot: left %s in place: still mounted below it\n' "$work" >&2
    elif [[ ${RECD_TEST_DEB_KEEP:-} == 1 || $status -ne 0 ]]; then
        printf 'test-boot: kept %s\n' "$work" >&2
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$root"
tar -C "$root" -xf "$base"
[[ $(cat "$root/etc/debian_version") == "${debian_version[$suite]}".* ]] ||
    fail "the root is not Debian ${debian_version[$suite]} ($suite): $(cat "$root/etc/debian_version")"

# --- 1b. Under emulation: an emulator that can run systemd 257, and no sandbox -----------------
# Another architecture's root boots under qemu-user (binfmt_misc). Two things in the way, both of
# the emulation, not of the package (seen with trixie arm64, 2026-11-29):
#   - Debian 12's qemu-user 7.2 refuses the clone flags systemd 257 spawns with (CLONE_PIDFD:
#     "Failed to spawn executor: Invalid argument": no unit starts); and systemd executes its
#     executor as /proc/self/fd/N, which qemu cannot open unless the kernel hands it the binary
#     (binfmt's O flag: "Error while loading /proc/self/fd/8"). So: trixie's qemu-user (static,
#     from the Debian archive, cached), registered for the test's time only, under a name of its
#     own with flags POF; a newer entry takes precedence over the distribution's, and goes at exit.
#   - The sandbox cannot be set up under emulation. seccomp filters are built for the guest's
#     architecture, but the kernel applies them to the emulator's own x86-64 system calls, and
#     MemoryDenyWriteExecute forbids the emulator's translated code: every unit with a seccomp-
#     based setting is killed (journald too). Past those, credentials (243/CREDENTIALS, journald
#     and getty), mount namespaces (226/NAMESPACE, logind) and PrivateNetwork (225/NETWORK, recd)
#     fail in the executor's mounts on /proc/self/fd/N (EINVAL under qemu). A drop-in for every
#     service lifts all of these, so the emulated boot checks the package with its arm64
#     binaries under systemd (activation, notify, reload, watchdog, restart, power-off, the
#     journal) without the sandbox. The sandbox itself is checked by the native boots (amd64);
#     the exposure comparison below is skipped here.
emulated=
if [[ $arch != "$(dpkg --print-architecture)" ]]; then
    emulated=1
    cpu=$(dpkg-architecture -a "$arch" -qDEB_HOST_GNU_CPU 2>/dev/null)
    emulator=$cache/qemu-user-trixie/usr/bin/qemu-$cpu
    # Fetched again when a month old (.complete's time: the files keep the package's own).
    if [[ ! -x $emulator || ! -e $cache/qemu-user-trixie/.complete ]] ||
        [[ -n $(find "$cache/qemu-user-trixie/.complete" -mtime +30) ]]; then
        step "trixie's qemu-user for $cpu (Debian 12's cannot run systemd 257 as PID 1)"
        downloads=$(mktemp -d)
        printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n' >"$downloads/sources.list"
        apt_download=(apt-get -q -o Dir::Etc::SourceList="$downloads/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o Dir::State::Lists="$downloads/lists" -o Dir::Cache="$downloads/cache" -o Dir::State::status=/dev/null
            -o Acquire::Check-Valid-Until=false)
        mkdir -p "$downloads/lists/partial" "$downloads/cache/archives/partial"
        "${apt_download[@]}" update >/dev/null 2>&1 || fail "apt-get update for trixie failed"
        (cd "$downloads" && "${apt_download[@]}" download qemu-user >/dev/null 2>&1) || fail "cannot download trixie's qemu-user"
        rm -rf "$cache/qemu-user-trixie"
        dpkg-deb -x "$downloads"/qemu-user_*.deb "$cache/qemu-user-trixie"
        rm -rf "$downloads"
        [[ -x $emulator ]] || fail "trixie's qemu-user has no $emulator"
        touch "$cache/qemu-user-trixie/.complete"
    fi
    distro_entry=/proc/sys/fs/binfmt_misc/qemu-$cpu
    [[ -r $distro_entry ]] || fail "no binfmt_misc entry qemu-$cpu (make deps-deb, CROSS packages)"
    magic=$(sed -n 's/^magic //p' "$distro_entry" | sed 's/../\\x&/g')
    mask=$(sed -n 's/^mask //p' "$distro_entry" | sed 's/../\\x&/g')
    binfmt_entry=/proc/sys/fs/binfmt_misc/recd-test-boot-$cpu
    [[ ! -e $binfmt_entry ]] || echo -1 >"$binfmt_entry"
    echo ":recd-test-boot-$cpu:M:0:$magic:$mask:$emulator:POF" >/proc/sys/fs/binfmt_misc/register ||
        fail "cannot register $emulator with binfmt_misc"
    step "emulated with $("$emulator" --version | head -1) (binfmt_misc recd-test-boot-$cpu, flags POF, for this test only)"
    mkdir -p "$root/etc/systemd/system/service.d"
    cat >"$root/etc/systemd/system/service.d/50-qemu-user.conf" <<'DROPIN'
# test-boot.sh under qemu-user: no sandbox can be set up for an emulated service (seccomp
# filters the emulator's own host calls; the executor's namespace and credential mounts fail).
# Every such setting is lifted here, for every service.
[Service]
SystemCallFilter=
SystemCallArchitectures=
SystemCallLog=
RestrictAddressFamilies=
RestrictNamespaces=no
RestrictRealtime=no
RestrictSUIDSGID=no
MemoryDenyWriteExecute=no
LockPersonality=no
ProtectKernelTunables=no
ProtectKernelModules=no
ProtectKernelLogs=no
ProtectClock=no
ProtectHostname=no
PrivateDevices=no
PrivateNetwork=no
PrivateUsers=no
PrivateTmp=no
PrivateMounts=no
PrivateIPC=no
ProtectSystem=no
ProtectHome=no
ProtectControlGroups=no
ProtectProc=default
ProcSubset=all
ReadWritePaths=
ReadOnlyPaths=
InaccessiblePaths=
TemporaryFileSystem=
BindPaths=
BindReadOnlyPaths=
ImportCredential=
LoadCredential=
RestrictFileSystems=
DROPIN
fi

# --- 2. The site's own files, and the checks --------------------------------------------------
# The package itself is installed by the checks, with apt, once systemd runs (as on a station:
# its maintainer scripts then start recd.socket and recd.service).
mkdir -p "$root/srv/boot-check"
cp "$deb" "$root/srv/boot-check/recd.deb"
cat >"$root/etc/asound.conf" <<'ALSA'
pcm.pacedmic {
    type pulse
    server "unix:/run/pa/native"
    device "testsink.monitor"
}
ALSA
install -m 755 "$here/boot-checks.sh" "$root/srv/boot-check/checks.sh"
install -m 755 "$here/../rtsp/rtp_check.py" "$root/srv/boot-check/rtp_check.py"
cat >"$root/etc/systemd/system/recd-boot-checks.service" <<'UNIT'
[Unit]
Description=recd's booted checks (Tests/deb/boot-checks.sh)
After=multi-user.target

[Service]
Type=oneshot
Environment=RECD_VERSION=@VERSION@
ExecStart=/bin/bash /srv/boot-check/checks.sh
StandardOutput=append:/srv/boot-check/checks.log
StandardError=append:/srv/boot-check/checks.log
UNIT
sed -i "s/@VERSION@/$version/" "$root/etc/systemd/system/recd-boot-checks.service"
ln -sf /etc/systemd/system/recd-boot-checks.service "$root/etc/systemd/system/multi-user.target.wants/recd-boot-checks.service"

# --- 3. The paced device: a PulseAudio server here, its socket in the container ----------------
mkdir -p "$pa/runtime"
chmod 755 "$pa"
cat >"$pa/pa.conf" <<PA
load-module module-null-sink sink_name=testsink rate=48000 channels=2
set-default-source testsink.monitor
load-module module-sine sink=testsink frequency=440
load-module module-native-protocol-unix auth-anonymous=1 socket=$pa/native
PA
HOME=$pa XDG_RUNTIME_DIR=$pa/runtime pulseaudio -n -F "$pa/pa.conf" --daemonize=no --exit-idle-time=-1 --system=false \
    --log-target=file:"$pa/log" &
pa_pid=$!
deadline=$((SECONDS + 30))
until [[ -S $pa/native ]]; do
    kill -0 "$pa_pid" 2>/dev/null || { cat "$pa/log" >&2; fail "PulseAudio exited"; }
    ((SECONDS < deadline)) || fail "no PulseAudio socket within 30 s"
    sleep 0.05
done
chmod 777 "$pa/native"
# A reader of the monitor that asks for 20 ms: the null sink then renders in 20 ms blocks, as a
# sound card delivers its periods, not in blocks of about 2 s (module-sine asks for no latency),
# which would hold back a recording's first frames by as much (../../shared/TESTING.md, 2).
PULSE_SERVER=unix:$pa/native parec --device=testsink.monitor --latency-msec=20 --raw >/dev/null 2>"$pa/parec.log" &
parec_pid=$!

# --- 4. The boot -------------------------------------------------------------------------------
# Two boots: the first installs and checks, and powers off while recording; the second checks
# that the station comes back by itself (recd.service after the boot, [autostart] recording
# again, the file of the power-off finalized), and powers off while recording again.
out=$root/srv/boot-check
for boot in 1 2; do
    step "boot $boot: the root with systemd as PID 1 (at most $timeout_seconds s); the checks run inside"
    boot_started=$SECONDS
    status=0
    # CAP_SYS_RESOURCE, which nspawn leaves out: a station's PID 1 has it, and needs it to give
    # recd.service its LimitNICE= above PID 1's own limit (0). At nice 0, as a machine boots,
    # whatever this script runs at (make test runs it at 10): threads inherit the nice value,
    # and libdispatch's workers, which ask for nice 0, would be refused from 10.
    timeout "$timeout_seconds" nice -n $((-$(nice))) systemd-nspawn -q --register=no --keep-unit --private-network --bind="$pa:/run/pa" \
        --capability=CAP_SYS_RESOURCE \
        -D "$root" -b --console=pipe >"$work/console-$boot.log" 2>&1 || status=$?
    boot_seconds=$((SECONDS - boot_started))
    [[ -s $out/results ]] || { cat "$work/console-$boot.log" "$out/checks.log" >&2 2>/dev/null; fail "the checks wrote no results (systemd-nspawn: $status)"; }
    if grep -q '^FAIL ' "$out/results" || ! grep -qx "end of boot $boot" "$out/results" || ((status != 0)); then
        sed 's/^/test-boot:   | /' "$out/results"
        printf -- '--- the checks\n' >&2
        tail -30 "$out/checks.log" >&2 2>/dev/null || true
        printf -- '--- the journal (the last 80 lines)\n' >&2
        tail -80 "$out/journal.txt" >&2 2>/dev/null || true
        fail "the booted checks failed in boot $boot (systemd-nspawn exited $status after $boot_seconds s)"
    fi
    step "boot $boot: booted, checked and powered off in $boot_seconds s"
done
sed 's/^/test-boot:   | /' "$out/results"

# --- 5. Afterwards: what the station wrote -----------------------------------------------------
recordings=$root/var/lib/recd/recordings
part=$(find "$recordings" -name '*.part')
[[ -z $part ]] || fail "unfinished files after the power-off: $part"
at_poweroff=$root$(cat "$out/recording-at-poweroff")
[[ -f $at_poweroff ]] || fail "the recording at power-off was not finalized: no ${at_poweroff#"$root"}"
count=0
while IFS= read -r -d '' file; do
    decoded=$(ffmpeg -nostdin -nostats -xerror -i "$file" -f null - 2>&1) || fail "ffmpeg cannot decode ${file#"$root"}: $decoded"
    count=$((count + 1))
done < <(find "$recordings" -type f \( -name '*.wav' -o -name '*.flac' \) -print0)
step "$count files in ${recordings#"$root"}, each decoded by ffmpeg from end to end; none unfinished"
ffmpeg -v error -i "$recordings/boot-take.wav" -f s16le -ac 2 -ar 48000 "$work/take.raw" -y || fail "ffmpeg cannot decode boot-take.wav"
python3 - "$work/take.raw" <<'PY' || fail "boot-take.wav is not 96000 frames of the 440 Hz tone"
import sys, numpy as np
samples = np.fromfile(sys.argv[1], dtype="<i2").reshape(-1, 2)
frames = len(samples)
left = samples[:, 0].astype(float)
spectrum = np.abs(np.fft.rfft(left * np.hanning(len(left))))
peak = np.fft.rfftfreq(len(left), 1 / 48000)[np.argmax(spectrum)]
rms = 20 * np.log10(np.sqrt(np.mean(left ** 2)) / 32768 + 1e-12)
print(f"test-boot: boot-take.wav: {frames} frames, dominant {peak:.1f} Hz, {rms:.1f} dBFS RMS")
sys.exit(0 if frames == 96000 and abs(peak - 440) < 2 and rms > -40 else 1)
PY
# The exposure the booted systemd gave each unit, against what check-units measures offline
# (not under emulation, whose drop-in lifts the sandbox: 1b above).
if [[ -n $emulated ]]; then
    step "exposure not compared under emulation (the sandbox is lifted); booted: $(paste -sd' ' "$out/exposure.txt")"
else
    while read -r unit booted; do
        offline=$(systemd-analyze security --offline=true --no-pager "$root/lib/systemd/system/$unit" 2>/dev/null |
            sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p')
        step "$unit: exposure $booted booted, $offline offline (check-units)"
        awk -v b="$booted" -v o="$offline" 'BEGIN { exit !(o != "" && b + 0 <= o + 0) }' ||
            fail "$unit's exposure under systemd ($booted) is above the offline analysis's ($offline)"
    done <"$out/exposure.txt"
fi
step "OK in $((SECONDS - started)) s ($suite $arch, recd $version)"
