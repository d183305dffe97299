"""The compatibility protocols, each driven by the vendor's own client library
from PyPI, unmodified (docs/COMPAT.md):

  batch     the `openai` package: client.audio.transcriptions.create in json,
            text, srt, vtt, verbose_json (segments and words) and stream=True
            (server-sent deltas), FLAC and Ogg uploads, translations,
            client.models.list; plain curl as in the README; the json text must
            equal `sotto transcribe` on the same file (same decoder, same options).
  realtime  the `openai` package's realtime client on /v1/realtime with
            intent=transcription: session.update (current shape) with server VAD,
            speech_started/stopped, committed, deltas while the person speaks,
            completed transcripts that match sotto's own protocol output on the same
            audio; the older transcription_session.update shape with turn detection
            off and a manual commit; G.711 mu-law input.
  deepgram  the `deepgram-sdk` package's live client on /v1/listen: interim and
            final Results with words and times, speech_final, SpeechStarted,
            UtteranceEnd, Finalize (from_finalize) and CloseStream (Metadata).
  errors    bad requests in each mode get the documented error shape and the
            server keeps serving: wrong API key, missing file, unknown model,
            undecodable and oversized uploads, unknown event types, bad base64,
            an empty commit, bad query parameters.

The server runs with an API key, so every client authenticates.
"""
import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402
from test_server import Checks  # noqa: E402

CLIP = "librispeech_train-clean-100_1898-145715-0024"  # 14.8 s, 2 utterances
# The batch section makes ten whole transcriptions of its clip; under the
# sanitizers (13.6 s each on the 2-core VM) they take this shorter one (5.4 s):
# the same requests and response writers, fewer tokens to decode. Each still
# encodes a 30 s window, so the section takes ~100 s instead of ~140 s.
SANITIZED_BATCH_CLIP = "librispeech_test-clean_1089-134691-0001"
KEY = "sk-sotto-test-0123456789"
# Streamed transcripts may have this many more word errors on the clip than the
# offline CLI (the tolerance of test_web.py): where passes fall, and so what is
# committed, depends on timing, most of all under sanitizers.
STREAM_TOL = 5


def words(text):
    return rc.normalize(text).split()


def wer_between(a, b):
    ra, rb = words(a), words(b)
    return rc.edit_distance(ra, rb), max(1, len(ra))


def parse_cues(text, vtt):
    """(start, end, text) of each cue of an .srt/.vtt file."""
    cues = []
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    for b in blocks:
        lines = b.strip().split("\n")
        if vtt and lines[0].startswith("WEBVTT"):
            continue
        if not vtt:
            lines = lines[1:]
        a, z = [x.strip() for x in lines[0].split("-->")]

        def sec(t):
            h, m, s = t.replace(",", ".").split(":")
            return int(h) * 3600 + int(m) * 60 + float(s)
        cues.append((sec(a), sec(z), " ".join(lines[1:])))
    return cues


def pcm_at(path, rate, tmp, encoding=None):
    """The clip as raw mono 16-bit PCM (or G.711 with encoding="u-law") at rate."""
    raw = os.path.join(tmp, f"{os.path.basename(path)}.{rate}.{encoding or 's16'}.raw")
    if not os.path.exists(raw):
        enc = ["-e", encoding, "-b", "8"] if encoding else ["-e", "signed-integer", "-b", "16"]
        subprocess.run(["sox", path, "-t", "raw", "-r", str(rate), "-c", "1"] + enc + [raw], check=True)
    with open(raw, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------------------------
# batch


def section_batch(ck, srv, args, clip, tmp, offline_text):
    """clip and offline_text: the batch clip and `sotto transcribe` on it; every
    request below transcribes the whole clip."""
    from openai import OpenAI
    client = OpenAI(base_url=srv.http_url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    path = clip["file"]
    ids = [m.id for m in client.models.list().data]
    ck.ok("models.list offers whisper-1, the model and its variants",
          "whisper-1" in ids and "tiny.en" in ids and "tiny.en:nf4" in ids, ", ".join(ids))

    t0 = time.monotonic()
    with open(path, "rb") as f:
        r = client.audio.transcriptions.create(model="whisper-1", file=f)
    dt = time.monotonic() - t0
    ck.ok("json: the text equals `sotto transcribe` on the same file", r.text.strip() == offline_text.strip(),
          f"{dt:.1f} s; server {r.text!r} vs CLI {offline_text!r}")
    e, n = rc.edit_distance(words(clip["text"]), words(r.text)), len(words(clip["text"]))
    e_off = rc.edit_distance(words(clip["text"]), words(offline_text))
    ck.ok("json: the text matches the reference transcript", e <= max(3, n // 10),
          f"{e}/{n} word errors (offline {e_off})")

    with open(path, "rb") as f:
        t = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="text")
    ck.ok("text: the plain text", isinstance(t, str) and t.strip() == r.text.strip(), repr(t)[:120])

    with open(path, "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word", "segment"])
    segs = v.segments or []
    ok_times = all(s.start <= s.end for s in segs) and all(a.end <= b.start + 1e-6 for a, b in zip(segs, segs[1:]))
    ck.ok("verbose_json: language, duration, text and ordered segments",
          v.language == "english" and abs(v.duration - clip["seconds"]) < 0.05 and v.text.strip() == r.text.strip()
          and len(segs) >= 1 and ok_times,
          f"language {v.language}, duration {v.duration} (clip {clip['seconds']}), {len(segs)} segments")
    ws = v.words or []
    wtext = " ".join(w.word for w in ws)
    ck.ok("verbose_json: words with times inside the audio, in order, spelling the text",
          len(ws) >= 5 and all(0 <= w.start <= w.end <= v.duration + 0.01 for w in ws)
          and all(a.end <= b.start + 1e-6 for a, b in zip(ws, ws[1:])) and words(wtext) == words(v.text),
          f"{len(ws)} words")

    for fmt in ("srt", "vtt"):
        with open(path, "rb") as f:
            s = client.audio.transcriptions.create(model="whisper-1", file=f, response_format=fmt)
        cues = parse_cues(s, fmt == "vtt")
        same = len(cues) == len(segs) and all(abs(c[0] - g.start) < 0.0015 and abs(c[1] - g.end) < 0.0015
                                              and c[2] == g.text.strip() for c, g in zip(cues, segs))
        ck.ok(f"{fmt}: one cue per verbose_json segment, same times and text",
              same and (fmt != "vtt" or s.startswith("WEBVTT")), f"{len(cues)} cues vs {len(segs)} segments")

    with open(path, "rb") as f:
        stream = client.audio.transcriptions.create(model="whisper-1", file=f, stream=True)
        deltas, done = [], None
        for ev in stream:
            if ev.type == "transcript.text.delta":
                deltas.append(ev.delta)
            elif ev.type == "transcript.text.done":
                done = ev.text
    ck.ok("stream=True: deltas, then done with the same text as json",
          len(deltas) >= 1 and done is not None and done.strip() == r.text.strip()
          and "".join(deltas).strip() == done.strip(), f"{len(deltas)} deltas")

    for ext, sox_args in (("flac", []), ("ogg", ["-C", "6"])):
        dst = os.path.join(tmp, f"clip.{ext}")
        p = subprocess.run(["sox", path] + sox_args + [dst], capture_output=True)
        if p.returncode != 0:
            ck.ok(f"upload .{ext}: sox can write it", False, p.stderr.decode()[-200:])
            continue
        with open(dst, "rb") as f:
            x = client.audio.transcriptions.create(model="whisper-1", file=f)
        e, n = wer_between(r.text, x.text)
        limit = 0 if ext == "flac" else max(2, n // 20)
        ck.ok(f"upload .{ext}: transcribed like the WAV", e <= limit, f"{e}/{n} words differ")

    with open(path, "rb") as f:
        q = client.audio.transcriptions.create(model="tiny.en:nf4", file=f)
    e, n = wer_between(r.text, q.text)
    ck.ok("model tiny.en:nf4 picks the NF4 variant", e <= max(3, n // 10) and "tiny.en (nf4)" in srv.log(),
          f"{e}/{n} words differ from f32")

    # curl, as in the README
    p = subprocess.run(["curl", "-sS", srv.http_url + "/v1/audio/transcriptions", "-H", f"Authorization: Bearer {KEY}",
                        "-F", f"file=@{path}", "-F", "model=whisper-1"], capture_output=True, timeout=300)
    try:
        cj = json.loads(p.stdout)
    except ValueError:
        cj = {}
    ck.ok("curl: the README's example returns the json text", cj.get("text", "").strip() == r.text.strip(),
          p.stdout[:160].decode(errors="replace"))


def section_translate(ck, srv, args, tmp):
    """Whisper base (multilingual): a German clip translated, as `sotto transcribe --task translate`."""
    from openai import OpenAI
    rows = {r["id"]: r for r in rc.load_manifest(args.manifest)}
    clip = rows.get("picovoice_de")
    if not clip:
        ck.ok("translations: the German dev clip exists", False)
        return
    off = rc.run_sotto(args.sotto, args.base_model, [clip["file"]], ["--task", "translate"])[clip["file"]]["text"]
    client = OpenAI(base_url=srv.http_url + "/v1", api_key=KEY, max_retries=0, timeout=300)
    with open(clip["file"], "rb") as f:
        t = client.audio.translations.create(model="base", file=f)
    ck.ok("translations (base): the English text equals `sotto transcribe --task translate`",
          t.text.strip() == off.strip() and len(words(t.text)) >= 3, f"{t.text!r} vs {off!r}")
    with open(clip["file"], "rb") as f:
        v = client.audio.transcriptions.create(model="base", file=f, response_format="verbose_json")
    ck.ok("transcriptions (base): the language is detected", v.language == "german", v.language)


# ---------------------------------------------------------------------------------------------
# realtime


async def rt_session(srv, session_event, chunks, commit=False, tail_s=2.0, rate=24000, silence_byte=b"\0\0",
                     speed=5.0):
    """One realtime transcription session: sends session_event, the audio chunks
    (bytes) as appends, trailing silence, optionally a commit; collects events until
    every committed item is completed (or a timeout)."""
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=srv.http_url + "/v1", api_key=KEY,
                         websocket_base_url=srv.http_url.replace("http", "ws") + "/v1", max_retries=0)
    events = []
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        async def reader():
            async for ev in conn:
                events.append((time.monotonic(), ev.type, ev))

        task = asyncio.create_task(reader())
        await conn.send(session_event)
        step = rate // 10 * len(silence_byte)
        for c in chunks:
            for i in range(0, len(c), step):
                await conn.send({"type": "input_audio_buffer.append",
                                 "audio": base64.b64encode(c[i:i + step]).decode()})
                await asyncio.sleep(0.1 / speed)  # 100 ms of audio
        silence = silence_byte * int(rate * tail_s)
        await conn.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(silence).decode()})
        if commit:
            await conn.send({"type": "input_audio_buffer.commit"})
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            committed = [e for _, t, e in events if t == "input_audio_buffer.committed"]
            completed = [e for _, t, e in events if t == "conversation.item.input_audio_transcription.completed"]
            if committed and len(completed) >= len(committed) and time.monotonic() - t0 > 1.0:
                break
            await asyncio.sleep(0.1)
        task.cancel()
    return events


def check_items(ck, label, events, vad=True):
    """Per item: speech_started < speech_stopped < committed < completed (with VAD);
    deltas concatenate to the completed transcript; previous_item_id chains."""
    probs, items, order = [], {}, []
    prev = None
    for i, (t, typ, e) in enumerate(events):
        iid = getattr(e, "item_id", None)
        if iid is None:
            continue
        it = items.setdefault(iid, {"deltas": [], "idx": {}})
        if iid not in order:
            order.append(iid)
        if typ.endswith(".delta"):
            it["deltas"].append((i, e.delta))
        else:
            it["idx"].setdefault(typ.split(".")[-1], i)
            if typ == "conversation.item.input_audio_transcription.completed":
                it["transcript"] = e.transcript
            if typ == "input_audio_buffer.committed":
                if e.previous_item_id != prev:
                    probs.append(f"{iid}: previous_item_id {e.previous_item_id} != {prev}")
                prev = iid
    texts = []
    for iid in order:
        it = items[iid]
        ix = it["idx"]
        if "completed" not in ix:
            probs.append(f"{iid}: no completed")
            continue
        seq = ["speech_started", "speech_stopped", "committed", "completed"] if vad else ["committed", "completed"]
        got = [ix.get(k) for k in seq]
        if None in got or got != sorted(got):
            probs.append(f"{iid}: order {seq} at {got}")
        d = "".join(x for _, x in it["deltas"])
        if d.strip() != it["transcript"].strip():
            probs.append(f"{iid}: deltas {d!r} != transcript {it['transcript']!r}")
        if any(i > ix["completed"] for i, _ in it["deltas"]):
            probs.append(f"{iid}: a delta after completed")
        texts.append(it["transcript"])
    ck.problems(f"{label}: items in order, deltas spell each transcript, items chained", probs)
    return items, " ".join(texts)


def section_realtime(ck, srv, args, clip, tmp):
    pcm24 = pcm_at(clip["file"], 24000, tmp)
    ga = {"type": "session.update", "session": {
        "type": "transcription",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                            "transcription": {"model": "whisper-1", "language": "en"},
                            "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                                               "silence_duration_ms": 800}}}}}
    events = sc.run(rt_session(srv, ga, [pcm24], speed=1.0))  # real time: deltas come while speaking
    types = [t for _, t, _ in events]
    ck.ok("realtime: session.created, then session.updated with the transcription session",
          types[:2] == ["session.created", "session.updated"]
          and events[1][2].session.type == "transcription", ", ".join(types[:3]))
    items, text = check_items(ck, "realtime (server VAD)", events)
    n_items = len(items)
    ck.ok("realtime: one item per utterance (2 in the clip)", n_items >= 2, f"{n_items} items")
    early = any(any(i < it["idx"].get("speech_stopped", 1 << 30) for i, _ in it["deltas"]) for it in items.values())
    if args.sanitized:  # a sanitizer build is too slow to keep up with real time
        ck.note("not checked under sanitizers: deltas before speech_stopped (a question of speed)")
    else:
        ck.ok("realtime: deltas arrive while the person is still speaking (before speech_stopped)", early)
    # sotto's own protocol on the same audio and VAD settings
    own = sc.run(sc.stream_async(srv.ws_url + "?api_key=" + KEY, sc.Audio.pcm(pcm24, 24000, 1, "pcm_s16le", 100),
                                 start={"vad": {"silence_ms": 800, "preroll_ms": 300}}))
    e, n = wer_between(own.transcript, text)
    ck.ok("realtime: the completed transcripts match sotto's own protocol output", e <= max(2, n // 20),
          f"{e}/{n} words differ; realtime {text!r}")
    e, n = rc.edit_distance(words(clip["text"]), words(text)), len(words(clip["text"]))
    ck.ok("realtime: the transcript matches the reference", e <= STREAM_TOL + args.e_off, f"{e}/{n} word errors (offline {args.e_off})")

    beta = {"type": "transcription_session.update", "session": {
        "input_audio_format": "pcm16", "input_audio_transcription": {"model": "tiny.en"}, "turn_detection": None}}
    events = sc.run(rt_session(srv, beta, [pcm24], commit=True, tail_s=0.5))
    types = [t for _, t, _ in events]
    ck.ok("realtime (older shape): transcription_session.updated answers transcription_session.update",
          "transcription_session.updated" in types, ", ".join(types[:3]))
    items, text = check_items(ck, "realtime (turn detection off, manual commit)", events, vad=False)
    ck.ok("realtime (manual commit): no VAD events", not any(t.startswith("input_audio_buffer.speech") for t in types))
    e, n = rc.edit_distance(words(clip["text"]), words(text)), len(words(clip["text"]))
    ck.ok("realtime (manual commit): the transcript matches the reference", e <= STREAM_TOL + args.e_off,
          f"{e}/{n} word errors (offline {args.e_off})")

    ulaw = pcm_at(clip["file"], 8000, tmp, encoding="u-law")
    g711 = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcmu"}, "turn_detection": {"type": "server_vad"}}}}}
    events = sc.run(rt_session(srv, g711, [ulaw], rate=8000, silence_byte=b"\xff"))
    _, text = check_items(ck, "realtime (G.711 mu-law)", events)
    e, n = rc.edit_distance(words(clip["text"]), words(text)), len(words(clip["text"]))
    ck.ok("realtime (G.711 mu-law, 8 kHz): the transcript matches the reference", e <= STREAM_TOL + args.e_off,
          f"{e}/{n} word errors (offline {args.e_off})")


# ---------------------------------------------------------------------------------------------
# deepgram


def dg_client(srv, key=KEY):
    from deepgram import DeepgramClient
    from deepgram.environment import DeepgramClientEnvironment
    env = DeepgramClientEnvironment(base=srv.http_url, production=srv.http_url.replace("http", "ws"),
                                    agent=srv.http_url.replace("http", "ws"), agent_rest=srv.http_url)
    return DeepgramClient(api_key=key, environment=env)


def dg_session(srv, chunks, chunk_s, finalize_at=None, key=KEY, tail=(), **query):
    """Streams audio messages (chunks, chunk_s seconds each) through the SDK's
    live client at 5x real time, then `tail` messages and CloseStream; returns
    the server's messages (as dicts) in order. finalize_at: chunk index after
    which a Finalize is sent."""
    from deepgram.core.events import EventType
    client = dg_client(srv, key)
    msgs = []
    with client.listen.v1.connect(**query) as sock:
        sock.on(EventType.MESSAGE, lambda m: msgs.append(m if isinstance(m, dict) else m.dict()))

        def feed():
            for i, c in enumerate(chunks):
                sock.send_media(c)
                time.sleep(chunk_s / 5)
                if finalize_at == i:
                    sock.send_finalize()
            for c in tail:
                sock.send_media(c)
            sock.send_close_stream()

        th = threading.Thread(target=feed)
        th.start()
        sock.start_listening()  # until the server closes
        th.join()
    return msgs


def pcm_chunks(pcm, rate, ms=100):
    step = rate * ms // 1000 * 2
    return [pcm[i:i + step] for i in range(0, len(pcm), step)]


def final_text(msgs):
    return " ".join(m["channel"]["alternatives"][0]["transcript"] for m in msgs
                    if m.get("type") == "Results" and m.get("is_final"))


def section_deepgram(ck, srv, args, clip, tmp):
    pcm = pcm_at(clip["file"], 16000, tmp)
    silence = [b"\0\0" * 16000 * 2]  # 2 s: the last utterance ends by the VAD
    msgs = dg_session(srv, pcm_chunks(pcm, 16000), 0.1, tail=silence, model="nova-3", encoding="linear16", sample_rate=16000, channels=1,
                      language="en-US", interim_results="true", vad_events="true", utterance_end_ms="1000",
                      endpointing="800")
    types = [m.get("type") for m in msgs]
    res = [m for m in msgs if m.get("type") == "Results"]
    interim = [m for m in res if not m.get("is_final")]
    finals = [m for m in res if m.get("is_final")]
    ck.ok("deepgram: interim results, then finals", len(interim) >= 2 and len(finals) >= 2,
          f"{len(interim)} interim, {len(finals)} final")
    ck.ok("deepgram: SpeechStarted and UtteranceEnd events", "SpeechStarted" in types and "UtteranceEnd" in types,
          ", ".join(sorted(set(types))))
    ck.ok("deepgram: the last message is Metadata with the audio's duration",
          types and types[-1] == "Metadata" and abs(msgs[-1]["duration"] - (clip["seconds"] + 2)) < 0.2,
          f"{types[-1] if types else None}, {msgs[-1].get('duration') if msgs else None}")
    probs = []
    for f in finals:
        alt = f["channel"]["alternatives"][0]
        ws = alt["words"]
        s0, s1 = f["start"], f["start"] + f["duration"]
        if [w["punctuated_word"] for w in ws] != alt["transcript"].split():
            probs.append(f"words do not spell {alt['transcript']!r}")
        if any(not (s0 - 1e-6 <= w["start"] <= w["end"] <= s1 + 1e-6) for w in ws):
            probs.append(f"word times outside [{s0}, {s1}]")
        if not f.get("speech_final"):
            probs.append("a final that the VAD ended is not speech_final")
    ck.problems("deepgram: finals are speech_final, with words spelling the transcript inside their times", probs)
    text = final_text(msgs)
    e, n = rc.edit_distance(words(clip["text"]), words(text)), len(words(clip["text"]))
    ck.ok("deepgram: the final transcript matches the reference", e <= STREAM_TOL + args.e_off, f"{e}/{n} word errors (offline {args.e_off})")

    chunks = pcm_chunks(pcm, 16000)
    msgs = dg_session(srv, chunks, 0.1, finalize_at=len(chunks) // 4, tail=silence, model="nova-2",
                      encoding="linear16", sample_rate=16000, interim_results="false")
    finals = [m for m in msgs if m.get("type") == "Results"]
    ck.ok("deepgram: Finalize yields a from_finalize result; no interims when not asked",
          any(m.get("from_finalize") for m in finals) and all(m.get("is_final") for m in finals),
          f"{len(finals)} results")

    # Opus: raw 20 ms packets, one per message, and an Ogg Opus stream (opusenc) in 4 KB pieces
    pcm48 = pcm_at(clip["file"], 48000, tmp)
    packets = sc.opus_packets(pcm48 + b"\0\0" * 48000 * 2)
    msgs = dg_session(srv, packets, 0.02, model="nova-3", encoding="opus", sample_rate=48000)
    e, n = rc.edit_distance(words(clip["text"]), words(final_text(msgs))), len(words(clip["text"]))
    ck.ok("deepgram (encoding=opus, raw packets): the transcript matches the reference", e <= STREAM_TOL + args.e_off,
          f"{e}/{n} word errors: {final_text(msgs)!r}")
    ogg = os.path.join(tmp, "clip.opus")
    padded = os.path.join(tmp, "padded.wav")
    subprocess.run(["sox", clip["file"], padded, "pad", "0", "2"], check=True)
    subprocess.run(["opusenc", "--quiet", "--bitrate", "32", padded, ogg], check=True)
    with open(ogg, "rb") as f:
        data = f.read()
    pieces = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    msgs = dg_session(srv, pieces, (clip["seconds"] + 2) / len(pieces), model="nova-3", encoding="ogg-opus")
    e, n = rc.edit_distance(words(clip["text"]), words(final_text(msgs))), len(words(clip["text"]))
    ck.ok("deepgram (encoding=ogg-opus, an Ogg stream in pieces): the transcript matches the reference",
          e <= STREAM_TOL + args.e_off, f"{e}/{n} word errors: {final_text(msgs)!r}")


# ---------------------------------------------------------------------------------------------
# errors


def section_errors(ck, srv, args, clip, tmp):
    from openai import OpenAI, AuthenticationError, BadRequestError, NotFoundError, APIStatusError
    path = clip["file"]
    bad = OpenAI(base_url=srv.http_url + "/v1", api_key="sk-wrong-key-000000", max_retries=0)
    try:
        with open(path, "rb") as f:
            bad.audio.transcriptions.create(model="whisper-1", file=f)
        ck.ok("batch: a wrong API key is refused (401)", False)
    except AuthenticationError as e:
        ck.ok("batch: a wrong API key is refused (401)", e.status_code == 401 and e.body.get("type") is not None,
              str(e.body)[:120])
    client = OpenAI(base_url=srv.http_url + "/v1", api_key=KEY, max_retries=0)
    try:
        with open(path, "rb") as f:
            client.audio.transcriptions.create(model="no-such-model", file=f)
        ck.ok("batch: an unknown model is 404 model_not_found", False)
    except NotFoundError as e:
        ck.ok("batch: an unknown model is 404 model_not_found", e.code == "model_not_found", str(e.body)[:120])
    junk = os.path.join(tmp, "junk.wav")
    with open(junk, "wb") as f:
        f.write(os.urandom(50000))
    try:
        with open(junk, "rb") as f:
            client.audio.transcriptions.create(model="whisper-1", file=f)
        ck.ok("batch: an undecodable file is 400 invalid_file_format", False)
    except BadRequestError as e:
        ck.ok("batch: an undecodable file is 400 invalid_file_format", e.code == "invalid_file_format",
              str(e.body)[:160])
    big = os.path.join(tmp, "big.wav")
    with open(big, "wb") as f:
        f.write(b"\0" * int(args.max_upload_mb * 1e6 + 1e6))
    try:
        with open(big, "rb") as f:
            client.audio.transcriptions.create(model="whisper-1", file=f)
        ck.ok("batch: an upload over --max-upload-mb is 413", False)
    except APIStatusError as e:
        ck.ok("batch: an upload over --max-upload-mb is 413", e.status_code == 413 and e.code == "file_too_large",
              str(e.body)[:160])
    try:
        with open(path, "rb") as f:
            client.audio.transcriptions.create(model="whisper-1", file=f, response_format="xml")
        ck.ok("batch: an unknown response_format is 400", False)
    except BadRequestError as e:
        ck.ok("batch: an unknown response_format is 400", e.body.get("param") == "response_format", str(e.body)[:160])
    # a form without a file, and a body that is not a form (curl)
    for what, extra in (("a form without a file", ["-F", "model=whisper-1"]),
                        ("a JSON body", ["-H", "Content-Type: application/json", "-d", "{}"])):
        p = subprocess.run(["curl", "-sS", "-w", "\n%{http_code}", srv.http_url + "/v1/audio/transcriptions",
                            "-H", f"Authorization: Bearer {KEY}"] + extra, capture_output=True, timeout=60)
        body, _, code = p.stdout.decode().rpartition("\n")
        try:
            err = json.loads(body)["error"]
            shaped = {"message", "type", "param", "code"} <= set(err)
        except (ValueError, KeyError, TypeError):
            shaped = False
        ck.ok(f"batch: {what} is 400 with an OpenAI-shaped error", code == "400" and shaped, body[:160])

    # realtime: unknown event, bad base64, empty commit, wrong session type; then it still works
    async def rt_errors():
        from openai import AsyncOpenAI
        client = AsyncOpenAI(base_url=srv.http_url + "/v1", api_key=KEY,
                             websocket_base_url=srv.http_url.replace("http", "ws") + "/v1", max_retries=0)
        got = []
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.send({"type": "response.create"})
            await conn.send({"type": "input_audio_buffer.commit"})
            await conn.send({"type": "input_audio_buffer.append", "audio": "***not base64***"})
            await conn.send({"type": "session.update", "session": {"type": "realtime"}})
            await conn.send({"type": "session.update", "session": {"type": "transcription", "audio": {
                "input": {"format": {"type": "audio/flac"}}}}})
            await conn.send({"type": "input_audio_buffer.append"})
            await conn.send_raw("x" * (1 << 20 + 1))  # over --max-frame-bytes
            # then a valid session at a declared 16 kHz
            await conn.send({"type": "session.update", "session": {"type": "transcription", "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 16000}}}}})
            pcm = pcm_at(path, 16000, tmp)[:16000 * 2 * 6]
            await conn.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
            await conn.send({"type": "input_audio_buffer.commit"})
            t0 = time.monotonic()
            async for ev in conn:
                got.append(ev)
                if ev.type.endswith("transcription.completed") or time.monotonic() - t0 > 60:
                    break
        return got
    try:  # a server that never completes the item must fail the check, not hang the test
        got = sc.run(asyncio.wait_for(rt_errors(), 120))
    except asyncio.TimeoutError:
        got = []
        print("    realtime errors: no transcription.completed within 120 s")
    errs = [e.error for e in got if e.type == "error"]
    codes = [getattr(e, "code", None) for e in errs]
    ck.ok("realtime: unknown event, empty commit, bad base64, wrong session type, wrong audio format, "
          "append without audio, an oversized message: an error event each",
          len(errs) == 7 and "unknown_event" in codes and "input_audio_buffer_commit_empty" in codes
          and "frame_too_large" in codes and all(e.type == "invalid_request_error" and e.message for e in errs),
          str(codes))
    upd = [e for e in got if e.type == "session.updated"]
    done = [e.transcript for e in got if e.type.endswith("transcription.completed")]
    ref_words = set(words(clip["text"]))
    heard = words(done[0]) if done else []
    ck.ok("realtime: after the errors, audio/pcm declared at 16 kHz is transcribed",
          len(upd) == 1 and upd[0].session.audio.input.format.rate == 16000 and len(heard) >= 8
          and sum(w in ref_words for w in heard) >= 0.7 * len(heard), f"{done}")

    async def rt_badkey():
        from openai import AsyncOpenAI
        client = AsyncOpenAI(base_url=srv.http_url + "/v1", api_key="sk-wrong-key-000000",
                             websocket_base_url=srv.http_url.replace("http", "ws") + "/v1", max_retries=0)
        got = []
        try:
            async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
                async for ev in conn:
                    got.append(ev)
        except Exception as e:  # the server closes the connection after the error
            got.append(e)
        return got
    got = sc.run(rt_badkey())
    ck.ok("realtime: a wrong API key gets an error event and the connection is closed",
          [getattr(e, "type", "") for e in got][:1] == ["error"] and
          not any(getattr(e, "type", "").startswith("session.") for e in got), str(got)[:200])

    # deepgram: bad query parameter, unknown message, wrong key
    async def dg_raw(query, key=KEY, send=()):
        import websockets
        url = srv.http_url.replace("http", "ws") + "/v1/listen?" + query
        got = []
        async with websockets.connect(url, additional_headers={"Authorization": f"Token {key}"}) as ws:
            for m in send:
                await ws.send(m)
            try:
                while True:
                    got.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
                    if got[-1].get("type") == "Metadata":
                        break
            except Exception:
                pass
        return got
    got = sc.run(dg_raw("encoding=linear32"))
    ck.ok("deepgram: an unsupported encoding gets an Error message and the connection closes",
          len(got) == 1 and got[0].get("type") == "Error" and got[0].get("description"), str(got)[:200])
    got = sc.run(dg_raw("encoding=linear16&sample_rate=16000",
                        send=[json.dumps({"type": "Bogus"}), json.dumps({"type": "KeepAlive"}),
                              json.dumps({"type": "CloseStream"})]))
    ck.ok("deepgram: an unknown message gets an Error; KeepAlive is fine; CloseStream ends with Metadata",
          [m.get("type") for m in got] == ["Error", "Metadata"], str(got)[:200])
    got = sc.run(dg_raw("encoding=linear16&sample_rate=16000",
                        send=[b"\x01\x02\x03", b"\0" * 3200, json.dumps({"type": "CloseStream"})]))
    ck.ok("deepgram: audio of an odd length gets an Error; the stream goes on to Metadata",
          [m.get("type") for m in got] == ["Error", "Metadata"] and got[0].get("variant") == "BAD_AUDIO",
          str(got)[:200])
    got = sc.run(dg_raw("encoding=linear16", key="wrong-key-000000"))
    ck.ok("deepgram: a wrong key gets an Error and the connection closes",
          len(got) == 1 and got[0].get("type") == "Error", str(got)[:200])

    st, _ = sc.http_get(srv.http_url + "/healthz")
    ck.ok("the server still serves after the bad requests", st == 200 and srv.alive())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--base-model", default=os.path.join(rc.REPO, "models", "base"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    ap.add_argument("--only", default="batch,translate,realtime,deepgram,errors")
    ap.add_argument("--max-upload-mb", type=float, default=3)
    ap.add_argument("--sanitized", action="store_true",
                    help="the server is a sanitizer build: skip the one check that needs real-time speed")
    args = ap.parse_args()
    only = set(args.only.split(","))
    rows = {r["id"]: r for r in rc.load_manifest(args.manifest, {"en"})}
    clip = rows[CLIP]
    tmp = tempfile.mkdtemp(prefix="sotto-compat-")
    ck = Checks()
    t_all = time.monotonic()
    batch_clip = rows[SANITIZED_BATCH_CLIP] if args.sanitized else clip
    offline = rc.run_sotto(args.sotto, args.model, list(dict.fromkeys([clip["file"], batch_clip["file"]])))
    args.e_off = rc.edit_distance(words(clip["text"]), words(offline[clip["file"]]["text"]))
    print(f"offline CLI on the clip: {args.e_off}/{len(words(clip['text']))} word errors", flush=True)
    models = ["--model", args.base_model] if "translate" in only else []
    srv = sc.Server(args.server, model=args.model,
                    args=models + ["--api-key", KEY, "--max-upload-mb", str(args.max_upload_mb)])
    srv.start()
    try:
        for name, fn in (("batch", lambda: section_batch(ck, srv, args, batch_clip, tmp,
                                                              offline[batch_clip["file"]]["text"])),
                         ("translate", lambda: section_translate(ck, srv, args, tmp)),
                         ("realtime", lambda: section_realtime(ck, srv, args, clip, tmp)),
                         ("deepgram", lambda: section_deepgram(ck, srv, args, clip, tmp)),
                         ("errors", lambda: section_errors(ck, srv, args, clip, tmp))):
            if name not in only:
                continue
            print(f"== {name}", flush=True)
            t0 = time.monotonic()
            try:
                fn()
            except Exception as e:  # a crash of the section is a failure, with its reason
                import traceback
                traceback.print_exc()
                ck.ok(f"{name}: ran to the end", False, f"{type(e).__name__}: {e}")
            print(f"   ({time.monotonic() - t0:.1f} s)", flush=True)
    finally:
        code = srv.stop()
        log = srv.log()
    ck.ok("the server exits cleanly (0) with no sanitizer report", code == 0 and "Sanitizer" not in log
          and "runtime error" not in log, f"exit {code}")
    if ck.failed:
        print(log[-4000:])
        print(f"FAILED {len(ck.failed)} of {ck.n} checks ({time.monotonic() - t_all:.0f} s)")
        return 1
    print(f"all {ck.n} checks passed ({time.monotonic() - t_all:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
