"""13. The live input as RTSP (issue 52) on the paced PulseAudio device (48 kHz stereo 16-bit):
what serving it costs with 0, 1 and 8 players, L16 and Opus, recd + recd-rtsp against VLC's
RTSP server reading the same device (`cvlc alsa://DEVICE --sout '#transcode{…}:rtp{sdp=rtsp://…}'`,
VLC 3's own RTSP server; Debian's VLC has no live555, which is its client, not its server).

Each case: the server up and steady, N players (`ffmpeg -rtsp_transport tcp -i URL -f s16le`
to a pipe whose bytes are counted, so a player that gets nothing shows; `udp` for VLC, whose
RTSP server answers a TCP SETUP 461), then the servers' CPU
over SECONDS (the players' own CPU is not counted: it is the same for both). recd runs
listening only (no recording), as a station that only streams would; recd-rtsp holds no tap
while nobody plays. VLC transcodes from its start, whether anyone plays or not.

usage: rtsp.py BINDIR WORKDIR DEVICE SECONDS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import os
import re
import socket
import subprocess
import sys
import threading
import time

from lib import Recd, cpu_clock, save, terminate

bindir, workdir, device, seconds, out = sys.argv[1:6]
seconds = float(seconds)
env = dict(os.environ)
# BENCH_RTSP_CLIENTS and BENCH_RTSP_CODECS narrow a long run to the cases in question.
CLIENTS = [int(count) for count in os.environ.get("BENCH_RTSP_CLIENTS", "0 1 8").split()]
CODECS = os.environ.get("BENCH_RTSP_CODECS", "l16 opus").split()
OPUS_BITRATE = 64000


class Player(threading.Thread):
    """One RTSP client: ffmpeg decoding to raw PCM on a pipe, its bytes counted."""

    def __init__(self, url, transport):
        super().__init__(daemon=True)
        self.proc = subprocess.Popen(["ffmpeg", "-loglevel", "error", "-rtsp_transport", transport, "-i", url,
                                      "-f", "s16le", "-ac", "2", "-ar", "48000", "pipe:1"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.bytes = 0
        self.start()

    def run(self):
        while True:
            data = self.proc.stdout.read(65536)
            if not data:
                return
            self.bytes += len(data)

    def stop(self):
        terminate(self.proc, timeout=10)
        self.join(5)


def switches(pid):
    """Context switches of every thread of `pid` so far (voluntary: it waited and was woken;
    involuntary: preempted): what waking a thread per chunk costs shows here, where CPU time on
    a 2-core VM moves by a percent of a core between runs."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as status:
                total += sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
        except OSError:
            pass  # a thread that ended
    return total


def measure(pids, url, clients, transport="tcp"):
    """The servers' CPU (percent of one core) over `seconds` with `clients` players, and the
    players' received rate (bytes of decoded PCM per second, 192000 expected)."""
    players = [Player(url, transport) for _ in range(clients)]
    deadline = time.monotonic() + 30
    while any(player.bytes < 192000 for player in players) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # steady: encoders and queues warmed up
    received = [player.bytes for player in players]
    before = {name: cpu_clock(pid) for name, pid in pids.items()}
    switched = {name: switches(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    cpu = {name: (cpu_clock(pid) - before[name]) / wall * 100 for name, pid in pids.items()}
    wakeups = {name: (switches(pid) - switched[name]) / wall for name, pid in pids.items()}
    rates = [(player.bytes - before_bytes) / wall for player, before_bytes in zip(players, received)]
    for player in players:
        player.stop()
    if rates and min(rates) < 192000 * 0.9:
        raise RuntimeError(f"a player of {url} got {min(rates):.0f} bytes/s of 192000: the figures would be a server that serves nothing")
    return {"clients": clients, "cpu_percent": cpu, "total_percent": sum(cpu.values()),
            "switches_per_s": wakeups, "total_switches_per_s": sum(wakeups.values()),
            "player_bytes_per_s": {"min": min(rates), "max": max(rates)} if rates else None}


def recd_cases():
    cases = []
    config = "[capture]\nperiod_time = 0.01\n[recording]\nsample_rate = 48000\nchannels = 2\n"
    with Recd(bindir, workdir, device, config, env, name="recd-rtsp-bench") as recd:
        recd.client().call("listen", {"preRoll": 0})
        rtsp_config = os.path.join(workdir, "rtsp-bench.toml")
        with open(rtsp_config, "w") as f:
            f.write(f'[rtsp]\naddress = "127.0.0.1"\naccess = "open"\nopus_bitrate = {OPUS_BITRATE}\n')
        log = open(os.path.join(workdir, "recd-rtsp-bench.log"), "w+")
        rtsp = subprocess.Popen([os.path.join(bindir, "recd-rtsp"), "--user", "--config", rtsp_config, "--socket", recd.socket,
                                 "--port", "0"], env=env, stdout=log, stderr=log)
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline:
            log.seek(0)
            found = re.search(r":(\d+)/live", log.read())
            port = int(found.group(1)) if found else None
            time.sleep(0.05)
        if port is None:
            raise RuntimeError("recd-rtsp did not start")
        try:
            for codec in CODECS:
                for clients in CLIENTS:
                    url = f"rtsp://127.0.0.1:{port}/live/{codec}"
                    case = measure({"recd": recd.pid, "recd-rtsp": rtsp.pid}, url, clients)
                    case.update(server="recd + recd-rtsp", codec=codec)
                    cases.append(case)
                    print(case, flush=True)
                    time.sleep(7)  # recd-rtsp closes the tap 5 s after the last player
            taps = recd.client().call("status").get("taps")
            if taps:
                raise RuntimeError(f"a tap is still open with nobody playing: {taps}")
        finally:
            terminate(rtsp, timeout=10)
            log.close()
    return cases


def vlc_cases():
    """VLC 3 as the station's streamer: the same device through ALSA, its own RTSP server.
    VLC refuses to run as root: as nobody, with the PulseAudio socket reachable."""
    cases = []
    sout = {"l16": "#transcode{acodec=s16b,channels=2,samplerate=48000}",
            "opus": f"#transcode{{acodec=opus,ab={OPUS_BITRATE // 1000},channels=2,samplerate=48000}}"}
    home = os.path.join(workdir, "vlc-home")
    os.makedirs(home, exist_ok=True)
    os.chmod(home, 0o777)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    if as_nobody:
        # The PulseAudio socket (PULSE_SERVER, anonymous) is in the run's private directory.
        socket_path = env["PULSE_SERVER"].removeprefix("unix:")
        directory = os.path.dirname(socket_path)
        while directory.startswith(workdir):
            os.chmod(directory, os.stat(directory).st_mode | 0o011)
            directory = os.path.dirname(directory)
    for codec in CODECS:
        with socket.socket() as probe:  # a free port: a VLC left over elsewhere must not answer
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = open(os.path.join(workdir, f"vlc-{codec}.log"), "w")
        vlc = subprocess.Popen(as_nobody + ["cvlc", "-v", "--intf", "dummy", f"alsa://{device}",
                                            "--sout", f"{sout[codec]}:rtp{{sdp=rtsp://127.0.0.1:{port}/live}}",
                                            "--sout-keep"],
                               env=dict(env, HOME=home), stdout=log, stderr=log)
        time.sleep(3)
        try:
            if vlc.poll() is not None:
                raise RuntimeError(f"cvlc exited with {vlc.returncode}")
            for clients in CLIENTS:
                # VLC's RTSP server sends RTP over UDP only (a TCP SETUP is answered 461).
                case = measure({"vlc": vlc.pid}, f"rtsp://127.0.0.1:{port}/live", clients, transport="udp")
                case.update(server="VLC", codec=codec)
                cases.append(case)
                print(case, flush=True)
        finally:
            terminate(vlc, timeout=10)
            log.close()
    return cases


version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "vlc-bin"], capture_output=True, text=True).stdout
save(out, {"seconds": seconds, "device": device, "opus_bitrate": OPUS_BITRATE, "vlc_version": version,
           "cases": recd_cases() + vlc_cases()})
