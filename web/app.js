// app.js - the dictation page: microphone -> AudioWorklet -> Opus (WebCodecs)
// or 16-bit PCM -> sotto-server's /v1/stream (docs/PROTOCOL.md); the
// transcript shown as it is generated; reconnect + resume after a lost
// connection, keeping the transcript and resending unacknowledged audio.
'use strict';
const $ = (id) => document.getElementById(id);
const RATE = 48000, BLOCK = RATE / 50; // 20 ms blocks

const S = {
  active: false, done: false, stopping: false, stopSent: false,
  ws: null, streaming: false, session: null, token: null, lastSeq: 0, reconnects: 0,
  packets: [], next: 0, acked: 0, codec: 'pcm', encoder: null, tsUs: 0,
  ctx: null, node: null, media: null, speechEndAt: {}, finalLatency: null, resumes: 0,
};
const T = new Transcript();

function setStatus(text, kind = '') { $('status').textContent = text; $('status').dataset.kind = kind; }
function showError(text) { $('error').textContent = text || ''; $('error').hidden = !text; }
function unitsPerPacket() { return S.codec === 'opus' ? 1 : BLOCK; }
function render() {
  T.render($('transcript'));
  if (!$('captionView').hidden) T.renderCaptions($('captionLines'));
}

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

function onBlock({ samples, rms }) {
  $('level').style.width = Math.min(100, Math.round(Math.sqrt(rms) * 250)) + '%';
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
  const lagMs = (S.packets.length - S.acked) * 20;
  $('lag').textContent = `unacknowledged audio: ${lagMs} ms` + (S.finalLatency != null ? `; last final ${S.finalLatency} ms after speech end` : '');
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
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const url = `${proto}//${location.host}/v1/stream`;
  const ws = A.token ? new WebSocket(url, ['sotto.v1', `sotto-key.${A.token}`]) : new WebSocket(url);
  ws.binaryType = 'arraybuffer';
  S.ws = ws;
  S.streaming = false;
  setStatus(S.session ? 'reconnecting…' : 'connecting…');
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
    if (S.reconnects >= 10) { fail('The connection to the server was lost and could not be restored.'); return; }
    const wait = Math.min(5000, 500 * 2 ** S.reconnects++);
    setStatus(`connection lost; reconnecting in ${(wait / 1000).toFixed(1)} s…`, 'bad');
    setTimeout(() => { if (S.active && !S.ws) connect(); }, wait);
  };
}

function onEvent(e) {
  if (e.type === 'hello') return;            // per connection
  if (typeof e.seq === 'number') {
    if (e.seq <= S.lastSeq) return;           // replayed after a resume
    S.lastSeq = e.seq;
  }
  switch (e.type) {
    case 'ready':
      S.session = e.session; S.token = e.token; S.streaming = true; S.next = 0; S.reconnects = 0;
      setStatus(`dictating: ${e.model}, ${e.weights} (${(e.weights_bytes / 1e6).toFixed(0)} MB)` +
                (e.language ? `, ${e.language}` : ''), 'live');
      if (e.feed) {
        const url = `caption.html?feed=${encodeURIComponent(e.feed)}` + ($('feedKey').value ? `&key=${encodeURIComponent($('feedKey').value)}` : '');
        $('feedLink').innerHTML = '';
        const a = document.createElement('a');
        a.href = url; a.textContent = `caption viewer for feed ${e.feed}`; a.target = '_blank';
        $('feedLink').appendChild(a);
      }
      pump();
      break;
    case 'resumed':
      S.resumes++;
      S.next = Math.floor(e.offset / unitsPerPacket()); S.streaming = true; S.reconnects = 0;
      setStatus('dictating (reconnected)', 'live');
      if (e.events_lost) showError('Some live updates were lost while disconnected; the final text is complete.');
      pump();
      break;
    case 'ack': {
      const upto = Math.floor(e.offset / unitsPerPacket());
      for (let i = S.acked; i < upto && i < S.packets.length; i++) S.packets[i] = null;
      S.acked = Math.max(S.acked, upto);
      pump();
      break;
    }
    case 'speech_end': S.speechEndAt[e.utterance] = performance.now(); break;
    case 'final':
      if (S.speechEndAt[e.utterance]) S.finalLatency = Math.round(performance.now() - S.speechEndAt[e.utterance]);
      break;
    case 'language': setStatus(`${$('status').textContent} (language: ${e.language})`, 'live'); break;
    case 'warning': showError(`Warning: ${e.message}`); break;
    case 'error':
      if (e.code === 'unauthorized') {
        needAccess('This server needs an API key or an access token: enter it above and press Start again.');
        break;
      }
      if (e.fatal || ['unknown_session', 'session_attached', 'bad_start', 'weights_not_allowed', 'unknown_model'].includes(e.code))
        fail(`Server error (${e.code}): ${e.message}`);
      else showError(`Server: ${e.message}`);
      break;
    case 'done': S.done = true; finish('stopped'); break;
  }
  if (T.onEvent(e)) render();
}

// ---- start / stop ------------------------------------------------------------

async function start() {
  showError('');
  if (!$('access').hidden && !(await takeCredential())) {
    if (!$('error').textContent) showError('Enter an API key or an access token first.');
    $('accessKey').focus();
    return;
  }
  Object.assign(S, { done: false, stopping: false, stopSent: false, encoderFlushed: false, session: null, token: null,
                     lastSeq: 0, reconnects: 0, packets: [], next: 0, acked: 0, tsUs: 0, speechEndAt: {} });
  try {
    S.media = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
  } catch (err) {
    showError(err.name === 'NotAllowedError'
      ? 'The microphone permission was denied. Allow the microphone for this page (see the address bar) and press Start again.'
      : err.name === 'NotFoundError' ? 'No microphone was found.' : `Cannot open the microphone: ${err.message}`);
    return;
  }
  S.ctx = new AudioContext({ sampleRate: RATE });
  await S.ctx.audioWorklet.addModule('capture-worklet.js');
  await setupEncoder();
  const src = S.ctx.createMediaStreamSource(S.media);
  S.node = new AudioWorkletNode(S.ctx, 'sotto-capture');
  S.node.port.onmessage = (m) => onBlock(m.data);
  src.connect(S.node);
  S.active = true;
  // A focused button that becomes disabled drops the focus to the page: a
  // keyboard user who pressed Start continues on Stop.
  const startHadFocus = document.activeElement === $('start');
  $('start').disabled = true;
  $('stop').disabled = false;
  if (startHadFocus) $('stop').focus();
  connect();
}

async function stop() {
  if (!S.active || S.stopping) return;
  S.stopping = true;
  S.stopHadFocus = document.activeElement === $('stop');
  $('stop').disabled = true;
  if (S.media) S.media.getTracks().forEach((t) => t.stop());
  if (S.encoder) { try { await S.encoder.flush(); } catch (e) { /* closed */ } }
  S.encoderFlushed = true;
  pump();
}

function finish(text) {
  S.active = false;
  if (S.ctx) S.ctx.close();
  if (S.media) S.media.getTracks().forEach((t) => t.stop());
  if (S.ws && S.ws.readyState === WebSocket.OPEN) S.ws.close();
  S.ctx = S.node = S.media = null;
  $('level').style.width = '0';
  // The focus was on Stop (pressed, or still there after an error) and would
  // drop to the page as Stop is disabled: it goes back to Start.
  const a = document.activeElement;
  const refocus = a === $('stop') || (S.stopHadFocus && (!a || a === document.body));
  $('start').disabled = false;
  $('stop').disabled = true;
  if (refocus) $('start').focus();
  S.stopHadFocus = false;
  setStatus(text);
}

function fail(msg) { showError(msg); finish('stopped after an error'); }

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
  if (on) { render(); $('captionsOff').focus(); } else $('captions').focus();
}

$('start').addEventListener('click', start);
$('stop').addEventListener('click', stop);
$('copy').addEventListener('click', () => navigator.clipboard.writeText(T.text()).then(() => setStatus('copied'), () => showError('Copy failed')));
$('dlTxt').addEventListener('click', () => download('transcript.txt', T.text(), 'text/plain'));
$('dlSrt').addEventListener('click', () => download('transcript.srt', T.srt(), 'application/x-subrip'));
$('dlVtt').addEventListener('click', () => download('transcript.vtt', T.vtt(), 'text/vtt'));
$('clear').addEventListener('click', () => { T.clear(); render(); });
$('captions').addEventListener('click', () => captions(true));
$('captionsOff').addEventListener('click', () => captions(false));
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('captionView').hidden) captions(false); });
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

window.sotto = { state: S, transcript: T, access: A }; // for tests and the console
