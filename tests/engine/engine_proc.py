"""Start a real `vllm serve` from the engine venv, watch its log, stop it -- always in bounded time.

Reusable by every engine-tier test:

    from engine_proc import EngineProc, engine_python, free_port

    with EngineProc(model_dir, ["--load-format", "dummy", "--skip-tokenizer-init"]) as eng:
        m = eng.wait_for(r"Setting attention block size to (\\d+) tokens", timeout=300)
        # eng.stop() is implicit on exit: SIGTERM to the whole process group, SIGKILL after a grace period

Or the one-shot helper `capture_line(...)` which starts an engine, waits for the first line that
matches `pattern` (or for a failure line / exit), stops the engine at once and returns a CaptureResult.

The engine runs in its own session (process group) so the API server, the engine core and the CPU
worker processes are all ended together; nothing outlives the `with` block or the test process
(an atexit hook stops engines that were not stopped explicitly).
"""

import atexit
import collections
import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Lines that mean the engine will not get further (matched case-sensitively, anywhere in a line).
FAILURE_PATTERNS = (
    r"Engine core initialization failed",
    r"WorkerProc failed to start",
    r"EngineCore failed to start",
    r"^\s*(?:[\w.]+\.)?(?:ValueError|AssertionError|RuntimeError|NotImplementedError|TypeError|KeyError|"
    r"ImportError|ModuleNotFoundError|OSError|AttributeError|PackageNotFoundError)\b",
    r"error: argument ",
    r"vllm serve: error:",
)

BASE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache on the CPU build (docs/engine-facts.md section 6, fix 3)
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}

_LIVE = set()


def engine_venv():
    """The engine venv: $SPARK_ENGINE_VENV or <repo>/.venv-engine."""
    return Path(os.environ.get("SPARK_ENGINE_VENV") or REPO / ".venv-engine")


def engine_python():
    return engine_venv() / "bin" / "python"


def engine_available(timeout=120):
    """True when the venv's python can import vllm (bounded)."""
    py = engine_python()
    if not py.exists():
        return False
    try:
        done = subprocess.run([str(py), "-c", "import vllm"], capture_output=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return done.returncode == 0


def free_port():
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineFailed(RuntimeError):
    """The engine printed a failure line or exited before the awaited line appeared."""


class EngineTimeout(RuntimeError):
    """The awaited line did not appear in time."""


class EngineProc:
    """One `vllm serve MODEL ARGS...` process group with a captured, searchable log."""

    def __init__(
        self,
        model,
        args=(),
        *,
        env=None,
        port=None,
        host="127.0.0.1",
        log_path=None,
        failure_patterns=FAILURE_PATTERNS,
        keep_lines=20000,
    ):
        self.model = str(model)
        self.args = [str(a) for a in args]
        self.port = port or free_port()
        self.host = host
        self.env = dict(os.environ)
        self.env.update(BASE_ENV)
        self.env.update({k: str(v) for k, v in (env or {}).items()})
        self.log_path = Path(log_path) if log_path else None
        self.failure_res = [re.compile(p) for p in failure_patterns]
        self.lines = collections.deque(maxlen=keep_lines)
        self._cond = threading.Condition()
        self._eof = False
        self.proc = None
        self.started_at = None
        self._reader = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def argv(self):
        vllm = engine_venv() / "bin" / "vllm"
        return [str(vllm), "serve", self.model, "--host", self.host, "--port", str(self.port), *self.args]

    def start(self):
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            bufsize=1,
            text=True,
            errors="replace",
        )
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read, name=f"engine-log-{self.proc.pid}", daemon=True)
        self._reader.start()
        return self

    def _read(self):
        with open(self.log_path or os.devnull, "a", encoding="utf-8") as sink:
            try:
                for line in self.proc.stdout:
                    line = line.rstrip("\n")
                    sink.write(line + "\n")
                    sink.flush()
                    with self._cond:
                        self.lines.append((time.monotonic() - self.started_at, line))
                        self._cond.notify_all()
            finally:
                self._mark_eof()

    def _mark_eof(self):
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace=10.0):
        """SIGTERM the process group, SIGKILL it after `grace` seconds; returns the exit code."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session=True: the group id is the leader's pid
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            # the leader is gone; make sure no member of its group survives it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            break
        if self._reader is not None:
            self._reader.join(timeout=5)
        _LIVE.discard(self)
        return self.proc.returncode

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ------------------------------------------------------------------ log access
    def elapsed(self):
        return None if self.started_at is None else time.monotonic() - self.started_at

    def text(self):
        with self._cond:
            return "\n".join(line for _, line in self.lines)

    def tail(self, n=60):
        with self._cond:
            return "\n".join(line for _, line in list(self.lines)[-n:])

    def wait_for(self, pattern, timeout, *, fail_on_failure_lines=True):
        """Block until a log line matches `pattern`; return (re.Match, seconds since start).

        Raises EngineFailed on a failure line (FAILURE_PATTERNS) or when the process exits first, and
        EngineTimeout after `timeout` seconds. Lines seen before the call are searched too.
        """
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                snapshot = list(self.lines)
                for at, line in snapshot[seen:]:
                    m = rx.search(line)
                    if m:
                        return m, at
                    if fail_on_failure_lines and any(f.search(line) for f in self.failure_res):
                        raise EngineFailed(
                            f"engine failure line after {at:.1f}s: {line}\n--- log tail ---\n"
                            + "\n".join(item[1] for item in snapshot[-60:])
                        )
                seen = len(snapshot)
                if self._eof:
                    code = self.proc.poll()
                    raise EngineFailed(
                        f"engine exited (code {code}) before /{pattern}/ appeared\n"
                        f"--- log tail ---\n" + "\n".join(item[1] for item in snapshot[-60:])
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EngineTimeout(
                        f"/{pattern}/ did not appear within {timeout:.0f}s\n--- log tail ---\n"
                        + "\n".join(item[1] for item in snapshot[-60:])
                    )
                self._cond.wait(timeout=min(left, 1.0))


class CaptureResult:
    def __init__(self, match, seconds, total_seconds, log, argv):
        self.match = match
        self.seconds = seconds  # start -> line
        self.total_seconds = total_seconds  # start -> engine fully stopped
        self.log = log
        self.argv = argv

    def group(self, *idx):
        return self.match.group(*idx)


def capture_line(model, args, pattern, *, timeout=600, env=None, log_path=None, grace=10.0, expect_failure=False):
    """Start `vllm serve model args`, return the first line matching `pattern`, stop the engine at once.

    expect_failure=True: the awaited line is itself part of a failure (e.g. a ValueError the engine
    raises), so failure lines do not end the wait; the engine exiting still does.
    Raises EngineFailed / EngineTimeout (with the log tail); the engine is stopped in every case.
    """
    eng = EngineProc(model, args, env=env, log_path=log_path)
    eng.start()
    try:
        match, seconds = eng.wait_for(pattern, timeout, fail_on_failure_lines=not expect_failure)
    finally:
        eng.stop(grace=grace)
    return CaptureResult(match, seconds, eng.elapsed(), eng.text(), eng.argv)


@atexit.register
def _stop_leftovers():
    for eng in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            eng.stop(grace=3.0)
