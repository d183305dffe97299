// app.js - the dictation page: microphone -> AudioWorklet -> Opus (WebCodecs)
// or 16-bit PCM -> sotto-server's /v1/stream (docs/PROTOCOL.md); the
// transcript shown as it is generated; reconnect + resume after a lost
// connection, keeping the transcript and resending unacknowledged audio.
// Every failure ends in a message and a stopped, released microphone.
'use strict';
const $ = (id) => document.getElementById(id);
const RATE = 48000, BLOCK = RATE / 50; // 20 ms blocks
// A session that never got `ready`: this many attempts to reach the server
// (0.5, 1, 2 s apart), then a stop with the microphone released.
const FIRST_TRIES = 4;
const SAVE_KEY = 'sotto.transcript.v1';

const S = {
  active: false, starting: false, done: false, stopping: false, stopSent: false,
  ws: null, streaming: false, session: null, token: null, lastSeq: 0, reconnects: 0, everReady: false,
  packets: [], next: 0, acked: 0, codec: 'pcm', encoder: null, tsUs: 0,
  ctx: null, node: null, media: null, speechEndAt: {}, finalLatency: null, resumes: 0, captures: 0,
  retryTimer: null, t0: 0, clock: null, speaking: false, pendingSince: null,
};
const T = new Transcript();

function setStatus(text, kind = '') { $('status').textContent = text; $('status').dataset.kind = kind; }
function showError(text) { $('error').textContent = text || ''; $('error').hidden = !text; }
function unitsPerPacket() { return S.codec === 'opus' ? 1 : BLOCK; }

// ---- the transcript: rendering, actions' state, autosave ------------------------

function render() {
  const box = $('transcript');
  const follow = box.scrollHeight - box.scrollTop - box.clientHeight < 40; // at the end: keep following
  T.render($('finals'), $('current'));
  if (follow) box.scrollTop = box.scrollHeight;
  if (!$('captionView').hidden) {
    T.renderCaptions($('captionLines'));
    // the page behind is inert while the view is open: new finals are announced here
    captionSaid = Math.min(captionSaid, T.finals.length); // after a Clear
    for (; captionSaid < T.finals.length; captionSaid++) {
      const p = document.createElement('p');
      p.textContent = T.finals[captionSaid].text;
      $('captionSaid').appendChild(p);
    }
  }
  const empty = T.empty();
  for (const id of ['copy', 'dlTxt', 'dlSrt', 'dlVtt', 'clear']) $(id).disabled = empty || (id !== 'copy' && id !== 'clear' && !T.finals.length);
  save();
}

// The finals are saved as they change (a few per minute), so a reload or a
// closed tab loses at most the utterance in progress.
let savedCount = -1, captionSaid = 0;
function save() {
  if (T.finals.length === savedCount) return;
  try {
    localStorage.setItem(SAVE_KEY, JSON.stringify({ finals: T.finals }));
    savedCount = T.finals.length;
  } catch (e) { /* private mode, storage full */ }
}
(function restore() {
  try {
    const j = JSON.parse(localStorage.getItem(SAVE_KEY) || 'null');
    if (j && Array.isArray(j.finals)) T.finals = j.finals.filter((f) => f && typeof f.text === 'string');
  } catch (e) { /* a damaged save is ignored */ }
})();

// ---- audio ------------------------------------------------------------------

async function setupEncoder() {
  S.codec = 'pcm';
  S.encoder = null;
  if ($('codec').value !== 'pcm' && 'AudioEncoder' in window) {
    const config = { codec: 'opus', sampleRate: RATE, numberOfChannels: 1, bitrate: 32000,
                     opus: { format: 'opus', frameDuration: 20000 } };
    try {
      const sup = await AudioEncoder.isConfigSupported(config);
      if (sup.supported) {
        S.encoder = new AudioEncoder({
          output: (chunk) => { const b = new Uint8Array(chunk.byteLength); chunk.copyTo(b); addPacket(b.buffer); },
          error: (e) => showError('Opus encoder: ' + e.message),
        });
        S.encoder.configure(config);
        S.codec = 'opus';
      }
    } catch (e) { S.encoder = null; }
  }
  $('codecShown').textContent = S.codec === 'opus' ? 'audio: Opus (WebCodecs), 48 kHz' : 'audio: PCM 16-bit, 48 kHz';
}

// The level in dB over a 60 dB range: speech sits around the middle, not at the top.
function showLevel(rms) {
  const pct = rms > 0 ? Math.max(0, Math.min(100, Math.round((20 * Math.log10(rms) + 60) / 60 * 100))) : 0;
  $('level').style.width = pct + '%';
  $('meter').setAttribute('aria-valuenow', String(pct));
}

function onBlock({ samples, rms }) {
  showLevel(rms);
  if (!S.active || S.stopping) return;
  if (S.encoder) {
    S.encoder.encode(new AudioData({ format: 'f32', sampleRate: RATE, numberOfFrames: samples.length,
                                     numberOfChannels: 1, timestamp: S.tsUs, data: samples }));
    S.tsUs += 20000;
  } else {
    const pcm = new Int16Array(samples.length);
    for (let i = 0; i < samples.length; i++) pcm[i] = Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32767)));
    addPacket(pcm.buffer);
  }
}

function addPacket(buf) { S.packets.push(buf); pump(); }

function setSpeech(on) {
  S.speaking = on;
  $('speech').dataset.on = String(on);
  $('speech').textContent = on ? 'speech detected' : 'no speech';
}

// How long the text is behind the voice: since the end of speech whose final
// has not come, or else the audio not yet acknowledged. Fixed width, no jargon.
function showDelay() {
  if (!S.active) { $('lag').textContent = ''; return; }
  const unacked = (S.packets.length - S.acked) * 0.02;
  const waiting = S.pendingSince != null ? (performance.now() - S.pendingSince) / 1000 : 0;
  const d = Math.max(unacked, waiting);
  $('lag').textContent = `text delay: ${d < 10 ? d.toFixed(1) : Math.round(d)} s`;
}

// Sends what the server has not yet been sent on this connection; `stop`
// once everything is out after Stop.
function pump() {
  const ws = S.ws;
  if (!ws || ws.readyState !== WebSocket.OPEN || !S.streaming) return;
  while (S.next < S.packets.length && ws.bufferedAmount < (1 << 20)) {
    const p = S.packets[S.next++];
    if (p) ws.send(p);
  }
  if (S.stopping && S.encoderFlushed && S.next >= S.packets.length && !S.stopSent) {
    ws.send(JSON.stringify({ type: 'stop' }));
    S.stopSent = true;
    setStatus('finishing…', 'live');
  }
}

// ---- access: servers started with --api-key (docs/SECURITY.md) ------------------------
// The page keeps only a short-lived client token: from the address's fragment
// (#token=ek_..., which is never sent to a server), or minted once from a key
// the user types (POST /v1/realtime/client_secrets), after which the key is
// forgotten. It goes in the WebSocket's subprotocol list as "sotto-key.TOKEN".

const A = { token: null, expires: 0 };

(function tokenFromFragment() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!m) return;
  A.token = decodeURIComponent(m[1]);
  A.expires = Infinity;
  history.replaceState(null, '', location.pathname + location.search); // out of the history
})();

function needAccess(msg) {
  $('access').hidden = false;
  A.token = null;
  fail(msg);
  $('accessKey').focus();
}

// A key or token typed into the access field becomes the page's token; false on failure.
async function takeCredential() {
  const v = $('accessKey').value.trim();
  $('accessKey').value = '';
  if (!v) return !!A.token && A.expires > Date.now();
  if (v.startsWith('ek_')) { A.token = v; A.expires = Infinity; return true; }
  try {
    const r = await fetch('/v1/realtime/client_secrets', { method: 'POST', headers: { Authorization: `Bearer ${v}` } });
    const j = await r.json().catch(() => ({}));
    if (!r.ok || !j.value) { showError(`The key was not accepted: ${(j.error && j.error.message) || r.status}`); return false; }
    A.token = j.value;
    A.expires = j.expires_at * 1000;
    return true;
  } catch (err) {
    showError(`Cannot reach the server for a token: ${err.message}`);
    return false;
  }
}

// ---- the connection -------------------------------------------------------------

function startMessage() {
  const m = { type: 'start', encoding: S.codec === 'opus' ? 'opus' : 'pcm_s16le', sample_rate: RATE, channels: 1,
              task: $('task').value };
  if ($('weights').value) m.weights = $('weights').value;
  m.language = $('language').value || 'auto';
  if ($('feed').value.trim()) {
    m.feed = $('feed').value.trim();
    if ($('feedKey').value) m.feed_key = $('feedKey').value;
  }
  return m;
}

function connect() {
  S.retryTimer = null;
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const url = `${proto}//${location.host}/v1/stream`;
  const ws = A.token ? new WebSocket(url, ['sotto.v1', `sotto-key.${A.token}`]) : new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  S.ws = ws;
  S.streaming = false;
  if (!S.reconnects) setStatus(S.session ? 'reconnecting…' : 'connecting…');
  ws.onopen = () => {
    if (S.session) ws.send(JSON.stringify({ type: 'resume', session: S.session, token: S.token, last_seq: S.lastSeq }));
    else ws.send(JSON.stringify(startMessage()));
  };
  ws.onmessage = (m) => { try { onEvent(JSON.parse(m.data)); } catch (err) { showError('bad event: ' + err.message); } };
  ws.onclose = () => {
    if (S.ws !== ws) return;
    S.ws = null;
    S.streaming = false;
    if (S.done || !S.active) return;
    const limit = S.everReady ? 10 : FIRST_TRIES;
    if (S.reconnects + 1 >= limit) {
      fail(S.everReady
        ? 'The connection to the server was lost and could not be restored. The text so far is kept; press Start to dictate again.'
        : `Cannot reach the sotto server at ${location.host} (${limit} attempts). Check that it is running and reachable, then press Start again.`);
      return;
    }
    if (S.stopping) { finish('stopped'); return; } // nothing more can be finished
    const wait = Math.min(5000, 500 * 2 ** S.reconnects++);
    setStatus(`${S.everReady ? 'connection lost' : 'cannot reach the server'}; retrying in ${(wait / 1000).toFixed(1)} s ` +
              `(attempt ${S.reconnects + 1} of ${limit})…`, 'bad');
    S.retryTimer = setTimeout(() => { if (S.active && !S.ws) connect(); }, wait);
  };
}

function feedLink(feed) {
  const url = `caption.html?feed=${encodeURIComponent(feed)}` + ($('feedKey').value ? `&key=${encodeURIComponent($('feedKey').value)}` : '');
  $('feedLink').textContent = '';
  const a = document.createElement('a');
  a.href = url; a.textContent = `caption viewer for feed ${feed}`; a.target = '_blank';
  $('feedLink').appendChild(a);
}

function onEvent(e) {
  if (e.type === 'hello') return;            // per connection
  if (typeof e.seq === 'number') {
    if (e.seq <= S.lastSeq) return;           // replayed after a resume
    S.lastSeq = e.seq;
  }
  switch (e.type) {
    case 'ready':
      if (S.session && S.session === e.session && S.resumes) break; // a resumed session's, again: keep sending from where it is
      S.session = e.session; S.token = e.token; S.streaming = true; S.next = 0; S.reconnects = 0; S.everReady = true;
      S.lastFinal = 0;
      setStatus(`dictating: ${e.model}, ${e.weights} (${(e.weights_bytes / 1e6).toFixed(0)} MB)` +
                (e.language ? `, ${e.language}` : ''), 'live');
      if (e.feed) feedLink(e.feed);
      pump();
      break;
    case 'resumed':
      S.resumes++;
      S.next = Math.floor(e.offset / unitsPerPacket()); S.streaming = true; S.reconnects = 0;
      S.stopSent = false;                     // after the audio from the offset, stop again (another instance may not have it)
      if (e.restored) T.tentative = ''; // the open utterance is transcribed again, its committed text kept
      setStatus('dictating (reconnected)', 'live');
      if (e.events_lost) showError('Some live updates were lost while disconnected; the final text is complete.');
      pump();
      break;
    case 'ack': {
      // the server may need the audio from `durable` on for a resume (on another instance)
      const upto = Math.floor((typeof e.durable === 'number' ? e.durable : e.offset) / unitsPerPacket());
      for (let i = S.acked; i < upto && i < S.packets.length; i++) S.packets[i] = null;
      S.acked = Math.max(S.acked, upto);
      pump();
      break;
    }
    case 'speech_start': setSpeech(true); break;
    case 'speech_end': S.speechEndAt[e.utterance] = performance.now(); S.pendingSince = performance.now(); setSpeech(false); break;
    case 'reconnect': setStatus('reconnecting (the server is restarting)…'); break;
    case 'final':
      if (e.replayed && e.utterance <= S.lastFinal) return; // a restore replays finals we may have
      S.lastFinal = Math.max(S.lastFinal || 0, e.utterance);
      if (S.speechEndAt[e.utterance]) S.finalLatency = Math.round(performance.now() - S.speechEndAt[e.utterance]);
      S.pendingSince = null;
      break;
    case 'language': setStatus(`${$('status').textContent} (language: ${e.language})`, 'live'); break;
    case 'warning':
      showError(e.code === 'backlog'
        ? 'The server cannot keep up: some audio was skipped. Fewer parallel sessions or smaller weights help.'
        : `Warning: ${e.message}`);
      break;
    case 'error': onError(e); break;
    case 'done': S.done = true; finish('stopped'); break;
  }
  if (T.onEvent(e)) render();
}

// Fatal errors and errors that leave a session that never started end it
// (microphone released, Start usable again); others are shown and it goes on.
function onError(e) {
  if (e.code === 'unauthorized') {
    needAccess('This server needs an API key or an access token: enter it above and press Start again.');
    return;
  }
  const feed = $('feed').value.trim();
  const known = {
    feed_taken: `The feed name "${feed}" is in use by another session. Choose another name under Settings (or stop the other session), then press Start again.`,
    feed_owned: `The feed name "${feed}" belongs to another API key. Choose another name under Settings, then press Start again.`,
    overloaded: 'The server is busy (every session slot is taken). Try again in a minute.',
    too_many_connections: 'The server has too many connections. Try again in a minute.',
    shutting_down: 'The server is shutting down. Try again once it is back.',
    model_unavailable: `The server could not load the model: ${e.message}. Try other weights under Settings.`,
    weights_not_allowed: 'The server does not offer these weights: choose others under Settings.',
  };
  const msg = known[e.code] || `Server error (${e.code}): ${e.message}`;
  if (e.fatal || !S.everReady || ['unknown_session', 'session_attached'].includes(e.code)) {
    S.fatal = true;
    fail(msg);
  } else showError(`Server: ${e.message}`);
}

// ---- start / stop ------------------------------------------------------------

function micUnavailable() {
  if (navigator.mediaDevices && navigator.mediaDevices.getUserMedia) return '';
  if (!window.isSecureContext)
    return `The browser allows the microphone only on a secure page: open this page over https (or on localhost, ` +
           `http://localhost:${location.port || 80}/), not over plain http from another device.`;
  return 'This browser gives this page no microphone access.';
}

async function start() {
  if (S.active || S.starting) return; // one capture at a time
  showError('');
  const why = micUnavailable();
  if (why) { showError(why); return; }
  if (!$('access').hidden && !(await takeCredential())) {
    if (!$('error').textContent) showError('Enter an API key or an access token first.');
    $('accessKey').focus();
    return;
  }
  S.starting = true;
  Object.assign(S, { done: false, stopping: false, stopSent: false, encoderFlushed: false, session: null, token: null,
                     lastSeq: 0, reconnects: 0, everReady: false, packets: [], next: 0, acked: 0, tsUs: 0, speechEndAt: {},
                     pendingSince: null, fatal: false });
  setToggle('starting');
  try {
    const audio = { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true };
    if ($('mic').value) audio.deviceId = { exact: $('mic').value };
    S.media = await navigator.mediaDevices.getUserMedia({ audio });
    S.captures++;
    listMics();
  } catch (err) {
    S.starting = false;
    setToggle('idle');
    showError(err.name === 'NotAllowedError'
      ? 'The microphone permission was denied. Allow the microphone for this page (see the address bar) and press Start again.'
      : err.name === 'NotFoundError' ? 'No microphone was found.'
        : err.name === 'OverconstrainedError' ? 'The chosen microphone is gone: choose another under Settings.'
          : `Cannot open the microphone: ${err.message}`);
    return;
  }
  S.active = true;
  try {
    S.ctx = new AudioContext({ sampleRate: RATE });
    await S.ctx.audioWorklet.addModule('capture-worklet.js');
    await setupEncoder();
    const src = S.ctx.createMediaStreamSource(S.media);
    S.node = new AudioWorkletNode(S.ctx, 'sotto-capture');
    S.node.port.onmessage = (m) => onBlock(m.data);
    src.connect(S.node);
  } catch (err) {
    fail(`Cannot set up the audio capture (${err.message}). Reload the page and press Start again.`);
    return;
  }
  S.starting = false;
  setToggle('recording');
  S.t0 = performance.now();
  $('rec').dataset.on = 'true';
  S.clock = setInterval(tick, 250);
  tick();
  connect();
}

// One big toggle: Start dictation / Stop dictation. It is never disabled (a
// disabled button would drop the keyboard focus): while the microphone opens
// or the last text arrives it says so and ignores presses (aria-disabled).
const TOGGLE = { idle: 'Start dictation', starting: 'Starting…', recording: 'Stop dictation', finishing: 'Finishing…' };
function setToggle(state) {
  const b = $('start');
  b.dataset.state = state;
  b.textContent = TOGGLE[state];
  b.setAttribute('aria-disabled', String(state === 'starting' || state === 'finishing'));
}
function toggle() {
  const st = $('start').dataset.state || 'idle';
  if (st === 'idle') start();
  else if (st === 'recording') stop();
}

function tick() {
  const s = Math.floor((performance.now() - S.t0) / 1000);
  $('elapsed').textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
  showDelay();
}

async function stop() {
  if (!S.active || S.stopping) return;
  S.stopping = true;
  setToggle('finishing');
  if (S.media) S.media.getTracks().forEach((t) => t.stop());
  if (!S.streaming && !S.everReady) { finish('stopped'); return; } // no session to finish
  if (S.encoder) { try { await S.encoder.flush(); } catch (e) { /* closed */ } }
  S.encoderFlushed = true;
  if (!S.ws && S.retryTimer) { clearTimeout(S.retryTimer); finish('stopped'); return; } // between retries
  pump();
}

function finish(text) {
  S.active = false;
  S.starting = false;
  clearTimeout(S.retryTimer);
  S.retryTimer = null;
  clearInterval(S.clock);
  if (S.ctx) S.ctx.close();
  if (S.media) S.media.getTracks().forEach((t) => t.stop());
  const ws = S.ws;
  S.ws = null;
  if (ws && ws.readyState <= WebSocket.OPEN) ws.close();
  S.ctx = S.node = S.media = null;
  showLevel(0);
  setSpeech(false);
  $('rec').dataset.on = 'false';
  $('lag').textContent = '';
  setToggle('idle');
  setStatus(text, text === 'stopped' ? '' : 'bad');
  if (T.committed || T.tentative) { T.committed = T.tentative = ''; render(); }
}

function fail(msg) { showError(msg); finish('stopped after an error'); }

// The microphones (names once the permission is given).
async function listMics() {
  if (!navigator.mediaDevices || !navigator.mediaDevices.enumerateDevices) return;
  try {
    const devs = (await navigator.mediaDevices.enumerateDevices()).filter((d) => d.kind === 'audioinput' && d.deviceId);
    const sel = $('mic'), keep = sel.value;
    while (sel.options.length > 1) sel.remove(1);
    devs.forEach((d, i) => {
      if (d.deviceId === 'default') return;
      const o = document.createElement('option');
      o.value = d.deviceId;
      o.textContent = d.label || `microphone ${i + 1}`;
      sel.appendChild(o);
    });
    if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  } catch (e) { /* no list: the default is used */ }
}

// ---- transcript actions ---------------------------------------------------------

function download(name, text, type) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

function captions(on) {
  $('captionView').hidden = !on;
  // a modal view: what it covers can be neither reached with Tab nor read
  document.querySelector('header').inert = on;
  document.querySelector('main').inert = on;
  $('captions').setAttribute('aria-pressed', String(on));
  if (on) {
    $('captionSaid').textContent = '';
    captionSaid = T.finals.length; // what was there before is not read out again
    render();
    $('captionsOff').focus();
  } else $('captions').focus();
}

let undoState = null;
function clearTranscript() {
  undoState = T.snapshot();
  T.clear();
  render();
  $('undo').hidden = false;
  $('undo').focus(); // Clear is now disabled: the focus moves on to Undo
  setStatus('cleared: Undo clear brings the text back');
}
function undoClear() {
  if (!undoState) return;
  T.restore(undoState);
  undoState = null;
  render();
  $('undo').hidden = true;
  $('clear').focus();
  setStatus('transcript restored');
}

// ---- file transcription: POST /v1/audio/transcriptions ---------------------------

async function transcribeFile(file) {
  if (!file) return;
  if (!$('access').hidden && $('accessKey').value.trim() && !(await takeCredential())) return; // a key typed for it
  const form = new FormData();
  form.append('file', file, file.name);
  form.append('model', 'whisper-1');
  form.append('response_format', 'verbose_json');
  if ($('language').value) form.append('language', $('language').value);
  const xhr = new XMLHttpRequest();
  xhr.open('POST', $('task').value === 'translate' ? 'v1/audio/translations' : 'v1/audio/transcriptions');
  if (A.token) xhr.setRequestHeader('Authorization', `Bearer ${A.token}`);
  const prog = $('fileProgress');
  prog.hidden = false;
  prog.value = 0;
  $('fileStatus').textContent = `uploading ${file.name}…`;
  xhr.upload.onprogress = (ev) => {
    if (ev.lengthComputable) prog.value = Math.round(ev.loaded / ev.total * 50);
    if (ev.loaded === ev.total) $('fileStatus').textContent = `transcribing ${file.name}…`;
  };
  xhr.upload.onload = () => { prog.value = 50; $('fileStatus').textContent = `transcribing ${file.name}…`; };
  xhr.onload = () => {
    prog.hidden = true;
    let j = {};
    try { j = JSON.parse(xhr.responseText); } catch (e) { /* below */ }
    if (xhr.status === 401) { $('access').hidden = false; showError('This server needs an API key or an access token: enter it above and pick the file again.'); $('fileStatus').textContent = ''; return; }
    if (xhr.status !== 200) {
      showError(`The file was not transcribed: ${(j.error && j.error.message) || xhr.status}`);
      $('fileStatus').textContent = '';
      return;
    }
    const base = T.finals.length ? T.finals[T.finals.length - 1].end : 0;
    const segs = j.segments && j.segments.length ? j.segments : [{ text: j.text || '', start: 0, end: j.duration || 0 }];
    for (const sg of segs) {
      const text = (sg.text || '').trim();
      if (text) T.finals.push({ utterance: T.finals.length + 1, text, start: base + sg.start, end: base + sg.end, file: file.name });
    }
    render();
    $('fileStatus').textContent = `${file.name}: ${segs.length} segment${segs.length === 1 ? '' : 's'} transcribed`;
    $('file').value = '';
  };
  xhr.onerror = () => { prog.hidden = true; $('fileStatus').textContent = ''; showError(`Cannot reach the sotto server at ${location.host} to transcribe the file.`); };
  xhr.send(form);
}

$('start').addEventListener('click', toggle);
$('copy').addEventListener('click', () => navigator.clipboard.writeText(T.text()).then(() => setStatus('copied'), () => showError('Copy failed')));
$('dlTxt').addEventListener('click', () => download('transcript.txt', T.text(), 'text/plain'));
$('dlSrt').addEventListener('click', () => download('transcript.srt', T.srt(), 'application/x-subrip'));
$('dlVtt').addEventListener('click', () => download('transcript.vtt', T.vtt(), 'text/vtt'));
$('clear').addEventListener('click', clearTranscript);
$('undo').addEventListener('click', undoClear);
$('captions').addEventListener('click', () => captions(true));
$('captionsOff').addEventListener('click', () => captions(false));
$('file').addEventListener('change', () => transcribeFile($('file').files[0]));
$('dropZone').addEventListener('dragover', (e) => { e.preventDefault(); $('transcript').classList.add('drop'); });
$('dropZone').addEventListener('dragleave', () => $('transcript').classList.remove('drop'));
$('dropZone').addEventListener('drop', (e) => {
  e.preventDefault();
  $('transcript').classList.remove('drop');
  if (e.dataTransfer.files.length) transcribeFile(e.dataTransfer.files[0]);
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && !$('captionView').hidden) captions(false);
  if (e.altKey && (e.key === 'd' || e.key === 'D' || e.code === 'KeyD')) { // the shortcut: start or stop
    e.preventDefault();
    toggle();
  }
});
window.addEventListener('resize', () => { if (!$('captionView').hidden) T.renderCaptions($('captionLines')); });
if (micUnavailable()) showError(micUnavailable());
// The weight variants this server offers (GET /v1/info), default first.
fetch('v1/info').then((r) => r.json()).then((info) => {
  const sel = $('weights');
  sel.textContent = '';
  (info.weights || []).forEach((w, i) => {
    const o = document.createElement('option');
    o.value = w;
    o.textContent = i === 0 ? `${w} (server default)` : w;
    sel.appendChild(o);
  });
}).catch(() => showError('Could not ask the server which weights it offers; using its default.'));
listMics();
render();

window.sotto = { state: S, transcript: T, access: A, render }; // for tests and the console
