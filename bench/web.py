"""10. The web page: the CPU of recd + recd-web while recd listens on the paced device, with no
page open and with one (headless Chromium showing the page: meters and spectrogram), side by
side over the same number of seconds. The browser's own CPU is not counted (it is the
viewer's machine's); recd's and recd-web's are, as seconds per hour and as a share of one core.

usage: web.py BINDIR WORKDIR DEVICE SECONDS OUT.json
(ALSA_CONFIG_PATH and PULSE_SERVER in the environment define the paced DEVICE.)"""

import os
import re
import subprocess
import sys
import time

from lib import Recd, cpu_clock, save

bindir, workdir, device, seconds, out = sys.argv[1:6]
seconds = float(seconds)
env = dict(os.environ)
CONFIG = """\
[listen]
enabled = true
[web]
address = "127.0.0.1"
observe = "open"
"""


def start_web(recd):
    log = os.path.join(workdir, "recd-web.log")
    logfile = open(log, "w")
    web = subprocess.Popen([os.path.join(bindir, "recd-web"), "--user", "--config", recd.config, "--socket", recd.socket,
                            "--recordings-dir", recd.recordings, "--port", "0"], env=env, stdout=logfile, stderr=logfile)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"port=(\d+)", open(log).read())
        if match:
            return web, int(match.group(1))
        time.sleep(0.05)
    raise RuntimeError(f"recd-web did not start; see {log}")


def measure(pids, seconds):
    before = [cpu_clock(pid) for pid in pids]
    time.sleep(seconds)
    after = [cpu_clock(pid) for pid in pids]
    return [b - a for a, b in zip(before, after)]


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=412,915"]:
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(executable_path="/usr/bin/chromedriver"))


results = {"seconds": seconds, "device": device}
with Recd(bindir, workdir, device, CONFIG, env) as recd:
    web, port = start_web(recd)
    try:
        time.sleep(3)  # listening settles
        idle = measure([recd.pid, web.pid], seconds)
        driver = browser()
        try:
            driver.get(f"http://127.0.0.1:{port}/")
            deadline = time.monotonic() + 30
            while not driver.execute_script("return window.recdPage && recdPage.spectrum.columns > 20"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the page drew no spectrum")
                time.sleep(0.1)
            columns_before = driver.execute_script("return recdPage.spectrum.columns")
            viewed = measure([recd.pid, web.pid], seconds)
            columns = driver.execute_script("return recdPage.spectrum.columns") - columns_before
        finally:
            driver.quit()
    finally:
        web.terminate()
        web.wait(timeout=30)

per_hour = lambda s: round(s / seconds * 3600, 2)
results["no_viewer"] = {"recd_s_per_h": per_hour(idle[0]), "recd_web_s_per_h": per_hour(idle[1]),
                        "core_percent": round(sum(idle) / seconds * 100, 3)}
results["one_viewer"] = {"recd_s_per_h": per_hour(viewed[0]), "recd_web_s_per_h": per_hour(viewed[1]),
                         "core_percent": round(sum(viewed) / seconds * 100, 3), "spectrum_columns_drawn": columns}
results["viewer_costs_core_percent"] = round((sum(viewed) - sum(idle)) / seconds * 100, 3)
results["target_core_percent"] = 2.0
results["met"] = results["viewer_costs_core_percent"] <= 2.0
print(results)
save(out, results)
