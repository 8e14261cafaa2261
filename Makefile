# recd — build, test, demo, install. `make help` lists the targets.
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR   = $(DESTDIR)$(PREFIX)/bin
SWIFT   ?= swift
CONFIG  ?= release

# Every Debian package the build, the tests, the demo and the benchmark need.
BUILD_PACKAGES = pkg-config libasound2-dev libsystemd-dev libsndfile1-dev libsoxr-dev
TEST_PACKAGES  = alsa-utils libasound2-plugins pulseaudio pulseaudio-utils systemd util-linux sndfile-programs bsdutils
BENCH_PACKAGES = sox mpd mpc valgrind hyperfine procps

.PHONY: help deps deps-bench build release test test-tsan check-units demo bench install uninstall clean

help:
	@echo "make deps     install the Debian packages the build, tests and demo need"
	@echo "make build    debug build of recd and recctl"
	@echo "make test     every test: unit, end to end, thread sanitizer, systemd units"
	@echo "make demo     start recd on a private test device, record with recctl, show the file"
	@echo "make bench    measure recd against arecord, sox and MPD; writes BENCHMARKS.md"
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

deps:
	$(call install_packages,$(BUILD_PACKAGES) $(TEST_PACKAGES))

deps-bench: deps
	$(call install_packages,$(BENCH_PACKAGES))

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

test: deps
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build
	$(MAKE) --no-print-directory test-tsan check-units

# The observation type under the thread sanitizer (its own build folder).
test-tsan: deps
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan --filter Observed

check-units: build
	Tests/units/check-units.sh "$$($(SWIFT) build --show-bin-path)/recd"

demo: deps
	$(SWIFT) build -c $(CONFIG) --product recd
	$(SWIFT) build -c $(CONFIG) --product recctl
	bash doc/demo.sh "$$($(SWIFT) build -c $(CONFIG) --show-bin-path)"

bench: deps-bench
	$(SWIFT) build -c release
	bash bench/run.sh "$$($(SWIFT) build -c release --show-bin-path)"

clean:
	rm -rf .build .build-tsan
