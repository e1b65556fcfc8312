"""A real ``klock serve`` for the remote tests: started on a free loopback port, stopped (and
waited for) at the end. The binary is ``$KLOCK_BIN`` (scripts/test-python.sh passes the one
``scripts/klock-bin.sh`` names), else whatever ``scripts/klock-bin.sh`` prints."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence

from support import REPO

_bin: str | None = None


def klock_bin() -> str:
    global _bin
    if _bin is None:
        _bin = (
            os.environ.get("KLOCK_BIN")
            or subprocess.run(
                ["bash", str(REPO / "scripts" / "klock-bin.sh")],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
    return _bin


class Server:
    """``klock serve ARGS --listen 127.0.0.1:PORT`` (port 0: a free one); ``url`` once up."""

    def __init__(self, *args: str, port: int = 0) -> None:
        self.args: Sequence[str] = args
        self.port = port
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [klock_bin(), "serve", *self.args, "--listen", f"127.0.0.1:{self.port}"],
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
