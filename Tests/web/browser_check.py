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
import json
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


def wait_for(driver, script, timeout, what):
    """Polls a JS expression until it is truthy; its value and the seconds it took."""
    start = time.monotonic()
    while True:
        value = run_script(driver, "return " + script, what)
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            fail(f"{what}: not within {timeout} s ({script} is {value!r})")
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


def open_browser(name, width, height):
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


def canvas_column(driver, element, x):
    """The brightness (r+g+b) of each row of column x of a canvas, top row first."""
    return run_script(driver, f"""
        const canvas = document.getElementById('{element}');
        const data = canvas.getContext('2d').getImageData({x} < 0 ? canvas.width + {x} : {x}, 0, 1, canvas.height).data;
        const rows = [];
        for (let i = 0; i < data.length; i += 4) rows.push(data[i] + data[i + 1] + data[i + 2]);
        return rows;""")


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
        rate, size = run_script(driver, "return [recdPage.spectrum.sampleRate, recdPage.spectrum.size]")
        bins = size // 2 + 1
        expected_row = height - 1 - (round(3000 * size / rate) * height) // bins
        module = pactl(arguments.pulse_server, "load-module", "module-sine", "sink=testsink", "frequency=3000")
        played = time.monotonic()
        while True:
            rows = canvas_column(driver, "spectrogram", -1)
            upper = rows[:height - 20]  # above the 440 Hz tone's rows
            brightest = max(range(len(upper)), key=lambda row: upper[row])
            if abs(brightest - expected_row) <= 1 and upper[brightest] > 300:
                RESULT["burstSeenAfter"] = round(time.monotonic() - played, 3)
                RESULT["burstRow"] = [brightest, expected_row]
                break
            if time.monotonic() - played > 30:
                fail(f"no 3 kHz in the spectrogram within 30 s: brightest row {brightest} ({upper[brightest]}), expected {expected_row}")
            time.sleep(0.02)
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
        played, _ = wait_for(driver, """(() => { const a = """ + player + """;
                                 if (a && a.paused) { a.muted = true; a.play(); } return a && a.currentTime > 0.3 && a.currentTime; })()""",
                             20, "the event's player playing")
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

        # The event's spectrogram, computed by recd-web from the file: the burst at its row.
        run_script(driver, f"document.querySelector('#recordings li[data-file={json.dumps(file)}] button.link').click()")
        drawn, _ = wait_for(driver, "(document.querySelector('canvas.file-spectrogram') || {dataset: {}}).dataset.drawn", 20,
                            "the event's spectrogram")
        canvas = "document.querySelector('canvas.file-spectrogram')"
        found = False
        for column in range(int(drawn)):
            rows = run_script(driver, f"""const c = {canvas}; const d = c.getContext('2d').getImageData({column}, 0, 1, c.height).data;
                const rows = []; for (let i = 0; i < d.length; i += 4) rows.push(d[i] + d[i + 1] + d[i + 2]); return rows;""")
            upper = rows[:height - 20]
            brightest = max(range(len(upper)), key=lambda row: upper[row])
            if abs(brightest - expected_row) <= 1 and upper[brightest] > 300:
                found = True
                break
        RESULT["fileSpectrogramColumns"] = int(drawn)
        if not found:
            fail(f"the event's spectrogram ({drawn} columns) shows no 3 kHz at row {expected_row}")

        # Nothing came from anywhere but the station.
        foreign = run_script(driver, """return performance.getEntriesByType('resource').map(e => e.name)
                                           .filter(n => !n.startsWith(location.origin) && !n.startsWith('data:'))""")
        if foreign:
            fail(f"the page loaded from elsewhere: {foreign}")
        driver.save_screenshot(os.path.join(shots, f"{arguments.browser}-phone.png"))
        driver.set_window_size(1280, 1000)
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(shots, f"{arguments.browser}-desktop.png"))
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
