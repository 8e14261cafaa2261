"""Spoken phrases with silence between them, through recd's trigger on a real-time device: the
closing check of sound-activated recording. Standalone (not a step of run.sh).

Sets up a private PulseAudio null sink, speaks PHRASES with espeak-ng into a 48 kHz stereo
timeline at known offsets over -60 dBFS noise, plays it with pacat (10 ms latency), runs recd
on the sink's monitor (ALSA `pulse` PCM) armed with a voice-band trigger, and prints each
event file's start and length against the phrase's known times.

usage: trigger_phrases.py BINDIR WORKDIR"""

import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import time
import wave

bindir, workdir = sys.argv[1:3]
os.makedirs(workdir, exist_ok=True)
RATE = 48000
PHRASES = [(4.0, "The dawn chorus starts at five."), (12.0, "A blackbird sings on the roof."),
           (21.0, "Recording ends when the sound ends.")]
LENGTH = 30.0
PREROLL, HANG = 1.0, 1.0

# The timeline: noise at -60 dBFS, each phrase at its offset.
frames = int(LENGTH * RATE)
rng = random.Random(7)
timeline = [rng.uniform(-1, 1) * 0.001 * 3 ** 0.5 * 32767 for _ in range(frames)]
spoken = []
for offset, text in PHRASES:
    raw = os.path.join(workdir, "phrase.wav")
    resampled = os.path.join(workdir, "phrase48.raw")
    subprocess.run(["espeak-ng", "-w", raw, text], check=True)
    subprocess.run(["sox", raw, "-t", "raw", "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed-integer", resampled,
                    "norm", "-6"], check=True)
    with open(resampled, "rb") as f:
        data = f.read()
    samples = struct.unpack(f"<{len(data) // 2}h", data)
    # The phrase's sound: from its first to its last sample above -40 dBFS (espeak pads with silence).
    loud = [i for i, s in enumerate(samples) if abs(s) > 328]
    start = int(offset * RATE)
    for i, s in enumerate(samples):
        if start + i < frames:
            timeline[start + i] += s
    spoken.append((offset + loud[0] / RATE, offset + loud[-1] / RATE, text))
pcm = b"".join(struct.pack("<hh", v, v) for v in (max(-32768, min(32767, int(round(x)))) for x in timeline))

# PulseAudio, private.
pulse = os.path.join(workdir, "pulse")
os.makedirs(pulse, exist_ok=True)
with open(os.path.join(pulse, "pa.conf"), "w") as f:
    f.write(f"load-module module-native-protocol-unix auth-anonymous=1 socket={pulse}/native\n"
            "load-module module-null-sink sink_name=sink rate=48000 channels=2\nset-default-source sink.monitor\n")
env = dict(os.environ, PULSE_SERVER=f"unix:{pulse}/native", HOME=pulse, XDG_RUNTIME_DIR=pulse)
server = subprocess.Popen(["pulseaudio", "-n", "-F", f"{pulse}/pa.conf", "--daemonize=no", "--exit-idle-time=-1",
                           "--system=false", f"--log-target=file:{pulse}/log"], env=env)
while not os.path.exists(f"{pulse}/native"):
    time.sleep(0.05)
alsa = os.path.join(workdir, "alsa.conf")
with open(alsa, "w") as f:
    f.write(f'pcm.phrases {{ type pulse server "unix:{pulse}/native" device "sink.monitor" }}\n')
env["ALSA_CONFIG_PATH"] = "/usr/share/alsa/alsa.conf:" + alsa
# A quiet stream keeps the sink running, as a live microphone keeps a device running: noise at
# the level of the timeline's, so that the background does not change when the phrases begin.
keepalive = subprocess.Popen("sox -q -n -t raw -r 48000 -c 2 -b 16 -e signed-integer - synth 3600 whitenoise vol 0.0017 "
                             "| pacat --rate=48000 --channels=2 --format=s16le --latency-msec=10", shell=True, env=env)

recordings = os.path.join(workdir, "recordings")
shutil.rmtree(recordings, ignore_errors=True)
sock = os.path.join(workdir, "recd.sock")
with open(os.path.join(workdir, "recd.toml"), "w") as f:
    f.write('[recording]\nformat = "flac"\n')
recd = subprocess.Popen([f"{bindir}/recd", "--user", "--config", f"{workdir}/recd.toml", "--socket", sock,
                         "--recordings-dir", recordings, "--device", "phrases"], env=env,
                        stderr=open(os.path.join(workdir, "recd.log"), "w"))
while True:
    try:
        client = socket.socket(socket.AF_UNIX)
        client.connect(sock)
        break
    except OSError:
        time.sleep(0.05)
reader = client.makefile("r")


def call(method, params=None, id=[0]):
    id[0] += 1
    client.sendall((json.dumps({"jsonrpc": "2.0", "id": id[0], "method": method, "params": params or {}}) + "\n").encode())
    while True:
        message = json.loads(reader.readline())
        if message.get("id") == id[0]:
            return message


call("subscribe", {"topics": ["trigger"]})
trigger = {"highPass": 300, "lowPass": 3400, "aboveFloor": 15, "attack": 0.03, "hang": HANG, "preRoll": PREROLL,
           "minimumLength": 0.3}
print("start:", json.dumps(call("start", {"name": "phrases", "trigger": trigger})["result"]["trigger"]))
time.sleep(3)  # a floor first (the trigger needs a second of it)
player = subprocess.Popen(["pacat", "--rate=48000", "--channels=2", "--format=s16le", "--latency-msec=10"],
                          stdin=subprocess.PIPE, env=env)
t0 = time.time()
player.stdin.write(pcm)
player.stdin.close()
events = []
deadline = time.time() + LENGTH + 10
client.settimeout(1)
while time.time() < deadline and len([e for e in events if e["kind"] == "closed"]) < len(PHRASES):
    try:
        line = reader.readline()
    except (socket.timeout, TimeoutError):
        continue
    message = json.loads(line)
    if message.get("method") == "changed" and message["params"]["topic"] == "trigger":
        events.append(message["params"]["value"])
call("stop")
status = call("status")


def seconds(text):
    from datetime import datetime
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


print(f"played from {t0:.3f} (pacat latency 10 ms not subtracted)")
print("phrase                                   sound (s in the timeline)   event file: first frame, onset (s)   length   sound+pre-roll+hang")
closed = [e for e in events if e["kind"] == "closed"]
for (begin, end, text), event in zip(spoken, closed):
    start = seconds(event["start"]) - t0
    onset = seconds(event["onset"]) - t0
    expected = PREROLL + (end - begin) + HANG
    print(f"{text:40} {begin:6.2f}–{end:6.2f}                {start:6.2f}, {onset:6.2f}            {event['duration']:6.2f}   {expected:6.2f}  {os.path.relpath(event['path'], recordings)}")
print("events:", [(e["kind"], e["event"], e.get("reason")) for e in events])
recd.terminate()
recd.wait()
keepalive.terminate()
server.terminate()
subprocess.run("pkill -f 'pacat --rate=48000'", shell=True)
