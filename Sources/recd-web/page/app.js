'use strict';
// recd's page: state, meters and spectrum from a subscription on recd (over /api/live), the
// day's recordings and schedule, controls and live listening by role. Everything is computed
// in recd (levels, the spectrum's columns) once for all viewers; the page only draws, and
// while it is hidden it closes its sockets, so that recd computes nothing for it.
const $ = (id) => document.getElementById(id);
// What the page has seen, for people and for the tests that drive it in a browser.
const page = window.recdPage = {
  roles: [], state: null, levels: null, levelsSeen: 0, trigger: null, currentTime: 0,
  spectrum: { columns: 0, sampleRate: 0, size: 0, height: 256 },
  // delay: how far behind the input the last chunk will be heard (seconds).
  audio: { chunks: 0, frames: 0, lostFrames: 0, rms: 0, delay: null, playing: false, error: null },
  recordings: [], day: null, errors: [], triggerEvents: [],
  // A station of several sources: their names, the one shown (?source= in the address), and
  // each one's state and loudest level for the switcher. One source: none of this.
  sources: [], source: null, sourceViews: {},
};

// The path with the source shown, for what recd answers per source.
function withSource(path) {
  return page.source ? path + (path.includes('?') ? '&' : '?') + 'source=' + encodeURIComponent(page.source) : path;
}

// A recording's URL under `prefix`: its path in the source's folder on a station of several.
function fileURL(prefix, file) {
  return prefix + ((page.source ? page.source + '/' : '') + file).split('/').map(encodeURIComponent).join('/');
}

async function api(path, options = {}) {
  const response = await fetch(path, Object.assign({ credentials: 'same-origin' }, options));
  const text = await response.text();
  let body = text;
  try { body = JSON.parse(text); } catch (_) { /* text */ }
  if (!response.ok) {
    const message = body && body.error ? body.error.message : text || response.statusText;
    throw new Error(message);
  }
  return body;
}

function say(text) {
  const element = $('message');
  element.textContent = text || '';
  element.hidden = !text;
  if (text) page.errors.push(text);
}

// MARK: Session and roles

async function loadSession() {
  const session = await api('/api/session');
  page.roles = session.roles;
  page.station = session.station || '';
  $('station').textContent = page.station;
  const can = (role) => page.roles.includes(role);
  $('login').hidden = session.tokenRoles.every((role) => can(role));
  // Signed in: a role that needs a token is held.
  $('logout').hidden = !page.roles.some((role) => !session.open.includes(role));
  $('controls').hidden = !can('control');
  $('live').hidden = !can('observe');
  $('day').hidden = !can('observe');
  $('devices').hidden = !can('observe');
  $('hear-row').hidden = !can('listen');
  if (!can('observe')) { $('state').textContent = 'sign in to see the station'; return; }
  // The station's status first: several sources make a switcher, and pick the one shown.
  try {
    const station = (await api('/api/status')).result;
    page.sources = station.sources ? station.sources.map((source) => source.source) : [];
    const asked = new URLSearchParams(location.search).get('source');
    page.source = page.sources.length ? (page.sources.includes(asked) ? asked : page.sources[0]) : null;
    drawSources();
  } catch (error) { say(error.message); }
  showSource();
  loadDevices();
}

// Everything shown for the source: its live view, its day, its stream's URL.
function showSource() {
  connectLive();
  loadDay();
  loadStream();
  api(withSource('/api/status')).then((status) => {
    page.recordingsDirectory = status.result.recordingsDirectory;
    showClock(status.result.clock);
  }).catch(() => {});
}

// MARK: Sources: a button per source with its state and level; the one shown is pressed.

function drawSources() {
  const nav = $('sources');
  nav.hidden = page.sources.length === 0;
  nav.replaceChildren(...page.sources.map((name) => {
    const button = document.createElement('button');
    button.dataset.source = name;
    button.setAttribute('aria-pressed', String(name === page.source));
    const label = document.createElement('span');
    label.className = 'name';
    label.textContent = name;
    const state = document.createElement('span');
    state.className = 'state';
    const level = document.createElement('span');
    level.className = 'level';
    level.setAttribute('role', 'meter');
    level.setAttribute('aria-label', name + ' level');
    level.setAttribute('aria-valuemin', String(meterFloor));
    level.setAttribute('aria-valuemax', '0');
    level.appendChild(document.createElement('span'));
    button.append(label, state, level);
    button.addEventListener('click', () => selectSource(name));
    return button;
  }));
  for (const name of page.sources) showSourceView(name);
}

function selectSource(name) {
  if (name === page.source) return;
  page.source = name;
  history.replaceState(null, '', '?source=' + encodeURIComponent(name));
  for (const button of $('sources').children) button.setAttribute('aria-pressed', String(button.dataset.source === name));
  disconnect();
  page.state = null;
  page.levels = null;
  page.trigger = null;
  $('recordings').replaceChildren();
  $('meters').replaceChildren();
  showSource();
}

// A notification for one of the sources: its button's state and level.
function updateSourceView(name, topic, value) {
  const view = page.sourceViews[name] || (page.sourceViews[name] = { state: null, peak: null });
  if (topic === 'state') view.state = value.name;
  else if (topic === 'levels') view.peak = value.channels.length ? Math.max(...value.channels.map((channel) => channel.peak)) : null;
  else return;
  showSourceView(name);
}

function showSourceView(name) {
  const button = $('sources').querySelector(`button[data-source="${name}"]`);
  const view = page.sourceViews[name];
  if (!button || !view) return;
  // Written only when it changes: levels come 20 times a second, and WebKit loses a click whose
  // press landed on a text node that was replaced before the release.
  const state = button.querySelector('.state'), text = view.state || '';
  if (state.textContent !== text) {
    state.textContent = text;
    state.className = 'state ' + text;
  }
  const level = button.querySelector('.level');
  const fraction = view.peak === null ? 0 : Math.max(0, Math.min(1, (view.peak - meterFloor) / -meterFloor));
  level.firstChild.style.width = (fraction * 100).toFixed(1) + '%';
  level.setAttribute('aria-valuenow', view.peak === null ? String(meterFloor) : view.peak.toFixed(1));
}

// The sound cards and the ids that keep naming them (devices.list): which one recd.toml names,
// and what to write for the others.
async function loadDevices() {
  try {
    const answer = (await api('/api/devices')).result;
    $('devices-warning').hidden = !answer.warning;
    $('devices-warning').textContent = answer.warning || '';
    const list = $('cards');
    list.replaceChildren();
    for (const card of answer.cards) {
      const item = document.createElement('li');
      const marks = card.configured ? (card.inUse ? 'configured, in use' : 'configured') : '';
      item.textContent = `card ${card.index} ${card.id} · ${card.name}` + (card.usb ? ` · USB ${card.usb}` : '') + (marks ? ` · ${marks}` : '');
      const id = document.createElement('code');
      id.textContent = `device = "${card.stableDevice}"`;
      item.append(document.createElement('br'), id);
      if (card.configured) item.classList.add('configured');
      list.append(item);
    }
    if (answer.cards.length === 0) list.textContent = `no sound card; the device is ${answer.current}`;
  } catch (error) { say(error.message); }
}
$('devices-refresh').addEventListener('click', loadDevices);

// recd-rtsp's URL with this page's host name, to copy into BirdNET-Go (doc/rtsp.md).
async function loadStream() {
  try {
    const stream = await api(withSource('/api/stream'));
    const credentials = stream.access === 'token' ? 'birdnet:TOKEN@' : '';
    const host = location.hostname.includes(':') ? `[${location.hostname}]` : location.hostname;
    $('stream-url').textContent = `rtsp://${credentials}${host}:${stream.port}${stream.path}`;
  } catch (error) { say(error.message); }
}

// The station's clock: marked while it is not synchronized (a Raspberry Pi before NTP), when
// every time shown may be off; files recorded meanwhile are re-dated once it is.
function showClock(clock) { $('clock').hidden = !clock || clock.synchronized; }

$('login').addEventListener('submit', async (event) => {
  event.preventDefault();
  try {
    await api('/api/login', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                              body: JSON.stringify({ token: $('token').value }) });
    $('token').value = '';
    say('');
    await loadSession();
  } catch (error) { say(error.message); }
});
$('logout').addEventListener('click', async () => {
  await api('/api/logout', { method: 'POST' });
  disconnect();
  await loadSession();
});

// MARK: Live state from recd's subscription

let live = null, liveRetry = 0, triggerPoll = null;

function connectLive() {
  if (live || document.hidden || !page.roles.includes('observe')) return;
  const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  live = new WebSocket(scheme + location.host + withSource('/api/live?spectrum=1'));
  // A message is one or more of recd's lines (doc/web.md). On a station of several sources
  // each names its source: every one feeds the switcher, the shown one the page.
  const receive = (update) => {
    if (update.source !== undefined) {
      updateSourceView(update.source, update.topic, update.value);
      if (update.source !== page.source) return;
    }
    apply(update.topic, update.value);
  };
  live.onmessage = (event) => {
    for (const line of event.data.split('\n')) {
      const message = JSON.parse(line);
      if (message.result && message.result.snapshot) {
        for (const entry of message.result.snapshot) receive(entry);
      } else if (message.method === 'changed') {
        receive(message.params);
      }
    }
    liveRetry = 0;
  };
  live.onclose = () => {
    live = null;
    if (document.hidden) return;
    $('state').textContent = 'reconnecting…';
    liveRetry = Math.min(liveRetry + 1, 10);
    setTimeout(connectLive, 500 * liveRetry);
  };
}

function disconnect() {
  if (live) { live.onclose = null; live.close(); live = null; }
  stopHearing();
}

// Hidden (another tab, the phone locked): nothing is computed for this page.
document.addEventListener('visibilitychange', () => {
  if (document.hidden) disconnect(); else connectLive();
});

function apply(topic, value) {
  switch (topic) {
    case 'state': showState(value); break;
    case 'currentTime': page.currentTime = value; showTime(); break;
    case 'levels': page.levels = value; page.levelsSeen += 1; drawMeters(); break;
    case 'spectrum': if (value) drawColumn(value); break;
    case 'error': if (value) say(value.message); break;
    case 'warning': if (value) say(value.message || value.code); break;
    case 'trigger':
      if (value) page.triggerEvents.push(Object.assign({ seenAt: Date.now() }, value));
      if (value && value.kind === 'closed') showClosedEvent(value);
      loadDaySoon();
      break;
    case 'segment': loadDaySoon(); break;
    case 'redated': loadDaySoon(); break;
  }
}

function showState(state) {
  page.state = state;
  const element = $('state');
  element.textContent = state.name;
  element.className = 'state ' + state.name;
  const active = ['preparing', 'recording', 'paused', 'waitingForDevice', 'stopping'].includes(state.name);
  const armed = active && state.recording && state.recording.trigger;
  if (armed && !triggerPoll) {
    triggerPoll = setInterval(pollTrigger, 1000);
    pollTrigger();
  } else if (!armed && triggerPoll) {
    clearInterval(triggerPoll);
    triggerPoll = null;
    page.trigger = null;
  }
  for (const button of document.querySelectorAll('#controls button')) {
    const method = button.dataset.method;
    button.disabled = {
      listen: state.name === 'listening' || active,
      unlisten: state.name !== 'listening',
      start: active,
      split: state.name !== 'recording' || Boolean(armed),
      stop: !active && state.name !== 'listening',
    }[method] || false;
  }
  if (!active) loadDaySoon();
  showTime();
  showInTab();
}

// The tab says what the station does: its name and state in the title, and a favicon that is
// a red dot while recording, a blue one while listening, a grey ring otherwise.
function showInTab() {
  const name = page.state ? page.state.name : 'connecting';
  const where = [page.station, page.source].filter(Boolean).join(' · ') || 'recd';
  document.title = `${where}: ${name}` + (page.state && page.state.name === 'recording' ? ' ' + formatDuration(page.currentTime).slice(0, 8) : '');
  const colour = { recording: '#c0392b', preparing: '#c0392b', stopping: '#c0392b', listening: '#2c74a8',
                   waitingForDevice: '#d68910', failed: '#d68910' }[name];
  if (page.favicon === colour) return;
  page.favicon = colour;
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 32;
  const context = canvas.getContext('2d');
  context.beginPath();
  context.arc(16, 16, 12, 0, 2 * Math.PI);
  if (colour) { context.fillStyle = colour; context.fill(); } else { context.lineWidth = 4; context.strokeStyle = '#808b96'; context.stroke(); }
  $('favicon').href = canvas.toDataURL('image/png');
}

function showTime() {
  const active = page.state && ['recording', 'paused'].includes(page.state.name);
  $('time').textContent = active ? formatDuration(page.currentTime) : '';
  if (active && Math.floor(page.currentTime) !== page.titleSecond) { page.titleSecond = Math.floor(page.currentTime); showInTab(); }
}

// The trigger's floor and levels are in status, not in a topic: asked for once a second
// while a sound-activated recording runs and the page is open.
async function pollTrigger() {
  try { page.trigger = (await api(withSource('/api/status'))).result.trigger || null; drawMeters(); } catch (_) { /* next time */ }
}

// MARK: Meters

const meterFloor = -60;

function drawMeters() {
  const channels = (page.levels && page.levels.channels) || [];
  const box = $('meters');
  while (box.children.length > channels.length) box.lastChild.remove();
  while (box.children.length < channels.length) {
    const row = document.createElement('div');
    row.className = 'meter';
    row.innerHTML = '<span></span><canvas width="300" height="16"></canvas><span></span>';
    box.appendChild(row);
  }
  channels.forEach((channel, index) => {
    const [label, canvas, value] = box.children[index].children;
    label.textContent = index + 1;
    value.textContent = channel.peak <= -160 ? '−∞' : channel.peak.toFixed(1) + ' dB';
    const context = canvas.getContext('2d');
    const x = (dB) => Math.max(0, Math.min(1, (dB - meterFloor) / -meterFloor)) * canvas.width;
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.fillStyle = '#8883';
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.fillStyle = channel.peak > -3 ? '#e74c3c' : '#27ae60';
    context.fillRect(0, 3, x(channel.average), canvas.height - 6);
    context.fillRect(x(channel.peak) - 1, 0, 2, canvas.height);
    const trigger = page.trigger;
    $('trigger-legend').hidden = !trigger;
    if (trigger) {
      for (const [level, colour] of [[trigger.floor, '#999'], [trigger.openLevel, '#e74c3c'], [trigger.closeLevel, '#f39c12']]) {
        if (level === undefined || level === null) continue;
        context.fillStyle = colour;
        context.fillRect(x(level) - 1, 0, 3, canvas.height);
      }
    }
  });
}

// MARK: Spectrogram: a column per 50 ms, newest on the right, frequency up over the range the
// viewer picks (the full band, 0–12 kHz where birds are, or a log scale), −100 dBFS black to
// −20 dBFS white. The columns are kept, so that a change of range redraws what is on screen.

const spectrumRanges = { full: null, '12000': 12000, log: 'log' };
// The browser may refuse storage (cookies off): the range is then the first, every time.
const stored = (() => { try { return localStorage.getItem('recd.spectrumRange'); } catch (_) { return null; } })();
const spectrum = { columns: [], range: stored in spectrumRanges ? stored : '12000' };
$('spectrum-range').value = spectrum.range;
$('spectrum-range').addEventListener('change', () => {
  spectrum.range = $('spectrum-range').value;
  try { localStorage.setItem('recd.spectrumRange', spectrum.range); } catch (_) { /* not kept */ }
  redrawSpectrogram();
});

// The frequency scale of a picture `height` rows high, for a spectrum of `sampleRate`: `hz(y)` is
// the frequency at height y (0 the bottom edge, `height` the top), `y(hz)` its inverse.
function frequencyScale(range, sampleRate, height) {
  const nyquist = sampleRate / 2;
  if (range === 'log') {
    const low = 50, high = nyquist;
    return { low, high, log: true,
             hz: (y) => low * Math.pow(high / low, y / height),
             y: (hz) => Math.log(Math.max(hz, low) / low) / Math.log(high / low) * height };
  }
  const high = Math.min(nyquist, spectrumRanges[range] || nyquist);
  return { low: 0, high, log: false, hz: (y) => high * y / height, y: (hz) => hz / high * height };
}

// The loudest bin under each row (a narrow sound is not averaged away): row 0 is the top.
function rowLevels(dBFS, size, sampleRate, scale, height) {
  const rows = new Float32Array(height);
  const binHz = sampleRate / size;
  for (let row = 0; row < height; row += 1) {
    const from = scale.hz(height - 1 - row), to = scale.hz(height - row);
    const low = Math.max(0, Math.min(dBFS.length - 1, Math.floor(from / binHz + 0.5)));
    const high = Math.max(low + 1, Math.min(dBFS.length, Math.floor(to / binHz + 0.5)));
    let dB = -160;
    for (let bin = low; bin < high; bin += 1) dB = Math.max(dB, dBFS[bin]);
    rows[row] = dB;
  }
  return rows;
}

function drawColumn(column) {
  const canvas = $('spectrogram');
  spectrum.columns.push(column);
  if (spectrum.columns.length > canvas.width) spectrum.columns.shift();
  const context = canvas.getContext('2d');
  context.drawImage(canvas, -1, 0);
  paintColumn(context, column, canvas.width - 1, canvas.height);
  page.spectrum.columns += 1;
  // The last column's capture time: with `columns`, it tells a test whether any was lost.
  page.spectrum.lastTime = column.time;
  if (page.spectrum.sampleRate !== column.sampleRate || page.spectrum.period !== column.period) {
    page.spectrum.sampleRate = column.sampleRate;
    page.spectrum.period = column.period;
    drawSpectrumAxes();
  }
  page.spectrum.size = column.size;
  page.spectrum.height = canvas.height;
}

function paintColumn(context, column, x, height) {
  const scale = frequencyScale(spectrum.range, column.sampleRate, height);
  const rows = rowLevels(column.dBFS, column.size, column.sampleRate, scale, height);
  const image = context.createImageData(1, height);
  for (let row = 0; row < height; row += 1) image.data.set([...shade((rows[row] + 100) / 80), 255], row * 4);
  context.putImageData(image, x, 0);
}

function redrawSpectrogram() {
  const canvas = $('spectrogram');
  const context = canvas.getContext('2d');
  context.fillStyle = '#000';
  context.fillRect(0, 0, canvas.width, canvas.height);
  const first = canvas.width - spectrum.columns.length;
  spectrum.columns.forEach((column, index) => paintColumn(context, column, first + index, canvas.height));
  drawSpectrumAxes();
}

// Frequencies worth a label on a scale: every kHz up to 12, every 2 or 4 above; on a log scale
// 1-2-5 steps.
function frequencyTicks(scale) {
  if (scale.log) return [100, 200, 500, 1000, 2000, 5000, 10000, 20000].filter((hz) => hz >= scale.low && hz <= scale.high);
  const step = scale.high <= 12000 ? 1000 : scale.high <= 24000 ? 2000 : 4000;
  const ticks = [];
  for (let hz = 0; hz <= scale.high + 1; hz += step) ticks.push(hz);
  return ticks;
}

function kHz(hz) { return hz >= 1000 ? (hz / 1000) + ' kHz' : hz + ' Hz'; }

// The kHz ruler beside the live spectrogram and the time ruler under it (seconds ago).
function drawSpectrumAxes() {
  const canvas = $('spectrogram');
  const sampleRate = page.spectrum.sampleRate;
  if (!sampleRate) return;
  const scale = frequencyScale(spectrum.range, sampleRate, canvas.height);
  page.spectrum.range = spectrum.range;
  page.spectrum.maxFrequency = scale.high;
  $('spectrum-axis').replaceChildren(...frequencyTicks(scale).map((hz) => {
    const label = document.createElement('span');
    label.dataset.hz = String(hz);
    label.textContent = kHz(hz);
    // As a fraction of the height, so that it stays right whatever size the canvas is shown at.
    label.style.top = (100 * (1 - scale.y(hz) / canvas.height)).toFixed(3) + '%';
    return label;
  }));
  const seconds = canvas.width * (page.spectrum.period || 0.05);
  const step = seconds > 40 ? 10 : 5;
  const times = [];
  for (let ago = 0; ago <= seconds; ago += step) times.push(ago);
  $('spectrum-time').replaceChildren(...times.map((ago) => {
    const label = document.createElement('span');
    label.textContent = ago === 0 ? 'now' : `−${ago} s`;
    label.style.left = (100 * (1 - ago / seconds)).toFixed(3) + '%';
    if (ago === 0) label.className = 'end';
    return label;
  }));
}

// The colour of a level on every spectrogram of the page and in recd-web's pictures
// (SpectrogramPicture.shade): `value` 0 at −100 dBFS, 1 at −20 dBFS.
function shade(value) {
  const v = Math.max(0, Math.min(1, value));
  return [Math.round(255 * Math.min(1, v * 1.6)), Math.round(255 * Math.max(0, v * 1.6 - 0.6)),
          Math.round(255 * (v < 0.4 ? v * 2 : Math.max(0, 1.6 - v * 2) + Math.max(0, v * 2.5 - 1.5)))];
}

// The dB legend under the spectrogram.
(function drawScale() {
  const canvas = $('spectrum-scale');
  const context = canvas.getContext('2d');
  const image = context.createImageData(canvas.width, canvas.height);
  for (let x = 0; x < canvas.width; x += 1) {
    const colour = [...shade(x / (canvas.width - 1)), 255];
    for (let y = 0; y < canvas.height; y += 1) image.data.set(colour, (y * canvas.width + x) * 4);
  }
  context.putImageData(image, 0, 0);
})();

// MARK: Hearing the input: a tap at the browser's own rate, one channel, played about
// 0.15–0.5 s behind.

let hearing = null;

$('hear').addEventListener('click', () => (hearing ? stopHearing() : startHearing()));

function startHearing() {
  const AudioContextType = window.AudioContext || window.webkitAudioContext;
  const audio = new AudioContextType();
  const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
  const socket = new WebSocket(scheme + location.host + withSource('/api/audio?rate=' + audio.sampleRate));
  socket.binaryType = 'arraybuffer';
  hearing = { audio, socket, next: 0 };
  page.audio.playing = true;
  $('hear').textContent = 'Stop hearing';
  socket.onmessage = (event) => {
    if (typeof event.data === 'string') { $('hear-state').textContent = 'live'; return; }
    play(event.data);
  };
  socket.onclose = (event) => {
    if (hearing && hearing.socket === socket) {
      if (event.reason) { page.audio.error = event.reason; say(event.reason); }
      stopHearing();
    }
  };
  audio.resume();
}

function play(data) {
  const view = new DataView(data);
  const headerBytes = view.getUint32(4, true), frames = view.getUint32(24, true), lost = view.getUint32(28, true);
  const captured = view.getFloat64(16, true);
  const samples = new Float32Array(data, headerBytes, frames);
  let sum = 0;
  for (const sample of samples) sum += sample * sample;
  page.audio.chunks += 1;
  page.audio.frames += frames;
  page.audio.lostFrames += lost;
  page.audio.rms = Math.sqrt(sum / Math.max(1, frames));
  const audio = hearing.audio;
  const buffer = audio.createBuffer(1, frames, audio.sampleRate);
  buffer.copyToChannel(samples, 0);
  const source = audio.createBufferSource();
  source.buffer = buffer;
  source.connect(audio.destination);
  // Behind by more than half a second (the tab was busy): start afresh, not ever later.
  if (hearing.next < audio.currentTime + 0.05 || hearing.next > audio.currentTime + 0.5) hearing.next = audio.currentTime + 0.15;
  source.start(hearing.next);
  // The chunk's first frame was captured at `captured` (NaN while recd does not know yet);
  // it is heard at hearing.next.
  if (Number.isFinite(captured)) page.audio.delay = Date.now() / 1000 - captured + (hearing.next - audio.currentTime);
  hearing.next += frames / audio.sampleRate;
}

function stopHearing() {
  if (!hearing) return;
  const { audio, socket } = hearing;
  hearing = null;
  socket.onclose = null;
  socket.close();
  audio.close();
  page.audio.playing = false;
  $('hear').textContent = 'Hear it';
  $('hear-state').textContent = '';
}

// MARK: Controls

for (const button of document.querySelectorAll('#controls button')) {
  button.addEventListener('click', async () => {
    try {
      await api('/api/control/' + button.dataset.method, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(Object.assign(JSON.parse(button.dataset.params || '{}'), page.source ? { source: page.source } : {})),
      });
      say('');
    } catch (error) { say(error.message); }
  });
}

// MARK: The day: recordings, trigger events and the schedule's windows on 24 hours, sunrise
// and sunset from [schedule]'s place; each file with a player and a download.

let dayTimer = null;
function loadDaySoon() { clearTimeout(dayTimer); dayTimer = setTimeout(loadDay, 300); }

// The day shown follows today until someone picks another.
let followToday = true;
$('date').addEventListener('change', () => { followToday = false; loadDay(); });

async function loadDay() {
  const date = followToday ? '' : $('date').value;
  try {
    const [day, list, status] = await Promise.all([api(withSource('/api/day' + (date ? '?date=' + date : ''))),
                                                   api(withSource('/api/recordings')), api(withSource('/api/status'))]);
    showClock(status.result.clock);
    if (followToday) $('date').value = day.day;
    if (page.day && page.day.day !== day.day) forgetPictures();
    page.day = day;
    page.recordings = list.result.recordings.filter((file) => {
      const start = fileStart(file);
      return start < day.end && start + file.duration > day.start;
    });
    drawDay(day, page.recordings);
  } catch (error) { say(error.message); }
}

// A closed event is on the timeline at once, from what the event says (its file is final
// then); the listing that follows replaces it with what the file itself says.
function showClosedEvent(event) {
  const directory = page.recordingsDirectory;
  if (!page.day || !directory || !event.path.startsWith(directory + '/')) return;
  const file = event.path.slice(directory.length + 1);
  if (page.recordings.some((known) => known.file === file)) return;
  const entry = { file, startedAt: event.start, duration: event.duration, format: file.split('.').pop(),
                  end: event.reason === 'hang' ? 'event' : 'end' };
  const start = fileStart(entry);
  if (start >= page.day.end || start + entry.duration <= page.day.start) return;
  page.recordings.push(entry);
  drawDay(page.day, page.recordings);
}

function fileStart(file) { return Date.parse(file.startedAt || file.modified) / 1000 - (file.startedAt ? 0 : file.duration); }

// A sound-activated recording's event: its own file, ended by its sound (or cut by the
// recording's end or a maximum length: then a file of a triggered session all the same).
function isEvent(file) { return file.end === 'event'; }

// The span shown: the whole day, or one hour of it (a tap on the timeline zooms to its hour).
let zoomHour = null;
function viewSpan(day) {
  if (zoomHour === null) return [day.start, day.end];
  const start = day.start + zoomHour * 3600;
  return [start, Math.min(day.end, start + 3600)];
}
function zoom(hour) {
  zoomHour = hour;
  $('zoom-out').hidden = hour === null;
  $('timeline').classList.toggle('zoomed', hour !== null);
  if (page.day) drawDay(page.day, page.recordings);
}
$('zoom-out').addEventListener('click', () => zoom(null));
$('timeline').addEventListener('click', (event) => {
  if (!page.day) return;
  if (zoomHour !== null) return zoom(null);
  const box = $('timeline').getBoundingClientRect();
  const fraction = (event.clientX - box.left) / box.width;
  // A day of 23 or 25 hours (the clocks change) has 23 or 25 to tap.
  const hours = Math.round((page.day.end - page.day.start) / 3600);
  zoom(Math.max(0, Math.min(hours - 1, Math.floor(fraction * (page.day.end - page.day.start) / 3600))));
});
$('timeline').addEventListener('keydown', (event) => {
  if (!page.day) return;
  const hours = Math.round((page.day.end - page.day.start) / 3600);
  if (event.key === 'Escape') zoom(null);
  else if (event.key === 'Enter' || event.key === ' ') {
    zoom(zoomHour === null ? Math.max(0, Math.min(hours - 1, Math.floor((Date.now() / 1000 - page.day.start) / 3600))) : null);
  }
  else if (event.key === 'ArrowRight' && zoomHour !== null) zoom(Math.min(hours - 1, zoomHour + 1));
  else if (event.key === 'ArrowLeft' && zoomHour !== null) zoom(Math.max(0, zoomHour - 1));
  else return;
  event.preventDefault();
});

// A time of day on the 24-hour clock (a station's log reads so, and a ruler's labels stay short).
function clock(seconds, withSeconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], Object.assign({ hour: '2-digit', minute: '2-digit', hourCycle: 'h23' },
                                                                        withSeconds ? { second: '2-digit' } : {}));
}

function drawDay(day, files) {
  const svg = $('timeline');
  const [viewStart, viewEnd] = viewSpan(day);
  const span = viewEnd - viewStart;
  const x = (time) => Math.max(0, Math.min(1440, (time - viewStart) / span * 1440));
  const styles = getComputedStyle(document.documentElement);
  const colour = (name) => styles.getPropertyValue(name).trim();
  const rect = (from, to, y, height, fill, title, minimum = 1) => {
    const element = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
    const left = x(from);
    element.setAttribute('x', left);
    element.setAttribute('width', Math.max(minimum, x(to) - left));
    element.setAttribute('y', y);
    element.setAttribute('height', height);
    element.setAttribute('fill', fill);
    if (title) {
      const label = document.createElementNS('http://www.w3.org/2000/svg', 'title');
      label.textContent = title;
      element.appendChild(label);
    }
    svg.appendChild(element);
    return element;
  };
  svg.replaceChildren();
  // Night, civil twilight (dawn to sunrise, sunset to dusk), day; sunrise and sunset as lines.
  if (day.sunrise && day.sunset) {
    rect(day.start, day.dawn || day.sunrise, 0, 80, colour('--night'));
    if (day.dawn) rect(day.dawn, day.sunrise, 0, 80, colour('--twilight'), `civil dawn ${clock(day.dawn)}`);
    if (day.dusk) rect(day.sunset, day.dusk, 0, 80, colour('--twilight'), `civil dusk ${clock(day.dusk)}`);
    rect(day.dusk || day.sunset, day.end, 0, 80, colour('--night'));
    for (const [name, time] of [['sunrise', day.sunrise], ['sunset', day.sunset]]) {
      if (time < viewStart || time > viewEnd) continue;
      const line = rect(time, time, 0, 80, '#f1c40f', `${name} ${clock(time)}`, 2);
      line.dataset.sun = name;
      line.dataset.time = String(time);
    }
  }
  for (const window of day.windows) rect(window.start, window.end, 0, 8, colour('--window'), `scheduled ${clock(window.start)}–${clock(window.end)}`);
  for (const file of files) {
    const start = fileStart(file);
    if (start + file.duration < viewStart || start > viewEnd) continue;
    const title = `${clock(start, true)} ${file.file} · ${formatDuration(file.duration)}`;
    if (isEvent(file)) {
      // Marks sized by loudness: the file's peak, −60 dBFS to 0 over the band's height.
      const peak = page.peaks[file.file];
      const loudness = peak === undefined ? 0.3 : Math.max(0.1, Math.min(1, (peak + 60) / 60));
      const mark = rect(start, start + file.duration, 80 - 26 * loudness, 26 * loudness, colour('--event'),
                        title + (peak === undefined ? '' : ` · peak ${peak.toFixed(1)} dBFS`), 3);
      mark.dataset.file = file.file;
      mark.dataset.event = 'true';
    } else {
      rect(start, start + file.duration, 12, 36, colour('--file'), title, 2).dataset.file = file.file;
    }
  }
  // The hours under it: every three of a day (six on a phone), every ten minutes of an hour.
  const narrow = svg.clientWidth > 0 && svg.clientWidth < 600;
  const step = zoomHour === null ? (narrow ? 6 : 3) * 3600 : (narrow ? 1200 : 600);
  const hours = [];
  for (let time = viewStart; time <= viewEnd + 1; time += step) hours.push(time);
  $('hours').replaceChildren(...hours.map((time) => {
    const label = document.createElement('span');
    label.textContent = clock(time);
    label.style.left = (100 * (time - viewStart) / span).toFixed(3) + '%';
    return label;
  }));
  svg.setAttribute('aria-label', `recordings on ${day.day}` + (zoomHour === null ? '' : `, ${clock(viewStart)} to ${clock(viewEnd)}`)
                   + `: ${files.length} files; press Enter to zoom to an hour, arrows to move, Escape for the whole day`);
  $('sun').textContent = day.sunrise && day.sunset
    ? `sunrise ${clock(day.sunrise)} · sunset ${clock(day.sunset)}` + (day.dawn ? ` · civil twilight from ${clock(day.dawn)} to ${clock(day.dusk)}` : '') : '';
  drawList(files);
  // The events' peaks size their marks: the pictures of those in view, the newest 48 at most
  // (a busy day has hundreds; recd-web renders one at a time).
  if (page.roles.includes('listen')) {
    const shown = files.filter((file) => isEvent(file) && fileStart(file) < viewEnd && fileStart(file) + file.duration > viewStart);
    for (const file of shown.slice(-48)) if (!(file.file in page.peaks)) loadPicture(file).catch(() => {});
  }
}

// The recordings of the day, newest first: each with its time, length, peak and format, its
// picture (recd-web's, loaded as it scrolls into view), a player and the downloads. Items
// already listed stay as they are, where they are: a refresh must not stop a player that plays.
function drawList(files) {
  const list = $('recordings');
  const listed = new Map(Array.from(list.children).map((item) => [item.dataset.file, item]));
  const canListen = page.roles.includes('listen');
  const items = [...files].reverse().map((file) => {
    const kept = listed.get(file.file);
    if (kept && kept.dataset.listen === String(canListen)) return kept;
    const item = document.createElement('li');
    item.dataset.file = file.file;
    item.dataset.listen = String(canListen);
    const title = document.createElement('div');
    title.className = 'title';
    const when = document.createElement('strong');
    when.textContent = clock(fileStart(file), true);
    const what = document.createElement('span');
    what.textContent = `${formatDuration(file.duration)} · ${file.format}` + (isEvent(file) ? ' · event' : '');
    const peak = document.createElement('span');
    peak.className = 'peak muted';
    const name = document.createElement('span');
    name.className = 'muted';
    name.textContent = file.file;
    title.append(when, what, peak, name);
    if (file.startClock === 'unsynchronized' || file.startClock === 'redated') {
      const mark = document.createElement('span');
      mark.className = file.startClock === 'unsynchronized' ? 'unverified' : 'muted';
      mark.textContent = file.startClock === 'unsynchronized' ? 'time unverified (clock not synchronized)' : 're-dated';
      title.appendChild(mark);
    }
    item.appendChild(title);
    if (canListen) {
      const url = fileURL('/recordings/', file.file);
      const picture = document.createElement('div');
      picture.className = 'spectrogram';
      const image = document.createElement('img');
      image.alt = `spectrogram of the recording at ${clock(fileStart(file), true)}`;
      image.className = 'file-picture';
      picture.append(image);
      const player = document.createElement('audio');
      player.controls = true;
      player.preload = 'none';
      player.src = url;
      player.setAttribute('aria-label', `play the recording at ${clock(fileStart(file), true)}`);
      const actions = document.createElement('div');
      actions.className = 'actions';
      const download = document.createElement('a');
      download.href = url;
      download.download = file.file.split('/').pop();
      download.textContent = 'download audio';
      const picturelink = document.createElement('a');
      picturelink.href = pictureURL(file);
      picturelink.download = file.file.split('/').pop().replace(/\.[^.]*$/, '') + '.png';
      picturelink.textContent = 'download picture';
      actions.append(download, picturelink);
      item.append(picture, player, actions);
      pictureObserver.observe(item);
    }
    showPeak(item, file.file);
    return item;
  });
  // Only what is out of place moves: replaceChildren would take every kept item out of the
  // page and put it back, and a player taken out while it loads may stop.
  items.forEach((item, index) => { if (list.children[index] !== item) list.insertBefore(item, list.children[index] || null); });
  while (list.children.length > items.length) list.lastElementChild.remove();
}

// Pictures (recd-web's PNG of a recording, with its rulers; doc/web.md): fetched once each,
// with what they show (the `Recd-Picture` header: the file's peak, where the plot is).
const pictures = new Map();
page.peaks = {};
page.pictures = {};

function pictureURL(file) {
  return fileURL('/api/picture/', file.file) + '?range=' + encodeURIComponent(spectrum.range);
}

function loadPicture(file) {
  const url = pictureURL(file);
  if (!pictures.has(url)) {
    pictures.set(url, (async () => {
      const response = await fetch(url, { credentials: 'same-origin' });
      if (!response.ok) throw new Error(await response.text());
      const info = JSON.parse(response.headers.get('Recd-Picture') || 'null');
      if (!info) throw new Error('recd-web said nothing of the picture');
      const picture = { url: URL.createObjectURL(await response.blob()), info };
      page.pictures[file.file] = info;
      if (page.peaks[file.file] !== info.peak) {
        page.peaks[file.file] = info.peak;
        const item = $('recordings').querySelector(`li[data-file="${CSS.escape(file.file)}"]`);
        if (item) showPeak(item, file.file);
        if (isEvent(file)) redrawDaySoon();
      }
      return picture;
    })());
    // A failure is asked again next time (recd-web was restarting, the file was being renamed).
    pictures.get(url).catch(() => pictures.delete(url));
  }
  return pictures.get(url);
}

// Another day: the pictures of the one before are let go (a page stays open for days).
function forgetPictures() {
  for (const promise of pictures.values()) promise.then((picture) => URL.revokeObjectURL(picture.url)).catch(() => {});
  pictures.clear();
  $('recordings').replaceChildren();  // its images were those URLs
}

function showPeak(item, name) {
  const peak = page.peaks[name];
  const element = item.querySelector('.peak');
  if (element) element.textContent = peak === undefined ? '' : peak <= -160 ? 'silent' : `peak ${peak.toFixed(1)} dBFS`;
}

let redrawTimer = null;
function redrawDaySoon() {
  clearTimeout(redrawTimer);
  redrawTimer = setTimeout(() => { if (page.day) drawDay(page.day, page.recordings); }, 200);
}

// A picture is fetched when its item comes into view, not for a whole day's list at once.
const pictureObserver = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue;
    pictureObserver.unobserve(entry.target);
    const file = page.recordings.find((known) => known.file === entry.target.dataset.file);
    const image = entry.target.querySelector('img.file-picture');
    if (!file || !image) continue;
    loadPicture(file).then((picture) => {
      image.src = picture.url;
      image.dataset.loaded = 'true';
    }).catch((error) => { image.alt = 'no picture: ' + error.message; });
  }
}, { rootMargin: '200px' });

function formatDuration(seconds) {
  const whole = Math.floor(seconds);
  const pad = (n) => String(n).padStart(2, '0');
  return `${pad(Math.floor(whole / 3600))}:${pad(Math.floor(whole / 60) % 60)}:${pad(whole % 60)}.${Math.floor((seconds - whole) * 10)}`;
}

loadSession().catch((error) => say(error.message));
