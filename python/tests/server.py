"""A real ``klock serve`` for the remote tests: started on a free loopback port, stopped (and
waited for) at the end. The binary is ``$KLOCK_BIN`` (scripts/test-python.sh passes the one
``scripts/klock-bin.sh`` names), else whatever ``scripts/klock-bin.sh`` prints. The
resettable manual-clock server is the test kit's ``klock-testkit serve`` (``$KLOCK_TESTKIT_BIN``,
else ``scripts/klock-bin.sh klock-testkit``): ``Server(program=testkit_bin())``. And
:class:`Link`, a loopback TCP link to it that a test can cut and restore."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence

from support import REPO

_bins: dict[str, str] = {}


def _binary(name: str, variable: str) -> str:
    """``$variable``, else the path ``scripts/klock-bin.sh name`` prints (resolved once)."""
    if name not in _bins:
        _bins[name] = (
            os.environ.get(variable)
            or subprocess.run(
                ["bash", str(REPO / "scripts" / "klock-bin.sh"), name],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
    return _bins[name]


def klock_bin() -> str:
    return _binary("klock", "KLOCK_BIN")


def testkit_bin() -> str:
    return _binary("klock-testkit", "KLOCK_TESTKIT_BIN")


class Server:
    """``PROGRAM serve ARGS --listen 127.0.0.1:PORT`` (port 0: a free one); ``url`` once up.
    PROGRAM is ``klock`` unless given (``testkit_bin()``: the resettable manual-clock server)."""

    def __init__(self, *args: str, port: int = 0, program: str | None = None) -> None:
        self.args: Sequence[str] = args
        self.port = port
        self.program = program
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.program or klock_bin(),
                "serve",
                *self.args,
                "--listen",
                f"127.0.0.1:{self.port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        timer = threading.Timer(20, self.proc.kill)  # never wait forever for the first line
        timer.start()
        try:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if "listening on " not in line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise RuntimeError(f"klock serve did not start: {line!r} {err[-2000:]}")
        self.url = line.split("listening on ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])

    def freeze(self) -> None:
        """SIGSTOP, and wait until every thread of the process has stopped: ``kill`` returns
        before the stop reaches the other threads, which can still answer a request sent
        meanwhile (seen in about one run in ten)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        tasks = pathlib.Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            states = []
            for task in tasks.iterdir():
                try:
                    # The state follows the command name in parentheses.
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
                except OSError:
                    continue  # a thread that ended meanwhile
            if states and all(state in "Tt" for state in states):
                return
            time.sleep(0.001)
        raise RuntimeError(f"klock serve (pid {self.proc.pid}) did not stop within 5 s")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.communicate(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate(timeout=10)
        self.proc = None


class Link:
    """A TCP forwarder from a free loopback port of its own (``url``) to the server's port: a
    client's network, which :meth:`cut` takes away (every open connection closed, new ones
    closed at once) while the server stays up, and :meth:`restore` gives back. It reaches
    whatever listens on the port, so a server restarted on it is reached again."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._cut = False
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                try:
                    if self._cut:
                        raise OSError("cut")
                    upstream = socket.create_connection(("127.0.0.1", self._port), timeout=5)
                except OSError:
                    conn.close()
                    continue
                upstream.settimeout(None)
                self._open |= {conn, upstream}
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                for end in (src, dst):
                    _drop(end)
                    self._open.discard(end)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for end in self._open:
                _drop(end)
            self._open.clear()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._listener.close()
        self.cut()


def _drop(end: socket.socket) -> None:
    """Closes a forwarded socket, both directions at once (its pump ends)."""
    try:
        end.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    end.close()
