"""Bounded inputs of sotto-server: what the static files and the upload
decoders refuse, against a real server process (tests/ref/server_client.py).

  static    --web is a temporary folder holding index.html, a link inside it
            (served), a link to a file outside it and a link to a folder outside
            it (both refused: 404, and the outside file's text never appears).
  methods   PUT, DELETE, POST, PATCH and OPTIONS on a static file: 405 with an
            Allow header, never the file; HEAD: headers without a body; CONNECT
            (which libwebsockets turns into a raw socket) is answered or closed
            within 3 s.
  uploads   the server runs with --max-upload-s 60:
            - a 144-byte WAV declaring 1 Hz (100 s at 16 kHz before the fix) -> 400;
            - a WAV whose data chunk declares 4 GB and holds 2 MB of 8 kHz audio
              (250 s) -> 413 quickly, the server's RSS growing < 150 MB;
            - a small FLAC of 10 min of silence -> 413 quickly (its declared length);
            - the same FLAC with the length field zeroed (unknown length) -> 413
              (the decoder stops at the cap);
            - an Ogg Opus file of 10 min of silence -> 413;
            - a form cut off inside its file part, a 9000-byte field -> 400 saying so;
            - a dev clip as WAV and as FLAC -> 200 with the clip's text.
            The server stays healthy throughout, and a sanitized build reports nothing.

Run: python3 tests/ref/test_inputs.py --server build/sotto-server --sotto build/sotto \
         --model models/tiny.en --manifest ../shared/audio/manifest.tsv
Exits non-zero if any check fails. Needs sox and opusenc (scripts/test.sh installs them).
"""
import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

import websockets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refcommon as rc  # noqa: E402
import server_client as sc  # noqa: E402

SECRET = "sotto-test-secret-outside-the-web-root"


class Checker:
    def __init__(self):
        self.failed = []
        self.count = 0

    def ok(self, name, cond, detail=""):
        self.count += 1
        print(f"  {'ok  ' if cond else 'FAIL'} {name}" + (f": {detail}" if detail and not cond else ""))
        if not cond:
            self.failed.append(name)
        return cond


request = sc.http_request


def upload(port, filename, data, timeout=120.0):
    return sc.upload_transcription(port, data, filename, timeout=timeout)


def wav_header(rate, bits, data_declared, channels=1):
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * align, align, bits)
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt
            + b"data" + struct.pack("<I", data_declared))


def section_static(port, web, ck):
    st, _, body, _ = request(port, "GET", "/index.html")
    ck.ok("GET /index.html: 200 with the file", st == 200 and b"inside" in body, f"{st}")
    st, _, body, _ = request(port, "GET", "/inner.html")
    ck.ok("a link to a file inside the web root is served", st == 200 and b"inside" in body, f"{st}")
    for path in ("/escape.txt", "/outdir/secret.txt"):
        st, _, body, _ = request(port, "GET", path)
        ck.ok(f"GET {path} (a link out of the web root): refused",
              st in (403, 404) and SECRET.encode() not in body, f"{st} {body[:80]!r}")


def section_methods(port, ck):
    for m in ("PUT", "DELETE", "POST", "PATCH", "OPTIONS"):
        st, hdr, body, _ = request(port, m, "/index.html", body=b"x" * 10 if m != "DELETE" else None)
        ck.ok(f"{m} /index.html: 405 with Allow, not the file",
              st == 405 and "GET" in hdr.get("allow", "") and b"inside" not in body,
              f"{st} allow={hdr.get('allow')!r} {body[:60]!r}")
    st, hdr, body, _ = request(port, "HEAD", "/index.html")
    ck.ok("HEAD /index.html: 200, no body", st == 200 and body == b"", f"{st} {len(body)} bytes")
    st, _, body, _ = request(port, "HEAD", "/healthz")
    ck.ok("HEAD /healthz: 200, no body", st == 200 and body == b"", f"{st} {body[:40]!r}")
    for target in ("example.com:443", "/index.html"):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        t0 = time.monotonic()
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        s.settimeout(3.0)
        outcome = "hang"
        try:
            while True:
                d = s.recv(4096)
                if not d:
                    outcome = "closed"
                    break
                if b"\r\n" in d:
                    outcome = "answered"
                    break
        except socket.timeout:
            pass
        except OSError:
            outcome = "closed"
        s.close()
        ck.ok(f"CONNECT {target}: answered or closed within 3 s", outcome != "hang",
              f"{outcome} after {time.monotonic() - t0:.1f} s")


def sox(args):
    p = subprocess.run(["sox"] + args, capture_output=True)
    if p.returncode:
        raise RuntimeError(f"sox {' '.join(args)}: {p.stderr.decode()[-300:]}")


def section_uploads(srv, tmp, clip, ck):
    port = srv.port
    # 1. a 144-byte WAV declaring 1 Hz
    one_hz = wav_header(1, 16, 100) + bytes(100)
    st, j, secs = upload(port, "one_hz.wav", one_hz)
    ck.ok("a 144-byte WAV at 1 Hz: 400 naming the rate", len(one_hz) == 144 and st == 400
          and "Hz" in json.dumps(j), f"{st} {j}")
    # 2. a data chunk declaring 4 GB, 2 MB present (8-bit 8 kHz: 250 s)
    rss0 = rc_rss(srv)
    big = wav_header(8000, 8, 0xFFFFFFF0) + bytes([128]) * (2 << 20)
    st, j, secs = upload(port, "huge.wav", big)
    rss1 = rc_rss(srv)
    ck.ok("a WAV declaring 4 GB (250 s present): 413 within 10 s", st == 413 and secs < 10,
          f"{st} {secs:.1f} s {j}")
    ck.ok("... and the server's RSS grows < 150 MB", rss1 - rss0 < 150, f"{rss0:.0f} -> {rss1:.0f} MB")
    # 3. FLAC of 10 minutes of silence (a few KB)
    flac = os.path.join(tmp, "silence.flac")
    sox(["-n", "-r", "8000", "-c", "1", "-b", "16", "-D", flac, "trim", "0", "600"])
    data = open(flac, "rb").read()
    st, j, secs = upload(port, "silence.flac", data)
    ck.ok(f"a {len(data) // 1024} KB FLAC of 10 min of silence: 413 within 5 s",
          st == 413 and secs < 5 and "60 s" in json.dumps(j), f"{st} {secs:.1f} s {j}")
    # 4. the same with STREAMINFO's total-samples field zeroed (length unknown)
    z = bytearray(data)
    ok_layout = z[:4] == b"fLaC" and (z[4] & 0x7F) == 0
    if ok_layout:
        z[21] &= 0xF0
        z[22:26] = b"\0\0\0\0"
    st, j, secs = upload(port, "unknown_length.flac", bytes(z))
    ck.ok("the FLAC with its length unknown: 413 within 10 s (decoding stops at the cap)",
          ok_layout and st == 413 and secs < 10, f"{st} {secs:.1f} s {j}")
    # 5. Ogg Opus of 10 minutes of silence
    wav = os.path.join(tmp, "silence.wav")
    opus = os.path.join(tmp, "silence.opus")
    sox(["-n", "-r", "48000", "-c", "1", "-b", "16", "-D", wav, "trim", "0", "600"])
    subprocess.run(["opusenc", "--quiet", "--bitrate", "16", wav, opus], check=True)
    data = open(opus, "rb").read()
    st, j, secs = upload(port, "silence.opus", data)
    ck.ok(f"a {len(data) // 1024} KB Ogg Opus file of 10 min of silence: 413 within 10 s",
          st == 413 and secs < 10, f"{st} {secs:.1f} s {j}")
    # 6. malformed forms: refused with the parser's reason
    b = "sottoB0undary"
    head = (f'--{b}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n').encode()
    ctype = {"Content-Type": f"multipart/form-data; boundary={b}"}
    st, _, body, _ = request(port, "POST", "/v1/audio/transcriptions", head + one_hz, ctype)
    ck.ok("a form cut off inside its file part: 400 saying it is truncated",
          st == 400 and b"truncated" in body, f"{st} {body[:200]!r}")
    long_prompt = (f'--{b}\r\nContent-Disposition: form-data; name="prompt"\r\n\r\n'.encode()
                   + b"p" * 9000 + b"\r\n")
    st, _, body, _ = request(port, "POST", "/v1/audio/transcriptions",
                             long_prompt + head + wav_header(8000, 8, 8000) + bytes(8000)
                             + f"\r\n--{b}--\r\n".encode(), ctype)
    ck.ok("a 9000-byte prompt field: 400 naming the field", st == 400 and b"prompt" in body,
          f"{st} {body[:200]!r}")
    # 7. normal uploads still work
    ref = rc.normalize(clip["text"]).split()
    clip_flac = os.path.join(tmp, "clip.flac")
    sox([clip["file"], clip_flac])
    for name, path in (("clip.wav", clip["file"]), ("clip.flac", clip_flac)):
        st, j, secs = upload(port, name, open(path, "rb").read())
        hyp = rc.normalize(j.get("text", "")).split() if isinstance(j, dict) else []
        errs = rc.edit_distance(ref, hyp)
        ck.ok(f"a {clip['seconds']:.0f} s dev clip as {name}: 200 with its text (WER <= 20%)",
              st == 200 and errs <= 0.2 * len(ref), f"{st} {errs}/{len(ref)} {str(j)[:200]}")
    st, _ = sc.http_get(srv.http_url + "/healthz")
    ck.ok("the server is still healthy", st == 200 and srv.alive(), f"{st}")


def rc_rss(srv):
    try:
        with open(f"/proc/{srv.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def make_web(tmp):
    web = os.path.join(tmp, "web")
    outside = os.path.join(tmp, "outside")
    os.makedirs(web)
    os.makedirs(outside)
    with open(os.path.join(web, "index.html"), "w") as f:
        f.write("<html>inside</html>\n")
    with open(os.path.join(outside, "secret.txt"), "w") as f:
        f.write(SECRET + "\n")
    os.symlink(os.path.join(web, "index.html"), os.path.join(web, "inner.html"))
    os.symlink(os.path.join(outside, "secret.txt"), os.path.join(web, "escape.txt"))
    os.symlink(outside, os.path.join(web, "outdir"))
    return web


def _ogg_crc(data):
    crc = 0
    for b in data:
        crc ^= b << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def ogg_page(body, seq, header_type=0, lacing=None, serial=0x50770):
    """One Ogg page (RFC 3533) with a valid CRC; lacing defaults to one
    complete packet of len(body) bytes."""
    if lacing is None:
        lacing = [255] * (len(body) // 255) + [len(body) % 255]
    hdr = (b"OggS" + bytes([0, header_type]) + struct.pack("<qII", 0, serial, seq)
           + b"\0\0\0\0" + bytes([len(lacing)]) + bytes(lacing))
    page = bytearray(hdr + body)
    struct.pack_into("<I", page, 22, _ogg_crc(page))
    return bytes(page)


def section_ogg(port, ck):
    """Deepgram's Ogg Opus input: a packet continued over page after page
    (every lacing value 255) would stay buffered in libogg without a limit;
    the server must refuse it once it outgrows the largest Opus packet."""
    head = b"OpusHead" + bytes([1, 1]) + struct.pack("<HIhB", 312, 48000, 0, 0)
    pages = [ogg_page(head, 0, header_type=2)]
    for i in range(6):  # 6 x 65025 bytes of one never-ending packet
        pages.append(ogg_page(b"\x55" * 65025, 1 + i, header_type=1 if i else 0,
                              lacing=[255] * 255))

    async def go():
        msgs = []
        ws = await sc.open_ws(f"ws://127.0.0.1:{port}/v1/listen?encoding=ogg-opus&sample_rate=48000")

        async def receive():
            try:
                async for m in ws:
                    if isinstance(m, str):
                        msgs.append(json.loads(m))
            except websockets.ConnectionClosed:
                pass

        rx = asyncio.create_task(receive())
        try:
            # paced, as a live stream: bytes still arriving when the server closes
            # would turn its close into a TCP reset that loses the Error message
            for pg in pages:
                if rx.done():
                    break
                await ws.send(pg)
                await asyncio.sleep(0.3)
        except websockets.ConnectionClosed:
            pass
        try:
            await asyncio.wait_for(rx, timeout=15)
        except asyncio.TimeoutError:
            await ws.close()
            return msgs, "timeout"
        return msgs, ws.close_code

    msgs, closed = asyncio.run(go())
    errs = [m for m in msgs if m.get("type") == "Error"]
    ck.ok("Deepgram ogg-opus: a packet continued over 390 KB of pages is refused "
          "(Error UNSUPPORTED_AUDIO, close 1008)",
          any(e.get("variant") == "UNSUPPORTED_AUDIO" and "61200" in e.get("message", "")
              for e in errs) and closed == 1008, f"messages {msgs[:3]}, close {closed}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(rc.REPO, "build", "sotto-server"))
    ap.add_argument("--sotto", default=os.path.join(rc.REPO, "build", "sotto"))  # the suite's usual args
    ap.add_argument("--model", default=os.path.join(rc.REPO, "models", "tiny.en"))
    ap.add_argument("--manifest", default=rc.DEFAULT_MANIFEST)
    args = ap.parse_args()
    rows = rc.load_manifest(args.manifest, languages={"en"})
    clip = min((r for r in rows if r["seconds"] >= 5), key=lambda r: r["seconds"])
    ck = Checker()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sotto-inputs-") as tmp:
        web = make_web(tmp)
        srv = sc.Server(args.server, model=args.model,
                        args=["--web", web, "--max-upload-s", "60", "--threads", "2"])
        srv.start()
        try:
            print("static files")
            section_static(srv.port, web, ck)
            print("methods")
            section_methods(srv.port, ck)
            print("uploads")
            section_uploads(srv, tmp, clip, ck)
            print("streams")
            section_ogg(srv.port, ck)
        finally:
            code = srv.stop()
        ck.ok("the server exits 0 on SIGTERM", code == 0, f"exit {code}; log {srv.log_path}")
        ck.ok("no sanitizer report in the server's log", not sc.SANITIZER_REPORTS,
              "\n".join(sc.SANITIZER_REPORTS)[:3000])
    print(f"{ck.count} checks, {len(ck.failed)} failed, {time.monotonic() - t0:.0f} s")
    if ck.failed:
        print("FAILED: " + "; ".join(ck.failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
