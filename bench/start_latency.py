"""5. Start latency on the paced PulseAudio device: from sending `start` to the first frame
captured, recd against a plain ALSA client (first_frame.c) on the same device.

recd's first frame is estimated from the first `changed` notification with currentTime > 0:
its timestamp minus its value is when the file's first frame was captured (had every frame
been delivered at once). recd publishes currentTime every 5 ms here, so the estimate is close.

usage: start_latency.py BINDIR WORKDIR DEVICE FIRST_FRAME_BIN RUNS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import json
import os
import subprocess
import sys
import time

from lib import Recd, save, summary

bindir, workdir, device, first_frame, runs, out = sys.argv[1:7]
runs = int(runs)
env = dict(os.environ)

CONFIG = """\
[metering]
time_interval = 0.005
"""


def recd_once(recd, index):
    client = recd.client()
    try:
        client.call("subscribe", {"topics": ["state", "currentTime"], "interval": 0.01})
        client.notifications.clear()
        t_send = time.time()
        rid = client.send("start", {"name": f"start-{index}", "format": "wav", "duration": 0.5})
        client.wait_response(rid)
        t_reply = time.time()
        first = None
        while True:
            note = client.next_notification()
            if first is None and note["topic"] == "currentTime" and note["value"] > 0:
                first = note
            if note["topic"] == "state" and note["value"]["name"] in ("finished", "failed"):
                final = note["value"]
                break
        if final["name"] != "finished":
            raise RuntimeError(f"recording failed: {final}")
        os.unlink(final["recording"]["path"])
        frame = first["timestamp"] - first["value"]
        return {"reply_ms": (t_reply - t_send) * 1000, "first_frame_ms": (frame - t_send) * 1000,
                "first_notification_ms": (first["timestamp"] - t_send) * 1000, "first_value_ms": first["value"] * 1000}
    finally:
        client.close()


def plain_alsa(count):
    result = subprocess.run([first_frame, device, str(count), "10000", "500000"], env=env,
                            capture_output=True, text=True, check=True)
    return [json.loads(line) for line in result.stdout.splitlines()]


results = {"runs": runs}
with Recd(bindir, workdir, device, CONFIG, env, name="recd-start") as recd:
    recd_once(recd, "warmup")
    plain_alsa(1)
    recd_runs, alsa_runs = [], []
    # Alternate so that both see the same load.
    for index in range(runs):
        recd_runs.append(recd_once(recd, index))
        alsa_runs.extend(plain_alsa(1))
        time.sleep(0.2)
    with open(recd.log) as f:
        log_tail = [line.rstrip() for line in f if "recording" in line][-4:]

results["recd"] = {key: summary([r[key] for r in recd_runs]) for key in recd_runs[0]}
results["alsa"] = {key: summary([r[key] for r in alsa_runs]) for key in ("open", "started", "read", "first")}
results["alsa_period_frames"] = alsa_runs[0]["period"]
results["log_tail"] = log_tail
save(out, results)
