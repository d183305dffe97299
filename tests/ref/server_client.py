"""A client library for testing and benchmarking sotto-server (docs/PROTOCOL.md).

- Server: starts sotto-server on a free port as a subprocess, waits for
  /healthz 200, captures its log, stops it (SIGTERM, then SIGKILL).
- Audio: reading the dev WAVs, resampling with sox, Opus packets through a
  small ctypes binding to libopus.
- stream(): one dictation session over WebSocket. Sends `start`, the audio
  (as fast as possible or at real-time pace, in chunks), then `stop`; records
  every event with its arrival time and every audio message with its send
  time. Returns a StreamResult.
- Checks on a StreamResult: sequence numbers, committed text, final texts,
  acknowledgements. Each returns a list of problems (empty = fine).

Used by tests/ref/test_server.py and bench/bench_server.py. Needs the
`websockets` package (asyncio API, version 13 or later).
"""
import asyncio
import base64
import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import ssl as ssl_mod
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import wave

import websockets
from websockets.asyncio.client import connect as ws_connect

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ---------------------------------------------------------------------------
# server process


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now.

    With SOTTO_TEST_PORTS=LO-HI set (scripts/test.sh sets it for the tests it runs
    beside others), the port is drawn from that range, so that two tests running
    at once never pick the same one between choosing it and their server
    binding it; otherwise the kernel picks one from its ephemeral range."""
    span = os.environ.get("SOTTO_TEST_PORTS", "")
    if span:
        lo, hi = (int(v) for v in span.split("-"))
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randint(lo, hi)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise RuntimeError(f"no free port in SOTTO_TEST_PORTS={span}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def insecure_ssl_context():
    """A client TLS context that accepts any certificate (self-signed test certs)."""
    ctx = ssl_mod.SSLContext(ssl_mod.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl_mod.CERT_NONE
    return ctx


def http_get(url, timeout=5.0, ssl_context=None):
    """(status, body text); status 0 and the error text if the connection fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ssl_context) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except Exception as e:  # connection refused, reset, timeout
        return 0, f"{type(e).__name__}: {e}"


# AddressSanitizer / UBSan / LeakSanitizer findings in any server's log (Server.stop
# collects them; a test run with a sanitized server fails on any).
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")
SANITIZER_REPORTS = []


class Server:
    """sotto-server as a subprocess on a free port.

        srv = Server(binary, model="models/tiny.en", args=["--max-sessions", "1"])
        srv.start()          # waits for /healthz 200
        ... srv.ws_url, srv.http_url ...
        srv.stop()           # SIGTERM; returns the exit code
        print(srv.log())
    """

    def __init__(self, binary, model=None, args=(), tls=None, threads=None, log_path=None,
                 log_level="info", env=None):
        self.binary = binary
        self.model = model
        self.args = list(args)
        self.tls = tls  # (cert, key) or None
        self.threads = threads
        self.port = None
        self.proc = None
        self.log_level = log_level
        self.env = env
        self._own_log = log_path is None
        self.log_path = log_path
        self._log_file = None

    @property
    def scheme(self):
        return "https" if self.tls else "http"

    @property
    def http_url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def ws_url(self):
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/v1/stream"

    @property
    def ssl_context(self):
        return insecure_ssl_context() if self.tls else None

    def command(self):
        cmd = [self.binary, "--port", str(self.port), "--host", "127.0.0.1",
               "--log-level", self.log_level]
        if self.model:
            cmd += ["--model", self.model]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        if self.tls:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        return cmd + self.args

    def start(self, timeout=60.0):
        for attempt in range(3):  # a free port may be taken between probe and bind
            self.port = free_port()
            if self.log_path is None or (self._own_log and attempt == 0):
                fd, self.log_path = tempfile.mkstemp(prefix="sotto-server-", suffix=".log")
                os.close(fd)
            self._log_file = open(self.log_path, "ab")
            env = dict(os.environ)
            if self.env:
                env.update(self.env)
            self.proc = subprocess.Popen(self.command(), stdout=self._log_file,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env)
            t0 = time.monotonic()
            while time.monotonic() - t0 < timeout:
                if self.proc.poll() is not None:
                    break
                st, _ = http_get(self.http_url + "/healthz", timeout=2.0,
                                 ssl_context=self.ssl_context)
                if st == 200:
                    self.start_seconds = time.monotonic() - t0
                    return self
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.kill()
                raise RuntimeError(f"sotto-server did not become healthy in {timeout:.0f} s; "
                                   f"log:\n{self.log()[-3000:]}")
            if "cannot listen" not in self.log():
                raise RuntimeError(f"sotto-server exited with {self.proc.returncode}; "
                                   f"log:\n{self.log()[-3000:]}")
        raise RuntimeError(f"sotto-server could not bind a port; log:\n{self.log()[-3000:]}")

    def signal(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout):
        """Exit code, or None if still running after timeout."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=40.0):
        """SIGTERM, wait; SIGKILL if it does not exit. Returns the exit code."""
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.wait(timeout)
            if rc is None:
                self.kill()
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        text = self.log()
        for needle in SANITIZER_MARKS:
            if needle in text:
                i = text.index(needle)
                SANITIZER_REPORTS.append(f"{self.log_path}: {text[max(0, i - 200):i + 1500]}")
                break
        return self.proc.returncode

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_lines(self, *needles):
        return [l for l in self.log().splitlines() if all(n in l for n in needles)]

    def metrics(self):
        """/metrics as {series (with labels): value}."""
        st, body = http_get(self.http_url + "/metrics", ssl_context=self.ssl_context)
        if st != 200:
            raise RuntimeError(f"/metrics answered {st}: {body[:200]}")
        return parse_metrics(body)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def http_request(port, method, path, body=None, headers=None, timeout=30.0):
    """(status, headers dict (lower-case), body bytes, seconds) of one plain-HTTP
    request to 127.0.0.1:port; status 0 and the error as the body on a failure."""
    import http.client
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.monotonic() - t0
    except Exception as e:  # reset, timeout
        return 0, {}, f"{type(e).__name__}: {e}".encode(), time.monotonic() - t0
    finally:
        conn.close()


def upload_transcription(port, data, filename="audio.wav", model="whisper-1", timeout=120.0):
    """POST /v1/audio/transcriptions with a multipart form holding `data` as the
    file; (status, parsed json or text, seconds)."""
    import uuid
    b = uuid.uuid4().hex
    parts = [f'--{b}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}\r\n'.encode(),
             f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
             f'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n",
             f"--{b}--\r\n".encode()]
    st, _, body, secs = http_request(port, "POST", "/v1/audio/transcriptions", b"".join(parts),
                                     {"Content-Type": f"multipart/form-data; boundary={b}"}, timeout)
    try:
        return st, json.loads(body), secs
    except ValueError:
        return st, body.decode("utf-8", "replace"), secs


class MetricsPoller:
    """Samples fn(server.metrics()) every `period` seconds on a thread while
    the `with` block runs; .samples is a list of (time.time(), value)."""

    def __init__(self, server, fn, period=0.05):
        import threading
        self.server, self.fn, self.period = server, fn, period
        self.samples = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self.fn(self.server.metrics())))
            except Exception:  # the server is stopping: no sample
                pass
            time.sleep(self.period)

    def __enter__(self):
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._th.join()

    def values(self):
        return [v for _, v in self.samples]


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


# ---------------------------------------------------------------------------
# audio


def read_wav(path):
    """(interleaved s16le bytes, sample rate, channels) of a 16-bit WAV."""
    with wave.open(path) as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: not 16-bit PCM")
        return w.readframes(w.getnframes()), w.getframerate(), w.getnchannels()


def sox_convert(src, dst, rate, channels=1):
    """Resamples (and up-mixes) a WAV with sox; dst is 16-bit."""
    subprocess.run(["sox", src, "-b", "16", "-c", str(channels), "-r", str(rate), dst],
                   check=True, capture_output=True)
    return dst


def s16_to_f32(pcm):
    import numpy as np
    return (np.frombuffer(pcm, dtype="<i2").astype("<f4") / 32768.0).tobytes()


class OpusEncoder:
    """libopus through ctypes: 48 kHz mono s16 -> raw Opus packets."""

    APPLICATION_VOIP, APPLICATION_AUDIO = 2048, 2049
    SET_BITRATE = 4002

    def __init__(self, rate=48000, channels=1, application=APPLICATION_AUDIO, bitrate=None):
        self.lib = _opus()
        err = ctypes.c_int(0)
        self.rate, self.channels = rate, channels
        self.enc = self.lib.opus_encoder_create(rate, channels, application, ctypes.byref(err))
        if err.value != 0 or not self.enc:
            raise RuntimeError(f"opus_encoder_create failed ({err.value})")
        if bitrate:
            self.lib.opus_encoder_ctl(self.enc, self.SET_BITRATE, ctypes.c_int(bitrate))
        self._out = ctypes.create_string_buffer(4000)

    def encode(self, pcm_frame):
        """One frame (2.5..120 ms of interleaved s16le) -> one packet."""
        n = len(pcm_frame) // (2 * self.channels)
        buf = ctypes.create_string_buffer(bytes(pcm_frame), len(pcm_frame))
        r = self.lib.opus_encode(self.enc, buf, n, self._out, len(self._out))
        if r < 0:
            raise RuntimeError(f"opus_encode failed ({r})")
        return self._out.raw[:r]

    def close(self):
        if self.enc:
            self.lib.opus_encoder_destroy(self.enc)
            self.enc = None

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


_opus_lib = None


def _opus():
    global _opus_lib
    if _opus_lib is None:
        lib = ctypes.CDLL("libopus.so.0")
        lib.opus_encoder_create.restype = ctypes.c_void_p
        lib.opus_encoder_create.argtypes = [ctypes.c_int32, ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int)]
        lib.opus_encode.restype = ctypes.c_int32
        lib.opus_encode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                    ctypes.c_char_p, ctypes.c_int32]
        lib.opus_encoder_destroy.argtypes = [ctypes.c_void_p]
        lib.opus_encoder_ctl.restype = ctypes.c_int
        lib.opus_decoder_create.restype = ctypes.c_void_p
        lib.opus_decoder_create.argtypes = [ctypes.c_int32, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int)]
        lib.opus_decode.restype = ctypes.c_int
        lib.opus_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                    ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.opus_decoder_destroy.argtypes = [ctypes.c_void_p]
        _opus_lib = lib
    return _opus_lib


def opus_packets(pcm48_mono, frame_ms=20, bitrate=None):
    """Raw Opus packets of frame_ms each from 48 kHz mono s16le (last frame zero-padded)."""
    enc = OpusEncoder(48000, 1, bitrate=bitrate)
    step = 48 * frame_ms * 2
    out = []
    try:
        for i in range(0, len(pcm48_mono), step):
            frame = pcm48_mono[i:i + step]
            if len(frame) < step:
                frame = frame + b"\0" * (step - len(frame))
            out.append(enc.encode(frame))
    finally:
        enc.close()
    return out


def opus_packet_is_bad(packet):
    """True if a fresh libopus decoder refuses the packet."""
    lib = _opus()
    err = ctypes.c_int(0)
    dec = lib.opus_decoder_create(48000, 1, ctypes.byref(err))
    pcm = (ctypes.c_int16 * 5760)()
    try:
        r = lib.opus_decode(dec, bytes(packet), len(packet), pcm, 5760, 0)
    finally:
        lib.opus_decoder_destroy(dec)
    return r < 0


def garbage_opus_packets(n, seed=1):
    """n random packets that libopus cannot decode (random bytes, kept if refused)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        p = bytes(rng.getrandbits(8) for _ in range(rng.randint(2, 200)))
        if opus_packet_is_bad(p):
            out.append(p)
    return out


class Audio:
    """Audio ready to stream: messages (PCM chunks or Opus packets), each with its
    duration, and the start message fields."""

    def __init__(self, messages, durations, encoding, rate, channels, units):
        self.messages = messages      # bytes per binary message
        self.durations = durations    # seconds of audio per message
        self.encoding = encoding
        self.rate = rate
        self.channels = channels
        self.units = units            # ack units per message (frames or 1 packet)

    @property
    def seconds(self):
        return sum(self.durations)

    @property
    def total_units(self):
        return sum(self.units)

    @classmethod
    def pcm(cls, data, rate=16000, channels=1, encoding="pcm_s16le", chunk_ms=100):
        bps = 2 if encoding == "pcm_s16le" else 4
        frame = bps * channels
        frames_per = max(1, rate * chunk_ms // 1000)
        msgs, durs, units = [], [], []
        for i in range(0, len(data) - len(data) % frame, frames_per * frame):
            m = data[i:i + frames_per * frame]
            if len(m) % frame:
                m = m[:len(m) - len(m) % frame]
            if not m:
                continue
            nf = len(m) // frame
            msgs.append(m)
            durs.append(nf / rate)
            units.append(nf)
        return cls(msgs, durs, encoding, rate, channels, units)

    @classmethod
    def opus(cls, packets, frame_ms=20):
        return cls(list(packets), [frame_ms / 1000.0] * len(packets), "opus", 48000, 1,
                   [1] * len(packets))

    def start_fields(self):
        return {"encoding": self.encoding, "sample_rate": self.rate, "channels": self.channels}

    def from_unit(self, unit):
        """The messages from ack offset `unit` on (for resuming): a new Audio.
        For PCM, a message is split if the offset falls inside it."""
        msgs, durs, units = [], [], []
        pos = 0
        frame = (len(self.messages[0]) // self.units[0]) if self.messages else 1
        for m, d, u in zip(self.messages, self.durations, self.units):
            end = pos + u
            if end <= unit:
                pos = end
                continue
            if pos < unit:  # split (PCM only: opus units are whole packets)
                skip = unit - pos
                m = m[skip * frame:]
                d = d * (u - skip) / u
                u -= skip
            msgs.append(m)
            durs.append(d)
            units.append(u)
            pos = end
        return Audio(msgs, durs, self.encoding, self.rate, self.channels, units)

    def head(self, seconds):
        """The first messages covering about `seconds` of audio."""
        t, k = 0.0, 0
        while k < len(self.messages) and t < seconds:
            t += self.durations[k]
            k += 1
        return Audio(self.messages[:k], self.durations[:k], self.encoding, self.rate,
                     self.channels, self.units[:k])


def as_audio(audio, encoding=None, rate=None, channels=None, chunk_ms=100, packet_ms=20):
    """An Audio from an Audio (returned as is), PCM bytes (chunked into chunk_ms
    messages; encoding pcm_s16le by default) or a list of Opus packets (packet_ms each)."""
    if isinstance(audio, Audio):
        return audio
    if isinstance(audio, (bytes, bytearray, memoryview)):
        return Audio.pcm(bytes(audio), rate or 16000, channels or 1, encoding or "pcm_s16le",
                         chunk_ms)
    packets = list(audio)
    if encoding not in (None, "opus"):
        raise ValueError("a list of packets is Opus")
    return Audio.opus(packets, packet_ms)


_audio_cache = {}


def load_clip(path, variant="s16_16k", tmpdir=None, chunk_ms=100, opus_frame_ms=20):
    """A dev clip (16 kHz mono s16 WAV) as Audio. variant:
    s16_16k | f32_16k | s16_48k | s16_48k_stereo | opus (20 ms packets from 48 kHz)."""
    key = (path, variant, chunk_ms, opus_frame_ms)
    if key in _audio_cache:
        return _audio_cache[key]
    tmpdir = tmpdir or tempfile.gettempdir()
    base = os.path.splitext(os.path.basename(path))[0]
    if variant == "s16_16k":
        pcm, rate, ch = read_wav(path)
        a = Audio.pcm(pcm, rate, ch, "pcm_s16le", chunk_ms)
    elif variant == "f32_16k":
        pcm, rate, ch = read_wav(path)
        a = Audio.pcm(s16_to_f32(pcm), rate, ch, "pcm_f32le", chunk_ms)
    elif variant in ("s16_48k", "s16_48k_stereo", "opus"):
        ch = 2 if variant == "s16_48k_stereo" else 1
        dst = os.path.join(tmpdir, f"{base}.48k.{ch}ch.wav")
        if not os.path.exists(dst):
            sox_convert(path, dst, 48000, ch)
        pcm, rate, ch = read_wav(dst)
        if variant == "opus":
            a = Audio.opus(opus_packets(pcm, opus_frame_ms), opus_frame_ms)
        else:
            a = Audio.pcm(pcm, rate, ch, "pcm_s16le", chunk_ms)
    else:
        raise ValueError(f"unknown audio variant {variant}")
    _audio_cache[key] = a
    return a


# ---------------------------------------------------------------------------
# streaming


class StreamResult:
    def __init__(self):
        self.events = []        # (arrival monotonic time, event dict), in arrival order
        self.sends = []         # (send monotonic time, cumulative units, cumulative audio s)
        self.t_connect = None   # when the connection opened
        self.t_audio0 = None    # when the first audio message was sent
        self.t_stop = None      # when stop was sent
        self.t_end = None       # when the connection closed / done arrived
        self.closed_code = None
        self.closed_reason = None
        self.exception = None
        self.session = None
        self.token = None

    def of_type(self, *types):
        return [e for _, e in self.events if e.get("type") in types]

    def timed(self, *types):
        return [(t, e) for t, e in self.events if e.get("type") in types]

    @property
    def ready(self):
        r = self.of_type("ready")
        return r[0] if r else None

    @property
    def done(self):
        r = self.of_type("done")
        return r[-1] if r else None

    @property
    def errors(self):
        return self.of_type("error")

    @property
    def warnings(self):
        return self.of_type("warning")

    @property
    def last_seq(self):
        s = [e.get("seq", 0) for _, e in self.events]
        return max(s) if s else 0

    def finals(self):
        """{utterance: final event} (the last one if repeated)."""
        out = {}
        for e in self.of_type("final"):
            out[e.get("utterance")] = e
        return out

    @property
    def transcript(self):
        f = self.finals()
        return "".join(f[u].get("text", "") for u in sorted(f))

    def sent_time_of_audio(self, seconds):
        """Send time of the message that completed `seconds` of audio (None if never)."""
        for t, _, s in self.sends:
            if s >= seconds - 1e-6:
                return t
        return None

    def summary(self):
        types = {}
        for _, e in self.events:
            types[e.get("type")] = types.get(e.get("type"), 0) + 1
        return types


async def _receiver(ws, res, stop_on_done=True):
    try:
        async for msg in ws:
            t = time.monotonic()
            if isinstance(msg, bytes):
                res.events.append((t, {"type": "<binary>", "len": len(msg)}))
                continue
            try:
                ev = json.loads(msg)
            except ValueError:
                ev = {"type": "<not json>", "raw": msg[:200]}
            res.events.append((t, ev))
            if ev.get("type") == "ready":
                res.session, res.token = ev.get("session"), ev.get("token")
    except websockets.ConnectionClosed:
        pass
    finally:
        res.t_end = time.monotonic()
        res.closed_code = getattr(ws, "close_code", None)
        res.closed_reason = getattr(ws, "close_reason", None)


async def wait_for(res, pred, timeout):
    """Waits until some event satisfies pred (returns it) or timeout (None)."""
    t0 = time.monotonic()
    seen = 0
    while time.monotonic() - t0 < timeout:
        while seen < len(res.events):
            ev = res.events[seen][1]
            seen += 1
            if pred(ev):
                return ev
        if res.t_end is not None and seen >= len(res.events):
            return None
        await asyncio.sleep(0.01)
    return None


def abort_connection(ws):
    """Closes the TCP connection without a close frame, with a reset (SO_LINGER 0)."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


async def open_ws(url, ssl_context=None, timeout=30.0):
    kw = dict(max_size=None, ping_interval=None, open_timeout=timeout, close_timeout=5)
    if url.startswith("wss:"):
        kw["ssl"] = ssl_context or insecure_ssl_context()
    return await ws_connect(url, **kw)


async def connect(url, ssl_context=None):
    """(ws, StreamResult, receiver task) of a new connection, its events recorded
    in the result; finish() ends it."""
    res = StreamResult()
    ws = await open_ws(url, ssl_context)
    res.t_connect = time.monotonic()
    rx = asyncio.create_task(_receiver(ws, res))
    return ws, res, rx


async def finish(ws, rx, stop=True, timeout=120):
    """Sends `stop` (unless stop is false), waits for the receiver to end (the
    server closes after `done`) and closes the connection; errors ignored."""
    if stop:
        with contextlib.suppress(Exception):
            await ws.send(json.dumps({"type": "stop"}))
    with contextlib.suppress(Exception):
        await asyncio.wait_for(rx, timeout)
    with contextlib.suppress(Exception):
        await ws.close()


async def send_audio(ws, res, audio, realtime=False, speed=1.0, t_base=None, units0=0, secs0=0.0,
                     abort_after_s=None, on_message=None):
    """Sends audio's messages; realtime: message k leaves at t_base + (audio time before k)/speed.
    Appends to res.sends. abort_after_s: stop after this much audio (returns False)."""
    units, secs = units0, secs0
    if t_base is None:
        t_base = time.monotonic()
    if res.t_audio0 is None:
        res.t_audio0 = t_base
    elapsed = 0.0
    for k, (m, d, u) in enumerate(zip(audio.messages, audio.durations, audio.units)):
        if abort_after_s is not None and elapsed >= abort_after_s:
            return False
        if realtime:
            delay = t_base + elapsed / speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await ws.send(m)
        units += u
        secs += d
        elapsed += d
        res.sends.append((time.monotonic(), units, secs))
        if on_message:
            r = on_message(k, ws)
            if asyncio.iscoroutine(r):
                await r
        elif not realtime and k % 20 == 19:
            await asyncio.sleep(0)  # let the receiver run
    return True


async def stream_async(url, audio, realtime=False, speed=1.0, start=None, wait_ready=True,
                       ssl_context=None, timeout=600.0, stop=True, extra_messages=None,
                       on_message=None, ready_timeout=60.0, encoding=None, rate=None,
                       channels=None, chunk_ms=100, packet_ms=20, **options):
    """One session: connect, start (audio's fields + `start` + **options as start fields,
    e.g. step_ms=500, weights="nf4"), send audio, stop, wait for done and the close.
    audio: an Audio, PCM bytes (with encoding/rate/channels/chunk_ms) or a list of Opus
    packets (packet_ms each). realtime: message k leaves at (audio time before k)/speed
    after the first. Returns a StreamResult (never raises for protocol problems: they show
    in the events; connection failures are in .exception).

    extra_messages: {message index: [messages to send before it]} (text str -> JSON text,
    bytes -> binary), to inject bad input."""
    audio = as_audio(audio, encoding, rate, channels, chunk_ms, packet_ms)
    res = StreamResult()
    try:
        ws = await open_ws(url, ssl_context)
    except Exception as e:
        res.exception = e
        return res
    res.t_connect = time.monotonic()
    rx = asyncio.create_task(_receiver(ws, res))
    try:
        msg = {"type": "start", **audio.start_fields(), **(start or {}), **options}
        await ws.send(json.dumps(msg))
        if wait_ready:
            ev = await wait_for(res, lambda e: e.get("type") in ("ready", "error"), ready_timeout)
            if ev is None or ev.get("type") == "error":
                raise RuntimeError(f"no ready: {ev}")
        if extra_messages:
            inner = on_message

            async def inject(k, w):
                for x in extra_messages.get(k + 1, []):
                    await w.send(x)
                if inner:
                    r = inner(k, w)
                    if asyncio.iscoroutine(r):
                        await r
            for x in extra_messages.get(0, []):
                await ws.send(x)
            await send_audio(ws, res, audio, realtime, speed, on_message=inject)
        else:
            await send_audio(ws, res, audio, realtime, speed, on_message=on_message)
        if stop:
            res.t_stop = time.monotonic()
            await ws.send(json.dumps({"type": "stop"}))
        await asyncio.wait_for(asyncio.shield(rx), timeout)
    except Exception as e:  # timeouts, closed connections
        res.exception = e
    finally:
        with contextlib.suppress(Exception):
            await ws.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rx, 5)
    return res


def stream(url, audio, **kw):
    """Synchronous wrapper of stream_async."""
    return asyncio.run(stream_async(url, audio, **kw))


async def stream_many(url, audios, concurrency=2, **kw):
    """Streams each Audio (a dict key -> Audio) with at most `concurrency` sessions at
    once; returns {key: StreamResult}."""
    sem = asyncio.Semaphore(concurrency)
    out = {}

    async def one(key, a):
        async with sem:
            out[key] = await stream_async(url, a, **kw)

    await asyncio.gather(*(one(k, a) for k, a in audios.items()))
    return out


async def resume_stream(url, audio, cut_s, start=None, ssl_context=None, timeout=600.0,
                        pause_s=0.5, detached_s=0.5, realtime=False):
    """Streams audio up to cut_s, waits pause_s, resets the connection, waits detached_s,
    reconnects with `resume` (last_seq: the highest seq received), resends the audio from
    `resumed.offset`, stops. Returns (first, second) StreamResults
    (second holds the events of the resumed connection)."""
    first = StreamResult()
    ws = await open_ws(url, ssl_context)
    first.t_connect = time.monotonic()
    rx = asyncio.create_task(_receiver(ws, first))
    await ws.send(json.dumps({"type": "start", **audio.start_fields(), **(start or {})}))
    ev = await wait_for(first, lambda e: e.get("type") in ("ready", "error"), 60)
    if not ev or ev.get("type") != "ready":
        raise RuntimeError(f"no ready: {ev}")
    await send_audio(ws, first, audio, realtime=realtime, abort_after_s=cut_s)
    await asyncio.sleep(pause_s)  # let some events arrive
    abort_connection(ws)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(rx, 5)
    await asyncio.sleep(detached_s)  # the session runs on detached: its events are kept
    second = StreamResult()
    last_seq = first.last_seq
    for attempt in range(20):
        ws2 = await open_ws(url, ssl_context)
        second = StreamResult()
        second.t_connect = time.monotonic()
        rx2 = asyncio.create_task(_receiver(ws2, second))
        await ws2.send(json.dumps({"type": "resume", "session": first.session,
                                   "token": first.token, "last_seq": last_seq}))
        ev = await wait_for(second, lambda e: e.get("type") in ("resumed", "error"), 30)
        if ev and ev.get("type") == "error" and ev.get("code") == "session_attached":
            await ws2.close()  # the server has not seen the reset yet
            with contextlib.suppress(Exception):
                await asyncio.wait_for(rx2, 5)
            await asyncio.sleep(0.2)
            continue
        break
    if not ev or ev.get("type") != "resumed":
        second.exception = RuntimeError(f"resume failed: {ev}")
        with contextlib.suppress(Exception):
            await ws2.close()
        return first, second
    offset = int(ev.get("offset", 0))
    rest = audio.from_unit(offset)
    sent_secs = offset * audio.durations[0] / audio.units[0]
    await send_audio(ws2, second, rest, realtime=realtime, units0=offset, secs0=sent_secs)
    second.t_stop = time.monotonic()
    await ws2.send(json.dumps({"type": "stop"}))
    try:
        await asyncio.wait_for(asyncio.shield(rx2), timeout)
    except Exception as e:
        second.exception = e
    with contextlib.suppress(Exception):
        await ws2.close()
    second.session, second.token = first.session, first.token
    return first, second


class RawWS:
    """A WebSocket client on a plain socket, for what libraries will not send.
    early: bytes sent `early_gap_s` after the upgrade request, before waiting for
    the server's 101 (a message that may reach the server before it has written
    anything on the new connection)."""

    def __init__(self, port, path="/v1/stream", headers="", early=b"", early_gap_s=0.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        f"Sec-WebSocket-Version: 13\r\n{headers}\r\n").encode())
        if early:
            if early_gap_s > 0:
                time.sleep(early_gap_s)
            self.s.sendall(early)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = self.s.recv(4096)
            if not d:
                break
            buf += d
        self.head, _, self.buf = buf.partition(b"\r\n\r\n")
        self.status = self.head.split(b"\r\n")[0].decode(errors="replace")

    @staticmethod
    def frame(op, payload=b"", mask=True, length=None, fin=True):
        n = len(payload) if length is None else length
        b = bytes([(0x80 if fin else 0) | op])
        m = 0x80 if mask else 0
        if n < 126:
            b += bytes([m | n])
        elif n < 65536:
            b += bytes([m | 126]) + struct.pack(">H", n)
        else:
            b += bytes([m | 127]) + struct.pack(">Q", n)
        if mask:
            k = os.urandom(4)
            b += k
            payload = bytes(c ^ k[i % 4] for i, c in enumerate(payload))
        return b + payload

    def send(self, data):
        self.s.sendall(data)

    def frames(self, seconds, texts=None):
        """Frames the server sends within `seconds` (or until `texts` text frames
        came): ([(opcode, payload)], closed)."""
        self.s.settimeout(0.2)
        t_end = time.monotonic() + seconds
        closed = False
        while (time.monotonic() < t_end and not closed and not self._has_close() and
               (texts is None or sum(op == 1 for op, _ in self._parse(self.buf)) < texts)):
            try:
                d = self.s.recv(65536)
                if not d:
                    closed = True
                self.buf += d
            except socket.timeout:
                pass
            except OSError:
                closed = True
        if self._has_close() and not closed:  # the server's close: the TCP close follows
            with contextlib.suppress(OSError):
                self.s.settimeout(1.0)
                closed = self.s.recv(65536) == b""
        return self._parse(self.buf), closed

    def _has_close(self):
        return 8 in [op for op, _ in self._parse(self.buf)]

    @staticmethod
    def _parse(b):
        out = []
        while len(b) >= 2:
            n, off = b[1] & 0x7f, 2
            if n == 126:
                n, off = struct.unpack(">H", b[2:4])[0], 4
            elif n == 127:
                n, off = struct.unpack(">Q", b[2:10])[0], 10
            if len(b) < off + n:
                break
            out.append((b[0] & 0x0f, b[off:off + n]))
            b = b[off + n:]
        return out

    def close(self, reset=False):
        with contextlib.suppress(OSError):
            if reset:  # an RST, as a client that vanishes
                self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.s.close()


def raw_ws_first_message(ws_url, message, gap_s=0.0, want=2, timeout=10.0):
    """Sends `message` (a dict) `gap_s` after the upgrade request, without waiting
    for the 101 (RawWS's early bytes); returns the first `want` text messages
    received (dicts; fewer if the server closes or `timeout` passes), then resets
    the connection."""
    import urllib.parse
    u = urllib.parse.urlparse(ws_url)
    raw = RawWS(u.port, u.path or "/", early=RawWS.frame(1, json.dumps(message).encode()),
                early_gap_s=gap_s)
    try:
        if " 101 " not in raw.status + " ":
            raise RuntimeError(f"no upgrade: {raw.status}")
        frames, _ = raw.frames(timeout, texts=want)
        return [json.loads(p) for op, p in frames if op == 1][:want]
    finally:
        raw.close(reset=True)


def _cum(units):
    c, out = 0, []
    for u in units:
        c += u
        out.append(c)
    return out


# ---------------------------------------------------------------------------
# checks (each returns a list of problem strings; empty = fine)


def check_seq(events, first=1, allow_partial_gaps=False):
    """Sequence numbers first, first+1, ... with no gap or repeat. With
    allow_partial_gaps, a gap is tolerated (superseded partials that the server may
    skip, PROTOCOL.md "Lagging clients") but repeats and reordering are not."""
    probs = []
    expect = first
    gaps = 0
    for e in events:
        s = e.get("seq")
        if not isinstance(s, int):
            probs.append(f"event without an integer seq: {e}")
            continue
        if s != expect:
            if s > expect and allow_partial_gaps:
                gaps += s - expect
            else:
                probs.append(f"seq {s} where {expect} was expected ({e.get('type')})")
        expect = max(expect, s + 1) if s >= expect else expect
    return probs


def seq_gaps(events):
    """Number of sequence numbers missing."""
    s = sorted(e["seq"] for e in events if isinstance(e.get("seq"), int))
    if not s:
        return 0
    return (s[-1] - s[0] + 1) - len(set(s))


def check_committed(events):
    """Per utterance: each commit's `committed` is the previous committed + its `text`;
    committed text never shrinks or changes (also in partials' `committed`); every final
    text starts with the utterance's committed text."""
    probs = []
    committed = {}
    for e in events:
        t = e.get("type")
        u = e.get("utterance")
        if t == "commit":
            prev = committed.get(u, "")
            c = e.get("committed", "")
            if not c.startswith(prev):
                probs.append(f"utterance {u}: committed text changed: {prev!r} -> {c!r} "
                             f"(seq {e.get('seq')})")
            if prev + e.get("text", "") != c:
                probs.append(f"utterance {u}: commit text {e.get('text')!r} is not the "
                             f"difference of {prev!r} -> {c!r} (seq {e.get('seq')})")
            committed[u] = c
        elif t == "partial":
            prev = committed.get(u, "")
            c = e.get("committed", "")
            if c != prev:
                probs.append(f"utterance {u}: partial's committed {c!r} != committed so far "
                             f"{prev!r} (seq {e.get('seq')})")
        elif t == "final":
            prev = committed.get(u, "")
            if not e.get("text", "").startswith(prev):
                probs.append(f"utterance {u}: final {e.get('text')!r} does not start with the "
                             f"committed {prev!r}")
            committed[u] = e.get("text", "")
    return probs


def check_utterances(events):
    """Utterances numbered 1, 2, ... each with exactly one final, finals in order,
    final times increasing and not overlapping."""
    probs = []
    finals = [e for e in events if e.get("type") == "final"]
    us = [e.get("utterance") for e in finals]
    if us != list(range(1, len(us) + 1)):
        probs.append(f"final utterances are {us}, not 1..{len(us)}")
    prev_end = -1.0
    for e in finals:
        s, en = e.get("start", 0), e.get("end", 0)
        if not (en >= s):
            probs.append(f"utterance {e.get('utterance')}: end {en} < start {s}")
        if s < prev_end - 1e-6:
            probs.append(f"utterance {e.get('utterance')}: starts at {s}, before the previous "
                         f"ended ({prev_end})")
        prev_end = en
    for e in events:
        if e.get("type") in ("partial", "commit") and e.get("utterance") not in us:
            probs.append(f"{e.get('type')} for utterance {e.get('utterance')} that has no final")
            break
    return probs


def check_acks(events, total_units):
    """ack offsets never decrease; the last equals what was sent."""
    probs = []
    acks = [e.get("offset") for e in events if e.get("type") == "ack"]
    if not acks:
        return ["no ack events"]
    for a, b in zip(acks, acks[1:]):
        if b < a:
            probs.append(f"ack offset went back: {a} -> {b}")
            break
    if acks[-1] != total_units:
        probs.append(f"last ack {acks[-1]} != units sent {total_units}")
    return probs


def check_session(res, total_units=None, allow_partial_gaps=False, expect_done=True):
    """The usual checks of a complete session: no errors, hello first, ready, seq,
    committed/final consistency, utterances, acks, done last."""
    evs = [e for _, e in res.events]
    probs = []
    if res.exception:
        probs.append(f"client exception: {type(res.exception).__name__}: {res.exception}")
    if not evs:
        return probs + ["no events"]
    if evs[0].get("type") != "hello" or evs[0].get("protocol") != "sotto.v1":
        probs.append(f"first event is not hello sotto.v1: {evs[0]}")
    if not res.ready:
        probs.append("no ready event")
    for e in res.errors:
        probs.append(f"error event: {e}")
    probs += check_seq(evs, 1, allow_partial_gaps)
    probs += check_committed(evs)
    probs += check_utterances(evs)
    if total_units is not None:
        probs += check_acks(evs, total_units)
    if expect_done:
        if not res.done:
            probs.append("no done event")
        elif evs[-1].get("type") != "done":
            probs.append(f"done is not the last event (last: {evs[-1].get('type')})")
        elif res.done.get("dropped_seconds", 0) != 0:
            probs.append(f"audio dropped: {res.done}")
    return probs


def run(coro):
    return asyncio.run(coro)


if __name__ == "__main__":  # a quick manual check: stream a WAV to a running server
    import argparse

    ap = argparse.ArgumentParser(description="stream a 16 kHz WAV to sotto-server")
    ap.add_argument("url", help="ws://HOST:PORT/v1/stream")
    ap.add_argument("wav")
    ap.add_argument("--variant", default="s16_16k")
    ap.add_argument("--realtime", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as td:
        audio = load_clip(a.wav, a.variant, td)
        r = stream(a.url, audio, realtime=a.realtime)
    for t, e in r.events:
        print(f"{t - r.t_connect:8.3f} {json.dumps(e)}")
    print("transcript:", r.transcript)
    print("problems:", check_session(r, audio.total_units) or "none")
    sys.exit(0)
