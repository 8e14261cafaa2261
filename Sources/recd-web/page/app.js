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
  button.querySelector('.state').textContent = view.state || '';
  button.querySelector('.state').className = 'state ' + (view.state || '');
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
}

function showTime() {
  const active = page.state && ['recording', 'paused'].includes(page.state.name);
  $('time').textContent = active ? formatDuration(page.currentTime) : '';
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

// MARK: Spectrogram: a column per 50 ms, frequency up (linear, 0 Hz at the bottom row, half
// the rate at the top), -100 dBFS black to -20 dBFS white.

function drawColumn(column) {
  const canvas = $('spectrogram');
  const context = canvas.getContext('2d');
  const height = canvas.height, width = canvas.width, bins = column.dBFS.length;
  context.drawImage(canvas, -1, 0);
  const image = context.createImageData(1, height);
  for (let row = 0; row < height; row += 1) {
    // The bins this row covers (the loudest is shown, so a narrow sound is not averaged away).
    const low = Math.floor((height - 1 - row) * bins / height);
    const high = Math.max(low + 1, Math.floor((height - row) * bins / height));
    let dB = -160;
    for (let bin = low; bin < high; bin += 1) dB = Math.max(dB, column.dBFS[bin]);
    const [r, g, b] = shade((dB + 100) / 80);
    image.data.set([r, g, b, 255], row * 4);
  }
  context.putImageData(image, width - 1, 0);
  page.spectrum.columns += 1;
  // The last column's capture time: with `columns`, it tells a test whether any was lost.
  page.spectrum.lastTime = column.time;
  page.spectrum.period = column.period;
  page.spectrum.sampleRate = column.sampleRate;
  page.spectrum.size = column.size;
  page.spectrum.height = height;
  $('spectrum-scale').textContent = '0 – ' + (column.sampleRate / 2000).toFixed(1) + ' kHz';
}

function shade(value) {
  const v = Math.max(0, Math.min(1, value));
  return [Math.round(255 * Math.min(1, v * 1.6)), Math.round(255 * Math.max(0, v * 1.6 - 0.6)),
          Math.round(255 * (v < 0.4 ? v * 2 : Math.max(0, 1.6 - v * 2) + Math.max(0, v * 2.5 - 1.5)))];
}

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
  const entry = { file, startedAt: event.start, duration: event.duration, format: file.split('.').pop() };
  const start = fileStart(entry);
  if (start >= page.day.end || start + entry.duration <= page.day.start) return;
  page.recordings.push(entry);
  drawDay(page.day, page.recordings);
}

function fileStart(file) { return Date.parse(file.startedAt || file.modified) / 1000 - (file.startedAt ? 0 : file.duration); }

function drawDay(day, files) {
  const svg = $('timeline');
  const span = day.end - day.start;
  const x = (time) => Math.max(0, Math.min(1440, (time - day.start) / span * 1440));
  const rect = (from, to, y, height, fill, title) => {
    const element = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
    const left = x(from);
    element.setAttribute('x', left);
    element.setAttribute('width', Math.max(1, x(to) - left));
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
  // Night, twilight, day.
  if (day.sunrise && day.sunset) {
    rect(day.start, day.dawn || day.sunrise, 0, 60, '#2c3e5088');
    if (day.dawn) rect(day.dawn, day.sunrise, 0, 60, '#5d6d7e66');
    if (day.dusk) rect(day.sunset, day.dusk, 0, 60, '#5d6d7e66');
    rect(day.dusk || day.sunset, day.end, 0, 60, '#2c3e5088');
  }
  for (const window of day.windows) rect(window.start, window.end, 0, 8, '#2e86c1', 'scheduled');
  for (const file of files) {
    const start = fileStart(file);
    rect(start, start + file.duration, 14, 40, '#c0392b', file.file).dataset.file = file.file;
  }
  for (let hour = 0; hour <= 24; hour += 6) rect(day.start + hour * 3600, day.start + hour * 3600, 56, 4, '#888');
  const time = (seconds) => new Date(seconds * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  $('sun').textContent = day.sunrise && day.sunset ? `sunrise ${time(day.sunrise)} · sunset ${time(day.sunset)}` : '';

  // Items already listed stay as they are: a refresh must not stop a player that plays.
  const list = $('recordings');
  const listed = new Map(Array.from(list.children).map((item) => [item.dataset.file, item]));
  const canListen = page.roles.includes('listen');
  const items = [...files].reverse().map((file) => {
    const kept = listed.get(file.file);
    if (kept && kept.dataset.listen === String(canListen)) return kept;
    const item = document.createElement('li');
    item.dataset.file = file.file;
    item.dataset.listen = String(canListen);
    const url = fileURL('/recordings/', file.file);
    const title = document.createElement('div');
    title.textContent = `${time(fileStart(file))} ${file.file} · ${formatDuration(file.duration)} · ${file.format}`;
    if (file.startClock === 'unsynchronized' || file.startClock === 'redated') {
      const mark = document.createElement('span');
      mark.className = file.startClock === 'unsynchronized' ? 'unverified' : '';
      mark.textContent = file.startClock === 'unsynchronized' ? ' · time unverified (clock not synchronized)' : ' · re-dated';
      title.appendChild(mark);
    }
    item.appendChild(title);
    if (canListen) {
      const player = document.createElement('audio');
      player.controls = true;
      player.preload = 'none';
      player.src = url;
      const download = document.createElement('a');
      download.href = url;
      download.download = file.file.split('/').pop();
      download.textContent = 'download';
      const show = document.createElement('button');
      show.textContent = 'spectrogram';
      show.className = 'link';
      show.addEventListener('click', () => showFileSpectrogram(item, file));
      item.append(player, download, ' ', show);
    }
    return item;
  });
  list.replaceChildren(...items);
}

// A recorded file's spectrogram, computed by recd-web (doc/web.md): drawn as the live one,
// a column per pixel across the file, 0 Hz at the bottom.
async function showFileSpectrogram(item, file) {
  let canvas = item.querySelector('canvas.file-spectrogram');
  if (canvas) { canvas.remove(); return; }
  canvas = document.createElement('canvas');
  canvas.className = 'file-spectrogram';
  canvas.height = 256;
  canvas.width = Math.min(1200, Math.max(100, Math.round(item.clientWidth || 600)));
  item.appendChild(canvas);
  try {
    const spectrogram = await api(fileURL('/api/spectrogram/', file.file) + '?columns=' + canvas.width);
    const levels = Uint8Array.from(atob(spectrogram.levels), (c) => c.charCodeAt(0));
    const context = canvas.getContext('2d');
    canvas.width = spectrogram.columns;
    const image = context.createImageData(spectrogram.columns, canvas.height);
    const bins = spectrogram.bins, height = canvas.height;
    for (let column = 0; column < spectrogram.columns; column += 1) {
      for (let row = 0; row < height; row += 1) {
        const low = Math.floor((height - 1 - row) * bins / height);
        const high = Math.max(low + 1, Math.floor((height - row) * bins / height));
        let level = 0;
        for (let bin = low; bin < high; bin += 1) level = Math.max(level, levels[column * bins + bin]);
        const dB = spectrogram.floor + level * spectrogram.step;
        image.data.set([...shade((dB + 100) / 80), 255], (row * spectrogram.columns + column) * 4);
      }
    }
    context.putImageData(image, 0, 0);
    canvas.dataset.drawn = String(spectrogram.columns);
    canvas.dataset.sampleRate = String(spectrogram.sampleRate);
    canvas.dataset.size = String(spectrogram.size);
  } catch (error) { say(error.message); canvas.remove(); }
}

function formatDuration(seconds) {
  const whole = Math.floor(seconds);
  const pad = (n) => String(n).padStart(2, '0');
  return `${pad(Math.floor(whole / 3600))}:${pad(Math.floor(whole / 60) % 60)}:${pad(whole % 60)}.${Math.floor((seconds - whole) * 10)}`;
}

loadSession().catch((error) => say(error.message));
