// captions.js - shared by the dictation page and the caption viewer: the
// transcript model (finals + the utterance in progress), its rendering (the
// transcript, and caption lines laid out to the screen's width), and export
// as text, SubRip and WebVTT with subtitle-sized cues.
'use strict';

// Subtitle cues from utterances: the same rules as stream/subtitle.c's
// sotto_split_cues (the server's feed .vtt/.srt). Word times are spread over
// an utterance in proportion to the words' lengths; words are grouped into
// cues of at most LINES lines of LINE_CHARS characters and MAX_S seconds, a
// cue never spans a silence of GAP_S, and it ends after a sentence once it
// holds a line's worth. Two lines are balanced.
const CUE = { LINE_CHARS: 42, LINES: 2, MAX_S: 7.0, GAP_S: 1.0 };

function cueWords(finals) {
  const words = [];
  for (const f of finals) {
    const ws = (f.text || '').split(/\s+/).filter(Boolean);
    const total = ws.reduce((n, w) => n + w.length, 0);
    const end = Math.max(f.start, f.end), per = total ? (end - f.start) / total : 0;
    let t = f.start;
    ws.forEach((w, i) => {
      const a = t;
      t += per * w.length;
      words.push({ w, chars: [...w].length, start: a, end: i === ws.length - 1 ? end : t });
    });
  }
  return words;
}

function linesNeeded(words, a, b, width) {
  let lines = 0, cur = 0;
  for (let i = a; i < b; i++) {
    if (lines === 0 || cur + 1 + words[i].chars > width) { lines++; cur = words[i].chars; } else cur += 1 + words[i].chars;
  }
  return lines;
}

function cueText(words, a, b, width) {
  const ws = words.slice(a, b);
  if (linesNeeded(words, a, b, width) === 2) {
    const total = ws.reduce((n, w) => n + w.chars, 0) + ws.length - 1;
    let left = 0, best = Infinity, split = -1;
    for (let k = 1; k < ws.length; k++) {
      left += ws[k - 1].chars + (k > 1 ? 1 : 0);
      const right = total - left - 1, worst = Math.max(left, right);
      if (left <= width && right <= width && worst < best) { best = worst; split = k; }
    }
    if (split > 0) return ws.slice(0, split).map((w) => w.w).join(' ') + '\n' + ws.slice(split).map((w) => w.w).join(' ');
  }
  const lines = [];
  let line = '';
  for (const w of ws) {
    if (line && [...line].length + 1 + w.chars > width) { lines.push(line); line = w.w; } else line = line ? line + ' ' + w.w : w.w;
  }
  if (line) lines.push(line);
  return lines.join('\n');
}

function splitCues(finals, lim = CUE) {
  const words = cueWords(finals), cues = [];
  for (let a = 0; a < words.length;) {
    let b = a + 1, chars = words[a].chars;
    for (; b < words.length; b++) {
      if (words[b].start - words[b - 1].end >= lim.GAP_S) break;
      if (words[b].end - words[a].start > lim.MAX_S) break;
      if (/[.?!]["')]?$/.test(words[b - 1].w) && chars >= lim.LINE_CHARS) break;
      if (linesNeeded(words, a, b + 1, lim.LINE_CHARS) > lim.LINES) break;
      chars += 1 + words[b].chars;
    }
    cues.push({ start: words[a].start, end: words[b - 1].end, text: cueText(words, a, b, lim.LINE_CHARS) });
    a = b;
  }
  return cues;
}

// Breaks words into lines no wider than `width` pixels as measure() says.
function layoutLines(words, width, measure) {
  const lines = [];
  let line = [];
  for (const w of words) {
    const cand = line.concat([w]);
    if (line.length && measure(cand.map((x) => x.w).join(' ')) > width) { lines.push(line); line = [w]; } else line = cand;
  }
  if (line.length) lines.push(line);
  return lines;
}

let measureCtx = null;
// A measuring function for the font el is drawn in (canvas text metrics).
function measurer(el) {
  if (!measureCtx) measureCtx = document.createElement('canvas').getContext('2d');
  const cs = getComputedStyle(el);
  const font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
  return (s) => { measureCtx.font = font; return measureCtx.measureText(s).width; };
}

class Transcript {
  constructor() { this.clear(); }
  clear() {
    this.finals = [];            // {utterance, text, start, end}
    this.committed = '';         // the utterance in progress
    this.tentative = '';
    this.shown = 0;              // finals already in the rendered list
  }
  empty() { return !this.finals.length && !this.committed && !this.tentative; }
  snapshot() { return { finals: this.finals.slice(), committed: this.committed, tentative: this.tentative }; }
  restore(s) { this.clear(); this.finals = s.finals.slice(); this.committed = s.committed || ''; this.tentative = s.tentative || ''; }
  onEvent(e) {                   // returns true if the text changed
    switch (e.type) {
      case 'partial': this.committed = e.committed || ''; this.tentative = e.tentative || ''; return true;
      case 'commit': this.committed = e.committed || ''; this.tentative = ''; return true;
      case 'final':
        if ((e.text || '').trim()) this.finals.push({ utterance: e.utterance, text: e.text.trim(), start: e.start, end: e.end });
        this.committed = ''; this.tentative = ''; return true;
      case 'feed':                // a feed viewer's history
        this.clear();
        this.finals = (e.finals || []).map((f) => ({ ...f, text: f.text.trim() }));
        return true;
      default: return false;
    }
  }
  // Renders into finalsEl (a polite live region: finals are appended, never
  // rebuilt, so a screen reader hears each committed stretch once) and
  // currentEl (the utterance in progress, its tentative part in a span of
  // class "tentative"; not live).
  render(finalsEl, currentEl) {
    if (this.shown > this.finals.length || finalsEl.childElementCount !== this.shown) {
      finalsEl.textContent = '';
      this.shown = 0;
    }
    for (; this.shown < this.finals.length; this.shown++) {
      const p = document.createElement('p');
      p.textContent = this.finals[this.shown].text;
      finalsEl.appendChild(p);
    }
    const c = this.committed.replace(/^ /, ''), t = this.committed ? this.tentative : this.tentative.replace(/^ /, '');
    const cs = currentEl.querySelector('.committed') || currentEl.appendChild(Object.assign(document.createElement('span'), { className: 'committed' }));
    const ts = currentEl.querySelector('.tentative') || currentEl.appendChild(Object.assign(document.createElement('span'), { className: 'tentative' }));
    if (cs.textContent !== c) cs.textContent = c;
    if (ts.textContent !== t) ts.textContent = t;
    currentEl.hidden = !c && !t;
  }
  // The last two lines for a caption view: whole lines that fit el's width
  // in el's font (measured), committed words plain, tentative ones in spans
  // of class "tentative".
  renderCaptions(el, nLines = 2) {
    const done = this.finals.map((f) => f.text).join(' ') + ' ' + this.committed;
    const words = done.split(/\s+/).filter(Boolean).map((w) => ({ w, tentative: false }))
      .concat(this.tentative.split(/\s+/).filter(Boolean).map((w) => ({ w, tentative: true })));
    const cs = getComputedStyle(el);
    const width = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    const lines = layoutLines(words, Math.max(1, width - 2), measurer(el)).slice(-nLines);
    el.textContent = '';
    for (const l of lines) {
      const d = document.createElement('div');
      d.className = 'caption-line';
      let run = null;
      l.forEach((w, i) => {
        const text = (i ? ' ' : '') + w.w;
        if (w.tentative) {
          if (!run) { run = document.createElement('span'); run.className = 'tentative'; d.appendChild(run); }
          run.textContent += text;
        } else d.appendChild(document.createTextNode(text));
      });
      el.appendChild(d);
    }
  }
  text() { return this.finals.map((f) => f.text).join('\n') + (this.finals.length ? '\n' : ''); }
  cues() { return splitCues(this.finals); }
  static stamp(t, sep) {
    const ms = Math.max(0, Math.round(t * 1000));
    const p = (n, w = 2) => String(n).padStart(w, '0');
    return `${p(Math.floor(ms / 3600000))}:${p(Math.floor(ms / 60000) % 60)}:${p(Math.floor(ms / 1000) % 60)}${sep}${p(ms % 1000, 3)}`;
  }
  srt() {
    return this.cues().map((c, i) => `${i + 1}\n${Transcript.stamp(c.start, ',')} --> ${Transcript.stamp(c.end, ',')}\n${c.text}\n`).join('\n');
  }
  vtt() {
    return 'WEBVTT\n\n' + this.cues().map((c) => `${Transcript.stamp(c.start, '.')} --> ${Transcript.stamp(c.end, '.')}\n${c.text}\n`).join('\n');
  }
}
