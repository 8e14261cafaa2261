#!/usr/bin/env bash
# Installs recd's Debian package into a clean root filesystem of its Debian release and uses it
# there (`make test-deb`, part of `make test`, for the host's package; `make test-packages` for
# every package, the arm64 one under qemu-user; doc/packaging.md):
#   1. a minimal root of the release (bookworm, or trixie: Raspberry Pi OS) and the package's
#      architecture from Debian's packages (mmdebstrap --variant=apt), with no Swift in it;
#      built once and cached as a tarball under ~/.cache/recd-test-deb (rebuilt when a week
#      old), apt's downloaded packages cached beside it, so a second run is fast;
#   2. `apt-get install ./recd_….deb` inside: Depends resolve from Debian's packages alone;
#      the user recd (in group audio) and /var/lib/recd exist afterwards; the transcript shows
#      the package's Depends and, for each binary, what `file` says and its newest glibc symbol;
#   3. recd --version and recctl --version print the package's version with the commit;
#   4. recd --system runs as the user recd (no systemd here: started directly with setpriv)
#      from an ALSA `file` device, configured through the conffile /etc/recd/recd.toml, and
#      records WAV, FLAC and .m4a, driven by recctl; the files are decoded by ffmpeg outside:
#      the WAV's samples are the input's, bit for bit, and every file holds exactly the frames
#      asked for; then, as the user recd, `recctl listen --pre-roll 2` and a `recctl start`
#      from the listening state: the WAV holds the 2 s of pre-roll plus the second asked for,
#      the input's frames from the one its preRoll names, bit for bit (the device paced to real
#      time for this);
#   5. systemd-analyze verify accepts the installed units;
#   6. an upgrade (the same package with a higher version) and a reinstall keep the changed
#      conffile;
#   7. remove keeps the configuration and the recordings; purge deletes the configuration and
#      still keeps the recordings (and the user recd that owns them).
#
# Usage: Tests/deb/test-deb.sh recd_VERSION_ARCH.deb [bookworm|trixie]   (as root: chroot,
# mount; make test-deb uses sudo when not root). The release defaults to bookworm for a package
# of this machine's architecture, trixie for another's.
# Environment: RECD_TEST_DEB_CACHE (default ~/.cache/recd-test-deb), RECD_TEST_DEB_KEEP=1 keeps
# the root filesystem for a look afterwards.
set -euo pipefail

script=test-deb
source "$(dirname "$0")/package-test.sh"
take_package "chroot and mount" mmdebstrap dpkg-deb ffmpeg ffprobe setpriv findmnt file objdump python3 -- "$@"

cache=${RECD_TEST_DEB_CACHE:-$HOME/.cache/recd-test-deb}
base=$cache/$suite-$arch.tar
archives=$cache/archives-$suite-$arch  # one each: two runs at once would share apt's lock
mkdir -p "$archives/partial"

# --- 1. The clean root filesystem --------------------------------------------------------------
started=$SECONDS
if [[ ! -s $base ]] || [[ -n $(find "$base" -mtime +7) ]]; then
    step "building a $suite $arch root filesystem with mmdebstrap (cached in $base)"
    rm -f "$base.new"
    mmdebstrap --quiet --variant=apt --arch="$arch" --aptopt='Acquire::Check-Valid-Until "false"' \
        --include=ca-certificates --format=tar "$suite" "$base.new" ||
        fail "mmdebstrap could not build a $suite $arch root filesystem"
    mv "$base.new" "$base"
else
    step "using the cached $suite $arch root filesystem $base"
fi

root=$(mktemp -d /var/tmp/recd-test-deb.XXXXXX)
recd_pid= listen_pid=
cleanup() {
    local status=$? pid
    for pid in $listen_pid $recd_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    # Innermost first; nothing is deleted while anything is still mounted below the root
    # (rm -rf would reach into /proc or the package cache).
    findmnt -rn -o TARGET | grep -F "$root/" | sort -r | while read -r mount; do
        umount "$mount" 2>/dev/null || umount -l "$mount" || true
    done
    if findmnt -rn -o TARGET | grep -qF "$root/"; then
        printf 'test-deb: left %s in place: still mounted below it\n' "$root" >&2
    elif [[ ${RECD_TEST_DEB_KEEP:-} == 1 ]]; then
        printf 'test-deb: kept %s\n' "$root" >&2
    else
        rm -rf "$root"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
tar -C "$root" -xf "$base"
[[ $(cat "$root/etc/debian_version") == "${debian_version[$suite]}".* ]] ||
    fail "the root filesystem is not Debian ${debian_version[$suite]} ($suite): $(cat "$root/etc/debian_version")"
step "Debian $(cat "$root/etc/debian_version") ($suite), $arch: its programs run as $(chroot "$root" uname -m)"
mount -t proc proc "$root/proc"
mount --bind "$archives" "$root/var/cache/apt/archives"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

# in_root COMMAND...: runs in the root filesystem with a clean environment.
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
apt_in_root() {
    in_root apt-get -y -q -o Dpkg::Use-Pty=0 -o APT::Keep-Downloaded-Packages=true "$@" \
        >"$root/apt.log" 2>&1 || { cat "$root/apt.log" >&2; fail "apt-get $* failed (log above)"; }
}

# --- 2. Install with apt -----------------------------------------------------------------------
step "apt-get install ./$(basename "$deb") in the clean root"
apt_in_root update
cp "$deb" "$root/tmp/"
apt_in_root install "./tmp/$(basename "$deb")"
in_root dpkg-query -W -f='${Status} ${Version}\n' recd | grep -qx "install ok installed $version" ||
    fail "recd $version is not installed: $(in_root dpkg-query -W -f='${Status} ${Version}' recd)"
step "installed recd $version and $(grep -c '^Setting up' "$root/apt.log") packages in all"
# What the package is: its Depends, and per binary what `file` says and the newest glibc symbol
# version it needs (recctl is static: none).
step "Depends: $(dpkg-deb -f "$deb" Depends)"
for tool in recd recctl; do
    newest=$(objdump -T "$root/usr/bin/$tool" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1 || true)
    step "/usr/bin/$tool: $(file -b "$root/usr/bin/$tool" | sed 's/, BuildID\[[^]]*\]=[0-9a-f]*//'); newest glibc symbol: ${newest:-none (static)}"
done
swift=$(find "$root" -xdev \( -name 'libswift*' -o -name 'swift' -o -name 'swiftc' \) -print | head -3)
[[ -z $swift ]] || fail "Swift in the root filesystem: $swift"
missing=$(in_root ldd /usr/bin/recd | grep 'not found' || true)
[[ -z $missing ]] || fail "recd links libraries the package does not depend on: $missing"
for soname in $(strings -n 6 "$root/usr/bin/recd" | grep -E '^lib(avcodec|avformat|avutil|mosquitto)\.so\.[0-9]+$'); do
    in_root sh -c "ldconfig -p | grep -q '^\s*$soname '" || fail "$soname (opened with dlopen) is not installed"
done
in_root getent passwd recd >/dev/null || fail "no user recd"
in_root id -nG recd | tr ' ' '\n' | grep -qx audio || fail "recd is not in group audio: $(in_root id -nG recd)"
[[ $(in_root stat -c '%U:%G %a' /var/lib/recd) == "recd:recd 750" ]] ||
    fail "/var/lib/recd: $(in_root stat -c '%U:%G %a' /var/lib/recd)"
in_root test -L /etc/systemd/system/multi-user.target.wants/recd.service || fail "recd.service is not enabled"
in_root test -L /etc/systemd/system/sockets.target.wants/recd.socket || fail "recd.socket is not enabled"

# --- 3. Versions -------------------------------------------------------------------------------
for tool in recd recctl; do
    out=$(in_root "$tool" --version) || fail "$tool --version failed"
    [[ $out == "$version (commit "*")" ]] || fail "$tool --version says '$out', not '$version (commit …)'"
    step "$tool --version: $out"
done

# --- 4. A recording as the user recd -----------------------------------------------------------
# The ALSA file device (doc: TESTING.md, 1): 30 s of a 440 Hz tone, 48 kHz stereo s16 (4b reads
# up to ~10 s of it in real time; the rest is margin for a slow machine or qemu).
mkdir -p "$root/srv/recd-test"
input_frames=$((30 * 48000))
ffmpeg -v error -f lavfi -i "sine=frequency=440:sample_rate=48000:duration=30" -ac 2 -f s16le \
    "$root/srv/recd-test/input.raw" || fail "ffmpeg could not write the test signal"
cat >"$root/srv/recd-test/asound.conf" <<'ALSA'
pcm.testmic {
    type file
    slave.pcm "null"
    file "/dev/null"
    infile "/srv/recd-test/input.raw"
    format "raw"
}
ALSA
chmod -R a+rX "$root/srv/recd-test"
# The site's change to the conffile: record from the test device.
grep -q '^#device = "default"$' "$root/etc/recd/recd.toml" || fail "/etc/recd/recd.toml has no '#device = \"default\"' line"
sed -i 's/^#device = "default"$/device = "testmic"/' "$root/etc/recd/recd.toml"
changed=$(md5sum <"$root/etc/recd/recd.toml")

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds, while recd runs.
wait_for() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        kill -0 "$recd_pid" 2>/dev/null || { cat "$root/srv/recd-test/recd.log" >&2; fail "recd exited while waiting for $what"; }
        ((SECONDS < deadline)) || { cat "$root/srv/recd-test/recd.log" >&2; fail "no $what within $1 s"; }
        sleep 0.1
    done
}
start_recd() {
    step "starting recd --system as user recd (setpriv)"
    chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin LANG=C.UTF-8 \
        ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:/srv/recd-test/asound.conf \
        setpriv --reuid=recd --regid=recd --init-groups /usr/bin/recd --system >>"$root/srv/recd-test/recd.log" 2>&1 &
    recd_pid=$!
    wait_for 30 "control socket" timeout 10 chroot "$root" recctl status
    uid=$(awk '/^Uid:/ { print $2 }' "/proc/$recd_pid/status")
    [[ $uid == "$(in_root id -u recd)" ]] || fail "recd runs as uid $uid, not as recd ($(in_root id -u recd))"
}
stop_recd() {
    local deadline=$((SECONDS + 30))
    kill -TERM "$recd_pid"
    while kill -0 "$recd_pid" 2>/dev/null; do
        ((SECONDS < deadline)) || fail "recd still running 30 s after SIGTERM"
        sleep 0.1
    done
    wait "$recd_pid" || fail "recd exited with status $? on SIGTERM"
    recd_pid=
}
start_recd
in_root recctl status | sed 's/^/  | /'

recordings=/var/lib/recd/recordings
declare -A codec=([wav]=pcm_s16le [flac]=flac [m4a]=aac)
declare -A format=([wav]=wav [flac]=flac [m4a]=aac)
for ext in wav flac m4a; do
    # 2 s of input take well under a second to record (the file device is not paced).
    timeout 60 chroot "$root" recctl start "take-$ext" --format "${format[$ext]}" --duration 2 --wait \
        >"$root/srv/recd-test/start.log" 2>&1 ||
        { cat "$root/srv/recd-test/start.log" "$root/srv/recd-test/recd.log" >&2; fail "recctl start --format ${format[$ext]} --wait failed or took over 60 s"; }
    file=$root$recordings/take-$ext.$ext
    [[ -f $file ]] || fail "no $recordings/take-$ext.$ext: $(ls -la "$root$recordings")"
    owner=$(in_root stat -c %U "$recordings/take-$ext.$ext")
    [[ $owner == recd ]] || fail "take-$ext.$ext belongs to $owner"
    probe=$(ffprobe -v error -select_streams a:0 -show_entries stream=codec_name,sample_rate,channels:format=duration \
        -of default=noprint_wrappers=1 "$file") || fail "ffprobe cannot read take-$ext.$ext"
    grep -qx "codec_name=${codec[$ext]}" <<<"$probe" || fail "take-$ext.$ext: $probe"
    duration=$(sed -n 's/^duration=//p' <<<"$probe")
    awk -v d="$duration" 'BEGIN { exit !(d > 1.9 && d < 2.1) }' || fail "take-$ext.$ext lasts $duration s, not 2"
    # Decoded from end to end without an error, and it is the tone (ffmpeg's sine source peaks
    # near -20 dBFS), not silence (-91 dB).
    decoded=$(ffmpeg -nostats -xerror -i "$file" -af volumedetect -f null - 2>&1) ||
        fail "ffmpeg cannot decode take-$ext.$ext: $decoded"
    peak=$(sed -n 's/.*max_volume: \(-\{0,1\}[0-9.]*\) dB/\1/p' <<<"$decoded")
    awk -v p="${peak:-}" 'BEGIN { exit !(p != "" && p > -40) }' || fail "take-$ext.$ext peaks at '${peak:-?}' dB: silence, not the tone"
    # Exactly the 2 s asked for; the WAV's samples are the input's first 2 s, bit for bit. An
    # .m4a declares its length in its edit list (ffprobe's duration_ts): FFmpeg's decoder
    # trims the encoder delay it names but not the padding of the last block, up to 1024 more.
    ffmpeg -v error -i "$file" -f s16le -ac 2 -ar 48000 "$root/srv/recd-test/decoded.raw" -y ||
        fail "ffmpeg cannot decode take-$ext.$ext to samples"
    frames=$(($(stat -c %s "$root/srv/recd-test/decoded.raw") / 4))
    if [[ $ext == m4a ]]; then
        declared=$(ffprobe -v error -select_streams a:0 -show_entries stream=duration_ts -of csv=p=0 "$file")
        [[ $declared -eq 96000 ]] || fail "take-m4a.m4a declares $declared frames (its edit list), not 96000"
        ((frames >= 96000 && frames <= 97024)) || fail "take-m4a.m4a decodes to $frames frames, not 96000 (+ at most 1024 of padding)"
        frames="$declared declared, $frames decoded"
    else
        [[ $frames -eq 96000 ]] || fail "take-$ext.$ext decodes to $frames frames, not 96000"
        frames="$frames frames"
    fi
    if [[ $ext == wav ]]; then
        cmp -s "$root/srv/recd-test/decoded.raw" <(head -c 384000 "$root/srv/recd-test/input.raw") ||
            fail "take-wav.wav is not the input bit for bit"
        frames="$frames, bit-exact"
    fi
    step "recorded $recordings/take-$ext.$ext: $(tr '\n' ' ' <<<"$probe")$frames, peak $peak dB (decoded by ffmpeg)"
done
stop_recd

# --- 4b. A listening start with pre-roll -------------------------------------------------------
# `recctl listen --pre-roll 2` as the user recd, then `recctl start` from the listening state:
# the file must begin with the 2 s held from before the start. The file device is not paced
# (listening would read the whole input in a moment, and tens of millions of frames a second
# after it), so for this part the plugin writes what it captures into a pipe to a reader that
# takes 192 000 bytes (1 s) a second: a read returns once its data is written, so recd reads the
# input (from a regular file: never a short read) in real time, or slower. The Recording's
# preRoll.firstFrame (frames since the device opened) says which input frame the file begins
# with; the WAV is compared with the input from there, bit for bit.
cat >"$root/srv/recd-test/pace.pl" <<'PACE'
my $chunk;
while (sysread(STDIN, $chunk, 19200)) { select(undef, undef, undef, 0.1); }
PACE
chmod a+r "$root/srv/recd-test/pace.pl"
sed -i 's|file "/dev/null"|file "\|/usr/bin/perl /srv/recd-test/pace.pl"|' "$root/srv/recd-test/asound.conf"
grep -q pace.pl "$root/srv/recd-test/asound.conf" || fail "could not pace testmic"
start_recd
as_recd() { in_root setpriv --reuid=recd --regid=recd --init-groups "$@"; }
# json EXPRESSION: a Python expression over the JSON document on standard input (j), printed.
json() { python3 -c 'import json, sys; j = json.load(sys.stdin); v = eval(sys.argv[1]); print("" if v is None else v)' "$1"; }
as_recd recctl listen --pre-roll 2 --json >"$root/srv/recd-test/listen.log" 2>&1 &
listen_pid=$!
held() { [[ $(as_recd recctl status --json | json '(j.get("listening") or {}).get("preRollHeld", 0) >= 2') == True ]]; }
wait_for 60 "listening with 2 s of pre-roll held" held
step "listening as user recd: $(as_recd recctl status --json | json '"%s s of pre-roll held (%d bytes), %d frames captured" % (j["listening"]["preRollHeld"], j["listening"]["preRollBytes"], j["listening"]["framesCaptured"])')"
as_recd recctl start take-preroll --format wav --duration 1 --json >"$root/srv/recd-test/start.json" 2>"$root/srv/recd-test/start.log" ||
    { cat "$root/srv/recd-test/start.log" "$root/srv/recd-test/recd.log" >&2; fail "recctl start from the listening state failed"; }
read -r first_frame preroll_frames frame_limit < <(json '"%d %d %d" % (j["preRoll"]["firstFrame"], j["preRoll"]["frames"], j["frameLimit"])' <"$root/srv/recd-test/start.json") ||
    fail "the Recording has no preRoll or frameLimit: $(cat "$root/srv/recd-test/start.json")"
((preroll_frames == 96000 && frame_limit == 96000 + 48000)) ||
    fail "the recording got $preroll_frames frames of pre-roll (2 s: 96000) and a limit of $frame_limit (96000 + 1 s)"
back_to_listening() { [[ $(as_recd recctl status --json | json 'j["state"]["name"]') == listening ]]; }
wait_for 60 "the recording's end (recd listening again)" back_to_listening
as_recd recctl stop >"$root/srv/recd-test/stop.log" 2>&1 || { cat "$root/srv/recd-test/stop.log" >&2; fail "recctl stop (ending listening) failed"; }
grep -q "stopped listening" "$root/srv/recd-test/stop.log" || fail "recctl stop said: $(cat "$root/srv/recd-test/stop.log")"
kill "$listen_pid" 2>/dev/null || true
wait "$listen_pid" 2>/dev/null || true
listen_pid=
file=$root$recordings/take-preroll.wav
[[ -f $file ]] || fail "no $recordings/take-preroll.wav: $(ls -la "$root$recordings")"
[[ $(in_root stat -c %U "$recordings/take-preroll.wav") == recd ]] || fail "take-preroll.wav does not belong to recd"
ffmpeg -v error -i "$file" -f s16le -ac 2 -ar 48000 "$root/srv/recd-test/decoded.raw" -y || fail "ffmpeg cannot decode take-preroll.wav"
frames=$(($(stat -c %s "$root/srv/recd-test/decoded.raw") / 4))
((frames == frame_limit)) || fail "take-preroll.wav holds $frames frames, not $frame_limit (2 s of pre-roll + 1 s)"
((first_frame + frames <= input_frames)) ||
    fail "listening read past the input's end before the recording ended (its first frame $first_frame, $frames frames, the input $input_frames)"
cmp -s "$root/srv/recd-test/decoded.raw" <(tail -c +$((first_frame * 4 + 1)) "$root/srv/recd-test/input.raw" | head -c $((frames * 4))) ||
    fail "take-preroll.wav is not the input from its frame $first_frame on"
step "recorded $recordings/take-preroll.wav while listening: $frames frames = $preroll_frames of pre-roll + 48000, the input's from its frame $first_frame on, bit-exact"
stop_recd
(cd "$root$recordings" && md5sum ./*) >"$root/srv/recd-test/recordings.md5"

# --- 5. The installed units --------------------------------------------------------------------
units=(/lib/systemd/system/recd.service /lib/systemd/system/recd.socket)
in_root systemd-analyze verify --man=no "${units[@]}" >/dev/null 2>"$root/srv/recd-test/verify.err" ||
    { cat "$root/srv/recd-test/verify.err" >&2; fail "systemd-analyze verify of the system units"; }
[[ ! -s $root/srv/recd-test/verify.err ]] || { cat "$root/srv/recd-test/verify.err" >&2; fail "systemd-analyze verify warned"; }
in_root sh -c 'mkdir -m 700 /tmp/xdg && XDG_RUNTIME_DIR=/tmp/xdg systemd-analyze --user verify --man=no /usr/lib/systemd/user/recd.service /usr/lib/systemd/user/recd.socket' \
    >/dev/null 2>"$root/srv/recd-test/verify.err" || { cat "$root/srv/recd-test/verify.err" >&2; fail "systemd-analyze verify of the user units"; }
[[ ! -s $root/srv/recd-test/verify.err ]] || { cat "$root/srv/recd-test/verify.err" >&2; fail "systemd-analyze verify (user units) warned"; }
step "systemd-analyze verify: system and user units ok"

# --- 6. Upgrade and reinstall keep the changed conffile ----------------------------------------
next=$version+test1
rm -rf "$root/tmp/next" && dpkg-deb -R "$deb" "$root/tmp/next"
sed -i "s/^Version: .*/Version: $next/" "$root/tmp/next/DEBIAN/control"
dpkg-deb --root-owner-group -Znone -b "$root/tmp/next" "$root/tmp/recd_${next}_$arch.deb" >/dev/null
rm -rf "$root/tmp/next"
apt_in_root install "./tmp/recd_${next}_$arch.deb"
grep -q "^Unpacking recd ($next) over ($version)" "$root/apt.log" || { cat "$root/apt.log" >&2; fail "no upgrade from $version to $next"; }
in_root dpkg-query -W -f='${Version}' recd | grep -qx "$next" || fail "not upgraded to $next"
[[ $(md5sum <"$root/etc/recd/recd.toml") == "$changed" ]] || fail "the upgrade changed /etc/recd/recd.toml"
apt_in_root install --reinstall "./tmp/recd_${next}_$arch.deb"
[[ $(md5sum <"$root/etc/recd/recd.toml") == "$changed" ]] || fail "the reinstall changed /etc/recd/recd.toml"
! ls "$root"/etc/recd/recd.toml.dpkg-* >/dev/null 2>&1 || fail "dpkg left $(ls "$root"/etc/recd/recd.toml.dpkg-*)"
step "upgraded $version -> $next and reinstalled: the changed /etc/recd/recd.toml kept"

# --- 7. Remove and purge keep the recordings ---------------------------------------------------
recordings_intact() { (cd "$root$recordings" && md5sum --quiet -c "$root/srv/recd-test/recordings.md5") || fail "recordings changed after $1"; }
apt_in_root remove recd
in_root test ! -e /usr/bin/recd || fail "remove left /usr/bin/recd"
[[ $(md5sum <"$root/etc/recd/recd.toml") == "$changed" ]] || fail "remove changed /etc/recd/recd.toml"
recordings_intact remove
apt_in_root purge recd
in_root test ! -e /etc/recd/recd.toml || fail "purge left /etc/recd/recd.toml"
in_root dpkg-query -W -f='${Status}' recd 2>/dev/null | grep -q 'not-installed' ||
    [[ -z $(in_root dpkg-query -W -f='${Status}' recd 2>/dev/null) ]] || fail "recd still known to dpkg after purge"
recordings_intact purge
in_root getent passwd recd >/dev/null || fail "purge deleted the user recd, who owns the recordings"
owners=$(in_root find "$recordings" -type f ! -user recd)
[[ -z $owners ]] || fail "recordings no longer owned by recd: $owners"
step "removed and purged: $(ls "$root$recordings" | wc -l) recordings still in $recordings, owned by recd"
step "OK in $((SECONDS - started)) s"
