#!/usr/bin/env python3
"""An RTP checker of the test's own (issue 52): plays URL over RTSP/TCP for SECONDS and checks
what arrives, independently of recd-rtsp's code.

  - every RTSP answer is 200 and PLAY's RTP-Info names the first packet's seq and rtptime;
  - RTP: version 2, payload type 96, one SSRC, sequence numbers contiguous, each timestamp the
    one before plus the frames of the packet before (L16: payload bytes / 2 / channels; Opus:
    960, recd-rtsp's 20 ms frames);
  - RTCP: sender reports on the odd channel, the first within a second of the first packet;
    two of them at least 2 s apart, with no timestamp jump between them, give the rate (RTP ticks
    per NTP second) within 200 ppm of the SDP's (plus SETTLING_MS over their distance, when
    given: see below); each report's NTP time is a capture time: earlier than when it arrived,
    by less than MAX_DELAY seconds (default 1).

The figures name each jump's first timestamp and each report's (NTP time, RTP timestamp), so that
a test holding a tap of its own can check the reports' times against the tap's capture times.

Prints one JSON object (the figures) and exits 0, or 1 with the reason.
usage: rtp_check.py URL SECONDS [MAX_DELAY [jumps [SETTLING_MS]]]      (rtsp://USER:TOKEN@HOST:PORT/PATH for Digest)
"""
import hashlib, json, re, socket, struct, sys, time
from urllib.parse import urlparse

url, seconds = sys.argv[1], float(sys.argv[2])
# How much earlier than its arrival a sender report's capture time may be (a server built with
# ThreadSanitizer runs far slower than it ships).
max_delay = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
# "jumps": a timestamp ahead of the one expected is counted, not a failure (audio the server
# could not keep up with: its timeline keeps its length); one behind always fails.
allow_jumps = len(sys.argv) > 4 and sys.argv[4] == "jumps"
settling_ms = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
jumps = 0
jump_frames = []  # each jump's size in RTP ticks (frames), in order
jump_timestamps = []  # the timestamp of each jump's first packet (where the new stretch begins)
u = urlparse(url)
# rtsp://USER:TOKEN@HOST:PORT/PATH: Digest (RFC 2069's form, as ffmpeg answers), the URL without them.
user, password = u.username, u.password
url = url.replace(f"{user}:{password}@", "") if user else url
challenge = None
sock = socket.create_connection((u.hostname, u.port or 554), timeout=10)
buffer = b""
cseq = 0


def fail(why):
    print(json.dumps({"ok": False, "why": why}))
    sys.exit(1)


def read_more():
    global buffer
    data = sock.recv(65536)
    if not data:
        fail("the server closed the connection")
    buffer += data


def md5(text):
    return hashlib.md5(text.encode()).hexdigest()


def request(method, target, headers=None):
    global cseq, buffer, challenge
    cseq += 1
    headers = dict(headers or {})
    if challenge:
        realm, nonce = challenge
        response = md5(f"{md5(f'{user}:{realm}:{password}')}:{nonce}:{md5(f'{method}:{target}')}")
        headers["Authorization"] = f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{target}", response="{response}"'
    lines = [f"{method} {target} RTSP/1.0", f"CSeq: {cseq}", "User-Agent: rtp_check"] + [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    while b"\r\n\r\n" not in buffer:
        read_more()
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    text = head.decode()
    status = int(text.split(" ")[1])
    fields = {}
    for line in text.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        fields[k.strip().lower()] = v.strip()
    length = int(fields.get("content-length", "0"))
    while len(buffer) < length:
        read_more()
    body, buffer = buffer[:length], buffer[length:]
    if fields.get("cseq") != str(cseq):
        fail(f"{method}: CSeq {fields.get('cseq')} for {cseq}")
    if status == 401 and user and not challenge:
        m = re.search(r'realm="([^"]*)".*nonce="([^"]*)"', fields.get("www-authenticate", ""))
        if not m:
            fail(f"{method}: 401 without a Digest challenge")
        challenge = (m.group(1), m.group(2))
        return request(method, target, headers)
    return status, fields, body.decode()


status, _, _ = request("OPTIONS", url)
if status != 200:
    fail(f"OPTIONS: {status}")
status, fields, sdp = request("DESCRIBE", url, {"Accept": "application/sdp"})
if status != 200:
    fail(f"DESCRIBE: {status}")
m = re.search(r"a=rtpmap:96 (L16|opus)/(\d+)/(\d+)", sdp)
if not m:
    fail(f"no L16 or opus rtpmap in the SDP: {sdp}")
codec, rate, channels = m.group(1), int(m.group(2)), int(m.group(3))
status, fields, _ = request("SETUP", url + "/trackID=0", {"Transport": "RTP/AVP/TCP;unicast;interleaved=0-1"})
if status != 200:
    fail(f"SETUP: {status}")
session = fields["session"].split(";")[0]
status, fields, _ = request("PLAY", url, {"Session": session, "Range": "npt=0.000-"})
if status != 200:
    fail(f"PLAY: {status}")
info = dict(kv.split("=", 1) for kv in fields["rtp-info"].split(";")[1:])
first_seq, first_ts = int(info["seq"]), int(info["rtptime"])

packets = 0
frames_total = 0
expected_seq, expected_ts, ssrc = first_seq, first_ts, None
reports = []
first_packet_at = None
start = time.time()
last_keepalive = start
while time.time() - start < seconds:
    while len(buffer) < 4:
        read_more()
    if buffer[0:1] != b"$":
        # A response to our keepalive.
        while b"\r\n\r\n" not in buffer:
            read_more()
        _, buffer = buffer.split(b"\r\n\r\n", 1)
        continue
    channel, length = buffer[1], struct.unpack(">H", buffer[2:4])[0]
    while len(buffer) < 4 + length:
        read_more()
    frame, buffer = buffer[4:4 + length], buffer[4 + length:]
    now = time.time()
    if channel == 0:
        v, pt = frame[0] >> 6, frame[1] & 0x7F
        seq, ts, this_ssrc = struct.unpack(">HII", frame[2:12])
        if v != 2 or pt != 96:
            fail(f"version {v}, payload type {pt}")
        if ssrc is None:
            ssrc = this_ssrc
            first_packet_at = now
        elif this_ssrc != ssrc:
            fail("the SSRC changed")
        if seq != expected_seq:
            fail(f"sequence {seq}, expected {expected_seq} after {packets} packets")
        if ts != expected_ts:
            ahead = (ts - expected_ts) & 0xFFFFFFFF
            if not (allow_jumps and 0 < ahead < 0x80000000):
                fail(f"timestamp {ts}, expected {expected_ts} after {packets} packets")
            jumps += 1
            jump_frames.append(ahead)
            jump_timestamps.append(ts)
        # L16: the payload's frames; Opus (RFC 7587): recd-rtsp's 20 ms packets, 960 ticks each.
        n = (len(frame) - 12) // 2 // channels if codec == "L16" else 960
        packets += 1
        frames_total += n
        expected_seq = (seq + 1) & 0xFFFF
        expected_ts = (ts + n) & 0xFFFFFFFF
    elif channel == 1 and len(frame) >= 28 and frame[1] == 200:
        ntp_s, ntp_f, rtp_ts = struct.unpack(">III", frame[8:20])
        ntp = ntp_s - 2208988800 + ntp_f / 2**32
        # The stretch it belongs to: the jumps seen before it (a report names the last frame sent).
        reports.append({"arrived": now, "ntp": ntp, "rtp": rtp_ts, "stretch": jumps})
        if not (0 <= now - ntp < max_delay):
            fail(f"a sender report's time is {now - ntp:.3f} s before its arrival (a capture time is earlier, by less than {max_delay} s)")
    if now - last_keepalive > 3:
        sock.sendall(f"GET_PARAMETER {url} RTSP/1.0\r\nCSeq: 999\r\nSession: {session}\r\n\r\n".encode())
        last_keepalive = now

if packets == 0:
    fail("no RTP packet")
if not reports:
    fail("no sender report")
if reports[0]["arrived"] - first_packet_at > max_delay:
    fail(f"the first sender report came {reports[0]['arrived'] - first_packet_at:.2f} s after the first packet")
figures = {"ok": True, "jumps": jumps, "jumpFrames": jump_frames, "jumpTimestamps": jump_timestamps,
           "senderReports": [[r["ntp"], r["rtp"]] for r in reports], "codec": codec, "rate": rate, "channels": channels, "packets": packets, "frames": frames_total,
           "seconds": time.time() - start, "reports": len(reports)}
# The rate from the two reports furthest apart within one contiguous stretch. Across a jump (a
# capture gap, frames a slow client lost), the capture times after it are the new device's first
# estimates and the frames lost the clock's count: true to milliseconds, not to 200 ppm of a
# few seconds.
pairs = [(a, b) for a in reports for b in reports if a["stretch"] == b["stretch"] and b["ntp"] - a["ntp"] >= 2]
figures["srRateStretches"] = len({a["stretch"] for a, _ in pairs})
if pairs:
    a, b = max(pairs, key=lambda pair: pair[1]["ntp"] - pair[0]["ntp"])
    figures["srRateSeconds"] = b["ntp"] - a["ntp"]
    ticks = (b["rtp"] - a["rtp"]) & 0xFFFFFFFF
    measured = ticks / (b["ntp"] - a["ntp"])
    figures["srRate"] = measured
    figures["srRatePPM"] = (measured / rate - 1) * 1e6
    # A report's time is recd's capture clock: the least delayed read since the device opened.
    # In the first seconds after it opens (or comes back) that clock is still settling; under
    # ThreadSanitizer on a loaded machine, by up to a few ms (CI: 1.8 ms over 5 s, 367 ppm), which
    # the tests then allow as SETTLING_MS. A wrong clock (the send time, another rate) is off by more.
    allowed = 200 + settling_ms * 1e3 / figures["srRateSeconds"]
    if abs(figures["srRatePPM"]) > allowed:
        fail(f"two sender reports {figures['srRateSeconds']:.2f} s apart give {measured:.1f} Hz, "
             f"{figures['srRatePPM']:.0f} ppm from {rate} (allowed {allowed:.0f})")
sock.sendall(f"TEARDOWN {url} RTSP/1.0\r\nCSeq: 1000\r\nSession: {session}\r\n\r\n".encode())
print(json.dumps(figures))
