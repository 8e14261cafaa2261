"""Issue 49, item 6: the subscribers load alone, sampled closely, to see WHAT grows.

One recd on its own paced PulseAudio device (soak.py's PulseServer: a null sink with a tone), a
FLAC 48 kHz stereo recording in 30 s segments, 20 clients subscribed to state, currentTime, levels
and recording at 20 Hz (soak.py's subscribers_worker). Optional, as soak.py's subscribers load:
--listen (listening with a 10 s pre-roll), --taps (soak.py's two audio taps), --loss-minutes N
(the PulseAudio server stopped for 10 s every N minutes).

Every --sample-seconds (15) it writes one JSON line to OUT/samples.jsonl with:
  status     VmRSS, RssAnon, RssFile, RssShmem, VmHWM (kB), Threads   (/proc/PID/status)
  rollup     /proc/PID/smaps_rollup's kB fields
  mappings   Rss (kB) of each mapped file summed over its mappings, split by permissions
             (recd's own r-xp text, r--p rodata, ...), and [heap], [stack], anonymous, memfd
  threads    every thread: tid, name, start time (s after the daemon's start), CPU ticks
  fds        open descriptors
so that a thread's appearance can be matched to what the daemon did then, and the file-backed
growth split into recd's own code and the libraries'.

usage: soak_subscribers.py BINDIR --minutes 25 --out DIR [--subscribers N] [--segment-seconds S] [--clock WORD] [--listen] [--taps] [--loss-minutes N] [--maps-every N]
       soak_subscribers.py --report DIR     (summary and, with Debian's matplotlib (/usr/bin/python3),
                                             DIR/subscribers.png; DIR/samples.jsonl may be gzipped)

Reading smaps holds recd's mmap_lock while the kernel walks every mapping (libpulse's 64 MiB
memfd pools among them): --maps-every 0 reads it only at the start and the end.

--clock says what the kernel tells recd of the system clock (Tests/reference/clock_discipline.c,
an LD_PRELOAD of adjtimex, as EndToEndTests.ClockTests use it): `synchronized` (the default: a
station once NTP has spoken), `unsynchronized` (an offline station without a real-time clock), or
`kernel` (whatever this machine's kernel says; a container's clock is often unsynchronized). While
the clock is unsynchronized, recd keeps every closed file in memory until it can be re-dated
(issue 50, `FileRedater.pendingLimit` files at most): memory that grows with every segment by
design, so a soak of the steady state must not measure it unawares. Each sample records
`status.clock` (synchronized, filesToRedate).
"""

import argparse
import collections
import gzip
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import Recd, clock_environment  # noqa: E402
from soak import PulseServer, subscribers_worker, tap_worker, TAP_FORMATS, RATE, SEGMENT_SECONDS  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message):
    print(time.strftime("%H:%M:%S ") + message, flush=True)


def proc_start_seconds(pid, tid=None):
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); starttime is field 22, utime 14, stime 15
    return int(fields[19]) / CLK_TCK, int(fields[11]) + int(fields[12])


def detailed_sample(pid, binary, maps=True):
    out = {"status": {}, "rollup": {}, "mappings": {}, "threads": []}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out["status"][key] = int(value.split()[0])
            elif key == "Threads":
                out["status"][key] = int(value)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    daemon_start, _ = proc_start_seconds(pid)
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            start, ticks = proc_start_seconds(pid, tid)
        except OSError:
            continue
        out["threads"].append({"tid": int(tid), "name": name, "start": round(start - daemon_start, 2),
                               "ticks": ticks})
    if not maps:
        return out
    # smaps and smaps_rollup hold recd's mmap_lock while they walk every mapping: a thread of
    # recd that maps, unmaps or faults meanwhile waits (seen: libdispatch starts workers then).
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out["rollup"][parts[0].rstrip(":")] = int(parts[1])
    mappings = collections.Counter()
    current = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                perms = parts[1]
                name = parts[5] if len(parts) > 5 else "[anon]"
                if name == binary:
                    name = "recd"
                elif name.startswith("/memfd:"):
                    name = "memfd:" + name[7:].split()[0]
                elif name.startswith("/"):
                    name = os.path.basename(name)
                current = f"{name} {perms}"
            elif parts[0] == "Rss:" and current:
                mappings[current] += int(parts[1])
    out["mappings"] = {k: v for k, v in sorted(mappings.items()) if v}
    return out


def run(args):
    bindir = os.path.abspath(args.bindir)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="recd-soak-subscribers.")
    config = "[metering]\nlevels_interval = 0.05\ntime_interval = 0.05\n"
    if args.listen:
        config += "\n[listen]\nenabled = true\npre_roll = \"10 s\"\n"
    meta = {"bindir": bindir, "recdVersion": os.popen(f"{bindir}/recd --version").read().strip(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "minutes": args.minutes,
            "sampleSeconds": args.sample_seconds, "listen": args.listen, "taps": args.taps,
            "lossMinutes": args.loss_minutes, "clock": args.clock, "subscribers": args.subscribers,
            "segmentSeconds": args.segment_seconds, "mapsEvery": args.maps_every, "config": config, "loadavgAtStart": os.getloadavg(),
            "cores": os.cpu_count()}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = PulseServer(work, "subs")
    clock_env = clock_environment(args.clock, work)
    alsa_conf = os.path.join(work, "alsa.conf")
    with open(alsa_conf, "w") as f:
        f.write(f'pcm.soak_subs {{ type pulse  server "unix:{server.socket}"  device "{server.sink}.monitor" }}\n')
    daemon = None
    workers = []
    events = []
    try:
        server.start()
        env = dict(os.environ, ALSA_CONFIG_PATH=f"/usr/share/alsa/alsa.conf:{alsa_conf}",
                   PULSE_SERVER=f"unix:{server.socket}", **clock_env)
        daemon = Recd(bindir, work, "soak_subs", config, env, name="recd-subs").__enter__()
        pid = daemon.pid
        binary = os.path.realpath(os.path.join(bindir, "recd"))
        meta["pid"] = pid
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(meta, f, indent=1)
        samples = open(os.path.join(out, "samples.jsonl"), "a")
        t0 = time.monotonic()

        taken = [0]

        def take(kind="sample"):
            record = {"t": round(time.monotonic() - t0, 1), "wall": time.time(), "kind": kind,
                      "loadavg": os.getloadavg()[0]}
            maps = kind != "sample" or (args.maps_every > 0 and taken[0] % args.maps_every == 0)
            taken[0] += 1
            record.update(detailed_sample(pid, binary, maps))
            clock = control.call("status").get("clock") or {}
            record["clock"] = {"synchronized": clock.get("synchronized"), "filesToRedate": clock.get("filesToRedate")}
            samples.write(json.dumps(record) + "\n")
            samples.flush()

        control = daemon.client(timeout=120)
        take("idle")  # before any other client
        ctx = multiprocessing.get_context("fork")
        if args.subscribers:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=subscribers_worker,
                               args=(daemon.socket, args.subscribers, ["state", "currentTime", "levels", "recording"], 0.05, child),
                               daemon=True)
            proc.start()
            workers.append(("subscribers", proc, parent))
        if args.taps:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=tap_worker, args=(daemon.socket, TAP_FORMATS, child), daemon=True)
            proc.start()
            workers.append(("taps", proc, parent))
        control.call("start", {"name": "subscribers", "format": "flac", "sampleRate": RATE, "channels": 2,
                               "segmentLength": args.segment_seconds})
        events.append({"t": round(time.monotonic() - t0, 1), "event": "recording started"})
        end = t0 + args.minutes * 60
        next_sample = time.monotonic()
        next_loss = t0 + args.loss_minutes * 60 if args.loss_minutes else float("inf")
        log(f"recd {pid}: {args.minutes} min into {out}")
        while not stop.is_set():
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_loss and now + 10 < end:
                next_loss += args.loss_minutes * 60
                events.append({"t": round(now - t0, 1), "event": "device lost"})
                log("device lost for 10 s")
                server.stop()
                stop.wait(10)
                server.start()
                events.append({"t": round(time.monotonic() - t0, 1), "event": "device back"})
                continue
            if now >= next_sample:
                if daemon.proc.poll() is not None:
                    raise RuntimeError(f"recd exited; see {daemon.log}")
                take()
                next_sample += args.sample_seconds
            stop.wait(max(0.0, min(next_sample, end, next_loss) - time.monotonic()))
        result = control.call("stop")
        events.append({"t": round(time.monotonic() - t0, 1), "event": "recording stopped",
                       "frames": result.get("frames")})
        for name, proc, pipe in workers:
            pipe.send("stop")
            events.append({"event": f"{name} worker", "stats": pipe.recv() if pipe.poll(30) else None})
            proc.join(10)
        time.sleep(2)
        take("final")
        samples.close()
        control.close()
    finally:
        for _, proc, _ in workers:
            if proc.is_alive():
                proc.terminate()
        if daemon:
            daemon.stop()
            shutil.copy(daemon.log, os.path.join(out, "recd.log"))
        server.stop()
        meta["events"] = events
        meta["loadavgAtEnd"] = os.getloadavg()
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(meta, f, indent=1)
        shutil.rmtree(work, ignore_errors=True)
    report(out, args.warmup)


def slope(points):
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def report(out, warmup_minutes):
    path = os.path.join(out, "samples.jsonl")
    opener = (lambda: gzip.open(path + ".gz", "rt")) if not os.path.exists(path) else (lambda: open(path))
    with opener() as f:
        rows = [json.loads(line) for line in f]
    busy = [r for r in rows if r["kind"] == "sample"]
    after = [r for r in busy if r["t"] >= warmup_minutes * 60]
    summary = {"warmupMinutes": warmup_minutes, "samples": len(busy), "samplesAfterWarmup": len(after)}

    figures = {
        "VmRSS": lambda r: r["status"]["VmRSS"],
        "RssAnon": lambda r: r["status"]["RssAnon"],
        "RssFile": lambda r: r["status"]["RssFile"],
        "RssShmem": lambda r: r["status"]["RssShmem"],
        "recdText": lambda r: r["mappings"].get("recd r-xp", 0),
        "recdAll": lambda r: sum(v for k, v in r["mappings"].items() if k.startswith("recd ")),
        "Threads": lambda r: r["status"]["Threads"],
    }
    for name, get in figures.items():
        # recd's own mappings come from smaps, read only every --maps-every samples.
        mapped = name.startswith("recd")
        some = [r for r in busy if r["mappings"]] if mapped else busy
        later = [r for r in after if r["mappings"]] if mapped else after
        if not some:
            continue
        values = [get(r) for r in some]
        entry = {"first": values[0], "atWarmup": get(later[0]) if later else None, "last": values[-1],
                 "min": min(values), "max": max(values), "samples": len(values)}
        fit = slope([(r["t"] / 3600, get(r)) for r in later])
        if name == "Threads":
            entry["perHourAfterWarmup"] = round(fit, 3)
        else:
            entry["MiBPerHourAfterWarmup"] = round(fit / 1024, 3)
        summary[name] = entry
    # Threads by name over time, and the threads born after the first sample.
    first_tids = {t["tid"] for t in busy[0]["threads"]}
    born = {}
    gone = {}
    previous = {t["tid"]: t for t in busy[0]["threads"]}
    for r in busy[1:] + [x for x in rows if x["kind"] == "final"]:
        now = {t["tid"]: t for t in r["threads"]}
        for tid, t in now.items():
            if tid not in previous and tid not in born:
                born[tid] = {"name": t["name"], "start": t["start"], "seenAt": r["t"]}
        for tid, t in previous.items():
            if tid not in now and tid not in gone:
                gone[tid] = {"name": t["name"], "goneBy": r["t"]}
        previous = now
    summary["threadsAtFirstSample"] = sorted(collections.Counter(t["name"] for t in busy[0]["threads"]).items())
    summary["threadsAtLastSample"] = sorted(collections.Counter(t["name"] for t in busy[-1]["threads"]).items())
    summary["threadsBornAfterFirstSample"] = born
    summary["threadsGone"] = gone
    summary["firstSampleTids"] = sorted(first_tids)
    # Mappings that grew the most between the first and last sample.
    with_maps = [r for r in rows if r["mappings"] and r["kind"] != "idle"]
    a, b = with_maps[0]["mappings"], with_maps[-1]["mappings"]
    delta = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
    summary["mappingGrowthKiB"] = dict(sorted(((k, v) for k, v in delta.items() if v), key=lambda kv: -abs(kv[1]))[:15])
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for name in [n for n in figures if n in summary]:
        e = summary[name]
        rate = e.get("MiBPerHourAfterWarmup", e.get("perHourAfterWarmup"))
        print(f"{name:9} first {e['first']} at warm-up {e['atWarmup']} last {e['last']} "
              f"(min {e['min']} max {e['max']}); slope after warm-up {rate}")
    print("threads born after the first sample:",
          ", ".join(f"{v['name']}@{v['start']:.0f}s" for v in born.values()) or "none")
    print("threads gone:", ", ".join(f"{v['name']} by {v['goneBy']:.0f}s" for v in gone.values()) or "none")
    plot(out, rows, warmup_minutes)


def plot(out, rows, warmup_minutes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
        return
    busy = [r for r in rows if r["kind"] == "sample"]
    minutes = [r["t"] / 60 for r in busy]
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(8, 8), sharex=True, height_ratios=[2, 1.3, 1])
    top.plot(minutes, [r["status"]["VmRSS"] / 1024 for r in busy], label="VmRSS")
    top.plot(minutes, [r["status"]["RssFile"] / 1024 for r in busy], label="RssFile")
    top.set_ylabel("MiB")
    top.legend(fontsize=7)
    middle.plot(minutes, [r["status"]["RssAnon"] / 1024 for r in busy], label="RssAnon")
    mapped = [r for r in busy if r["mappings"]]
    middle.plot([r["t"] / 60 for r in mapped], [r["mappings"].get("recd r-xp", 0) / 1024 for r in mapped],
                label="recd's text (r-xp) Rss", marker="." if len(mapped) < len(busy) else None)
    middle.plot(minutes, [r["status"]["RssShmem"] / 1024 for r in busy], label="RssShmem")
    middle.set_ylabel("MiB")
    middle.legend(fontsize=7)
    def count(r, match):
        return sum(1 for t in r["threads"] if match(t["name"]))
    bottom.plot(minutes, [r["status"]["Threads"] for r in busy], label="all threads")
    bottom.plot(minutes, [count(r, lambda n: n == "-qos.overcommit") for r in busy],
                label="libdispatch overcommit pool (-qos.overcommit, with the manager)")
    bottom.plot(minutes, [count(r, lambda n: n == "oot.default-qos") for r in busy], label="global pool (oot.default-qos)")
    bottom.plot(minutes, [count(r, lambda n: n.startswith("recd-") or n == "threaded-ml") for r in busy],
                label="recd-capture/-writer/-tap, threaded-ml")
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel("threads")
    bottom.set_xlabel("minutes (grey: end of warm-up)")
    bottom.legend(fontsize=6, loc="center right")
    for axis in (top, middle, bottom):
        axis.axvline(warmup_minutes, color="grey", linewidth=0.8)
        axis.grid(alpha=0.3)
    events = json.load(open(os.path.join(out, "run.json"))).get("events", [])
    for e in events:
        if e.get("event") == "device lost":
            for axis in (top, middle, bottom):
                axis.axvline(e["t"] / 60, color="red", linewidth=0.6, linestyle=":")
    try:
        with open(os.path.join(out, "run.json")) as f:
            meta = json.load(f)
    except OSError:
        meta = {}
    subscribers, seconds = meta.get("subscribers", 20), meta.get("segmentSeconds", 30)
    top.set_title(f"recd, {subscribers} subscribers at 20 Hz + FLAC in {seconds:g} s segments, "
                  f"clock {meta.get('clock', 'kernel')} (red: device lost)", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "subscribers.png"), dpi=72)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bindir", nargs="?")
    parser.add_argument("--minutes", type=float, default=25)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--sample-seconds", type=float, default=15)
    parser.add_argument("--out")
    parser.add_argument("--listen", action="store_true")
    parser.add_argument("--taps", action="store_true")
    parser.add_argument("--loss-minutes", type=float, default=0)
    parser.add_argument("--maps-every", type=int, default=1,
                        help="read smaps and smaps_rollup every N samples (0: only the first and last)")
    parser.add_argument("--subscribers", type=int, default=20, help="clients subscribed at 20 Hz (0: none)")
    parser.add_argument("--segment-seconds", type=float, default=SEGMENT_SECONDS,
                        help="segment length: 1 puts 30 hours of 30 s segment rollovers into one hour")
    parser.add_argument("--clock", choices=["synchronized", "unsynchronized", "kernel"], default="synchronized",
                        help="what the kernel tells recd of the system clock (see above)")
    parser.add_argument("--report", metavar="DIR")
    args = parser.parse_args()
    if args.report:
        report(args.report, args.warmup)
        return
    if not args.bindir or not args.out:
        parser.error("BINDIR and --out are required")
    run(args)


if __name__ == "__main__":
    main()
