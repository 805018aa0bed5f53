"""One `dspark serve` child on a free loopback port, for the scripts that drive a live server
(bench/serving_bars.py, bench/soak/soak.py, tests/e2e/nginx_test.py).

Standard library only, so that it runs under the system /usr/bin/python3. Import it with this folder
on the path, computed from the importing script's own location:

    sys.path.insert(0, str(ROOT / "bench"))
    from dspark_server import ServeError, ServeProcess, free_port

    srv = ServeProcess("build/bin/dspark", ["-m", "models/ref-target.gguf"], "serve.log", cwd=ROOT)
    srv.start()          # ServeError when it exits or stays silent at start-up
    ... srv.port ...
    code = srv.stop()    # its exit code
"""
import ctypes
import http.client
import json
import os
import shlex
import signal
import socket
import subprocess
import time

START_TIMEOUT_S = 120  # loading the bundled models takes seconds; a cold page cache on a busy host more
BINARY_WAIT_S = 60  # a relink replaces the binary for a moment: wait that long for it to come back


def sse_chunks(response):
    """The JSON chunks of a server-sent-events response in order; None for the final
    `data: [DONE]`, after which it stops. Blank separators and `: ping` comments are skipped."""
    while True:
        line = response.readline()
        if not line:
            return
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            yield None
            return
        yield json.loads(data)


class ServeError(Exception):
    """The server did not come up: the binary is missing, it exited at start-up, or /health stayed silent."""


def free_port():
    """A loopback port free right now. Another process may take it before the server binds it; the
    start-up check then fails with the server's log, which says so."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Resolved here, in the parent: the child must not load libraries between fork and exec, where a lock
# held by another thread of the parent at the fork would never be released.
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """In the child before exec: SIGTERM when the parent dies, even by SIGKILL (a ctest timeout), so
    that no server outlives the script. Linux ties this to the thread that forked, so start servers
    from a thread that outlives them (the main thread in every caller)."""
    if _prctl is not None:
        _prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ServeProcess:
    """`BINARY serve ARGS --port PORT` with stdout and stderr in log_path.

    start() = launch() + wait_ready(); callers that start several servers launch them all first so
    that they load in parallel. stop() sends SIGTERM (once: a second one makes the server cancel its
    requests at once instead of draining them), kills after a timeout and returns the exit code."""

    def __init__(self, binary, args, log_path, name=None, cwd=None, port=None, die_with_parent=True):
        self.binary = str(binary)
        self.name = name
        self.cwd = str(cwd) if cwd is not None else os.getcwd()
        self.port = port if port is not None else free_port()
        self.args = ["serve"] + [str(a) for a in args] + ["--port", str(self.port)]
        self.log_path = str(log_path)
        self.die_with_parent = die_with_parent
        self.proc = None
        self.exit_code = None
        self._log = None
        self._terminated = False

    def _label(self):
        return f"server {self.name}" if self.name else "server"

    def command(self):
        """The command line as a user would type it: the binary relative to cwd, and no --port (any
        free one does)."""
        args = list(self.args)
        i = args.index("--port")
        del args[i:i + 2]
        return shlex.join([os.path.relpath(self.binary, self.cwd)] + args)

    def launch(self):
        """Starts the process without waiting for it to answer."""
        for _ in range(int(BINARY_WAIT_S / 0.5)):
            if os.access(self.binary, os.X_OK):
                break
            time.sleep(0.5)
        else:
            raise ServeError(f"{self.binary} is missing or not executable (build it: make build)")
        self._log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen([self.binary] + self.args, cwd=self.cwd, stdout=self._log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent if self.die_with_parent else None)
        except OSError as e:  # e.g. ETXTBSY while the linker still writes the binary
            self._log.close()
            self._log = None
            raise ServeError(f"cannot run {self.binary}: {e}") from None

    def wait_ready(self, timeout=START_TIMEOUT_S):
        """Until GET /health answers {"status": "ok"}; ServeError with the log's tail when the process
        exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServeError(f"{self._label()} exited with {self.proc.returncode} at start-up:\n"
                                 f"  {self.command()}\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.1)
        raise ServeError(f"{self._label()} did not answer /health in {timeout:g} s\n{self.log_tail()}")

    def start(self, timeout=START_TIMEOUT_S):
        self.launch()
        self.wait_ready(timeout)

    def healthy(self, timeout=2):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            body = json.loads(r.read() or b"null")
            return r.status == 200 and isinstance(body, dict) and body.get("status") == "ok"
        except (OSError, http.client.HTTPException, ValueError):
            return False
        finally:
            conn.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self):
        """SIGTERM without waiting, at most once; stop() then waits. Lets a caller stop several servers
        in parallel."""
        if self.alive() and not self._terminated:
            self.proc.terminate()
            self._terminated = True

    def stop(self, timeout=10):
        """Stops the server; returns its exit code (None when it was never started)."""
        if self.proc is None:
            return None
        self.terminate()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.exit_code is None:
            self.exit_code = self.proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.exit_code

    def log_tail(self, n=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "\n".join(f.read().splitlines()[-n:])
        except OSError:
            return ""
