// caption.js - a read-only viewer of a live-caption feed:
// caption.html?feed=NAME[&key=KEY]. Large, high-contrast, last two lines;
// reconnects (and gets the finals so far again) if the connection drops.
'use strict';
(() => {
  const q = new URLSearchParams(location.search);
  const feed = q.get('feed'), key = q.get('key');
  const status = document.getElementById('status'), lines = document.getElementById('captionLines');
  const T = new Transcript();
  let ended = false, tries = 0;
  if (!feed) { status.textContent = 'No feed named: open caption.html?feed=NAME'; return; }
  function connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}/v1/feeds/${encodeURIComponent(feed)}` +
                             (key ? `?key=${encodeURIComponent(key)}` : ''));
    ws.onopen = () => { tries = 0; status.textContent = `feed ${feed}`; };
    ws.onmessage = (m) => {
      const e = JSON.parse(m.data);
      if (e.type === 'error') { status.textContent = `${e.code}: ${e.message}`; if (e.fatal) ended = true; return; }
      if (e.type === 'done') { ended = true; status.textContent = `feed ${feed} ended`; }
      if (T.onEvent(e)) T.renderCaptions(lines);
    };
    ws.onclose = () => {
      if (ended) return;
      const wait = Math.min(10000, 500 * 2 ** tries++);
      status.textContent = `connection lost; reconnecting in ${(wait / 1000).toFixed(1)} s…`;
      setTimeout(connect, wait);
    };
  }
  connect();
})();
