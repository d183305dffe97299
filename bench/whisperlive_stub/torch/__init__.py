"""Stand-in for torch when bench/whisperlive_peer.py runs WhisperLive's server.

WhisperLive (PyPI whisper-live) imports torch at the top of its server and
faster_whisper backend, and with that backend uses it only to ask whether
CUDA is available (its torch-based VAD serves the TensorRT backend; the
faster_whisper backend filters with faster-whisper's own Silero model). The
PyPI torch wheels pull in gigabytes of CUDA libraries, so the benchmark puts
this module first on the server's PYTHONPATH instead: no GPU, so WhisperLive
picks the CPU and int8, as it does on a CPU machine with torch installed.
"""


class _Cuda:
    @staticmethod
    def is_available():
        return False


cuda = _Cuda()
