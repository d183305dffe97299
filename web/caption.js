// caption.js - a read-only viewer of a live-caption feed:
// caption.html?feed=NAME[&key=KEY]. Large, high-contrast, the last two
// lines that fit the screen, tentative words marked. It waits for a feed
// that has not started, follows a feed that ends and starts again (a new
// session under the same name), and reconnects if the connection drops.
// Text size and theme are kept in localStorage.
'use strict';
(() => {
  const q = new URLSearchParams(location.search);
  const feed = q.get('feed'), key = q.get('key');
  const $ = (id) => document.getElementById(id);
  const status = $('status'), lines = $('captionLines');
  const T = new Transcript();
  const POLL_MS = 2000; // how often a feed that is not live is asked again
  let live = false, tries = 0, said = 0;
  let session = null; // the number of the session last shown (the feed event's `session`)
  const V = { connects: 0, sessions: 0 };
  window.sotto = { transcript: T, viewer: V };

  const prefs = (() => { try { return JSON.parse(localStorage.getItem('sotto.viewer') || '{}'); } catch (e) { return {}; } })();
  function apply() {
    document.body.dataset.size = $('size').value;
    document.body.dataset.theme = $('theme').value;
    try { localStorage.setItem('sotto.viewer', JSON.stringify({ size: $('size').value, theme: $('theme').value })); } catch (e) { /* */ }
    T.renderCaptions(lines);
  }
  if (prefs.size) $('size').value = prefs.size;
  if (prefs.theme) $('theme').value = prefs.theme;
  $('size').addEventListener('change', apply);
  $('theme').addEventListener('change', apply);
  window.addEventListener('resize', () => T.renderCaptions(lines));

  if (!feed) { status.textContent = 'No feed named: open caption.html?feed=NAME'; return; }
  const qs = key ? `?key=${encodeURIComponent(key)}` : '';
  $('dlVtt').href = `v1/feeds/${encodeURIComponent(feed)}.vtt${qs}`;
  $('dlVtt').download = `${feed}.vtt`;
  $('dlSrt').href = `v1/feeds/${encodeURIComponent(feed)}.srt${qs}`;
  $('dlSrt').download = `${feed}.srt`;
  apply();

  function show() {
    T.renderCaptions(lines);
    // screen readers hear each final once, not every update of the lines
    for (; said < T.finals.length; said++) {
      const p = document.createElement('p');
      p.textContent = T.finals[said].text;
      $('said').appendChild(p);
    }
  }

  function connect() {
    V.connects++;
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}/v1/feeds/${encodeURIComponent(feed)}${qs}`);
    let again = null; // the wait before the next connection, set by what this one said
    let heard = false;
    ws.onmessage = (m) => {
      heard = true;
      const e = JSON.parse(m.data);
      if (e.type === 'error') {
        if (e.code === 'not_found') {
          again = POLL_MS;
          status.textContent = live || T.finals.length
            ? `Feed ${feed} ended; waiting for it to start again…`
            : `Waiting for feed ${feed} to start…`;
          live = false;
        } else if (e.code === 'forbidden') {
          status.textContent = 'This feed needs its viewer key: open the link with &key=…';
          again = -1;
        } else status.textContent = `${e.code}: ${e.message}`;
        return;
      }
      if (e.type === 'feed') {
        tries = 0;
        // A session number not seen before is a new session, live or already
        // ended (a short one can start and end between two connections): its
        // finals replace the last one's. The same number again is the same
        // session (after a dropped connection, or asked again once ended).
        const fresh = e.session == null ? (e.live && !live) : e.session !== session;
        if (fresh) {
          V.sessions++;
          session = e.session;
          V.session = session;
          said = 0;
          $('said').textContent = '';
        }
        live = !!e.live;
        status.textContent = live ? `Feed ${feed}: live` : `Feed ${feed} ended; waiting for it to start again…`;
        if (!live) again = POLL_MS;
        if (fresh || live) { T.onEvent(e); show(); }
        return;
      }
      if (e.type === 'done') {
        live = false;
        again = POLL_MS;
        status.textContent = `Feed ${feed} ended; waiting for it to start again…`;
      }
      if (T.onEvent(e)) show();
    };
    ws.onclose = (ev) => {
      V.lastClose = { code: ev.code, heard };
      if (again === -1) return;
      let wait = again;
      if (wait == null && !heard && !V.sessions) { // closed unheard before any session: as not_found
        wait = POLL_MS;
        status.textContent = `Waiting for feed ${feed} to start…`;
      } else if (wait == null) { // the connection dropped
        wait = Math.min(10000, 500 * 2 ** tries++);
        status.textContent = `Connection lost; reconnecting in ${(wait / 1000).toFixed(1)} s…`;
      }
      setTimeout(connect, wait);
    };
  }
  connect();
})();
