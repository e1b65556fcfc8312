"""A real ``klock serve`` for the remote tests: started on a free loopback port, stopped (and
waited for) at the end. The binary is ``$KLOCK_BIN`` (scripts/test-python.sh passes the one
``scripts/klock-bin.sh`` names), else whatever ``scripts/klock-bin.sh`` prints. The
resettable manual-clock server is the test kit's ``klock-testkit serve`` (``$KLOCK_TESTKIT_BIN``,
else ``scripts/klock-bin.sh klock-testkit``): ``Server(program=testkit_bin())``. And
:class:`Link`, a loopback TCP link to it that a test can cut and restore, that counts the
connections made through it and can lose one request or one answer; and :func:`call`, one
HTTP request by hand (stdlib, a connection of its own). And :class:`Cluster`, three ``klock
serve --node-id`` processes on free loopback ports joined by ``klock cluster init``."""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

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


def token_server(
    tmp_path: pathlib.Path, *args: str, secret: str = "secret", **limits: int
) -> Server:
    """``klock serve --memory ARGS`` with one agent token, ``secret``, for every namespace, with
    these limits of the token file (server/README.md, Access)."""
    tokens = tmp_path / "tokens.json"
    grant: dict[str, Any] = {
        "name": "agents",
        "sha256": hashlib.sha256(secret.encode()).hexdigest(),
        "role": "agent",
        "namespaces": ["*"],
        **limits,
    }
    tokens.write_text(json.dumps({"tokens": [grant]}))
    return Server("--memory", "--tokens", str(tokens), *args)


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


# The cluster secret of the test clusters (klock serve asks for at least 16 characters).
CLUSTER_SECRET = "a-cluster-secret-of-the-tests"


class Cluster:
    """``size`` (three) ``klock serve --node-id N --cluster-peers ... --cluster-secret-file``
    processes on free loopback ports, each with a redb file of its own in ``dir``, made one
    cluster by ``klock cluster init``. ``urls``: the nodes' client URLs, in node order. Made
    with :func:`cluster`, which kills every node at the end, whatever happened. A node's
    log goes to a file (its INFO lines would fill a pipe nobody reads)."""

    def __init__(self, dir: pathlib.Path, size: int = 3) -> None:
        self.dir = dir
        self.secret = dir / "secret"
        self.secret.write_text(CLUSTER_SECRET)
        self.ports = [free_port() for _ in range(size)]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.peers = ",".join(f"{i + 1}={url}" for i, url in enumerate(self.urls))
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size

    def start(self, i: int) -> None:
        """Starts node ``i`` (0-based; its Raft id is ``i + 1``) on its port."""
        with open(self.dir / f"node{i + 1}.log", "ab") as log:
            self.procs[i] = subprocess.Popen(
                [
                    klock_bin(),
                    "serve",
                    "--listen",
                    f"127.0.0.1:{self.ports[i]}",
                    "--data",
                    str(self.dir / f"node{i + 1}.redb"),
                    "--node-id",
                    str(i + 1),
                    "--cluster-peers",
                    self.peers,
                    "--cluster-secret-file",
                    str(self.secret),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def status(self, i: int) -> dict[str, Any] | None:
        """Node ``i``'s ``/raft/status``, or ``None`` if it does not answer."""
        try:
            code, text = call(
                "GET",
                f"{self.urls[i]}/raft/status",
                headers={"klock-cluster-secret": CLUSTER_SECRET},
                timeout=2,
            )
        except OSError:
            return None
        return json.loads(text) if code == 200 else None

    def init(self) -> None:
        """``klock cluster init`` through node 1, once it listens (retried until then)."""
        deadline = time.monotonic() + 15
        while True:
            done = subprocess.run(
                [
                    klock_bin(),
                    "cluster",
                    "init",
                    "--node",
                    self.urls[0],
                    "--cluster-secret-file",
                    str(self.secret),
                ],
                capture_output=True,
                text=True,
                timeout=15,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"klock cluster init failed: {done.stderr[-2000:]}")
            time.sleep(0.1)

    def leader(self, timeout: float = 15) -> int:
        """The index of the live node every live node names as leader, once there is one."""
        deadline = time.monotonic() + timeout
        while True:
            live = [i for i, proc in enumerate(self.procs) if proc is not None]
            named = [(self.status(i) or {}).get("leader") for i in live]
            first = named[0] if named else None
            if (
                isinstance(first, int)
                and all(n == first for n in named)
                and self.procs[first - 1] is not None
            ):
                return first - 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"no leader agreed on within {timeout} s: {named}")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``, as a crash, and wait for it."""
        proc = self.procs[i]
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
        self.procs[i] = None

    def kill_all(self) -> None:
        for i in range(len(self.procs)):
            self.kill(i)


@contextmanager
def cluster(size: int = 3) -> Iterator[Cluster]:
    """A started, initialized :class:`Cluster` with a leader; every node killed at the end,
    even on failure."""
    with tempfile.TemporaryDirectory(prefix="klock-cluster-") as d:
        nodes = Cluster(pathlib.Path(d), size)
        try:
            for i in range(size):
                nodes.start(i)
            nodes.init()
            nodes.leader()
            yield nodes
        finally:
            nodes.kill_all()


# The port claims this process holds, kept until it ends (see free_port).
_CLAIMS: list[Any] = []


def free_port() -> int:
    """A loopback port nothing listens on now, for a node that binds it just after.

    It is drawn from below the kernel's ephemeral range: until the node binds it, a port of
    that range can be handed to any socket of the machine (another test's ``bind(0)``, the
    local end of an outgoing connection), and the node could not listen. Below the range only
    another test picks ports; so that two picks never meet (two nodes of one cluster, two
    pytest workers, a Rust test), each takes the exclusive ``flock`` that the Rust test kit's
    ``claim_port`` takes on the port's file, and this process keeps it until it ends."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            low = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    floor = 10_000
    claims = pathlib.Path(tempfile.gettempdir()) / "klock-test-ports"
    claims.mkdir(exist_ok=True)
    for attempt in range(2000):
        if attempt < 1000 and low > floor + 1000:
            candidate = random.randrange(floor, low)
        else:
            with socket.create_server(("127.0.0.1", 0)) as probe:
                candidate = int(probe.getsockname()[1])
        lock = open(claims / str(candidate), "a")  # noqa: SIM115 (held past this call)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.create_server(("127.0.0.1", candidate)):
                pass
        except OSError:
            lock.close()
            continue
        _CLAIMS.append(lock)
        return candidate
    raise RuntimeError("no loopback port could be claimed in 2,000 tries")


def call(
    method: str,
    url: str,
    *,
    json_body: Any = None,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> tuple[int, str]:
    """One request to ``url`` on a connection of its own: (status, body text)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    sent = dict(headers or {})
    body = None
    if json_body is not None:
        body = json.dumps(json_body).encode()
        sent["Content-Type"] = "application/json"
    try:
        conn.request(method, parts.path + ("?" + urlencode(params) if params else ""), body, sent)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


class Link:
    """A TCP forwarder from a free loopback port of its own (``url``) to the server's port: a
    client's network, which :meth:`cut` takes away (every open connection closed, new ones
    closed at once) while the server stays up, and :meth:`restore` gives back. It reaches
    whatever listens on the port, so a server restarted on it is reached again.

    ``accepted`` counts the connections clients made through it. :meth:`lose` arms one fault
    for the next request (a read from a client) whose first line starts with a given prefix:
    ``"request"`` closes that connection without forwarding the request (a server that closed
    an idle connection as the request arrived), ``"answer"`` forwards it and closes the
    connection instead of passing the answer on (the server acted; the client hears nothing).
    ``lost`` counts the faults that happened. :meth:`hold` keeps every request starting with a
    given prefix at the link (neither forwarded nor failed) until :meth:`release`: a request
    that is late, not lost."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._cut = False
        self._open: set[socket.socket] = set()
        self.accepted = 0
        self.lost = 0
        self._fault: tuple[bytes, str] | None = None
        self._mute: set[socket.socket] = set()  # upstreams whose next answer is lost
        self._held: bytes | None = None  # the prefix of the requests held back, if any
        self._released = threading.Event()
        self._released.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def lose(self, what: str, prefix: str) -> None:
        """Loses the ``what`` ("request" or "answer") of the next request starting with
        ``prefix`` (e.g. ``"POST /v1/ns/default/sessions "``)."""
        if what not in ("request", "answer"):
            raise ValueError(f"what must be 'request' or 'answer', got {what!r}")
        with self._lock:
            self._fault = (prefix.encode(), what)

    def hold(self, prefix: str) -> None:
        """Holds back every request starting with ``prefix`` until :meth:`release`."""
        with self._lock:
            self._held = prefix.encode()
            self._released.clear()

    def release(self) -> None:
        """Forwards the requests held back, and holds no more."""
        with self._lock:
            self._held = None
            self._released.set()

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
                # Forward each write at once: with Nagle's algorithm a request written in
                # two pieces waits for the server's delayed ACK (40 ms) between them.
                for end in (conn, upstream):
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._open |= {conn, upstream}
                self.accepted += 1
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    held = self._held is not None and data.startswith(self._held)
                if held:
                    self._released.wait(30)  # bounded: a forgotten release fails the test
                with self._lock:
                    fault = self._fault
                    if fault is not None and data.startswith(fault[0]):
                        self._fault = None
                        self.lost += 1
                        if fault[1] == "request":
                            break  # closes both ends, nothing forwarded
                        self._mute.add(dst)
                    elif src in self._mute:
                        break  # the answer: closes both ends instead of passing it on
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                for end in (src, dst):
                    _drop(end)
                    self._open.discard(end)
                    self._mute.discard(end)

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
