"""WhisperLive (PyPI whisper-live, its faster_whisper backend) as the peer of
bench/bench_server.py: the same streams, at real-time pace, to its server.

The server runs in a Python of its own (--whisperlive-python; made by
bench/setup_whisperlive.sh) on the same CTranslate2 model directory, with its VAD on,
bench/whisperlive_stub first on its path (torch, which it imports only to ask
for CUDA), max_clients as many as the streams and the same number of CPU threads
(OMP_NUM_THREADS). A stream sends int16 PCM in 100 ms messages, then
END_OF_AUDIO, and collects the segments the server sends back.

  segment latency: arrival of a segment's first `completed` version minus the
    send time of the audio at its end (segment.end): the counterpart of
    sotto's final latency, without a VAD endpoint to wait for.
  settle: arrival of the last message that changed the transcript minus the
    time the last audio was sent (the issue's "settles text N s after the
    audio ends").
"""
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

import websockets

STUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "whisperlive_stub")

SERVER_CODE = """
import sys
from whisper_live.server import TranscriptionServer
port, model, clients = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
TranscriptionServer().run("127.0.0.1", port=port, backend="faster_whisper",
                          faster_whisper_custom_model_path=model, single_model=True,
                          max_clients=clients, max_connection_time=3600)
"""


class Server:
    def __init__(self, python, model, port, clients, threads, log_path):
        self.python, self.model, self.port, self.clients = python, model, port, clients
        self.threads, self.log_path, self.proc = threads, log_path, None

    def start(self, timeout=60.0):
        env = dict(os.environ, PYTHONPATH=STUB, OMP_NUM_THREADS=str(self.threads))
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.python, "-c", SERVER_CODE, str(self.port), self.model,
                                      str(self.clients)], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"WhisperLive exited: {open(self.log_path).read()[-2000:]}")
            try:
                asyncio.run(_probe(self.port))
                return self
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("WhisperLive did not listen")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.proc:
            self.log.close()


async def _probe(port):
    async with websockets.connect(f"ws://127.0.0.1:{port}", open_timeout=2):
        pass


class Result:
    def __init__(self):
        self.msgs = []       # (arrival monotonic, message)
        self.t_first = None  # first audio sent
        self.t_last = None   # last audio sent
        self.error = None

    def segments(self):
        """The last version of every segment (by its start), in order of start."""
        seen = {}
        for _, m in self.msgs:
            for s in m.get("segments", []):
                seen[float(s["start"])] = s
        return [seen[k] for k in sorted(seen)]

    def transcript(self):
        return " ".join(s["text"].strip() for s in self.segments())

    def latencies(self):
        """Segment latency of each segment that was sent as completed."""
        first = {}
        for t, m in self.msgs:
            for s in m.get("segments", []):
                if s.get("completed") and float(s["start"]) not in first:
                    first[float(s["start"])] = t - (self.t_first + float(s["end"]))
        return list(first.values())

    def settle(self):
        last, prev = None, None
        for t, m in self.msgs:
            text = " ".join(s["text"] for s in m.get("segments", []))
            if "segments" in m and text != prev:
                last, prev = t, text
        return last - self.t_last if last is not None and self.t_last else float("nan")


async def stream(port, pcm, wait_after_s=15.0):
    """Streams s16 16 kHz mono PCM at real-time pace; returns a Result."""
    r = Result()
    async with websockets.connect(f"ws://127.0.0.1:{port}", max_size=None, open_timeout=30) as ws:
        await ws.send(json.dumps({"uid": str(uuid.uuid4()), "language": "en", "task": "transcribe",
                                  "model": "tiny.en", "use_vad": True, "audio_format": "int16"}))

        async def rx():
            async for msg in ws:
                if isinstance(msg, str):
                    r.msgs.append((time.monotonic(), json.loads(msg)))

        reader = asyncio.create_task(rx())
        t0 = time.monotonic()
        while not any(m.get("message") == "SERVER_READY" for _, m in r.msgs):
            if time.monotonic() - t0 > 120 or reader.done():
                r.error = f"no SERVER_READY: {r.msgs[-1:]}"
                reader.cancel()
                return r
            await asyncio.sleep(0.02)
        step = 3200  # 100 ms
        r.t_first = time.monotonic()
        for i in range(0, len(pcm), step):
            due = r.t_first + i / 32000.0
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            await ws.send(pcm[i:i + step])
        r.t_last = time.monotonic()
        await ws.send(b"END_OF_AUDIO")
        # the server keeps sending the last segments; wait until they stop changing
        t_end = time.monotonic() + wait_after_s
        n = -1
        while time.monotonic() < t_end and not reader.done():
            await asyncio.sleep(1.0)
            if n == len(r.msgs) and time.monotonic() - r.msgs[-1][0] > 3.0:
                break
            n = len(r.msgs)
        reader.cancel()
    return r


async def stream_many(port, pcms):
    return await asyncio.gather(*(stream(port, p) for p in pcms))


if __name__ == "__main__":
    print(__doc__)
    sys.exit(0)
