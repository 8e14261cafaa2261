#!/usr/bin/env bash
# Builds recd's Debian package from the release binaries (`make deb`; doc/packaging.md).
#
#   1. `make install DESTDIR=STAGE PREFIX=/usr`: the binaries as `make release` links them,
#      man pages and completions generated from the command definitions, units, sysusers.d,
#      tmpfiles.d and /etc/recd/recd.toml;
#   2. laid out as debhelper does on Debian 12: system units in /lib/systemd/system, zsh
#      completions in vendor-completions, man pages gzip -9n, binaries stripped (dh_strip's
#      options), copyright, changelog.gz (a native package) and README.Debian in /usr/share/doc/recd;
#   3. Depends: dpkg-shlibdeps over the binaries (the libraries they link), plus the
#      libraries recd opens with dlopen, which dpkg-shlibdeps cannot see: every soname string
#      in the binary that is not one of its DT_NEEDED entries (libavcodec.so.59, ...), mapped
#      to its package and that package's shlibs dependency through dpkg on the build machine;
#      plus systemd-sysusers for postinst (as dh_installsysusers adds it) and procps for the
#      kill in recd.service's ExecReload=;
#   4. dpkg-deb --root-owner-group, then lintian (errors and unoverridden warnings fail).
#
# Usage: build-deb.sh --version V --commit C --arch A --output FILE.deb   (from the repository)
#        [--binaries DIR --root ROOT]: another release's or architecture's recd, recctl, recd-web and recd-rtsp
#        (packaging/cross/build.sh, already stripped) replace the host's after `make install`
#        (man pages and completions are the same), and dpkg-shlibdeps and dpkg run inside ROOT,
#        a root filesystem of the target release and architecture (under qemu-user if foreign).
set -euo pipefail

fail() {
    printf 'make deb: FAIL: %s\n' "$*" >&2
    exit 1
}

version= commit= arch= output= binaries= target=
while (($#)); do
    case $1 in
    --version) version=$2 ;;
    --commit) commit=$2 ;;
    --arch) arch=$2 ;;
    --output) output=$2 ;;
    --binaries) binaries=$(readlink -f "$2") ;;
    --root) target=$(readlink -f "$2") ;;
    *) fail "unknown argument $1" ;;
    esac
    shift 2
done
[[ -n $version && -n $arch && -n $output ]] || fail "usage: build-deb.sh --version V --commit C --arch A --output FILE.deb"
[[ -z $binaries || -n $target ]] || fail "--binaries needs --root (the target's root filesystem, for dpkg-shlibdeps)"
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || fail "version '$version' (RecdVersion.current) is not a Debian native version"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here=$repo/packaging/deb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps expects the files in debian/PACKAGE below the directory it runs in.
root=$work/debian/recd
mkdir -p "$root"
printf 'Source: recd\n\nPackage: recd\nArchitecture: any\n' >"$work/debian/control"
maintainer="recd maintainers <maintainers@users.noreply.a-seed-480acf5f.example>"

# 1. What make install installs, with PREFIX=/usr.
echo "make deb: 1/4 make install into a staging tree (the man pages' tool is built once: about 30 s)"
make -C "$repo" --no-print-directory install DESTDIR="$root" PREFIX=/usr >"$work/install.log" 2>&1 ||
    { cat "$work/install.log" >&2; fail "make install failed"; }
rm -f "$root/etc/recd/recd.toml.example"

# 2. Debian 12's layout.
echo "make deb: 2/4 Debian's layout, copyright, changelog"
mkdir -p "$root/lib/systemd"
mv "$root/usr/lib/systemd/system" "$root/lib/systemd/system"
mv "$root/usr/share/zsh/site-functions" "$root/usr/share/zsh/vendor-completions"
gzip -9n "$root"/usr/share/man/man1/*.1 "$root"/usr/share/man/man5/*.5
if [[ -n $binaries ]]; then
    install -m 755 "$binaries/recd" "$binaries/recctl" "$binaries/recd-web" "$binaries/recd-rtsp" "$root/usr/bin/"
else
    strip --remove-section=.comment --remove-section=.note "$root/usr/bin/recd" "$root/usr/bin/recctl" "$root/usr/bin/recd-web" "$root/usr/bin/recd-rtsp"
fi
doc=$root/usr/share/doc/recd
install -d "$doc" "$root/usr/share/lintian/overrides"
install -m 644 "$here/copyright" "$here/README.Debian" "$doc/"
install -m 644 "$here/lintian-overrides" "$root/usr/share/lintian/overrides/recd"
# The changelog: one entry per package version, dated by the commit (the same input gives the
# same package).
date=$(git -C "$repo" log -1 --format=%cD 2>/dev/null || date -R)
{
    printf 'recd (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * recd %s%s, packaged by make deb.\n\n' "$version" "${commit:+ built from commit $commit}"
    printf ' -- %s  %s\n' "$maintainer" "$date"
} | gzip -9n >"$doc/changelog.gz"
find "$root" -type d -exec chmod 755 {} +
# Also where dpkg-shlibdeps recognises a package's root.
install -d -m 755 "$root/DEBIAN"

# 3. Depends.
echo "make deb: 3/4 Depends from dpkg-shlibdeps and the libraries recd opens with dlopen"
# recctl is a static executable (Package.swift, staticClient): it links nothing.
readelf -lW "$root/usr/bin/recctl" | grep -q "Requesting program interpreter" &&
    fail "usr/bin/recctl is not a static executable: pass it to dpkg-shlibdeps too"
# in_target COMMAND...: runs here, or inside the target's root filesystem (its dpkg database,
# its libraries), with the staging tree visible at the same path.
in_target() {
    if [[ -z $target ]]; then "$@"; return; fi
    # The architectures said outright: dpkg-architecture would ask a C compiler the root lacks.
    chroot "$target" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        DEB_BUILD_ARCH="$arch" DEB_HOST_ARCH="$arch" "$@"
}
if [[ -n $target ]]; then
    mkdir -p "$target$work"
    mount --bind "$work" "$target$work"
    trap 'umount "$target$work" 2>/dev/null || umount -l "$target$work"; rmdir "$target$work" 2>/dev/null; rm -rf "$work"' EXIT
fi
linked=$(in_target sh -c 'cd "$1" && dpkg-shlibdeps -O "$2" "$3" "$4"' - "$work" "$root/usr/bin/recd" "$root/usr/bin/recd-web" "$root/usr/bin/recd-rtsp" 2>"$work/shlibdeps.err") ||
    { cat "$work/shlibdeps.err" >&2; fail "dpkg-shlibdeps failed"; }
# trixie's libc6 diverts the dynamic loader (/lib/ld-linux-aarch64.so.1 on arm64,
# /lib64/ld-linux-x86-64.so.2 on amd64) for the /usr merge, which dpkg-shlibdeps warns about
# whatever the binary: those lines alone are no reason to fail.
sed -i -e '/warning: diversions involved - output may be incorrect/d' -e '/^ diversion by libc6 \(from\|to\): \/lib\(64\)\{0,1\}\/ld-linux/d' \
    "$work/shlibdeps.err"
[[ ! -s $work/shlibdeps.err ]] && [[ $linked == shlibs:Depends=* ]] ||
    { cat "$work/shlibdeps.err" >&2; fail "dpkg-shlibdeps warned or said: $linked"; }
linked=${linked#shlibs:Depends=}
needed=$(readelf -dW "$root/usr/bin/recd" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
opened=$(strings -n 6 "$root/usr/bin/recd" | grep -E '^lib[A-Za-z0-9_+-]+\.so\.[0-9]+$' | sort -u |
    grep -vxF -f <(printf '%s\n' "$needed") || true)
[[ -n $opened ]] || fail "found no library recd opens with dlopen (expected FFmpeg's and mosquitto's)"
multiarch=$(dpkg-architecture -a "$arch" -qDEB_HOST_MULTIARCH 2>/dev/null)
loaded=()
for soname in $opened; do
    file=
    for dir in "/usr/lib/$multiarch" "/lib/$multiarch"; do
        [[ -e $target$dir/$soname ]] && { file=$(in_target readlink -f "$dir/$soname"); break; }
    done
    [[ -n $file ]] || fail "recd opens $soname, which is not installed ${target:-here} for $arch (make deps installs the -dev packages)"
    package=$(in_target dpkg -S "$file" 2>/dev/null | head -1 | cut -d: -f1) || true
    [[ -n $package ]] || fail "no package owns $file ($soname)"
    name=${soname%%.so.*} major=${soname##*.so.}
    dependency=$(in_target dpkg-query --control-show "$package:$arch" shlibs 2>/dev/null |
        awk -v n="$name" -v m="$major" '$1 == n && $2 == m { $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }')
    [[ -n $dependency ]] || dependency=$package
    echo "make deb: recd opens $soname with dlopen: $dependency"
    loaded+=("$dependency")
done
depends=$(printf '%s\n' "$linked" | tr ',' '\n' | sed 's/^ *//'; printf '%s\n' "${loaded[@]}")
depends=$(printf '%s\n' "$depends" | sort -u | paste -sd, | sed 's/,/, /g')
# recd.service reloads with `kill -HUP $MAINPID`: kill is procps's (priority important, so
# nearly always there, but not in a minimal root, where systemd-analyze verify finds it missing).
depends="$depends, procps, systemd | systemd-standalone-sysusers | systemd-sysusers"

# 4. Control files and the package.
install -m 755 "$here/postinst" "$here/prerm" "$here/postrm" "$root/DEBIAN/"
echo /etc/recd/recd.toml >"$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: recd
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $size
Depends: $depends
Section: sound
Priority: optional
Description: audio recorder daemon controlled over a Unix socket
 recd records audio from any ALSA device to WAV/RF64, FLAC, Ogg Opus, Ogg
 Vorbis, CAF, AAC or Apple Lossless in .m4a, or MP3, as a systemd service.
 Programs control and watch it over a Unix socket (JSON-RPC 2.0); recctl is
 its command-line client.
 .
 Files are never lost: the file being recorded is kept playable and finalized
 after a crash, a vanished device is waited for, and the disk is never filled.
 Segments by length or on the clock, retention, an MQTT bridge with Home
 Assistant discovery, and upload hooks for finished files.
 .
 recd-web, socket-activated (not enabled by default), serves a page for
 phones and desktops on the LAN (meters, a live spectrogram, listening live,
 the day's recordings with players, controls behind tokens, HTTPS) and
 Prometheus metrics; recd-rtsp, socket-activated too, serves the live input
 as RTSP to analysers such as BirdNET-Go (L16 or Opus); recd itself stays off
 the network.
CONTROL
echo "make deb: 4/4 dpkg-deb (xz) and lintian"
dpkg-deb --root-owner-group -Zxz --build "$root" "$repo/$output" >/dev/null || fail "dpkg-deb failed"

echo "make deb: $output ($(du -k "$repo/$output" | cut -f1) KiB, installed $size KiB)"
echo "Depends: $depends"
# lintian: any error, or any warning not overridden, fails the build.
lintian --display-info --fail-on error,warning "$repo/$output" || fail "lintian (above)"
echo "make deb: lintian clean"
