# What test-deb.sh and test-boot.sh share, sourced by both after setting $script (their name,
# the prefix of every line they print): the package's facts and the checks before anything runs.
#   take_package WHY TOOL... -- "$@"   the package given ($1) and its release ($2, default:
#     bookworm for this machine's architecture, trixie for another's); needs root (WHY says
#     for what) and each TOOL; sets deb, version, arch, suite and debian_version, and has
#     another architecture's programs run under qemu-user (binfmt_misc).

fail() {
    printf '%s: FAIL: %s\n' "$script" "$*" >&2
    exit 1
}
step() { printf '%s: [%3d s] %s\n' "$script" "$SECONDS" "$*"; }

take_package() {
    local why=$1 tool
    shift
    local tools=()
    while [[ $1 != -- ]]; do tools+=("$1"); shift; done
    shift
    [[ ($# -eq 1 || $# -eq 2) && -f $1 ]] || fail "usage: $script.sh recd_VERSION_ARCH.deb [SUITE] (not found: ${1:-})"
    deb=$(readlink -f "$1")
    [[ $(id -u) -eq 0 ]] || fail "needs root ($why); run it as root or with sudo"
    for tool in "${tools[@]}"; do
        command -v "$tool" >/dev/null || fail "$tool not found (make deps-deb installs it)"
    done
    version=$(dpkg-deb -f "$deb" Version)
    arch=$(dpkg-deb -f "$deb" Architecture)
    suite=${2:-$([[ $arch == "$(dpkg --print-architecture)" ]] && echo bookworm || echo trixie)}
    declare -gA debian_version=([bookworm]=12 [trixie]=13)
    [[ -n ${debian_version[$suite]:-} ]] || fail "unknown release $suite (bookworm or trixie)"
    if [[ $arch != "$(dpkg --print-architecture)" ]]; then
        # The root's programs, recd among them, run under qemu-user (binfmt_misc).
        findmnt -rn /proc/sys/fs/binfmt_misc >/dev/null || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        update-binfmts --enable "qemu-$(dpkg-architecture -a "$arch" -qDEB_HOST_GNU_CPU 2>/dev/null)" >/dev/null 2>&1 || true
        arch-test "$arch" >/dev/null 2>&1 || fail "$arch programs do not run here (qemu-user-static and binfmt-support)"
    fi
}
