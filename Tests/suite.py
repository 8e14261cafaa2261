#!/usr/bin/env python3
"""make test and make check: every test where it proves something, each build made once.

make test builds two configurations of the package (and the fuzzer, Makefile's fuzz-build):
  release  the shipping binaries (.build/release): every end-to-end test runs against them
           (RECD_TEST_BINARIES), and make install, deb, demo use them;
  tsan     debug with ThreadSanitizer, with the tests (.build-tsan): the unit tests, and every
           end-to-end test against a recd, recctl and harness built with TSan. Its test bundle
           also drives the release binaries, so the harness and the client library (RecdClient)
           run under TSan in both passes.
A plain debug build would only run the unit tests a second time with the same -Onone code the
TSan build has; it is make check's (the inner loop), not make test's.

Most tests wait on real-time devices, and Swift Testing runs a synchronous test on one of the
cooperative pool's threads (two here), so one test process waits on two tests at a time while the
machine idles. Each test function runs instead in a process of its own (`--filter` on its exact
name), several at once, the longest first (the durations of the last run, .build/test-durations.json,
or Tests/test-durations.json on a fresh clone). Every test has its own devices and daemons.
The checks that need no device (fuzzing, units, install, the package) run beside them at a lower
priority, in the CPU the waiting tests leave.

Usage: Tests/suite.py test|check [--workers N]
       Tests/suite.py run CONFIGURATION... [--filter REGEX]   (no build: unit, tsan, release, debug, debug-e2e)
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DURATIONS = os.path.join(ROOT, ".build", "test-durations.json")
DURATIONS_COMMITTED = os.path.join(ROOT, "Tests", "test-durations.json")
LOGS = os.path.join(ROOT, ".build", "test-logs")
BUNDLE = "recdPackageTests.xctest"
# A few end-to-end tests for `make check`: a recording bit for bit, the protocol, recctl,
# listening with pre-roll and the matrix's most fragile cell.
SMOKE = [
    "EndToEndTests.ProtocolTests/",
    "EndToEndTests.RecctlTests/startStopAndInfo",
    "EndToEndTests.ListeningTests/",
    "EndToEndTests.CombinationMatrixTests/segmentsByLength",
]
# How long one test function may take before it is stopped and counted as failed.
JOB_TIMEOUT = 900


def make(target, **extra):
    return ["make", "--no-print-directory", target] + [f"{k}={v}" for k, v in extra.items()]


class Configuration:
    """A test bundle, the environment its tests run in, and which of its tests to run."""

    def __init__(self, name, bundle, environment, select, weight):
        self.name, self.bundle, self.environment, self.select, self.weight = name, bundle, environment, select, weight

    def tests(self):
        listed = subprocess.run([self.bundle, "--testing-library", "swift-testing", "--list-tests"], cwd=ROOT,
                                check=True, capture_output=True, text=True).stdout.split("\n")
        return [name for name in listed if name and self.select(name)]


def is_end_to_end(name):
    return name.startswith("EndToEndTests.")


# End-to-end tests whose TSan pass would prove nothing the release pass does not: what they
# check is logic, the same code in both builds, and their daemons' threads do what the other
# tests' do under TSan. Run against the release binaries only (in all, 4 minutes of a 2-core
# machine's TSan pass):
# - the ranges checked at every edge: hundreds of recctl, socket and MQTT requests, one each;
# - the page in three browsers (recd-web's routes, sockets and roles run under TSan in the
#   other WebTests).
RELEASE_ONLY = [
    "EndToEndTests.ParameterRangeTests/",
    "EndToEndTests.WebTests/theStationIn",
]


def is_release_only(name):
    return any(name.startswith(prefix) for prefix in RELEASE_ONLY)


def configurations():
    debug = os.path.join(ROOT, ".build", "debug", BUNDLE)
    tsan = os.path.join(ROOT, ".build-tsan", "debug", BUNDLE)
    release_bin = os.path.join(ROOT, ".build", "release")
    # Tests/tsan.supp: the runtime's false positives, each with its evidence.
    tsan_environment = {"TSAN_OPTIONS": "halt_on_error=1 suppressions=" + os.path.join(ROOT, "Tests", "tsan.supp")}
    return {
        # make check's: the debug build alone.
        "debug": Configuration("debug", debug, {}, lambda n: not is_end_to_end(n), 1),
        "debug-smoke": Configuration("debug", debug, {}, lambda n: any(n.startswith(s) for s in SMOKE), 1),
        # The inner loop's whole end-to-end pass against the debug binaries (no release or TSan
        # build needed): `Tests/suite.py run debug-e2e [--filter REGEX]` after `make build-tests`.
        "debug-e2e": Configuration("debug", debug, {}, is_end_to_end, 2),
        # make test's: the TSan build's test bundle runs every test. The end-to-end tests drive a
        # recd built with TSan, then the release binaries (RECD_TEST_BINARIES); the harness and
        # the client library (RecdClient) are under TSan in both.
        "unit": Configuration("unit", tsan, tsan_environment, lambda n: not is_end_to_end(n), 1),
        "tsan": Configuration("tsan", tsan, tsan_environment, lambda n: is_end_to_end(n) and not is_release_only(n), 2),
        "release": Configuration("release", tsan, dict(tsan_environment, RECD_TEST_BINARIES=release_bin), is_end_to_end, 1),
    }


def load_durations():
    for path in (DURATIONS, DURATIONS_COMMITTED):
        try:
            with open(path) as file:
                return json.load(file)
        except (OSError, ValueError):
            continue
    return {}


class Job:
    def __init__(self, configuration, test):
        self.configuration, self.test = configuration, test
        self.key = f"{configuration.name} {test}"
        self.log = os.path.join(LOGS, re.sub(r"[^A-Za-z0-9.]+", "_", self.key) + ".log")
        self.process = None
        self.started = self.seconds = None
        self.cpu = 0.0
        self.status = None

    def start(self):
        environment = dict(os.environ, **self.configuration.environment)
        # The exact test: its whole name, regular-expression characters escaped.
        argv = [self.configuration.bundle, "--testing-library", "swift-testing", "--filter", re.escape(self.test)]
        self.output = open(self.log, "w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(argv, cwd=ROOT, env=environment, stdout=self.output, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)

    def poll(self):
        # wait4, not Popen.poll: its resource usage includes every process the test reaped
        # (daemons, PulseAudio servers, decoders), so the suite can tell where the CPU goes.
        pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
        if pid == self.process.pid:
            self.process.returncode = os.waitstatus_to_exitcode(status)
            self.cpu = usage.ru_utime + usage.ru_stime
        if self.process.returncode is None:
            if time.monotonic() - self.started > JOB_TIMEOUT:
                os.killpg(self.process.pid, 9)
                self.process.wait()
                self.finish(f"timed out after {JOB_TIMEOUT} s")
                return True
            return False
        self.finish(None)
        return True

    def finish(self, problem):
        self.seconds = time.monotonic() - self.started
        # Whatever the test left running (a daemon whose test died before it could stop it).
        try:
            os.killpg(self.process.pid, 9)
        except ProcessLookupError:
            pass
        self.output.close()
        text = open(self.log, errors="replace").read()
        ran = re.findall(r"Test run with (\d+) tests?", text)
        if problem is None and self.process.returncode != 0:
            problem = f"exit status {self.process.returncode}"
        if problem is None and ran[-1:] != ["1"]:
            # The filter must select exactly this test: a typo would otherwise pass by running
            # nothing. (The last count is this process's: a test may run the bundle as a child.)
            problem = f"the filter ran {ran or 'no'} tests, not 1"
        self.status = problem

    def tail(self, lines=60, comment_lines=40):
        """The failures, each issue with its comment (the daemon's log the test attached: the
        only record of the cause once CI's clone is gone)."""
        text = open(self.log, errors="replace").read().splitlines()
        # A sanitizer's report first, whole (its stack is the only trace of a crash once CI's
        # clone is gone): from its first line to its SUMMARY.
        report = []
        for line in text:
            if report and len(report) < 80:
                report.append(line)
                if line.startswith("SUMMARY:"):
                    break
            elif not report and ("ThreadSanitizer:DEADLYSIGNAL" in line or re.match(r"==\d+==ERROR:", line)
                                 or line.startswith("WARNING: ThreadSanitizer")):
                report.append(line)
        failing = []
        comment = 0  # lines of the current issue's comment still to show
        for line in text:
            if "recorded an issue" in line:
                failing.append(line)
                comment = comment_lines
            elif comment and (line.startswith("↳") or line.startswith("  ")):
                failing.append(line)
                comment -= 1
            else:
                comment = 0
                if "✘" in line or "Fatal error" in line:
                    failing.append(line)
        return "\n".join(report + (failing or text)[-(lines + comment_lines):])


def step(pending, running, done, failed, capacity, label):
    """Starts what fits, waits a moment, collects what finished."""
    load = sum(job.configuration.weight for job in running)
    while pending and (not running or load + pending[0].configuration.weight <= capacity):
        job = pending.pop(0)
        job.start()
        running.append(job)
        load += job.configuration.weight
    time.sleep(0.05)
    for job in [job for job in running if job.poll()]:
        running.remove(job)
        done.append(job)
        if job.status:
            failed.append(job)
            print(f"[{label}] ✘ {job.key} ({job.seconds:.0f} s): {job.status}\n{job.tail()}\n", flush=True)


def run_pool(jobs, capacity, label):
    """Runs the jobs, the longest first, with at most `capacity` weight at once. The failed."""
    os.makedirs(LOGS, exist_ok=True)
    durations = load_durations()
    pending = sorted(jobs, key=lambda job: -durations.get(job.key, 60))
    running, done, failed = [], [], []
    started = last_report = time.monotonic()
    print(f"[{label}] {len(jobs)} tests, up to {capacity} at once (logs: {os.path.relpath(LOGS, ROOT)})", flush=True)
    try:
        while pending or running:
            step(pending, running, done, failed, capacity, label)
            if time.monotonic() - last_report > 60:
                last_report = time.monotonic()
                print(f"[{label}] {len(done)}/{len(jobs)} done, {len(failed)} failed, {time.monotonic() - started:.0f} s; "
                      f"running: {', '.join(job.key for job in running[:4])}{' …' if len(running) > 4 else ''}", flush=True)
    except BaseException:
        # Interrupted (Ctrl-C): each test is a session of its own, which the terminal's signal
        # does not reach; stop them and everything they started.
        for job in running:
            try:
                os.killpg(job.process.pid, 9)
            except ProcessLookupError:
                pass
        raise
    durations.update({job.key: round(job.seconds, 1) for job in done if not job.status})
    os.makedirs(os.path.dirname(DURATIONS), exist_ok=True)
    with open(DURATIONS, "w") as file:
        json.dump(dict(sorted(durations.items())), file, indent=0)
    cpu = sum(job.cpu for job in done)
    print(f"[{label}] CPU: {cpu:.0f} s in all; the most: "
          + ", ".join(f"{job.key} {job.cpu:.0f} s" for job in sorted(done, key=lambda job: -job.cpu)[:8]), flush=True)
    with open(os.path.join(LOGS, "jobs.json"), "w") as file:
        json.dump([{"key": job.key, "seconds": round(job.seconds, 1), "cpu": round(job.cpu, 1), "status": job.status}
                   for job in done], file, indent=0)
    slowest = sorted(done, key=lambda job: -job.seconds)[:5]
    print(f"[{label}] {len(done) - len(failed)} of {len(done)} passed in {time.monotonic() - started:.0f} s; slowest: "
          + ", ".join(f"{job.key} {job.seconds:.0f} s" for job in slowest), flush=True)
    return failed


class Background:
    """Commands run one after another beside the test pool, at a lower priority: they use the CPU
    the real-time tests leave while they wait, and yield it to them when they need it."""

    def __init__(self, steps, phases_run, failures):
        self.steps, self.phases_run, self.failures = steps, phases_run, failures
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        for name, argv in self.steps:
            log = os.path.join(LOGS, name + ".log")
            start = time.monotonic()
            with open(log, "w") as output:
                ok = subprocess.run(["nice", "-n", "10", *argv], cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL).returncode == 0
            seconds = time.monotonic() - start
            self.phases_run.append((name + " (beside the tests)", start, seconds, ok))
            text = open(log, errors="replace").read().splitlines()
            print(f"[{name}] {'ok' if ok else 'FAILED'} after {seconds:.0f} s (log: {os.path.relpath(log, ROOT)})"
                  + ("" if ok else "\n" + "\n".join(text[-40:])), flush=True)
            if not ok:
                self.failures.append(name)

    def join(self):
        self.thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", choices=["test", "check", "run"])
    parser.add_argument("configurations", nargs="*", help="for run: unit, tsan, release (make test's); debug, debug-smoke (make check's)")
    parser.add_argument("--filter", help="for run: only the tests whose names match this regular expression")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "6")),
                        help="how many test processes at once (a TSan one counts twice); TEST_WORKERS")
    arguments = parser.parse_args()
    # Ctrl-C or a stop stops the tests too (run_pool), also when started with SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    phases_run = []  # (name, start, seconds, ok)
    failures = []
    configs = configurations()
    began = time.monotonic()
    os.makedirs(LOGS, exist_ok=True)

    def phase(name, action):
        print(f"\n=== {name}", flush=True)
        start = time.monotonic()
        try:
            ok = action()
        except subprocess.CalledProcessError as error:
            ok = False
            print(f"{name}: {error}", flush=True)
        phases_run.append((name, start, time.monotonic() - start, ok))
        if not ok:
            failures.append(name)
        return ok

    def command(argv):
        return lambda: subprocess.run(argv, cwd=ROOT).returncode == 0

    def tests(*names):
        def action():
            jobs = [Job(configs[name], test) for name in names for test in configs[name].tests()
                    if not arguments.filter or re.search(arguments.filter, test)]
            failed = run_pool(jobs, arguments.workers, "+".join(names))
            failures.extend(job.key for job in failed)
            return not failed
        return action

    if arguments.suite == "run":
        phase("tests: " + ", ".join(arguments.configurations), tests(*arguments.configurations))
    elif arguments.suite == "check":
        # The inner loop: an incremental debug build, the unit tests, a few end-to-end tests.
        if phase("build: debug, with the tests", command(make("build-tests"))):
            phase("tests: unit, end-to-end smoke (debug)", tests("debug", "debug-smoke"))
    else:
        ok = phase("build: release", command(make("release")))
        ok = ok and phase("build: tsan, with the tests", command(make("build-tsan")))
        if ok:
            background = Background([
                ("check-imports", make("check-imports")),
                # The release build is the one the tests run: used as it is, never rebuilt under them.
                ("fuzz-smoke", make("fuzz-smoke", SKIP_RELEASE_BUILD=1)),
                ("check-units", make("check-units", SKIP_RELEASE_BUILD=1)),
                ("check-install", make("check-install", SKIP_RELEASE_BUILD=1)),
                ("test-deb", make("test-deb", SKIP_RELEASE_BUILD=1)),
                ("test-boot", make("test-boot", SKIP_DEB_BUILD=1)),
            ], phases_run, failures)
            phase("tests: unit (tsan), end to end (tsan, release)", tests("unit", "tsan", "release"))
            background.join()

    print("\n=== make " + arguments.suite + ": phases (start and length in seconds)")
    width = max([len(name) for name, _, _, _ in phases_run] + [5])
    for name, start, seconds, ok in sorted(phases_run, key=lambda phase: phase[1]):
        print(f"  {name:<{width}}  {start - began:6.0f}  {seconds:6.0f}  {'ok' if ok else 'FAILED'}")
    total = time.monotonic() - began
    print(f"  {'total':<{width}}  {'':6}  {total:6.0f}  ({total / 60:.1f} min)")
    if failures:
        print("\nFAILED: " + "\n        ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
