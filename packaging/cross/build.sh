#!/usr/bin/env bash
# Builds recd, recctl, recd-web and recd-rtsp for another Debian release or architecture on this machine (make deb
# ARCH=arm64, doc/packaging.md): Raspberry Pi OS is Debian 13 (trixie), arm64.
#
# The compiler is Debian's own Swift (swiftlang 6.2.3, in sid only: trixie's 6.0.3 is too old
# for our dependencies) in a sid root of this machine's architecture, since it needs sid's glibc
# to run. It compiles for the target against a root of the target release and architecture
# (the sysroot: its -dev packages, which also answer dpkg-shlibdeps later), into which sid's
# Swift runtime for the target architecture is copied and linked statically. So the binaries
# need only the target release's libraries: glibc symbols no newer than its own (checked here).
# Under qemu-user (binfmt_misc) the target root is made with its maintainer scripts run.
#
# Usage: packaging/cross/build.sh --arch arm64 --suite trixie --output DIR   (as root: chroot,
# mount). Both roots are cached under RECD_CROSS_CACHE (default ~/.cache/recd-cross), rebuilt
# when a month old; the first run downloads about 1 GB and, with the release build, takes up to an hour on 2 cores.
set -euo pipefail

fail() {
    printf 'make deb: FAIL: %s\n' "$*" >&2
    exit 1
}
step() { printf 'make deb: [%3d s] %s\n' "$SECONDS" "$*"; }

arch= suite= output=
while (($#)); do
    case $1 in
    --arch) arch=$2 ;;
    --suite) suite=$2 ;;
    --output) output=$2 ;;
    *) fail "unknown argument $1" ;;
    esac
    shift 2
done
[[ -n $arch && -n $suite && -n $output ]] || fail "usage: build.sh --arch ARCH --suite SUITE --output DIR"
[[ $(id -u) -eq 0 ]] || fail "needs root (mmdebstrap, chroot, mount)"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
host=$(dpkg --print-architecture)
case $arch in
# Debian's swiftlang names its amd64 modules x86_64-pc-linux-gnu (clang's own name for it).
amd64) triple=x86_64-pc-linux-gnu swiftarch=x86_64 ;;
arm64) triple=aarch64-unknown-linux-gnu swiftarch=aarch64 ;;
*) fail "no Swift triple known for Debian architecture $arch" ;;
esac
case $suite in
bookworm) glibc=2.36 ;;
trixie) glibc=2.41 ;;
*) fail "glibc of $suite unknown: add it here" ;;
esac
multiarch=$(dpkg-architecture -a "$arch" -qDEB_HOST_MULTIARCH 2>/dev/null)
mirror=http://deb.debian.org/debian
aptopts=(--aptopt='Acquire::Check-Valid-Until "false"')  # the registry serves dated snapshots

cache=${RECD_CROSS_CACHE:-$HOME/.cache/recd-cross}
compiler=$cache/sid-$host           # sid, with swiftlang (the compiler)
sysroot=$cache/$suite-$arch         # the target: its -dev packages and sid's Swift runtime
mkdir -p "$cache"

if [[ $arch != "$host" ]]; then
    # Foreign binaries (the target root's maintainer scripts, dpkg-shlibdeps' helpers) run
    # under qemu-user through binfmt_misc.
    findmnt -rn /proc/sys/fs/binfmt_misc >/dev/null || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    update-binfmts --enable "qemu-$(dpkg-architecture -a "$arch" -qDEB_HOST_GNU_CPU 2>/dev/null)" >/dev/null 2>&1 || true
    arch-test "$arch" >/dev/null 2>&1 || fail "$arch binaries do not run here (make deps-deb installs qemu-user-static and binfmt-support)"
fi

fresh() { [[ -e $1/.complete ]] && [[ -z $(find "$1/.complete" -mtime +30) ]]; }

# fetch_runtime: sid's swiftlang for the target architecture, of the compiler's version, unpacked
# for its runtime and modules only (the compiler in it does not run here).
fetch_runtime() {
    local downloads apt_download unpacked
    downloads=$(mktemp -d)
    printf 'deb [arch=%s signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s sid main\n' "$arch" "$mirror" \
        >"$downloads/sources.list"
    apt_download=(apt-get -q -o Dir::Etc::SourceList="$downloads/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$downloads/lists" -o Dir::Cache="$downloads/cache" -o Dir::State::status=/dev/null
        -o APT::Architecture="$arch" -o APT::Architectures::="$arch" -o Acquire::Check-Valid-Until=false)
    mkdir -p "$downloads/lists/partial" "$downloads/cache/archives/partial"
    "${apt_download[@]}" update >/dev/null || fail "apt-get update for sid $arch failed"
    (cd "$downloads" && "${apt_download[@]}" download "swiftlang:$arch=$swift_version" >/dev/null) ||
        fail "could not download swiftlang:$arch $swift_version (it must match the compiler's version)"
    unpacked=$downloads/swiftlang
    mkdir -p "$unpacked"
    dpkg-deb --fsys-tarfile "$downloads"/swiftlang_*.deb |
        tar -x -C "$unpacked" --wildcards './usr/libexec/swift/lib/swift/*' './usr/libexec/swift/lib/swift_static/*'
    # The runtime and its modules where a Swift SDK keeps them.
    mv "$unpacked/usr/libexec/swift/lib/swift" "$unpacked/usr/libexec/swift/lib/swift_static" "$sysroot/usr/lib/"
    rm -rf "$downloads"
}

if ! fresh "$compiler"; then
    step "a sid root with Debian's Swift (swiftlang) to compile with ($compiler, about 3 GB)"
    rm -rf "$compiler"
    mmdebstrap --quiet --variant=apt "${aptopts[@]}" \
        --include=swiftlang,libc6-dev,g++,git,pkg-config,ca-certificates,file \
        sid "$compiler" "deb $mirror sid main" || fail "mmdebstrap could not build the sid root"
    touch "$compiler/.complete"
fi
swift_version=$(chroot "$compiler" dpkg-query -W -f='${Version}' swiftlang)

if ! fresh "$sysroot"; then
    step "a $suite $arch root with the -dev packages to compile against ($sysroot)"
    rm -rf "$sysroot"
    mmdebstrap --quiet --variant=apt --arch="$arch" "${aptopts[@]}" \
        --include=libc6-dev,g++,libasound2-dev,libsndfile1-dev,libsoxr-dev,libsystemd-dev,libavformat-dev,libavcodec-dev,libavutil-dev,libmosquitto-dev,dpkg-dev \
        "$suite" "$sysroot" "deb $mirror $suite main" || fail "mmdebstrap could not build the $suite $arch root"
    step "sid's Swift runtime for $arch (swiftlang:$arch $swift_version) into it"
    if [[ $arch == "$host" ]]; then
        # The compiler's own.
        cp -a "$compiler/usr/libexec/swift/lib/swift" "$compiler/usr/libexec/swift/lib/swift_static" "$sysroot/usr/lib/"
    else
        fetch_runtime
    fi
    # The compiler's own C headers (stddef.h…, architecture-independent) beside them.
    cp -a "$compiler/usr/libexec/swift/lib/clang" "$sysroot/usr/lib/clang"
    touch "$sysroot/.complete"
fi

# --- Build, inside the compiler's root, against the target's ------------------------------------
build=$cache/build-$suite-$arch
mkdir -p "$build/scratch"
mounts=()
bind() { mkdir -p "$2" && mount --bind "$1" "$2" && mounts+=("$2"); }
cleanup() {
    local status=$? mount
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
    exit "$status"
}
trap cleanup EXIT
bind "$sysroot" "$compiler/sysroot"
bind "$repo" "$compiler/src"
bind "$build/scratch" "$compiler/scratch"
[[ -d /opt/swift-packages ]] && bind /opt/swift-packages "$compiler/opt/swift-packages"
bind /dev "$compiler/dev"
mount -t proc proc "$compiler/proc" && mounts+=("$compiler/proc")
cp /etc/gitconfig "$compiler/etc/gitconfig" 2>/dev/null || true   # where the Swift packages come from
cp /etc/resolv.conf "$compiler/etc/resolv.conf" 2>/dev/null || true
cat >"$compiler/scratch/toolset.json" <<JSON
{
  "schemaVersion": "1.0",
  "swiftCompiler": { "extraCLIOptions": ["-use-ld=lld", "-sdk", "/sysroot", "-resource-dir", "/sysroot/usr/lib/swift_static"] }
}
JSON
step "swift build for $triple with Debian's Swift $swift_version (a release build: several minutes)"
chroot "$compiler" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 RECD_STATIC_RECCTL=1 \
    PKG_CONFIG_SYSROOT_DIR=/sysroot PKG_CONFIG_LIBDIR="/sysroot/usr/lib/$multiarch/pkgconfig:/sysroot/usr/share/pkgconfig" \
    swift build --package-path /src --scratch-path /scratch -c release --triple "$triple" --sdk /sysroot \
    --toolset /scratch/toolset.json --static-swift-stdlib --disable-local-rpath --force-resolved-versions \
    -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic >"$build/build.log" 2>&1 ||
    { tail -40 "$build/build.log" >&2; fail "swift build for $triple failed (log: $build/build.log)"; }
bin=$build/scratch/$triple/release
mkdir -p "$output"
cp "$bin/recd" "$bin/recctl" "$bin/recd-web" "$bin/recd-rtsp" "$output/"
# Stripped as the host's package is (dh_strip's options), by the target's own binutils.
mkdir -p "$sysroot/tmp/recd-strip"
cp "$output/recd" "$output/recctl" "$output/recd-web" "$output/recd-rtsp" "$sysroot/tmp/recd-strip/"
chroot "$sysroot" strip --remove-section=.comment --remove-section=.note /tmp/recd-strip/recd /tmp/recd-strip/recctl /tmp/recd-strip/recd-web /tmp/recd-strip/recd-rtsp ||
    fail "strip failed"
mv "$sysroot/tmp/recd-strip/recd" "$sysroot/tmp/recd-strip/recctl" "$sysroot/tmp/recd-strip/recd-web" "$sysroot/tmp/recd-strip/recd-rtsp" "$output/"
rmdir "$sysroot/tmp/recd-strip"
for tool in recd recctl recd-web recd-rtsp; do
    file -b "$output/$tool" | grep -q "$(case $arch in arm64) echo 'ARM aarch64' ;; amd64) echo 'x86-64' ;; esac)" ||
        fail "$output/$tool is not an $arch executable: $(file -b "$output/$tool")"
    # recctl is a static executable: no dynamic symbols at all.
    newest=$(objdump -T "$output/$tool" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1) || newest=
    [[ -z $newest ]] || [[ $(printf '%s\n%s\n' "$newest" "$glibc" | sort -V | tail -1) == "$glibc" ]] ||
        fail "$tool needs GLIBC_$newest, newer than $suite's $glibc"
    step "$tool: $(file -b "$output/$tool" | cut -d, -f1-2), newest glibc symbol ${newest:-none} (≤ $suite's $glibc)"
done
