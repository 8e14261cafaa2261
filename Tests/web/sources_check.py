#!/usr/bin/python3
"""The page of a station of two sources (issue 53) in a real browser: the switcher, a state and
a meter per source, and everything the page shows and does following the source it shows.
recd runs `east` and `west` on two paced PulseAudio devices, both listening from boot; both
play a 440 Hz tone, west's also a 3 kHz sine. Prints one JSON object; exits 1 with the reason
on the first check that fails (browser_check.py's helpers and conventions).

    sources_check.py --browser chromium|webkit|firefox --url http://127.0.0.1:PORT --token TOKEN
                     --screenshots DIR
"""
import argparse
import json
import os
import time

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from browser_check import RESULT, Firefox, brightest_row, browser_failures, fail, label_row, open_browser, run_script, wait_for


def log_pointer_events(driver):
    """From here on, the pointer events the page receives go to window.clickEvents, for a step
    that waits on a click's effect to show when it times out."""
    run_script(driver, """
        window.clickEvents = [];
        if (!window.clickLog) {
            window.clickLog = (event) => window.clickEvents.push([event.type, event.target.nodeName, event.target.className || event.target.id]);
            for (const type of ['mousedown', 'mouseup', 'click']) document.addEventListener(type, window.clickLog, true);
        }""")


def click(driver, selector):
    """A real click (WebDriver's pointer, not element.click())."""
    log_pointer_events(driver)
    driver.find_element(By.CSS_SELECTOR, selector).click()


def press(driver, selector, seconds=0.3):
    """A person's click: the pointer pressed on the element's middle, held, released."""
    log_pointer_events(driver)
    element = driver.find_element(By.CSS_SELECTOR, selector)
    if isinstance(driver, Firefox):
        driver.client.actions.sequence("pointer", "mouse", {"pointerType": "mouse"}).pointer_move(0, 0, origin=element) \
            .pointer_down().pause(int(seconds * 1000)).pointer_up().perform()
        driver.client.actions.release()
    else:
        ActionChains(driver).move_to_element(element).click_and_hold().pause(seconds).release().perform()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--browser", default="chromium", choices=["chromium", "webkit", "firefox"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--screenshots", required=True)
    arguments = parser.parse_args()
    RESULT["browser"] = arguments.browser
    os.makedirs(arguments.screenshots, exist_ok=True)
    driver = open_browser(arguments.browser, 1280, 1000)
    try:
        driver.get(arguments.url + "/")
        wait_for(driver, "window.recdPage && recdPage.sources.join() === 'east,west' && recdPage.source === 'east'", 15,
                 "the station's two sources, the first shown")
        driver.find_element(By.ID, "token").send_keys(arguments.token)
        click(driver, "#login button")
        wait_for(driver, "recdPage.roles.includes('control')", 10, "signing in", "[recdPage.roles, window.clickEvents]")
        # A button per source, the shown one pressed, each with its state and a moving meter.
        pressed = run_script(driver, "return Array.from(document.querySelectorAll('#sources button'))"
                                     ".map(b => [b.dataset.source, b.getAttribute('aria-pressed')])")
        RESULT["buttons"] = pressed
        if pressed != [["east", "true"], ["west", "false"]]:
            fail(f"the switcher's buttons are {pressed}")
        views, _ = wait_for(driver, "['east', 'west'].every(s => recdPage.sourceViews[s] && recdPage.sourceViews[s].state === 'listening'"
                            " && typeof recdPage.sourceViews[s].peak === 'number' && recdPage.sourceViews[s].peak > -30) && recdPage.sourceViews", 15, "both sources listening, both meters up")
        RESULT["sourceViews"] = views
        bars = run_script(driver, "return Array.from(document.querySelectorAll('#sources .level span')).map(s => parseFloat(s.style.width))")
        if len(bars) != 2 or any(bar < 50 for bar in bars):
            fail(f"the sources' meters are drawn at {bars} % for tones at -12 dBFS (the scale is -60…0 dBFS)")
        wait_for(driver, "document.getElementById('stream-url').textContent.endsWith(':8554/east')", 10, "east's RTSP URL")

        # Record on the shown source (east): east records, west goes on listening, and neither
        # button moves or changes its size (a button under the finger must stay there).
        boxes = "return Array.from(document.querySelectorAll('#sources button')).map(b => { const r = b.getBoundingClientRect(); return [r.x, r.y, r.width, r.height] })"
        before = run_script(driver, boxes)
        click(driver, "#controls button[data-method=start]:not([data-params])")
        wait_for(driver, "recdPage.state && recdPage.state.name === 'recording' && recdPage.sourceViews.east.state === 'recording'"
                         " && document.querySelector('#sources button[data-source=east] .state').textContent === 'recording'", 10,
                 "east recording after Record")
        after = run_script(driver, boxes)
        RESULT["sourceButtons"] = [before, after]
        if any(abs(a - b) > 0.5 for box_before, box_after in zip(before, after) for a, b in zip(box_before, box_after)):
            fail(f"the source buttons moved when east's state changed: {before} -> {after}")
        time.sleep(0.3)
        if run_script(driver, "return recdPage.sourceViews.west.state") != "listening":
            fail("Record on east changed west's state")

        # West: its own state, spectrum (with its 3 kHz) and stream; the address says so.
        # Pressed as a person presses, on the state text, beside the meter that moves 20 times a
        # second: WebKit fires no click when the node pressed on is replaced before the release
        # (the page once rewrote that text with every level).
        press(driver, "#sources button[data-source=west] .state")
        wait_for(driver, "recdPage.source === 'west' && location.search === '?source=west' && recdPage.state"
                         " && recdPage.state.name === 'listening'", 10, "west shown after its button",
                 "[recdPage.source, location.search, recdPage.state, document.getElementById('state').textContent,"
                 " document.querySelector('#sources button[data-source=west]').getAttribute('aria-pressed'), window.clickEvents]")
        wait_for(driver, "document.getElementById('stream-url').textContent.endsWith(':8554/west')", 10, "west's RTSP URL")
        height = run_script(driver, "return document.getElementById('spectrogram').height")
        start = run_script(driver, "return recdPage.spectrum.columns")
        wait_for(driver, f"recdPage.spectrum.columns > {start + 20}", 15, "west's spectrum columns")
        # Where the kHz ruler puts 3 kHz, above the 440 Hz tone (under the 1 kHz label).
        expected = label_row(driver, 3000)
        row, brightness = brightest_row(driver, height, int(label_row(driver, 1000)))
        RESULT["westSpectrumRow"] = [row, round(expected, 2)]
        if abs(row - expected) > 1 or brightness <= 300:
            fail(f"west's spectrogram has no 3 kHz: brightest rows around {row} ({brightness}), the ruler's 3 kHz at {expected:.1f}")
        driver.save_screenshot(os.path.join(arguments.screenshots, f"{arguments.browser}-sources.png"))

        # Back to east: stop it; its file is listed with a player under east's folder.
        click(driver, "#sources button[data-source=east]")
        wait_for(driver, "recdPage.source === 'east' && recdPage.state && recdPage.state.name === 'recording'", 10,
                 "east shown again, recording")
        click(driver, "#controls button[data-method=stop]")
        wait_for(driver, "recdPage.sourceViews.east.state === 'listening'", 10, "east listening again after Stop")
        source, _ = wait_for(driver, "(document.querySelector('#recordings audio') || {}).src", 15, "east's recording listed")
        RESULT["player"] = source
        if "/recordings/east/" not in source:
            fail(f"east's recording plays from {source}")
        status = run_script(driver, "return fetch(document.querySelector('#recordings audio').src, {headers: {Range: 'bytes=0-3'}})"
                                    ".then(r => r.status)", "east's recording over HTTP")
        if status != 206:
            fail(f"east's recording answered {status}")
        if run_script(driver, "return recdPage.sourceViews.west.state") != "listening":
            fail("west's state changed while east recorded and stopped")
        RESULT["errors"] = run_script(driver, "return recdPage.errors")
    except Exception as error:
        browser_failures(error)
    finally:
        driver.quit()
    print(json.dumps(RESULT))
    with open(os.path.join(arguments.screenshots, f"{arguments.browser}-sources.json"), "w") as result:
        json.dump(RESULT, result)


if __name__ == "__main__":
    main()
