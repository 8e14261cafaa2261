#!/usr/bin/python3
"""Drives recd-web's page in a real browser (Selenium: headless Chromium, or WebKitGTK under
Xvfb; Marionette, Mozilla's own protocol, for headless Firefox: Debian has no geckodriver) against a real recd on the paced PulseAudio device, whose sink plays a 440 Hz tone at
-12 dBFS peak. Prints one JSON object of what it measured; exits 1 with the reason on the first
check that fails. WebTests (Tests/EndToEndTests/WebTests.swift) starts the daemons and reads it.

    browser_check.py --browser chromium|webkit|firefox --url http://127.0.0.1:PORT --token TOKEN
                     --pulse-server unix:/…/native --recordings DIR --screenshots DIR

The token grants listen and control. The recd.toml behind it has [trigger] with
high_pass = 2000 (the tone is below the band) and threshold = -40, hang = 0.5, so that a
3 kHz burst is one event.
"""
import argparse
import base64
import json
import math
import os
import struct
import subprocess
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By

RESULT = {}


def fail(message):
    RESULT["failure"] = message
    print(json.dumps(RESULT))
    sys.exit(1)


def run_script(driver, script, what="a script"):
    """execute_script, saying which step failed; WebKitWebDriver now and then answers "Could
    not parse script result" for a script that ran (seen twice in some forty runs): asked again."""
    for attempt in range(3):
        try:
            return driver.execute_script(script)
        except WebDriverException as error:
            if "Could not parse script result" not in (error.msg or "") or attempt == 2:
                fail(f"{what}: {error.msg}")
            time.sleep(0.1)


def wait_for(driver, script, timeout, what, explain=None):
    """Polls a JS expression until it is truthy; its value and the seconds it took. `explain`,
    a JS expression of the parts, is shown when it times out."""
    start = time.monotonic()
    while True:
        value = run_script(driver, "return " + script, what)
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            parts = f"; {explain} is {run_script(driver, 'return ' + explain, what)!r}" if explain else ""
            fail(f"{what}: not within {timeout} s ({script} is {value!r}{parts})")
        time.sleep(0.02)


def browser_failures(error):
    """Fails with what a browser error says: Selenium's, Marionette's own, or a lost connection
    (OSError); anything else is raised again."""
    if isinstance(error, WebDriverException):
        fail(f"the browser: {error.msg}")
    if type(error).__module__.startswith("marionette_driver") or isinstance(error, OSError):
        fail(f"the browser: {error}")
    raise error


def pactl(server, *arguments):
    environment = dict(os.environ, PULSE_SERVER=server)
    return subprocess.run(["pactl", *arguments], env=environment, check=True, capture_output=True, text=True).stdout.strip()


class Firefox:
    """Firefox through Marionette, with the few calls of Selenium's this script makes."""

    def __init__(self, width, height):
        from marionette_driver.marionette import Marionette
        # Every host but this one goes to a proxy that is not there (localhost never does).
        prefs = {"media.autoplay.default": 0, "network.proxy.type": 1, "network.proxy.http": "127.0.0.1",
                 "network.proxy.http_port": 9, "network.proxy.ssl": "127.0.0.1", "network.proxy.ssl_port": 9}
        # Its own instance: without this a second Firefox hands its window to one already
        # running (another test's) and exits.
        os.environ["MOZ_NO_REMOTE"] = "1"
        self.client = Marionette(bin="/usr/bin/firefox-esr", headless=True, prefs=prefs)
        self.client.start_session()
        self.set_window_size(width, height)

    def get(self, url):
        self.client.navigate(url)

    def execute_script(self, script):
        # In the page's own scope (no sandbox): the page's globals, and a promise is awaited.
        return self.client.execute_script(script, sandbox=None, new_sandbox=False)

    def find_element(self, strategy, selector):
        return self.client.find_element(strategy, selector)

    def find_elements(self, strategy, selector):
        return self.client.find_elements(strategy, selector)

    def save_screenshot(self, path):
        with open(path, "wb") as file:
            file.write(self.client.screenshot(format="binary"))

    def set_window_size(self, width, height):
        self.client.set_window_rect(width=width, height=height)

    def quit(self):
        try:
            self.client.delete_session()
        finally:
            self.client.cleanup()


def open_browser(name, width, height, dark=False):
    if name == "firefox":
        return Firefox(width, height)
    if name == "chromium":
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--autoplay-policy=no-user-gesture-required",
                         f"--window-size={width},{height}", "--no-first-run", "--disable-background-networking",
                         # Nothing but the station: every other host fails to resolve.
                         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]:
            options.add_argument(argument)
        driver = webdriver.Chrome(options=options, service=ChromeService(executable_path="/usr/bin/chromedriver"))
    else:
        options = webdriver.WebKitGTKOptions()
        # Debian's WebKitGTK browser for automation (webkit2gtk-driver drives it; run under Xvfb).
        options.binary_location = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
        options.add_argument("--automation")
        if dark:
            options.add_argument("--dark-mode")
        driver = webdriver.WebKitGTK(executable_path="/usr/bin/WebKitWebDriver", options=options)
        driver.set_window_size(width, height)
    return driver


def spectrum_threads(pid):
    """recd's spectrum threads: one while someone watches a spectrum, none otherwise."""
    names = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            pass
    return names.count("recd-spectrum")


def label_row(driver, hz):
    """The canvas row (a float: rows are 1 apart) that the kHz ruler's label for `hz` points
    at, from where the browser laid the label out beside the canvas; None if there is none."""
    return run_script(driver, f"""
        const canvas = document.getElementById('spectrogram');
        const label = document.querySelector('#spectrum-axis span[data-hz="{hz}"]');
        if (!label) return null;
        const box = canvas.getBoundingClientRect(), at = label.getBoundingClientRect();
        return ((at.top + at.height / 2) - box.top) * canvas.height / box.height;""", f"the {hz} Hz label")


def brightest(rows):
    """The middle of the brightest rows (a loud tone's neighbouring bins are as white as its own:
    the scale ends at -20 dBFS) as a row coordinate (row r spans r to r + 1), and that brightness."""
    most = max(rows)
    loudest = [row for row, value in enumerate(rows) if value >= most - 10]
    return (min(loudest) + max(loudest) + 1) / 2, most


def brightest_row(driver, height, below):
    """The brightest rows' middle in the spectrogram's newest column above row `below` (the
    440 Hz tone is under it), and their brightness."""
    return brightest(canvas_column(driver, "spectrogram", -1)[:below])


def canvas_column(driver, element, x):
    """The brightness (r+g+b) of each row of column x of a canvas, top row first."""
    return run_script(driver, f"""
        const canvas = document.getElementById('{element}');
        const data = canvas.getContext('2d').getImageData({x} < 0 ? canvas.width + {x} : {x}, 0, 1, canvas.height).data;
        const rows = [];
        for (let i = 0; i < data.length; i += 4) rows.push(data[i] + data[i + 1] + data[i + 2]);
        return rows;""")


# The contrast of every text on the page against what is behind it, from the rendered colours
# (WCAG 2's relative luminance; AA: 4.5, 3 for large text). Disabled controls are exempt.
CONTRAST_SCRIPT = """
const channels = (text) => { const m = text.match(/rgba?\\(([^)]+)\\)/); if (!m) return [0, 0, 0, 0];
  const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
const luminance = (c) => { const l = c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2]; };
const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
const behind = (element) => { const layers = [];
  for (let e = element; e; e = e.parentElement) { const c = channels(getComputedStyle(e).backgroundColor); if (c[3] > 0) layers.push(c); if (c[3] >= 1) break; }
  let colour = [255, 255, 255, 1]; for (const layer of layers.reverse()) colour = over(layer, colour); return colour; };
const failures = []; let checked = 0;
for (const element of document.querySelectorAll('body *')) {
  if (element.closest('svg, canvas, option, [hidden]') || element.closest(':disabled')) continue;
  const own = Array.from(element.childNodes).some((node) => node.nodeType === 3 && node.textContent.trim());
  if (!own || element.getClientRects().length === 0) continue;
  const style = getComputedStyle(element);
  if (style.visibility === 'hidden' || Number(style.opacity) === 0) continue;
  const ground = behind(element), ink = over(channels(style.color), ground);
  const [light, dark] = [luminance(ink), luminance(ground)].sort((a, b) => b - a);
  const ratio = (light + 0.05) / (dark + 0.05);
  const size = parseFloat(style.fontSize), large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  checked += 1;
  if (ratio < (large ? 3 : 4.5)) failures.push(`${element.tagName.toLowerCase()}${element.id ? '#' + element.id : ''}.${element.className} "${element.textContent.trim().slice(0, 30)}" ${ratio.toFixed(2)}:1`);
}
return [checked, failures, getComputedStyle(document.documentElement).backgroundColor];
"""


def accessible_name(driver, element):
    """The element's accessible name as the engine's accessibility tree computes it (WebDriver's
    Get Computed Label; Marionette's own for Firefox)."""
    return element.computed_label if isinstance(driver, Firefox) else element.accessible_name


def look(driver, browser, shots, theme):
    """Screenshots of the page on a phone and a desktop in `theme`, each checked for contrast,
    and every control's accessible name. Returns what was measured."""
    measured = {}
    for size, (width, height) in [("phone", (412, 915)), ("desktop", (1280, 1000))]:
        driver.set_window_size(width, height)
        run_script(driver, "window.scrollTo(0, 0); return true", "scrolling to the top")
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(shots, f"{browser}-{size}-{theme}.png"))
        checked, failures, background = run_script(driver, CONTRAST_SCRIPT, "the contrast check")
        measured[size] = {"texts": checked}
        if checked < 20 or failures:
            fail(f"{theme} {size}: {len(failures)} of {checked} texts below WCAG AA contrast: {failures[:8]}")
        measured["background"] = background
    unnamed, named = [], 0
    for element in driver.find_elements(By.CSS_SELECTOR, "button, select, input, a[href], audio, [tabindex], [role=img], [role=meter]"):
        if not element.is_displayed():
            continue
        name = (accessible_name(driver, element) or "").strip()
        if name:
            named += 1
        else:
            unnamed.append(element.get_attribute("outerHTML")[:120])
    measured["controlsNamed"] = named
    if unnamed or named < 10:
        fail(f"{theme}: {len(unnamed)} controls without an accessible name ({named} with one): {unnamed[:5]}")
    return measured


def check_sun(driver):
    """The timeline's sunrise and sunset lines and civil twilight's edges where astral (an
    independent implementation) puts them for the station's place on the day shown."""
    day = run_script(driver, "return recdPage.day", "the day")
    lines = run_script(driver, """return Object.fromEntries(Array.from(document.querySelectorAll('#timeline rect[data-sun]'))
                                    .map(r => [r.dataset.sun, Number(r.getAttribute('x'))]))""", "the sun's lines")
    # ScheduleTests' reference (Tests/reference/sun_times.py): astral's events for each UTC date.
    year = day["day"].split("-")[0]
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference", "sun_times.py")
    table = subprocess.run(["/usr/bin/python3", script, year, "52.52,13.4"], check=True, capture_output=True, text=True).stdout
    line = next((line for line in table.splitlines() if f" {day['day']} " in line), None)
    if line is None:
        fail(f"astral has no {day['day']}")
    reference = dict(zip(["dawn", "sunrise", "sunset", "dusk"], (float(value) for value in line.split()[2:])))
    drawn = {}
    for name in ["sunrise", "sunset"]:
        if name not in lines:
            fail(f"no {name} on the timeline: {lines}")
        drawn[name] = day["start"] + lines[name] / 1440 * (day["end"] - day["start"])
    edges = run_script(driver, """return Array.from(document.querySelectorAll('#timeline rect')).filter(r => r.querySelector('title')
        && r.querySelector('title').textContent.startsWith('civil ')).map(r => [r.querySelector('title').textContent.split(' ')[1],
        Number(r.getAttribute('x')), Number(r.getAttribute('width'))])""", "civil twilight")
    for name, x, width in edges:
        drawn["dawn" if name == "dawn" else "dusk"] = day["start"] + (x if name == "dawn" else x + width) / 1440 * (day["end"] - day["start"])
    RESULT["sun"] = {}
    for name, time_drawn in drawn.items():
        expected = reference[name]
        RESULT["sun"][name] = [round(time_drawn), round(expected)]
        if abs(time_drawn - expected) > 90:
            fail(f"the timeline draws {name} at {time_drawn:.0f}, astral says {expected:.0f}")
    if len(drawn) != 4:
        fail(f"the timeline shows {sorted(drawn)} of sunrise, sunset, dawn and dusk")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--browser", default="chromium", choices=["chromium", "webkit", "firefox"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pulse-server", required=True)
    parser.add_argument("--recordings", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--recd-pid", type=int, required=True, help="to see its spectrum thread come and go")
    arguments = parser.parse_args()
    RESULT["browser"] = arguments.browser
    shots = arguments.screenshots
    os.makedirs(shots, exist_ok=True)

    # One browser: first without the token (it sees the station, but controls are hidden and
    # refused), then signed in.
    driver = open_browser(arguments.browser, 412, 915)
    try:
        driver.get(arguments.url + "/")
        wait_for(driver, "window.recdPage && recdPage.levelsSeen > 0 && recdPage.state", 15, "an observer's first levels")
        if driver.find_element(By.ID, "controls").is_displayed():
            fail("the controls show without a token")
        refused = run_script(driver, """
            return fetch('/api/control/listen', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{}'})
              .then(r => r.text().then(t => [r.status, t]));""")
        RESULT["controlWithoutToken"] = refused
        if refused[0] != 401:
            fail(f"a control without the token was answered {refused}")
        # The clock's mark (issue 50): shown exactly while recd says the clock is not synchronized
        # (this machine's kernel says so: STA_UNSYNC; a synchronized one hides it).
        synchronized = run_script(driver, "return fetch('/api/status').then(r => r.json()).then(s => s.result.clock.synchronized)",
                                  "the clock in status")
        RESULT["clockSynchronized"] = synchronized
        wait_for(driver, "document.getElementById('clock').hidden === " + ("true" if synchronized else "false"), 10,
                 "the clock's mark " + ("hidden" if synchronized else "shown"))
        # The microphones (issue 51): what devices.list says, as the page lists it.
        cards = run_script(driver, "return fetch('/api/devices').then(r => r.json()).then(d => d.result.cards.length)",
                           "the sound cards in devices.list")
        RESULT["soundCards"] = cards
        wait_for(driver, "!document.getElementById('devices').hidden && document.getElementById('cards').textContent.length > 0", 10,
                 "the microphones listed")
        listed = run_script(driver, "return document.querySelectorAll('#cards li').length", "the cards on the page")
        if listed != cards:
            fail(f"the page lists {listed} sound cards, devices.list {cards}")
        # recd-rtsp's URL to copy, with this page's host and [rtsp]'s port and path.
        wait_for(driver, "document.getElementById('stream-url').textContent.startsWith('rtsp://')", 10, "the RTSP URL")
        url = run_script(driver, "return document.getElementById('stream-url').textContent", "the RTSP URL")
        RESULT["rtspURL"] = url
        if not url.endswith(":8554/live"):
            fail(f"the RTSP URL on the page is {url}")
        driver.save_screenshot(os.path.join(shots, f"{arguments.browser}-phone-observer.png"))

        driver.find_element(By.ID, "token").send_keys(arguments.token)
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_for(driver, "recdPage.roles.includes('control') && recdPage.roles.includes('listen')", 10, "signing in")

        # Listen: the meter follows the tone (-12 dBFS peak, -15 dBFS RMS per channel).
        driver.find_element(By.CSS_SELECTOR, "#controls button[data-method=listen]").click()
        wait_for(driver, "recdPage.state.name === 'listening'", 10, "listening after the Listen button")
        # The tab says it: the station's name and the state in the title, a favicon of its own.
        listening_tab, _ = wait_for(driver, "document.title.includes('listening') && recdPage.station && "
                                    "document.title.startsWith(recdPage.station) && [document.title, document.getElementById('favicon').href]",
                                    10, "the tab's title while listening")
        levels, _ = wait_for(driver, "recdPage.levels && recdPage.levels.channels.length === 2 && "
                             "recdPage.levels.channels.every(c => c.peak > -30) && recdPage.levels", 10, "the tone on the meter")
        RESULT["levels"] = levels["channels"]
        for channel in levels["channels"]:
            if abs(channel["peak"] + 12) > 1 or abs(channel["average"] + 15) > 1:
                fail(f"the meter says {channel} for a tone at -12 dBFS peak, -15 dBFS RMS")
        # Drawn: the bar reaches the RMS (-15 dBFS) and stops short of -9 dBFS (the scale is -60…0).
        bar = run_script(driver, """
            const canvas = document.querySelector('#meters canvas');
            const x = (dB) => Math.round((dB + 60) / 60 * canvas.width);
            const at = (dB) => Array.from(canvas.getContext('2d').getImageData(x(dB), Math.floor(canvas.height / 2), 1, 1).data);
            return [at(-16), at(-9)];""")
        RESULT["meterPixels"] = bar
        green = lambda pixel: pixel[1] > pixel[0] + 60 and pixel[3] == 255
        if not green(bar[0]) or green(bar[1]):
            fail(f"the meter's bar is not drawn to the tone's level: pixels at -16 and -9 dBFS {bar}")

        # A 3 kHz burst: the spectrogram's newest column has its brightest row where 3 kHz is.
        # How soon it shows is reported (burstSeenAfter), not bounded: under ThreadSanitizer on
        # a loaded machine it took 2.5 s where one alone takes 0.1 s. The deadline only says it
        # never came.
        height = run_script(driver, "return document.getElementById('spectrogram').height")
        wait_for(driver, "recdPage.spectrum.columns > 10", 10, "spectrum columns")
        # Every column reaches the page: as many drawn as their capture times span.
        first_count, first_time = run_script(driver, "return [recdPage.spectrum.columns, recdPage.spectrum.lastTime]")
        wait_for(driver, f"recdPage.spectrum.columns > {first_count + 40}", 30, "40 more spectrum columns")
        count, last_time, period = run_script(driver, "return [recdPage.spectrum.columns, recdPage.spectrum.lastTime, recdPage.spectrum.period]")
        spanned = round((last_time - first_time) / period)
        RESULT["spectrumColumns"] = [count - first_count, spanned]
        if abs((count - first_count) - spanned) > 1:
            fail(f"{count - first_count} spectrum columns drawn over {spanned} periods of capture: columns were lost")
        rate = run_script(driver, "return recdPage.spectrum.sampleRate")
        # The kHz ruler says the range: 0 Hz at the bottom edge, the top label at the top edge
        # (12 kHz, the page's first range, or half the rate when that is less).
        for range_name, top in [("12000", min(12000, rate // 2)), ("full", rate // 2)]:
            run_script(driver, f"const s = document.getElementById('spectrum-range'); s.value = '{range_name}';"
                               "s.dispatchEvent(new Event('change')); return true")
            wait_for(driver, f"recdPage.spectrum.range === '{range_name}' && document.querySelector('#spectrum-axis span[data-hz=\"{top}\"]')",
                     10, f"the {range_name} ruler")
            bottom_row, top_row = label_row(driver, 0), label_row(driver, top)
            if abs(bottom_row - height) > 1 or abs(top_row) > 1:
                fail(f"{range_name}: the ruler puts 0 Hz at row {bottom_row:.1f} and {top} Hz at {top_row:.1f} of {height}")
        # A 3 kHz burst: the newest column's brightest row is where the ruler says 3 kHz is, within
        # a row: at its label (0-12 kHz), between 2 and 4 kHz's (full, linear), between 2 and 5
        # kHz's by the logarithm (log). Each range redraws the columns already shown.
        module = pactl(arguments.pulse_server, "load-module", "module-sine", "sink=testsink", "frequency=3000")
        played = time.monotonic()
        rows_seen = {}
        for range_name in ["12000", "full", "log"]:
            run_script(driver, f"const s = document.getElementById('spectrum-range'); s.value = '{range_name}';"
                               "s.dispatchEvent(new Event('change')); return true")
            wait_for(driver, f"recdPage.spectrum.range === '{range_name}'", 10, f"the {range_name} range")
            if range_name == "12000":
                expected = label_row(driver, 3000)
            elif range_name == "full":
                expected = (label_row(driver, 2000) + label_row(driver, 4000)) / 2
            else:
                low, high = label_row(driver, 2000), label_row(driver, 5000)
                expected = low + (high - low) * math.log(3 / 2) / math.log(5 / 2)
            # Above the 440 Hz tone's rows (where the ruler puts 1 kHz: 440 Hz is under it).
            below = int(label_row(driver, 2000 if range_name == "full" else 1000))
            while True:
                row, brightness = brightest_row(driver, height, below)
                if abs(row - expected) <= 1 and brightness > 300:
                    rows_seen[range_name] = [row, round(expected, 2)]
                    break
                if time.monotonic() - played > 30:
                    fail(f"{range_name}: no 3 kHz at the ruler's row {expected:.1f} within 30 s: brightest row {row} ({brightness})")
                time.sleep(0.02)
            if range_name == "12000":
                RESULT["burstSeenAfter"] = round(time.monotonic() - played, 3)
        RESULT["burstRows"] = rows_seen
        run_script(driver, "const s = document.getElementById('spectrum-range'); s.value = '12000'; s.dispatchEvent(new Event('change')); return true")
        driver.save_screenshot(os.path.join(shots, f"{arguments.browser}-phone-spectrum.png"))
        if spectrum_threads(arguments.recd_pid) != 1:
            fail(f"{spectrum_threads(arguments.recd_pid)} spectrum threads in recd while one page shows it")
        pactl(arguments.pulse_server, "unload-module", module)

        # Hear it: audio comes, at the tone's level, live: the page knows when each chunk was
        # captured. How far behind it is heard is reported (audio.delay), not bounded: it is
        # recd's, recd-web's and the browser's scheduling, a latency a loaded machine stretches.
        # The 30 s are a deadline, not that latency: audio heard later than that is not live.
        driver.find_element(By.ID, "hear").click()
        audio, _ = wait_for(driver, "recdPage.audio.chunks > 50 && recdPage.audio.delay !== null && recdPage.audio", 30, "live audio")
        RESULT["audio"] = audio
        tone_rms = 10 ** (-15 / 20)
        if audio["error"] or abs(audio["rms"] - tone_rms) > tone_rms * 0.13:
            fail(f"live audio {audio}: the tone's RMS is {tone_rms:.3f}")
        if not 0 < audio["delay"] < 30:
            fail(f"live audio is {audio['delay']} s behind its capture: not live")
        driver.find_element(By.ID, "hear").click()

        # Arm the trigger; a 3 kHz burst is one event; once it has closed, it is on the timeline
        # from what the closing says (app.js's showClosedEvent), not only when the listing after
        # it comes.
        driver.find_element(By.CSS_SELECTOR, "#controls button[data-params]").click()
        wait_for(driver, "recdPage.state.name === 'recording' && recdPage.trigger && recdPage.trigger.floor !== undefined", 15,
                 "armed, with its floor")
        recording_tab, _ = wait_for(driver, "document.title.includes('recording') && [document.title, document.getElementById('favicon').href]",
                                    10, "the tab's title while recording")
        RESULT["tab"] = [listening_tab[0], recording_tab[0]]
        if not recording_tab[1].startswith("data:image/png") or recording_tab[1] == listening_tab[1]:
            fail("the favicon is the same while recording as while listening")
        known = run_script(driver, "return Array.from(document.querySelectorAll('#timeline rect[data-file]')).map(r => r.dataset.file)")
        # When a new file's rectangle appears, by the page's clock (a MutationObserver, run in
        # the same task as the drawing): where its entry came from (the closing's has no
        # `frames`, the listing's has), and whether the closing had arrived by then (if the
        # listing came first, it drew the file, rightly).
        run_script(driver, f"""window.newFileSeenAt = null;
            new MutationObserver(() => {{
                if (window.newFileSeenAt !== null) return;
                const file = Array.from(document.querySelectorAll('#timeline rect[data-file]')).map(r => r.dataset.file)
                    .find(f => !{json.dumps(known)}.includes(f));
                if (file === undefined) return;
                window.newFileSeenAt = Date.now();
                const entry = recdPage.recordings.find(f => f.file === file);
                window.newFileDrawnFrom = entry && !('frames' in entry) ? 'the closing' : 'the listing';
                window.newFileClosedBefore = recdPage.triggerEvents.some(e => e.kind === 'closed' && (e.path || '').endsWith('/' + file));
            }}).observe(document.getElementById('timeline'), {{ childList: true, subtree: true }});
            return true""")
        module = pactl(arguments.pulse_server, "load-module", "module-sine", "sink=testsink", "frequency=3000")
        time.sleep(1.5)
        driver.save_screenshot(os.path.join(shots, f"{arguments.browser}-phone-event.png"))
        pactl(arguments.pulse_server, "unload-module", module)
        # Closed as recd says (the `trigger` topic's `closed`, once the file is final), then
        # on the timeline: both by the page's clock.
        closed, _ = wait_for(driver, "recdPage.triggerEvents.filter(e => e.kind === 'closed').map(e => e.seenAt)[0]", 20,
                             "the event's closing")
        new_file = f"""Array.from(document.querySelectorAll('#timeline rect[data-file]')).map(r => r.dataset.file)
                       .filter(f => !{json.dumps(known)}.includes(f))[0]"""
        file, _ = wait_for(driver, new_file, 30, "the event on the timeline")
        seen_at, _ = wait_for(driver, "window.newFileSeenAt", 30, "the observer's time")
        drawn_from, closed_before = run_script(driver, "return [window.newFileDrawnFrom, window.newFileClosedBefore]")
        # A figure, not a bound: the page's clock from the closing to the rectangle.
        RESULT["eventOnTimelineAfterClose"] = round((seen_at - closed) / 1000, 3)
        RESULT["eventDrawnFrom"] = drawn_from
        if closed_before and drawn_from != "the closing":
            fail(f"the closed event reached the timeline only with {drawn_from}, not from the closing itself")
        driver.find_element(By.CSS_SELECTOR, "#controls button[data-method=stop]").click()
        wait_for(driver, "recdPage.state.name === 'finished' || recdPage.state.name === 'listening'", 10, "stopped")
        RESULT["eventFile"] = file
        player = f"document.querySelector('#recordings li[data-file={json.dumps(file)}] audio')"

        # Its player plays, and what the browser decodes is the file's audio.
        # WebKitGTK 2.50's GStreamer player can stay paused for buffering for good: the whole
        # file downloaded (its source at EOS, buffering at 100 %), the pipeline's state change
        # still pending when the last buffering message came (GST_DEBUG=webkitmediaplayer:5
        # shows "Pausing stream for buffering", then "paused for buffering" every 0.35 s); the
        # element plays (not paused) at readyState HAVE_CURRENT_DATA, networkState LOADING,
        # currentTime still. Seen once in about 150 runs, on a loaded machine (WebKit's bugs
        # 245739 and 300041 are of the same kind). As a listener would, this check then loads the
        # player again and plays, once, and says so (playerNudged): a file whose bytes did not
        # come would stay still after that too, and fail.
        explain = f"""(() => {{ const a = {player}; return a && {{ error: a.error && [a.error.code, a.error.message],
            networkState: a.networkState, readyState: a.readyState, paused: a.paused, currentTime: a.currentTime,
            duration: a.duration, src: a.src }}; }})()"""
        start = still_since = time.monotonic()
        last_time, nudged = None, None
        while True:
            state = run_script(driver, """return (() => { const a = """ + player + """;
                if (a && a.paused) { a.muted = true; a.play(); } return a && [a.currentTime, a.readyState, a.paused]; })()""",
                               "the event's player")
            now = time.monotonic()
            if state and state[0] > 0.3:
                played = state[0]
                break
            if not state or state[0] != last_time or state[2]:
                last_time, still_since = state and state[0], now
            elif arguments.browser == "webkit" and nudged is None and state[1] < 3 and now - still_since > 5:
                nudged = run_script(driver, f"return (() => {{ const a = {player}; const was = {explain}; a.load(); a.play(); return was; }})()",
                                    "loading the player again")
                still_since = now
            if now - start > (30 if nudged else 20):
                fail(f"the event's player playing: not within {round(now - start)} s ({explain} is {run_script(driver, 'return ' + explain)!r}"
                     + (f"; loaded again at {nudged!r}" if nudged else "") + ")")
            time.sleep(0.05)
        if nudged:
            RESULT["playerNudged"] = nudged
        RESULT["playerTime"] = played
        decoded = run_script(driver, """
            const url = """ + player + """.src;
            return fetch(url).then(r => r.arrayBuffer()).then(bytes => {
                const context = new OfflineAudioContext(1, 1, 48000);
                return context.decodeAudioData(bytes);
            }).then(buffer => [buffer.sampleRate, buffer.length, buffer.numberOfChannels, Array.from(buffer.getChannelData(0).slice(0, 4800))]);""")
        reference = subprocess.run(["ffmpeg", "-v", "error", "-i", os.path.join(arguments.recordings, file), "-map_channel", "0.0.0",
                                    "-f", "f32le", "-"], check=True, capture_output=True).stdout
        samples = struct.unpack(f"<{len(reference) // 4}f", reference)
        RESULT["decoded"] = decoded[:3]
        if decoded[0] != 48000 or decoded[1] != len(samples):
            fail(f"the browser decoded {decoded[:3]}, ffmpeg {len(samples)} frames at 48000 Hz")
        worst = max(abs(a - b) for a, b in zip(decoded[3], samples[:4800]))
        RESULT["decodedDifference"] = worst
        if worst > 1e-4:
            fail(f"the browser's decoding differs from ffmpeg's by {worst}")

        # The event's picture, rendered by recd-web from the file: read back by ffmpeg (an
        # independent PNG reader), the burst is the brightest row of the plot where its range
        # puts 3 kHz, and the peak it states is the file's (ffmpeg's volumedetect).
        item = f"document.querySelector('#recordings li[data-file={json.dumps(file)}]')"
        # Pictures load as their items come into view: scrolled to, as a viewer would.
        run_script(driver, f"{item}.scrollIntoView(); return true", "scrolling to the event")
        deadline = time.monotonic() + 30
        while not run_script(driver, f"return {item} && {item}.querySelector('img.file-picture').dataset.loaded", "the picture"):
            if time.monotonic() > deadline:
                answer = run_script(driver, f"""return fetch({item}.querySelector('a[download$=".png"]').href)
                    .then(r => r.text().then(t => [r.status, t.slice(0, 300)]))""", "the picture's answer")
                alt = run_script(driver, "return " + item + ".querySelector('img.file-picture').alt", "the image's text")
                fail(f"the event's picture did not load within 30 s: its image says {alt!r}, recd-web {answer}")
            time.sleep(0.05)
        info = run_script(driver, f"return recdPage.pictures[{json.dumps(file)}]", "the picture's info")
        encoded = run_script(driver, f"""return fetch({item}.querySelector('a[download$=".png"]').href).then(r => r.arrayBuffer())
            .then(b => {{ const a = new Uint8Array(b); let s = ''; for (let i = 0; i < a.length; i += 1) s += String.fromCharCode(a[i]); return btoa(s); }})""",
                             "the picture's bytes")
        png = base64.b64decode(encoded)
        if png[:8] != b"\x89PNG\r\n\x1a\n":
            fail(f"the picture is not a PNG: {png[:16]!r}")
        with open(os.path.join(shots, f"{arguments.browser}-event-picture.png"), "wb") as picture_file:
            picture_file.write(png)
        probe = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-of", "json", "-"], input=png,
                                          check=True, capture_output=True).stdout)["streams"][0]
        if (probe["width"], probe["height"]) != (info["width"], info["height"]):
            fail(f"the picture is {probe['width']}x{probe['height']}, its info says {info['width']}x{info['height']}")
        pixels = subprocess.run(["ffmpeg", "-v", "error", "-i", "-", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], input=png,
                                check=True, capture_output=True).stdout
        plot = info["plot"]
        if plot["logarithmic"] or abs(plot["highFrequency"] - min(12000, rate / 2)) > 0.5:
            fail(f"the picture's plot is not 0-12 kHz: {plot}")
        width, plot_height = info["width"], plot["height"]
        # Where the plot's scale puts 3 kHz (row r spans r to r + 1 from the plot's top).
        expected_row = plot_height * (1 - 3000 / plot["highFrequency"])
        # The burst's columns (the loud ones) summed row by row: the brightest rows' middle is
        # where the picture draws the tone. A column whose windows hold one of the burst's edges
        # (the tone cut at any phase is a click, broadband) draws it wider, so single columns
        # are reported, and bound only loosely.
        tone_columns = []
        for column in range(plot["width"]):
            x = plot["x"] + column
            # Above 1 kHz: the 440 Hz tone is under it.
            rows = [sum(pixels[((plot["y"] + row) * width + x) * 3:((plot["y"] + row) * width + x) * 3 + 3])
                    for row in range(int(plot_height * (1 - 1000 / plot["highFrequency"])))]
            row, brightness = brightest(rows)
            if brightness > 300:
                tone_columns.append((column, row, rows))
        if not tone_columns:
            fail("the event's picture has no loud column above 1 kHz")
        summed = [sum(rows[r] for _, _, rows in tone_columns) for r in range(len(tone_columns[0][2]))]
        most = max(summed)
        loudest = [r for r, value in enumerate(summed) if value >= most - 10 * len(tone_columns)]
        tone_row = (min(loudest) + max(loudest) + 1) / 2
        apart = [[column, row] for column, row, _ in tone_columns if abs(row - expected_row) > 1]
        RESULT["pictureRows"] = {"tone": tone_row, "expected": expected_row, "columns": len(tone_columns), "columnsApart": apart}
        if abs(tone_row - expected_row) > 1 or any(abs(row - expected_row) > 4 for _, row in apart) or len(apart) * 4 > len(tone_columns):
            fail(f"the event's picture draws its burst at row {tone_row} (columns apart: {apart} of {len(tone_columns)}), 3 kHz is row {expected_row}")
        detected = subprocess.run(["ffmpeg", "-v", "info", "-i", os.path.join(arguments.recordings, file), "-af", "volumedetect",
                                   "-f", "null", "-"], capture_output=True, text=True).stderr
        max_volume = float(detected.split("max_volume: ")[1].split(" dB")[0])
        RESULT["picturePeak"] = [info["peak"], max_volume]
        if abs(info["peak"] - max_volume) > 0.15:
            fail(f"the picture says the file's peak is {info['peak']} dBFS, ffmpeg {max_volume}")
        shown = run_script(driver, f"return {item}.querySelector('.peak').textContent", "the listed peak")
        if f"{info['peak']:.1f}" not in shown:
            fail(f"the list says '{shown}' for a peak of {info['peak']:.1f} dBFS")

        # Nothing came from anywhere but the station.
        foreign = run_script(driver, """return performance.getEntriesByType('resource').map(e => e.name)
                                           .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:') && !n.startsWith('blob:' + location.origin))""")
        if foreign:
            fail(f"the page loaded from elsewhere: {foreign}")
        check_sun(driver)
        light = look(driver, arguments.browser, shots, "light")
        if arguments.browser == "chromium":
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
            dark = look(driver, arguments.browser, shots, "dark")
        elif arguments.browser == "firefox":
            driver.client.set_pref("layout.css.prefers-color-scheme.content-override", 0)
            dark = look(driver, arguments.browser, shots, "dark")
        else:
            # WebKitGTK follows its GTK theme: a second MiniBrowser, in dark mode, signed in afresh.
            dark_driver = open_browser(arguments.browser, 412, 915, dark=True)
            try:
                dark_driver.get(arguments.url + "/")
                wait_for(dark_driver, "window.recdPage && recdPage.state && !document.getElementById('login').hidden", 15, "the dark page")
                dark_driver.find_element(By.ID, "token").send_keys(arguments.token)
                dark_driver.find_element(By.CSS_SELECTOR, "#login button").click()
                wait_for(dark_driver, "recdPage.roles.includes('listen') && recdPage.levelsSeen > 0 && "
                                      "document.querySelector('#recordings img.file-picture[data-loaded]')", 30, "the dark page signed in")
                dark = look(dark_driver, arguments.browser, shots, "dark")
            finally:
                dark_driver.quit()
        RESULT["themes"] = {"light": light, "dark": dark}
        for size in ["phone", "desktop"]:
            shot = lambda theme: open(os.path.join(shots, f"{arguments.browser}-{size}-{theme}.png"), "rb").read()
            if shot("light") == shot("dark"):
                fail(f"the {size}'s dark screenshot is the light one")
        if light["background"] == dark["background"]:
            fail(f"the dark theme has the light one's background {light['background']}")
        RESULT["errors"] = run_script(driver, "return recdPage.errors")
    except Exception as error:
        browser_failures(error)
    finally:
        driver.quit()
    # The page is gone: recd computes no spectrum for nobody (it is still listening).
    deadline = time.monotonic() + 30
    while spectrum_threads(arguments.recd_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if spectrum_threads(arguments.recd_pid):
        fail("recd still computes a spectrum 30 s after the last page closed")
    RESULT["spectrumEndedAfterPageClosed"] = True
    print(json.dumps(RESULT))


if __name__ == "__main__":
    main()
