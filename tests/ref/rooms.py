"""Test streams for the "hard rooms" tests and benchmark (tests/ref/test_rooms.py,
bench/bench_rooms.py): dev clips joined with gaps or with none, noise mixed in at a
given SNR, and pieces of non-speech audio. Everything is deterministic (fixed seeds),
16 kHz mono float32 in [-1, 1), built in memory with numpy; nothing is written into the
repository (write_wav() to a temporary directory).

A Stream carries the audio and what is known about it:

    st = join_clips(pick_clips(rows, 7, seed=1), gap_s=(1, 4), seed=1)
    st = add_noise(st, "pink", snr_db=0, seed=2)           # a new Stream
    st.audio, st.seconds, st.segments, st.texts, st.reference
    st.write_wav("/tmp/x.wav")

- segments: one (start, end) in seconds per clip: the clip's speech span (its first to
  its last active 20 ms frame, see speech_span()), in stream time. clip_spans: the
  clips' full extents (with their own leading/trailing silence).
- texts / ids: the reference text and manifest id per clip; reference: texts joined.

Noise kinds (add_noise): white, pink (1/f power, FFT-shaped), babble (6-8 other dev
clips of speakers not in the stream, each at the same active level, looped from a
random offset and summed). The SNR is the mean power of the stream's active speech
frames (frames inside the segments no more than ACTIVE_BELOW_DB under the 95th
percentile of those frames) over the mean power of the noise.

Non-speech pieces (NONSPEECH, nonspeech(name, seconds, seed)): digital silence, low
white noise (-60 dBFS RMS), mains hum (50/100/150 Hz), keyboard-like clicks, synthesized
music (chords, melody, a kick-drum thump), room tone with door-like thumps. Each is a
Stream with no segments and no text: the only right transcript is none.

Text checks: normalize()/edit_distance()/corpus_wer() are refcommon's (Whisper's English
normalizer, word Levenshtein); has_loop(), words_per_second_ok(), lost_runs().
"""
import os
import re
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402

SR = 16000
FRAME = 320            # 20 ms analysis frames
ACTIVE_BELOW_DB = 30.0  # active speech: within this of the 95th-percentile frame

normalize = rc.normalize
edit_distance = rc.edit_distance
corpus_wer = rc.corpus_wer

# clips not used as stream material: the 70 s concatenation duplicates test-clean
# clips, the 5.4 min chapter has its own silences, earnings22's reference is not
# cross-checked (they may still be babble talkers, see babble()).
NOT_MATERIAL = ("concat70s", "full-chapter", "earnings22")


# ---------------------------------------------------------------------------
# clips


def speaker(row):
    """A speaker key for a manifest row: the LibriSpeech speaker number, one key for
    the LibriVox reader, else the id itself."""
    i = row["id"]
    m = re.match(r"(?:long_)?librispeech_[a-z0-9-]+_(\d+)-", i)
    if m:
        return "ls" + m.group(1)
    if i.startswith("librivox_"):
        return "librivox-ss"
    return i


_clip_cache = {}


def clip_audio(row):
    """The clip's samples (float32, cached)."""
    p = row["file"]
    if p not in _clip_cache:
        _clip_cache[p] = rc.read_wav_16k(p)
    return _clip_cache[p]


def material(rows, min_s=2.0, max_s=16.0):
    """English clips usable as stream material, in manifest order."""
    return [r for r in rows if r.get("language", "en") == "en" and min_s <= r["seconds"] <= max_s
            and not any(x in r["id"] for x in NOT_MATERIAL)]


def pick_clips(rows, n, seed=1, min_s=2.0, max_s=16.0, exclude_speakers=()):
    """n material clips chosen with a fixed seed (no speaker of exclude_speakers)."""
    pool = [r for r in material(rows, min_s, max_s) if speaker(r) not in exclude_speakers]
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} clips of {min_s}-{max_s} s, {n} wanted")
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(pool), size=n, replace=False)
    return [pool[i] for i in idx]


def frame_db(x):
    """Power per 20 ms frame in dBFS (a full-scale sine is -3 dB)."""
    n = len(x) // FRAME
    if n == 0:
        return np.zeros(0)
    p = np.mean(x[:n * FRAME].reshape(n, FRAME).astype(np.float64) ** 2, axis=1)
    return 10 * np.log10(p + 1e-12)


def speech_span(x, below_db=40.0):
    """(first, last) second of the clip's active part: frames no more than below_db under
    its 95th-percentile frame."""
    db = frame_db(x)
    if len(db) == 0:
        return 0.0, len(x) / SR
    act = np.nonzero(db >= np.percentile(db, 95) - below_db)[0]
    return act[0] * FRAME / SR, (act[-1] + 1) * FRAME / SR


def longest_quiet(x, t0=0.0, t1=None, below_db=35.0, ref_db=None):
    """The longest run (seconds) of frames quieter than ref_db - below_db between t0 and
    t1 (ref_db: the 95th-percentile frame of that stretch); (length, start second)."""
    t1 = len(x) / SR if t1 is None else t1
    a, b = int(t0 * SR), int(t1 * SR)
    db = frame_db(x[a:b])
    if len(db) == 0:
        return 0.0, t0
    ref = np.percentile(db, 95) if ref_db is None else ref_db
    quiet = db < ref - below_db
    best, best_at, run = 0, 0, 0
    for i, q in enumerate(quiet):
        run = run + 1 if q else 0
        if run > best:
            best, best_at = run, i - run + 1
    return best * FRAME / SR, t0 + best_at * FRAME / SR


def trim_clip(x, keep_s=0.15):
    """The clip with its leading/trailing silence cut to at most keep_s."""
    s, e = speech_span(x)
    a = max(0, int((s - keep_s) * SR))
    b = min(len(x), int((e + keep_s) * SR))
    return x[a:b]


# ---------------------------------------------------------------------------
# streams


class Stream:
    def __init__(self, name, audio, segments=(), texts=(), ids=(), clip_spans=(), meta=None):
        self.name = name
        self.audio = np.asarray(audio, dtype=np.float32)
        self.segments = list(segments)
        self.texts = list(texts)
        self.ids = list(ids)
        self.clip_spans = list(clip_spans) or list(segments)
        self.meta = dict(meta or {})

    @property
    def seconds(self):
        return len(self.audio) / SR

    @property
    def reference(self):
        return " ".join(t.strip() for t in self.texts)

    def with_audio(self, audio, name=None, **meta):
        return Stream(name or self.name, audio, self.segments, self.texts, self.ids,
                      self.clip_spans, {**self.meta, **meta})

    def pcm16(self):
        """s16le bytes (clipped)."""
        return to_pcm16(self.audio)

    def write_wav(self, path):
        write_wav(path, self.audio)
        return path

    def gaps(self):
        """(end of clip k, start of clip k+1) in speech-span terms, for each join."""
        return [(a[1], b[0]) for a, b in zip(self.segments, self.segments[1:])]

    def __repr__(self):
        return (f"Stream({self.name!r}, {self.seconds:.1f} s, {len(self.segments)} clips, "
                f"{self.meta})")


def to_pcm16(x):
    return (np.clip(np.round(np.asarray(x, dtype=np.float64) * 32768.0), -32768, 32767)
            .astype("<i2").tobytes())


def write_wav(path, x):
    """16-bit mono 16 kHz WAV."""
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(to_pcm16(x))
    return path


def join_clips(rows, gap_s=(1.0, 4.0), seed=1, lead_s=1.0, tail_s=1.5, trim=None, name=None):
    """Clips joined into one Stream. gap_s: (lo, hi) seconds of digital silence drawn
    uniformly per join (fixed seed), a number for a fixed gap, or 0 for none
    (continuous speech: then each clip's own leading/trailing silence is trimmed to
    0.15 s unless trim=False). lead_s / tail_s: silence before the first and after
    the last clip."""
    rng = np.random.default_rng(seed)
    if trim is None:
        trim = not gap_s
    parts, segs, spans, t = [], [], [], 0.0
    if lead_s > 0:
        parts.append(np.zeros(int(lead_s * SR), np.float32))
        t += lead_s
    for k, r in enumerate(rows):
        x = clip_audio(r)
        if trim:
            x = trim_clip(x)
        if k > 0 and gap_s:
            g = rng.uniform(*gap_s) if isinstance(gap_s, (tuple, list)) else float(gap_s)
            n = int(round(g * SR))
            parts.append(np.zeros(n, np.float32))
            t += n / SR
        s, e = speech_span(x)
        segs.append((float(t + s), float(t + e)))
        spans.append((t, t + len(x) / SR))
        parts.append(x.astype(np.float32))
        t += len(x) / SR
    parts.append(np.zeros(int(tail_s * SR), np.float32))
    kind = "continuous" if not gap_s else f"gaps {gap_s}"
    return Stream(name or f"{len(rows)} clips, {kind}", np.concatenate(parts), segs,
                  [r["text"] for r in rows], [r["id"] for r in rows], spans,
                  {"join": kind, "seed": seed})


def continuous_clips(rows, min_s=45.0, max_s=90.0, max_pause_s=0.8):
    """Clips of one speaker, in manifest order, whose trimmed audio has no internal
    quiet stretch of max_pause_s or more, about min_s..max_s together: a continuous
    read with no pause for the VAD. Tries the speakers in manifest order; returns the
    first set that reaches min_s."""
    by_spk = {}
    for r in material(rows, 2.0, 20.0):
        by_spk.setdefault(speaker(r), []).append(r)
    for spk, rs in by_spk.items():
        out, tot = [], 0.0
        for r in rs:
            x = trim_clip(clip_audio(r))
            q, _ = longest_quiet(x)
            if q >= max_pause_s or tot + len(x) / SR > max_s:
                continue
            out.append(r)
            tot += len(x) / SR
        if tot >= min_s:
            return out
    raise ValueError(f"no speaker has {min_s} s of clips without a pause")


# ---------------------------------------------------------------------------
# noise


def white(n, rng):
    return rng.standard_normal(n).astype(np.float32)


def pink(n, rng):
    """1/f-power Gaussian noise (white noise shaped in the frequency domain; the DC bin
    and everything under 20 Hz removed), unit RMS."""
    m = 1 << int(np.ceil(np.log2(max(n, 2))))
    spec = np.fft.rfft(rng.standard_normal(m))
    f = np.fft.rfftfreq(m, 1.0 / SR)
    g = np.zeros_like(f)
    g[f >= 20] = 1.0 / np.sqrt(f[f >= 20])
    y = np.fft.irfft(spec * g, m)[:n]
    return (y / (np.sqrt(np.mean(y ** 2)) + 1e-12)).astype(np.float32)


def active_power(x, segments=None):
    """Mean power of the active frames (inside segments, if given)."""
    db = frame_db(x)
    if segments is not None:
        inside = np.zeros(len(db), bool)
        for s, e in segments:
            inside[int(s * SR) // FRAME:int(np.ceil(e * SR / FRAME))] = True
        db = db[inside[:len(db)]]
    if len(db) == 0:
        return 0.0
    act = db[db >= np.percentile(db, 95) - ACTIVE_BELOW_DB]
    return float(np.mean(10 ** (act / 10)))


def babble(n, rows, seed=1, talkers=(6, 8), exclude_speakers=(), exclude_ids=()):
    """Babble: the sum of 6-8 dev clips, each scaled to unit active power, looped from a
    random offset; unit RMS. Talkers are one clip per speaker (the speaker's longest),
    first English speakers not in exclude_speakers, then other languages' clips (pass
    rows of every language for those), then, if still short, other clips of the
    excluded speakers (never one of exclude_ids). Returns (noise, talker ids)."""
    rng = np.random.default_rng(seed)
    cand = sorted((r for r in rows if "concat70s" not in r["id"] and r["id"] not in exclude_ids),
                  key=lambda r: (-r["seconds"], r["id"]))
    tiers = ([], [], [])
    seen = set()
    for r in cand:
        s = speaker(r)
        if s in seen:
            continue
        if s in exclude_speakers:
            continue
        seen.add(s)
        tiers[0 if r.get("language", "en") == "en" else 1].append(r)
    tiers[2].extend(r for r in cand if speaker(r) in exclude_speakers)
    k = int(rng.integers(talkers[0], talkers[1] + 1))
    chosen = []
    for tier in tiers:
        tier = sorted(tier, key=lambda r: r["id"])
        take = min(k - len(chosen), len(tier))
        if take > 0:
            chosen += [tier[i] for i in sorted(rng.choice(len(tier), size=take, replace=False))]
    if len(chosen) < k:
        raise ValueError(f"babble needs {k} talkers, {len(chosen)} available")
    out = np.zeros(n, np.float64)
    for r in chosen:
        x = clip_audio(r).astype(np.float64)
        x = x / np.sqrt(active_power(x) + 1e-12)
        off = int(rng.integers(0, len(x)))
        reps = int(np.ceil((n + off) / len(x)))
        out += np.tile(x, reps)[off:off + n]
    out /= np.sqrt(np.mean(out ** 2)) + 1e-12
    return out.astype(np.float32), [r["id"] for r in chosen]


def add_noise(stream, kind, snr_db, seed=1, rows=None):
    """A new Stream: stream + noise of `kind` (white | pink | babble; babble needs the
    manifest rows, all languages for the most distinct talkers) at snr_db over the stream's active speech. The whole mix is scaled
    down if it would clip (the SNR is kept)."""
    x = stream.audio.astype(np.float64)
    rng = np.random.default_rng(seed)
    meta = {"noise": kind, "snr_db": snr_db}
    if kind == "white":
        nz = white(len(x), rng)
    elif kind == "pink":
        nz = pink(len(x), rng)
    elif kind == "babble":
        if rows is None:
            raise ValueError("babble needs rows")
        spk = {speaker({"id": i}) for i in stream.ids}
        nz, talkers = babble(len(x), rows, seed, exclude_speakers=spk,
                             exclude_ids=set(stream.ids))
        meta["talkers"] = talkers
    else:
        raise ValueError(f"unknown noise {kind}")
    nz = nz.astype(np.float64)
    ps = active_power(stream.audio, stream.segments)
    pn = float(np.mean(nz ** 2))
    y = x + nz * np.sqrt(ps / (pn * 10 ** (snr_db / 10.0)))
    peak = float(np.max(np.abs(y))) if len(y) else 0.0
    if peak > 0.97:
        y *= 0.97 / peak
        meta["scaled_db"] = round(20 * np.log10(0.97 / peak), 1)
    return stream.with_audio(y.astype(np.float32), f"{stream.name}, {kind} {snr_db:g} dB", **meta)


# ---------------------------------------------------------------------------
# non-speech pieces


def _dbfs(db):
    return 10 ** (db / 20.0)


def digital_silence(seconds, seed=0):
    return np.zeros(int(seconds * SR), np.float32)


def low_noise(seconds, seed=0, rms_dbfs=-60.0):
    """White noise at rms_dbfs."""
    rng = np.random.default_rng(seed)
    return (white(int(seconds * SR), rng) * _dbfs(rms_dbfs)).astype(np.float32)


def hum(seconds, seed=0, rms_dbfs=-30.0, base_hz=50.0):
    """Mains hum: base_hz and its 2nd and 3rd harmonics (amplitudes 1, 1/2, 1/3, slowly
    drifting phase), RMS rms_dbfs, over white noise 40 dB lower."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    drift = 0.3 * np.sin(2 * np.pi * 0.05 * t + rng.uniform(0, 2 * np.pi))
    y = sum(np.sin(2 * np.pi * base_hz * h * t + h * drift + rng.uniform(0, 2 * np.pi)) / h
            for h in (1, 2, 3))
    y *= _dbfs(rms_dbfs) / np.sqrt(np.mean(y ** 2))
    y += white(n, rng) * _dbfs(rms_dbfs - 40)
    return y.astype(np.float32)


def clicks(seconds, seed=0, peak_dbfs=-12.0, rate_hz=6.0):
    """Keyboard-like typing: bursts of keystrokes (about rate_hz while typing, pauses of
    0.3-2 s between bursts); each stroke a 2-6 ms decaying noise burst with a 2-5 kHz
    ring and a softer release click 60-120 ms later; white noise floor at -65 dBFS."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    y = white(n, rng).astype(np.float64) * _dbfs(-65)
    t = rng.uniform(0.1, 0.6)
    while t < seconds - 0.2:
        for _ in range(int(rng.integers(3, 12))):  # a word
            for k, level in ((0, 1.0), (rng.uniform(0.06, 0.12), 0.4)):
                a = int((t + k) * SR)
                m = int(SR * 0.012)
                if a + m >= n:
                    break
                tt = np.arange(m) / SR
                tau = rng.uniform(0.002, 0.006)
                env = np.exp(-tt / tau)
                ring = np.sin(2 * np.pi * rng.uniform(2000, 5000) * tt)
                burst = (0.6 * rng.standard_normal(m) + ring) * env
                y[a:a + m] += burst / np.max(np.abs(burst)) * _dbfs(peak_dbfs) * level * \
                    rng.uniform(0.5, 1.0)
            t += rng.exponential(1.0 / rate_hz) + 0.04
        t += rng.uniform(0.3, 2.0)
    return y.astype(np.float32)


def _tone(freq, n, harmonics=6, decay=1.0):
    tt = np.arange(n) / SR
    return sum(np.sin(2 * np.pi * freq * h * tt) * (decay / h) for h in range(1, harmonics + 1)
               if freq * h < SR / 2 - 500)


def _adsr(n, a=0.02, d=0.1, s=0.6, r=0.15):
    env = np.full(n, s)
    na, nd, nr = int(a * SR), int(d * SR), int(r * SR)
    na, nd, nr = min(na, n), min(nd, max(0, n - na)), min(nr, n)
    env[:na] = np.linspace(0, 1, na, endpoint=False)
    env[na:na + nd] = np.linspace(1, s, nd, endpoint=False)
    if nr:
        env[n - nr:] *= np.linspace(1, 0, nr)
    return env


def music(seconds, seed=0, rms_dbfs=-20.0, bpm=None):
    """Synthesized music: a chord progression (4 chords of 3 harmonic tones each, one
    per bar), a melody of eighth and quarter notes from the key's major scale an octave
    up, and a kick-drum thump (a 150->50 Hz sine sweep, decaying) on beats 1 and 3;
    RMS rms_dbfs."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    bpm = bpm or float(rng.uniform(90, 130))
    beat = 60.0 / bpm
    key = float(rng.choice([196.0, 220.0, 246.94, 261.63]))  # G3, A3, B3, C4
    scale = [0, 2, 4, 5, 7, 9, 11, 12]
    prog = [[0, 4, 7], [7, 11, 14], [9, 12, 16], [5, 9, 12]]  # I V vi IV

    def hz(semi, base=key):
        return base * 2 ** (semi / 12.0)
    bar = 4 * beat
    nbars = int(np.ceil(seconds / bar))
    y = np.zeros(int((nbars + 1) * bar * SR) + SR, np.float64)
    for b in range(nbars):
        a = int(b * bar * SR)
        m = int(bar * SR)
        chord = prog[b % 4]
        for s in chord:
            y[a:a + m] += 0.25 * _tone(hz(s - 12), m, 5) * _adsr(m, 0.05, 0.3, 0.5, 0.3)
        t = 0.0
        while t < bar - 1e-6:
            d = beat / 2 if rng.random() < 0.6 else beat
            d = min(d, bar - t)
            mm = int(d * SR)
            s = scale[int(rng.integers(0, len(scale)))] + 12 * int(rng.integers(0, 2))
            ma = a + int(t * SR)
            y[ma:ma + mm] += 0.35 * _tone(hz(s), mm, 4) * _adsr(mm, 0.01, 0.05, 0.7, 0.05)
            t += d
        for k in (0, 2):
            ka = a + int(k * beat * SR)
            mk = int(0.25 * SR)
            tt = np.arange(mk) / SR
            f = 50 + 100 * np.exp(-tt / 0.03)
            y[ka:ka + mk] += 0.9 * np.sin(2 * np.pi * np.cumsum(f) / SR) * np.exp(-tt / 0.08)
    y = y[:n]
    fade = min(n // 4, int(0.5 * SR))
    if fade:
        y[:fade] *= np.linspace(0, 1, fade)
        y[n - fade:] *= np.linspace(1, 0, fade)
    y *= _dbfs(rms_dbfs) / (np.sqrt(np.mean(y ** 2)) + 1e-12)
    return y.astype(np.float32)


def room_tone(seconds, seed=0, floor_dbfs=-55.0, thump_dbfs=-10.0):
    """Room tone: pink noise at floor_dbfs RMS with a door-like thump every 3-8 s (a
    decaying 50-90 Hz sine with a short low-passed noise transient; sometimes a second,
    softer one 0.15-0.4 s later, a door bouncing in its frame)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    y = pink(n, rng).astype(np.float64) * _dbfs(floor_dbfs)
    t = rng.uniform(1.0, 4.0)
    while t < seconds - 0.6:
        hits = [(0.0, 1.0)]
        if rng.random() < 0.5:
            hits.append((rng.uniform(0.15, 0.4), rng.uniform(0.3, 0.6)))
        for dt, level in hits:
            a = int((t + dt) * SR)
            m = int(0.4 * SR)
            if a + m > n:
                continue
            tt = np.arange(m) / SR
            body = np.sin(2 * np.pi * rng.uniform(50, 90) * tt) * np.exp(-tt / rng.uniform(0.05, 0.12))
            tr = rng.standard_normal(m) * np.exp(-tt / 0.008)
            tr = np.convolve(tr, np.ones(8) / 8, mode="same")  # crude low-pass
            th = body + 0.5 * tr
            y[a:a + m] += th / np.max(np.abs(th)) * _dbfs(thump_dbfs) * level
        t += rng.uniform(3.0, 8.0)
    return y.astype(np.float32)


# name -> (generator, default seconds in the CI test, description)
NONSPEECH = {
    "silence": (digital_silence, 60.0, "digital silence"),
    "low_noise": (low_noise, 20.0, "white noise at -60 dBFS RMS"),
    "hum": (hum, 20.0, "50/100/150 Hz mains hum at -30 dBFS RMS"),
    "clicks": (clicks, 20.0, "keyboard-like clicks, peaks -12 dBFS, over -65 dBFS noise"),
    "music": (music, 60.0, "synthesized music (chords, melody, kick) at -20 dBFS RMS"),
    "room_tone": (room_tone, 30.0, "pink room tone at -55 dBFS with door-like thumps at -10 dBFS"),
}


def nonspeech(name, seconds=None, seed=0):
    """A non-speech piece as a Stream (no segments, no text)."""
    fn, default_s, desc = NONSPEECH[name]
    s = default_s if seconds is None else seconds
    return Stream(name, fn(s, seed=seed), meta={"nonspeech": desc, "seed": seed})


# ---------------------------------------------------------------------------
# text checks


def words(text):
    """Normalized words (Whisper's English normalizer)."""
    return normalize(text).split()


def ngram_counts(ws, n=4):
    out = {}
    for i in range(len(ws) - n + 1):
        g = tuple(ws[i:i + n])
        out[g] = out.get(g, 0) + 1
    return out


def loop_ngram(text, n=4, times=3):
    """The most repeated n-gram of the normalized words if it occurs `times` or more
    times (anywhere, overlapping counts), else None. Returns (ngram string, count)."""
    c = ngram_counts(words(text), n)
    if not c:
        return None
    g, k = max(c.items(), key=lambda kv: kv[1])
    return (" ".join(g), k) if k >= times else None


def has_loop(text, n=4, times=3):
    """True if some 4-gram of the text's normalized words occurs 3 or more times: the
    signature of a repetition loop ("i am not sure if i can i am not sure if i can ...").
    Ordinary dictation repeats a 4-word phrase 3 times in one utterance almost never."""
    return loop_ngram(text, n, times) is not None


# Read English is about 2.5-3 words/s, fast speech up to about 5. A final with more than
# MAX_WPS words per second of its span plus MAX_WPS_SLACK words is not speech.
MAX_WPS = 6.0
MAX_WPS_SLACK = 3


def max_words(seconds):
    return int(MAX_WPS * max(0.0, seconds) + MAX_WPS_SLACK)


def words_per_second_ok(text, seconds):
    """True if the text has at most 6 words per second of audio + 3 words
    (MAX_WPS, MAX_WPS_SLACK)."""
    return len(words(text)) <= max_words(seconds)


def align(ref, hyp):
    """A word-level Levenshtein alignment of two word lists: a list of (op, ref word or
    None, hyp word or None), op in '=', 's', 'd' (ref word missing), 'i' (inserted)."""
    R, H = len(ref), len(hyp)
    d = np.zeros((R + 1, H + 1), np.int32)
    d[:, 0] = np.arange(R + 1)
    d[0, :] = np.arange(H + 1)
    for i in range(1, R + 1):
        ri = ref[i - 1]
        row, prev = d[i], d[i - 1]
        for j in range(1, H + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ri != hyp[j - 1]))
    out, i, j = [], R, H
    while i > 0 or j > 0:
        if i > 0 and j > 0 and d[i, j] == d[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            out.append(("=" if ref[i - 1] == hyp[j - 1] else "s", ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i > 0 and d[i, j] == d[i - 1, j] + 1:
            out.append(("d", ref[i - 1], None))
            i -= 1
        else:
            out.append(("i", None, hyp[j - 1]))
            j -= 1
    return out[::-1]


def lost_runs(ref_text, hyp_text, min_run=1):
    """Runs of consecutive reference words the hypothesis does not have (deleted or
    substituted in the alignment), longest first: [(length, index of the first word,
    the words)]. Insertions do not break a run."""
    ref, hyp = words(ref_text), words(hyp_text)
    runs, cur, start, k = [], [], None, 0
    for op, r, _ in align(ref, hyp):
        if op == "i":
            continue
        if op in ("d", "s"):
            if not cur:
                start = k
            cur.append(r)
        else:
            if len(cur) >= min_run:
                runs.append((len(cur), start, " ".join(cur)))
            cur = []
        k += 1
    if len(cur) >= min_run:
        runs.append((len(cur), start, " ".join(cur)))
    runs.sort(key=lambda x: -x[0])
    return runs


def errors(ref_text, hyp_text):
    """(word errors, reference words) of normalized texts."""
    r = words(ref_text)
    return edit_distance(r, words(hyp_text)), len(r)


if __name__ == "__main__":  # writes example WAVs for listening: rooms.py OUTDIR [manifest]
    import argparse

    ap = argparse.ArgumentParser(description="write the test streams as WAVs")
    ap.add_argument("outdir")
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    all_rows = rc.load_manifest(a.manifest)
    rows = [r for r in all_rows if r["language"] == "en"]
    base = join_clips(pick_clips(rows, 7, seed=1), seed=1)
    for st in (base, add_noise(base, "pink", 0, 2), add_noise(base, "white", 10, 2),
               add_noise(base, "babble", 5, 3, all_rows),
               join_clips(continuous_clips(rows), 0, lead_s=1.0)):
        p = os.path.join(a.outdir, re.sub(r"[^\w.-]+", "_", st.name) + ".wav")
        st.write_wav(p)
        print(f"{p}: {st.seconds:.1f} s, {len(st.segments)} clips {st.meta}")
    for name in NONSPEECH:
        st = nonspeech(name)
        p = os.path.join(a.outdir, name + ".wav")
        st.write_wav(p)
        print(f"{p}: {st.seconds:.1f} s, {st.meta['nonspeech']}")
