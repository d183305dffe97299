"""A private PulseAudio server with a virtual microphone, for tests that capture
from a real audio input device (sotto-mic through PortAudio/ALSA, Firefox).

    with VirtualAudio() as va:           # pulseaudio on its own socket
        env = va.env()                   # os.environ + PULSE_SERVER, ... for clients
        p = va.play("clip.wav")          # paplay into the null sink (a Popen)
        ... a client started with env=env captures the default source ...
        p.wait()

The daemon loads only the native protocol (anonymous, on a socket in a private
runtime directory) and one null sink; the sink's monitor is the default source,
so whatever `play` sends into the sink is what a client recording from the
default source (or from ALSA's "pulse" device, libasound2-plugins) hears. Runs
as root too. `stop` (or leaving the `with`) ends the daemon and every player it
started, and removes the runtime directory, also after an exception.

Needs the Debian packages pulseaudio and pulseaudio-utils (and
libasound2-plugins for ALSA clients).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

PACKAGES = "pulseaudio pulseaudio-utils libasound2-plugins"


def missing_tools():
    """The commands VirtualAudio needs that are not installed."""
    return [t for t in ("pulseaudio", "pactl", "paplay") if shutil.which(t) is None]


class VirtualAudio:
    def __init__(self, sink="sotto_virtual_mic", rate=48000, channels=1):
        self.sink = sink
        self.rate = rate
        self.channels = channels
        self.dir = None
        self.proc = None
        self.players = []

    @property
    def socket(self):
        return os.path.join(self.dir, "run", "native")

    @property
    def source(self):
        return self.sink + ".monitor"

    def env(self, base=None):
        """The environment for a PulseAudio client of this server (libpulse, the
        ALSA pulse plugin, Firefox): base (default os.environ) plus the server
        address and a client.conf that never autospawns another daemon."""
        e = dict(os.environ if base is None else base)
        e["PULSE_SERVER"] = "unix:" + self.socket
        e["PULSE_CLIENTCONFIG"] = os.path.join(self.dir, "client.conf")
        e.pop("PULSE_SINK", None)
        e.pop("PULSE_SOURCE", None)
        return e

    def log(self):
        try:
            with open(os.path.join(self.dir, "pulseaudio.log"), errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def start(self, timeout=20.0):
        missing = missing_tools()
        if missing:
            raise RuntimeError(f"missing {' '.join(missing)} (apt-get install {PACKAGES})")
        self.dir = tempfile.mkdtemp(prefix="sotto-pulse-")
        for d in ("run", "home", "state"):
            os.makedirs(os.path.join(self.dir, d), mode=0o700)
        script = os.path.join(self.dir, "default.pa")
        with open(script, "w") as f:
            f.write(f"load-module module-native-protocol-unix auth-anonymous=1 socket={self.socket}\n"
                    f"load-module module-null-sink sink_name={self.sink} rate={self.rate} "
                    f"channels={self.channels} sink_properties=device.description={self.sink}\n"
                    f"set-default-sink {self.sink}\n"
                    f"set-default-source {self.source}\n")
        with open(os.path.join(self.dir, "client.conf"), "w") as f:
            f.write("autospawn = no\n")
        denv = dict(os.environ, HOME=os.path.join(self.dir, "home"),
                    XDG_RUNTIME_DIR=os.path.join(self.dir, "run"),
                    XDG_STATE_HOME=os.path.join(self.dir, "state"),
                    XDG_CONFIG_HOME=os.path.join(self.dir, "home"))
        for k in ("PULSE_SERVER", "DBUS_SESSION_BUS_ADDRESS", "DISPLAY"):
            denv.pop(k, None)
        log = open(os.path.join(self.dir, "pulseaudio.log"), "wb")
        try:
            # -n: no default.pa; only our script. As root it warns and runs.
            self.proc = subprocess.Popen(
                ["pulseaudio", "--daemonize=no", "--exit-idle-time=-1", "-n", "-F", script,
                 "--use-pid-file=no", "--realtime=no", "--high-priority=no",
                 "--disallow-exit", "--log-target=stderr", "--log-level=notice"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=denv,
                start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                text = self.log()
                self.stop()
                raise RuntimeError(f"pulseaudio exited ({self.proc.returncode}): {text[-1500:]}")
            p = subprocess.run(["pactl", "info"], env=self.env(), capture_output=True, text=True)
            if p.returncode == 0 and f"Default Source: {self.source}" in p.stdout:
                return self
            if time.monotonic() > deadline:
                text = self.log()
                self.stop()
                raise RuntimeError(f"pulseaudio did not come up in {timeout:.0f} s: "
                                   f"{p.stdout[-300:]} {p.stderr[-300:]} {text[-1500:]}")
            time.sleep(0.2)

    def play(self, wav):
        """Starts paplay of a WAV into the null sink; returns its Popen (stop()
        ends it if it is still playing)."""
        p = subprocess.Popen(["paplay", "--device", self.sink, wav], env=self.env(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
        self.players.append(p)
        return p

    def sources(self):
        """`pactl list short sources` lines."""
        p = subprocess.run(["pactl", "list", "short", "sources"], env=self.env(),
                           capture_output=True, text=True, timeout=10)
        return p.stdout.splitlines()

    def stop(self):
        for p in self.players:
            _end(p, 2.0)
        self.players = []
        if self.proc is not None:
            _end(self.proc, 5.0)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def _end(p, timeout):
    """SIGTERM the process (and its process group), then SIGKILL."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except OSError:
        p.terminate()
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
        p.wait()
