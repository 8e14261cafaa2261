# recd — build, test, demo, install. `make help` lists the targets.
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR   = $(DESTDIR)$(PREFIX)/bin
SWIFT   ?= swift
CONFIG  ?= release
# Release binaries carry the Swift runtime and FoundationEssentials inside them: no run-time
# symbol lookup across a dozen Swift libraries (recctl starts faster) and fewer resident pages.
# Linked by lld: the functions that run first and together (bench/hot-functions.order, `make
# hot-functions`), relative relocations packed, no symbol table exported to shared libraries —
# each keeps megabytes of the executable from becoming resident (BENCHMARKS.md, 4a).
# No $ORIGIN run path either: recctl is a static PIE under make (Package.swift, staticClient).
export RECD_STATIC_RECCTL = 1
# Every build without colored diagnostics: SwiftPM adds -color-diagnostics to every compiler
# command when its output is a terminal, and a changed command is compiled again, so a build in
# a terminal after one into a pipe or a log (make test's checks, CI) rebuilt the whole package
# (8 minutes), and the next one in a pipe rebuilt it back.
SWIFT_BUILD = $(SWIFT) build --no-color-diagnostics
HOT_FUNCTIONS = $(CURDIR)/bench/hot-functions.order
RELEASE_FLAGS = -c release --static-swift-stdlib --disable-local-rpath -Xswiftc -use-ld=lld \
  -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic \
  -Xlinker --symbol-ordering-file=$(HOT_FUNCTIONS) -Xlinker --no-warn-symbol-ordering

# Every Debian package the build, the tests, the demo and the benchmark need.
BUILD_PACKAGES = pkg-config libasound2-dev libsystemd-dev libsndfile1-dev libsoxr-dev libmosquitto-dev libavcodec-dev libavformat-dev libavutil-dev
TEST_PACKAGES  = prometheus jackd2 libjack-jackd2-dev strace sox gcc python3 python3-astral python3-scipy python3-numpy ffmpeg gstreamer1.0-tools gstreamer1.0-plugins-good gstreamer1.0-libav alsa-utils libasound2-plugins pulseaudio pulseaudio-utils systemd util-linux sndfile-programs bsdutils man-db bash-completion mosquitto mosquitto-clients rclone tmux socat jq openssl curl chromium chromium-driver webkit2gtk-driver xvfb python3-selenium firefox-esr python3-venv faketime
BENCH_PACKAGES = sox mpd mpc valgrind hyperfine procps python3 gcc binutils linux-perf vlc-bin vlc-plugin-base
# What `make deb`, `make test-deb` and `make test-boot` need besides the build's: dpkg-deb,
# dpkg-shlibdeps and strip, lintian, mmdebstrap for the clean root the package is installed
# into, file and python3 for test-deb (what a binary is; the JSON recctl prints), systemd-nspawn
# to boot that root, PulseAudio and numpy for test-boot's paced device and its check.
DEB_PACKAGES   = dpkg-dev binutils lintian mmdebstrap ffmpeg util-linux file python3 systemd-container pulseaudio pulseaudio-utils python3-numpy
# For packages of another architecture (make deb ARCH=arm64): its binaries run under qemu-user.
CROSS_PACKAGES = qemu-user-static binfmt-support arch-test file
# make soak's plot; heaptrack for finding what a soak shows growing.
SOAK_PACKAGES  = python3-matplotlib heaptrack

.PHONY: help deps deps-bench deps-deb build-info build build-tests build-tsan release deb test-deb test-boot test-packages hot-functions test check test-release test-tsan fuzz fuzz-build fuzz-smoke check-imports check-units check-install demo demo-shell bench bench-publish soak install uninstall clean

help:
	@echo "make deps     install the Debian packages the build, tests and demo need"
	@echo "make build    debug build of recd and recctl"
	@echo "make test     every test: unit, end to end, thread sanitizer, browsers, fuzzing, systemd units, install, the package (about 38 minutes on 2 cores)"
	@echo "make check    the inner loop: debug build, unit tests and a few end-to-end tests (about 1 minute after an edit)"
	@echo "make fuzz     fuzz the request parser and configuration reader (FUZZ_SECONDS, default 600)"
	@echo "make demo     start recd on a private test device, record with recctl, show the file"
	@echo "make demo-shell  the demo, then a shell with recctl pointed at its recd and device"
	@echo "make bench    measure recd against arecord, sox and MPD; report and raw figures in bench/out/ (untracked)"
	@echo "make bench-publish  put a run's tables into BENCHMARKS.md (BENCH_RUN, default bench/out/latest)"
	@echo "make deb      build the Debian package recd_VERSION_ARCH.deb (release binaries, lintian-checked)"
	@echo "make test-deb install that package into a clean Debian 12 root filesystem and record with it"
	@echo "make test-boot  install that package into a clean Debian 12 root, boot it with systemd as PID 1 and check the units there"
	@echo "make test-packages  every package (Debian 13 arm64 and amd64, Debian 12 amd64) built and tested in a clean root of its release"
	@echo "make soak     three loads for hours (SOAK_MINUTES, default 120): RSS, threads and fds slopes, files checked; bench/out/soak-latest"
	@echo "make install  install binaries, completions, man pages, units, example config (PREFIX, DESTDIR)"

# Installs only what is missing; sudo when not root.
define install_packages
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	  echo "installing:$$missing"; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

# Firefox is driven through Marionette, Mozilla's own protocol (Debian 12 has no geckodriver):
# Mozilla's Python client from PyPI, in a virtual environment that also sees Debian's Selenium.
# The web tests run their browsers with its python.
WEB_VENV = .build/web-venv
MARIONETTE_DRIVER = marionette_driver==3.7.1
deps:
	$(call install_packages,$(BUILD_PACKAGES) $(TEST_PACKAGES))
	@[ -x $(WEB_VENV)/bin/python ] && $(WEB_VENV)/bin/python -c 'import marionette_driver' 2>/dev/null || { \
	  echo "a Python environment for the browser tests: $(WEB_VENV) ($(MARIONETTE_DRIVER) from PyPI)"; \
	  rm -rf $(WEB_VENV) && /usr/bin/python3 -m venv --system-site-packages $(WEB_VENV) && \
	  $(WEB_VENV)/bin/pip install -q --disable-pip-version-check $(MARIONETTE_DRIVER); }

deps-bench: deps
	$(call install_packages,$(BENCH_PACKAGES))

deps-deb: deps
	$(call install_packages,$(DEB_PACKAGES))

# The project's one version is RecdVersion.current (Sources/RecorderModel/RecdVersion.swift);
# the package is named after it. The commit goes into the binaries through CBuildInfo: commit.h
# is rewritten only when the commit changes, and build_info.c touched with it, so that a build
# directory that compiled it before commit.h existed compiles it again (one C file, a relink).
# Outside a git checkout the commit is empty and --version prints the version alone.
VERSION      := $(shell sed -n 's/^ *public static let current = "\(.*\)"$$/\1/p' Sources/RecorderModel/RecdVersion.swift)
BUILD_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
build-info:
	@h=Sources/CBuildInfo/commit.h; line='#define RECD_COMMIT "$(BUILD_COMMIT)"'; \
	if [ "$$(cat $$h 2>/dev/null)" != "$$line" ]; then echo "$$line" >$$h; touch Sources/CBuildInfo/build_info.c; fi

# The debug and TSan builds leave out the TLS trait (Package.swift): BoringSSL would cost each
# 3-4 minutes; HTTPS is tested against the release binaries, which have it.
TEST_BUILD_FLAGS = --disable-default-traits

# One build per configuration, each in one folder with one set of flags, so that no target
# builds what another built: the shipping release binaries in .build/release, which make
# install, deb, demo, demo-shell, bench, soak and the release end-to-end tests all use; TSan
# with the tests in .build-tsan (make test); debug with the tests in .build/debug (make check).
build: deps build-info
	$(SWIFT_BUILD) $(TEST_BUILD_FLAGS)

build-tests: deps build-info
	$(SWIFT_BUILD) --build-tests $(TEST_BUILD_FLAGS)

build-tsan: deps build-info
	$(SWIFT_BUILD) --build-tests --sanitize=thread --scratch-path .build-tsan $(TEST_BUILD_FLAGS)

# make test builds the release binaries once, first; the checks it runs beside the tests
# (fuzz-smoke, check-units, check-install, test-deb) take them as they are, SKIP_RELEASE_BUILD=1:
# nothing relinks recd under the tests that are starting it. (Their logs are not terminals:
# before SWIFT_BUILD's --no-color-diagnostics, a build there recompiled everything.)
release: deps build-info
ifeq ($(SKIP_RELEASE_BUILD),1)
	@test -x "$$($(SWIFT_BUILD) $(RELEASE_FLAGS) --show-bin-path)/recd" || { echo "release: no release build to use"; exit 1; }
else
	$(SWIFT_BUILD) $(RELEASE_FLAGS)
endif

# Every test where it proves something (Tests/suite.py, doc/testing.md): the release and TSan
# builds; the unit tests under TSan and the end-to-end tests against a TSan-built recd and
# against the release binaries, each test function its own process, several at once; beside
# them, at a lower priority, imports, fuzzing, units, install and the package. Prints each
# phase's start and length at the end. TEST_WORKERS sets how many tests run at once.
test: deps
	python3 Tests/suite.py test

# The inner loop while working: an incremental debug build, the unit tests and a few end-to-end
# smoke tests against the debug binaries.
check: deps
	python3 Tests/suite.py check

# One configuration's tests alone: the end-to-end suites against the release binaries as they
# ship (static runtime, lld, the hot-functions order, recctl a static PIE; the TSan build's
# harness drives them); every test under the thread sanitizer (halt_on_error: any report fails
# the test that provoked it).
test-release: build-tsan release
	python3 Tests/suite.py run release

test-tsan: build-tsan
	python3 Tests/suite.py run unit tsan

# libFuzzer over the request parser and the configuration reader (Sources/recd-fuzz).
# `make fuzz FUZZ_SECONDS=1800` for a long run; new inputs go to .build-fuzz/corpus, crashes
# to .build-fuzz/ (add a crash to Tests/fuzz/corpus once it is fixed). Tests/fuzz/recd.dict
# gives it the tokens of a request and of recd.toml, and numbers at the edges (0, -1, 1e308,
# 2e14, Int64.max, NaN...).
FUZZ_DICT     = -dict=Tests/fuzz/recd.dict
FUZZ_SECONDS ?= 600
# A debug build: it compiles in 60 s where a release one took 100 (make test builds it every
# time), its assertions are on, and it still runs 300 000 inputs in about 25 s.
FUZZ_BIN      = .build-fuzz/debug/recd-fuzz
fuzz-build: deps
	$(SWIFT_BUILD) --sanitize=fuzzer -Xswiftc -parse-as-library -Xswiftc -DFUZZING \
	  --scratch-path .build-fuzz --product recd-fuzz

FUZZ_ARGS    ?= -max_total_time=$(FUZZ_SECONDS)
fuzz: fuzz-build
	mkdir -p .build-fuzz/corpus
	SWIFT_BACKTRACE=enable=no $(FUZZ_BIN) $(FUZZ_ARGS) $(FUZZ_DICT) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 -artifact_prefix=.build-fuzz/ .build-fuzz/corpus Tests/fuzz/corpus

# A short fuzzing run (part of make test): the seed corpus replayed by the release build's
# recd-fuzz (built without the fuzzer, it replays the files it is given), then 300 000 new inputs
# from a fixed seed, the same on every machine (deterministic hashing: Swift seeds Dictionary
# and Set order per process otherwise).
fuzz-smoke: fuzz-build release
	"$$($(SWIFT_BUILD) -c release --show-bin-path)/recd-fuzz" Tests/fuzz/corpus
	rm -rf .build-fuzz/smoke && mkdir -p .build-fuzz/smoke
	SWIFT_DETERMINISTIC_HASHING=1 SWIFT_BACKTRACE=enable=no $(FUZZ_BIN) -seed=1 -runs=300000 $(FUZZ_DICT) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 -artifact_prefix=.build-fuzz/ .build-fuzz/smoke Tests/fuzz/corpus

# Every module declares exactly what it imports (Package.swift against the sources).
check-imports:
	python3 Tests/layers/check-imports.py

check-units: release
	Tests/units/check-units.sh "$$($(SWIFT_BUILD) -c release --show-bin-path)/recd"

# make install / uninstall into a staging directory (a release build).
check-install: deps
	bash Tests/install/check-install.sh

# The Debian package (doc/packaging.md): `make install` into a staging tree with PREFIX=/usr,
# laid out as Debian expects, Depends from the binaries, lintian over the result.
# For another architecture or Debian release (a Raspberry Pi: `make deb ARCH=arm64`, Raspberry
# Pi OS being Debian 13, trixie), packaging/cross/build.sh builds recd and recctl with Debian's
# Swift from sid in a root of its own, against a root of the target (both cached in
# RECD_CROSS_CACHE), and the package is made the same way, its Depends from the target's root.
# The host's own package is for Debian 12 (bookworm); another architecture's is for trixie.
HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null)
ARCH      ?= $(HOST_ARCH)
DEFAULT_SUITE = $(if $(filter $(HOST_ARCH),$(ARCH)),bookworm,trixie)
SUITE     ?= $(DEFAULT_SUITE)
CROSS      = $(if $(and $(filter $(HOST_ARCH),$(ARCH)),$(filter bookworm,$(SUITE))),,$(SUITE)-$(ARCH))
DEB        = recd_$(VERSION)_$(ARCH)$(if $(filter $(DEFAULT_SUITE),$(SUITE)),,-$(SUITE)).deb
export RECD_CROSS_CACHE ?= $(HOME)/.cache/recd-cross
AS_ROOT    = $$([ "$$(id -u)" -eq 0 ] || echo sudo --preserve-env=RECD_CROSS_CACHE,RECD_TEST_DEB_CACHE,RECD_TEST_DEB_KEEP)
deb: deps-deb
	$(if $(CROSS),$(call install_packages,$(CROSS_PACKAGES)))
	@echo "make deb: the release build first (about 4 min from a fresh clone, seconds when it is there)"
	@$(MAKE) --no-print-directory release
	$(if $(CROSS),$(AS_ROOT) bash packaging/cross/build.sh --arch "$(ARCH)" --suite "$(SUITE)" --output ".build/cross/$(CROSS)")
	@echo "make deb: make install into a staging tree, then dpkg-deb and lintian"
	$(if $(CROSS),$(AS_ROOT)) bash packaging/deb/build-deb.sh --version "$(VERSION)" --commit "$(BUILD_COMMIT)" --arch "$(ARCH)" \
	  --output "$(DEB)" $(if $(CROSS),--binaries ".build/cross/$(CROSS)" --root "$(RECD_CROSS_CACHE)/$(CROSS)")

# Installs that package into a clean Debian 12 root filesystem (mmdebstrap, cached under
# ~/.cache/recd-test-deb) and records with it there (Tests/deb/test-deb.sh). Needs root
# (chroot, mount): sudo when not root, as for packages.
test-deb: deb
	$(AS_ROOT) bash Tests/deb/test-deb.sh "$(DEB)" "$(SUITE)"

# The package as a station runs it: installed into a clean root of its release, which is then
# booted with systemd as PID 1 (systemd-nspawn) and checked from inside: socket activation,
# reload, a paced device through the sandbox, autostart after kill -9, restart and the
# watchdog, recd-web.socket, the journal, power-off while recording (Tests/deb/test-boot.sh;
# the checks are Tests/deb/boot-checks.sh). Root, as test-deb. SKIP_DEB_BUILD=1 takes the
# package test-deb has just made (make test, test-packages) instead of making it again.
test-boot: $(if $(filter 1,$(SKIP_DEB_BUILD)),,deb)
	@test -f "$(DEB)" || { echo "test-boot: no $(DEB): make deb first"; exit 1; }
	$(AS_ROOT) bash Tests/deb/test-boot.sh "$(DEB)" "$(SUITE)"

# Every package, each built (make deb), tested as test-deb does in a clean root of its release
# and booted there as test-boot does: Raspberry Pi OS's (trixie arm64, under qemu-user),
# Debian 13's (trixie amd64) and Debian 12's (bookworm amd64), natively. Not in `make test`
# (which runs the host's package through both): the first run builds the cross roots and a
# second compiler's release builds (up to an hour the first time). Each is timed; a failed one
# does not stop the others, and the summary at the end says which failed.
PACKAGES ?= trixie-arm64 trixie-amd64 bookworm-amd64
test-packages:
	@summary=""; failed=0; for package in $(PACKAGES); do \
	  suite=$${package%%-*}; arch=$${package#*-}; started=$$(date +%s); \
	  echo "=== make test-packages: $$suite $$arch ($$(date -u +%H:%M:%S) UTC)"; \
	  if $(MAKE) --no-print-directory test-deb SUITE=$$suite ARCH=$$arch; then deb=ok; else deb=FAILED; failed=1; fi; \
	  booted=$$(date +%s); \
	  if $(MAKE) --no-print-directory test-boot SKIP_DEB_BUILD=1 SUITE=$$suite ARCH=$$arch; then boot=ok; else boot=FAILED; failed=1; fi; \
	  result="test-deb $$deb in $$(( booted - started )) s, test-boot $$boot in $$(( $$(date +%s) - booted )) s"; \
	  line="$$suite $$arch: $$result (make deb, test-deb, test-boot)"; \
	  echo "=== make test-packages: $$line"; summary="$$summary$$line\n"; \
	done; \
	printf '=== make test-packages:\n'; printf "$$summary" | sed 's/^/    /'; exit $$failed

# Both use the release build (make release) unless CONFIG=debug.
demo: $(if $(filter release,$(CONFIG)),release,build)
	bash doc/demo.sh "$$($(SWIFT_BUILD) -c $(CONFIG) --show-bin-path)"

# The demo, then a shell with recctl pointed at its recd and device (they stop when it exits).
demo-shell: $(if $(filter release,$(CONFIG)),release,build)
	bash doc/demo.sh "$$($(SWIFT_BUILD) -c $(CONFIG) --show-bin-path)" --shell

bench: deps-bench release build-tests
	RECD_TEST_XCTEST="$$($(SWIFT_BUILD) --show-bin-path $(TEST_BUILD_FLAGS))/recdPackageTests.xctest" \
	  bash bench/run.sh "$$($(SWIFT_BUILD) -c release --show-bin-path)"

# Memory, threads and descriptors over hours of wall-clock time: three daemons at once (recording
# alone; 20 subscribers at 20 Hz, segments and a lost device; start/stop churn with clients that
# come and go), each on its own paced PulseAudio device. Not part of make test. The report
# (summary.json, samples.jsonl, soak.png) goes to bench/out/soak-RUN, bench/out/soak-latest;
# the published run's are in bench/results/soak (bench-publish leaves them alone).
# Debian's python3 (not a python3 earlier in PATH) has Debian's matplotlib.
SOAK_MINUTES        ?= 120
SOAK_WARMUP_MINUTES ?= 15
SOAK_PYTHON         ?= /usr/bin/python3
soak: deps-bench release
	$(call install_packages,$(SOAK_PACKAGES))
	SOAK_MINUTES=$(SOAK_MINUTES) SOAK_WARMUP_MINUTES=$(SOAK_WARMUP_MINUTES) \
	  $(SOAK_PYTHON) bench/soak.py "$$($(SWIFT_BUILD) -c release --show-bin-path)"

# Regenerates the list of functions recd and recctl run (callgrind over a recorder's day in
# miniature), then relinks with it. Commit the list; an outdated one only clusters less.
hot-functions: deps-bench
	$(SWIFT_BUILD) $(RELEASE_FLAGS)
	set -e; bin="$$($(SWIFT_BUILD) -c release --show-bin-path)"; \
	cd bench && python3 hot_functions.py "$$bin" $(HOT_FUNCTIONS); rm -f "$$bin/recd" "$$bin/recctl"
	$(SWIFT_BUILD) $(RELEASE_FLAGS)

# On purpose only: copies a run's raw figures to bench/results/ and rewrites the generated part
# of BENCHMARKS.md from them. The hand-written findings there name the run they were written against.
BENCH_RUN ?= bench/out/latest
bench-publish:
	@test -f "$(BENCH_RUN)/results/tree.env" || { echo "no benchmark run in $(BENCH_RUN): make bench first, or BENCH_RUN=DIR"; exit 1; }
	mkdir -p bench/results && find bench/results -mindepth 1 -maxdepth 1 ! -name soak -exec rm -rf {} +
	cp -r "$(BENCH_RUN)/results/." bench/results
	python3 bench/report.py --into BENCHMARKS.md bench/results

# --- make install / make uninstall ---------------------------------------------------------
# Layout: PREFIX=/usr/local (default) or PREFIX=/usr for packages; DESTDIR stages the tree.
# systemd, bash-completion, zsh and fish all search both /usr/local and /usr.
DATADIR     = $(DESTDIR)$(PREFIX)/share
MAN1DIR     = $(DATADIR)/man/man1
MAN5DIR     = $(DATADIR)/man/man5
BASHCOMPDIR = $(DATADIR)/bash-completion/completions
ZSHCOMPDIR  = $(DATADIR)/zsh/site-functions
FISHCOMPDIR = $(DATADIR)/fish/vendor_completions.d
UNITDIR     = $(DESTDIR)$(PREFIX)/lib/systemd/system
USERUNITDIR = $(DESTDIR)$(PREFIX)/lib/systemd/user
SYSUSERSDIR = $(DESTDIR)$(PREFIX)/lib/sysusers.d
TMPFILESDIR = $(DESTDIR)$(PREFIX)/lib/tmpfiles.d
# recd --system reads /etc/recd/recd.toml whatever the PREFIX.
CONFDIR     = $(DESTDIR)/etc/recd
# Man pages, completions and units are generated here, then installed.
GENERATED   = .build/install-files
# systemd units, the same names in systemd/ and systemd/user/.
UNITS       = recd.service recd.socket recd-web.service recd-web.socket recd-web-proxy.service recd-rtsp.service recd-rtsp.socket
# The executables make install installs, each with its man pages and completions.
TOOLS       = recd recctl recd-web recd-rtsp
# The man pages' date: the last commit's, so that installing twice gives the same files.
MANDATE    ?= $(shell git log -1 --format=%cs 2>/dev/null)

# Man pages and completions come from the command definitions themselves: man pages through
# swift-argument-parser's generate-manual tool (one page per subcommand: recctl.1,
# recctl.start.1, ...: `man recctl.start`), completions from each binary's --generate-completion-script.
# Two touches after generating: a paragraph break in a page is `.Pp`, not an empty line (which
# groff warns about), and a bash completion has no #! line (it is sourced, never run).
# The tool reads the release binaries' help (--experimental-dump-help). It is run directly, built
# from the resolved swift-argument-parser checkout in a folder of its own (20 s), not through
# the package's GenerateManual plugin: the plugin builds the whole package again first, with
# flags of its own (a second release build, or a relink of .build/release that the next
# `make release` undoes).
# The tool also writes a page for ArgumentParser's implicit `help` subcommand (recd.help.1,
# recctl.help.1: stubs) and so gives recd(1), which has no subcommands, a `subcommand` in its
# synopsis: both go, and recd(1) points at recctl(1) and recd.toml(5) instead.
# recd.toml(5) is made from etc/recd.toml (doc/recd.toml.5.awk), the documented reference.
# The units' ExecStart= names /usr/local/bin/recd; it is rewritten to $(PREFIX)/bin/recd.
# An existing /etc/recd/recd.toml is never overwritten: the shipped one goes next to it
# as recd.toml.example.
GENERATE_MANUAL = .build/argument-parser/debug/generate-manual
install: release
	rm -rf $(GENERATED)
	mkdir -p $(GENERATED)/man $(GENERATED)/completions $(GENERATED)/system $(GENERATED)/user
	$(SWIFT_BUILD) --package-path .build/checkouts/swift-argument-parser --scratch-path .build/argument-parser --product generate-manual
	set -e; bin="$$($(SWIFT_BUILD) -c release --show-bin-path)"; for tool in $(TOOLS); do \
	  $(GENERATE_MANUAL) "$$bin/$$tool" --multi-page $(if $(MANDATE),--date $(MANDATE)) --output-directory $(GENERATED)/man; \
	done
	rm -f $(addprefix $(GENERATED)/man/,$(addsuffix .help.1,$(TOOLS)))
	sed -i -e '/^\.Ar subcommand$$/d' -e 's/^\.Xr recd\.help 1$$/.Xr recctl 1 ,\n.Xr recd.toml 5/' $(GENERATED)/man/recd.1
	sed -i -e '/^\.Ar subcommand$$/d' -e 's/^\.Xr recd-web\.help 1$$/.Xr recd 1 ,\n.Xr recd.toml 5/' $(GENERATED)/man/recd-web.1
	sed -i -e '/^\.Ar subcommand$$/d' -e 's/^\.Xr recd-rtsp\.help 1$$/.Xr recd 1 ,\n.Xr recd.toml 5/' $(GENERATED)/man/recd-rtsp.1
	sed -i -e '/^\.Xr recctl\.help 1/d' $(GENERATED)/man/recctl.1
	sed -i 's/^$$/.Pp/' $(GENERATED)/man/*.1
	set -e; bin="$$($(SWIFT_BUILD) -c release --show-bin-path)"; \
	awk -v date="$(MANDATE)" -v version="$(VERSION)" -f doc/recd.toml.5.awk etc/recd.toml \
	  >$(GENERATED)/man/recd.toml.5; \
	for tool in $(TOOLS); do \
	  "$$bin/$$tool" --generate-completion-script bash | sed '1{/^#!/d}' >$(GENERATED)/completions/$$tool; \
	  "$$bin/$$tool" --generate-completion-script zsh >$(GENERATED)/completions/_$$tool; \
	  "$$bin/$$tool" --generate-completion-script fish >$(GENERATED)/completions/$$tool.fish; \
	done; \
	for unit in $(UNITS); do \
	  sed 's|/usr/local/bin/recd|$(PREFIX)/bin/recd|g' systemd/$$unit >$(GENERATED)/system/$$unit; \
	  sed 's|/usr/local/bin/recd|$(PREFIX)/bin/recd|g' systemd/user/$$unit >$(GENERATED)/user/$$unit; \
	done; \
	install -d $(BINDIR) $(MAN1DIR) $(MAN5DIR) $(BASHCOMPDIR) $(ZSHCOMPDIR) $(FISHCOMPDIR) \
	  $(UNITDIR) $(USERUNITDIR) $(SYSUSERSDIR) $(TMPFILESDIR) $(CONFDIR); \
	install -m 755 $(addprefix "$$bin"/,$(TOOLS)) $(BINDIR)/; \
	install -m 644 $(GENERATED)/man/*.1 $(MAN1DIR)/; \
	install -m 644 $(GENERATED)/man/recd.toml.5 $(MAN5DIR)/; \
	install -m 644 $(addprefix $(GENERATED)/completions/,$(TOOLS)) $(BASHCOMPDIR)/; \
	install -m 644 $(addprefix $(GENERATED)/completions/_,$(TOOLS)) $(ZSHCOMPDIR)/; \
	install -m 644 $(addprefix $(GENERATED)/completions/,$(addsuffix .fish,$(TOOLS))) $(FISHCOMPDIR)/; \
	install -m 644 $(addprefix $(GENERATED)/system/,$(UNITS)) $(UNITDIR)/; \
	install -m 644 $(addprefix $(GENERATED)/user/,$(UNITS)) $(USERUNITDIR)/; \
	install -m 644 systemd/sysusers.d/recd.conf $(SYSUSERSDIR)/recd.conf; \
	install -m 644 systemd/tmpfiles.d/recd.conf $(TMPFILESDIR)/recd.conf; \
	if [ -e $(CONFDIR)/recd.toml ]; then \
	  install -m 644 etc/recd.toml $(CONFDIR)/recd.toml.example; \
	  echo "kept $(CONFDIR)/recd.toml; the shipped one is $(CONFDIR)/recd.toml.example"; \
	else \
	  install -m 644 etc/recd.toml $(CONFDIR)/recd.toml; \
	fi
	@echo "installed; next: systemd-sysusers && systemd-tmpfiles --create recd.conf && systemctl daemon-reload && systemctl enable --now recd.socket (or: systemctl --user enable --now recd.socket)"

# Removes what install put there, except a recd.toml that was changed after installing.
uninstall:
	rm -f $(addprefix $(BINDIR)/,$(TOOLS))
	rm -f $(MAN1DIR)/recd.1 $(MAN1DIR)/recd.*.1 $(MAN1DIR)/recctl.1 $(MAN1DIR)/recctl.*.1 $(MAN1DIR)/recd-web.1 $(MAN1DIR)/recd-rtsp.1 $(MAN5DIR)/recd.toml.5
	rm -f $(addprefix $(BASHCOMPDIR)/,$(TOOLS)) $(addprefix $(ZSHCOMPDIR)/_,$(TOOLS))
	rm -f $(addprefix $(FISHCOMPDIR)/,$(addsuffix .fish,$(TOOLS)))
	rm -f $(addprefix $(UNITDIR)/,$(UNITS))
	rm -f $(addprefix $(USERUNITDIR)/,$(UNITS))
	rm -f $(SYSUSERSDIR)/recd.conf $(TMPFILESDIR)/recd.conf $(CONFDIR)/recd.toml.example
	if cmp -s etc/recd.toml $(CONFDIR)/recd.toml; then rm -f $(CONFDIR)/recd.toml; \
	elif [ -e $(CONFDIR)/recd.toml ]; then echo "kept $(CONFDIR)/recd.toml (changed since installed)"; fi
	rmdir $(CONFDIR) 2>/dev/null || true

clean:
	rm -rf .build .build-tsan recd_*.deb
