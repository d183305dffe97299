// captions.js - shared by the dictation page and the caption viewer: the
// transcript model (finals + the utterance in progress), its rendering, and
// export as text, SubRip and WebVTT.
'use strict';

class Transcript {
  constructor() { this.clear(); }
  clear() {
    this.finals = [];            // {utterance, text, start, end}
    this.committed = '';         // the utterance in progress
    this.tentative = '';
  }
  onEvent(e) {                   // returns true if the text changed
    switch (e.type) {
      case 'partial': this.committed = e.committed || ''; this.tentative = e.tentative || ''; return true;
      case 'commit': this.committed = e.committed || ''; this.tentative = ''; return true;
      case 'final':
        if ((e.text || '').trim()) this.finals.push({ utterance: e.utterance, text: e.text.trim(), start: e.start, end: e.end });
        this.committed = ''; this.tentative = ''; return true;
      case 'feed':                // a feed viewer's history
        this.finals = (e.finals || []).map((f) => ({ ...f, text: f.text.trim() }));
        return true;
      default: return false;
    }
  }
  // Renders into el: finals as paragraphs, the current utterance with its
  // tentative part in a span of class "tentative".
  render(el) {
    el.textContent = '';
    for (const f of this.finals) {
      const p = document.createElement('p');
      p.textContent = f.text;
      el.appendChild(p);
    }
    if (this.committed || this.tentative) {
      const p = document.createElement('p');
      p.className = 'current';
      const c = document.createElement('span');
      c.className = 'committed';
      c.textContent = this.committed.replace(/^ /, '');
      const t = document.createElement('span');
      t.className = 'tentative';
      t.textContent = this.committed ? this.tentative : this.tentative.replace(/^ /, '');
      p.append(c, t);
      el.appendChild(p);
    }
  }
  // The last two lines for the caption view (about `width` characters each).
  renderCaptions(el, width = 42) {
    const text = this.finals.map((f) => f.text).join(' ');
    const cur = (this.committed + this.tentative).trim();
    const words = (text + (cur ? ' ' + cur : '')).split(/\s+/).filter(Boolean);
    const lines = [];
    let line = '';
    for (const w of words) {
      if (line && line.length + 1 + w.length > width) { lines.push(line); line = w; }
      else line = line ? line + ' ' + w : w;
    }
    if (line) lines.push(line);
    el.textContent = '';
    for (const l of lines.slice(-2)) {
      const d = document.createElement('div');
      d.textContent = l;
      el.appendChild(d);
    }
  }
  text() { return this.finals.map((f) => f.text).join('\n') + (this.finals.length ? '\n' : ''); }
  static stamp(t, sep) {
    const ms = Math.max(0, Math.round(t * 1000));
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return `${p(Math.floor(ms / 3600000))}:${p(Math.floor(ms / 60000) % 60)}:${p(Math.floor(ms / 1000) % 60)}${sep}${p(ms % 1000, 3)}`;
  }
  srt() {
    return this.finals.map((f, i) => `${i + 1}\n${Transcript.stamp(f.start, ',')} --> ${Transcript.stamp(f.end, ',')}\n${f.text}\n`).join('\n');
  }
  vtt() {
    return 'WEBVTT\n\n' + this.finals.map((f) => `${Transcript.stamp(f.start, '.')} --> ${Transcript.stamp(f.end, '.')}\n${f.text}\n`).join('\n');
  }
}
