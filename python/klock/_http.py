"""The remote client's HTTP/1.1 transport: stdlib ``http.client``, keep-alive connections in a pool.

Contract
--------
* :class:`Transport` sends requests to one ``http://`` or ``https://`` origin (a path in the URL
  prefixes every request's path). :meth:`Transport.request` makes **one attempt** and returns
  the whole answer (:class:`Response`, any status), or raises :class:`TransportError` when no
  answer came (what failed in words, the ``OSError`` or ``ssl`` error as ``__cause__``), or
  :class:`TransportClosed` once :meth:`Transport.close` was called. Retries, budgets and
  backoff are the caller's (:mod:`klock.remote`); this module decides nothing about them,
  except the one resend of a stale connection below.
* **Pool.** A connection carries one request at a time: a request takes the most recently
  used idle connection (or opens one) and gives it back once the answer is read whole, unless
  the answer said ``Connection: close`` (the server's requests-per-connection cap) or anything
  failed. So threads and the asyncio executor's threads never share a connection mid-request,
  and there are as many connections as requests in flight at once. At most
  :data:`MAX_IDLE` idle connections are kept, each at most :data:`IDLE_S` seconds, less than
  ``klock serve``'s 60 s idle timeout so that a connection is rarely reused as the server
  closes it. An idle connection that has become readable (the server closed it, or sent
  something unasked) is dropped before use.
* **Stale connection.** A reused connection that fails with a connection error (reset, broken
  pipe, or closed with no status line) before any byte of the answer arrived was closed by the
  server while idle. The request is then sent once more, on a fresh connection, if it is safe
  to send twice: a ``GET``/``HEAD``, or a request with an ``Idempotency-Key`` (the server acts
  on a key once and answers its retries with the first answer). Otherwise the error is raised
  to the caller's retry rules. A fresh connection's failure is always raised.
* **Timeouts.** ``timeout`` (seconds) bounds the connect and every socket read and write of
  the attempt; ``read_timeout``, if given, bounds the reads instead (a long poll).
* **TLS.** ``https://`` URLs use the ``ssl.SSLContext`` given (:func:`tls_context` makes it
  from ``connect``'s ``verify=``); a refused certificate is a :class:`TransportError` whose
  ``__cause__`` is the ``ssl.SSLCertVerificationError``.
* :meth:`Transport.close` closes the idle connections and shuts down those in use, so a
  request blocked in a read (the event reader's long poll) ends at once with
  :class:`TransportClosed`; so does every later request.
"""

from __future__ import annotations

import http.client
import json
import re
import select
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

__all__ = [
    "IDLE_S",
    "MAX_IDLE",
    "Response",
    "Transport",
    "TransportClosed",
    "TransportError",
    "tls_context",
]

#: The most idle connections a transport keeps.
MAX_IDLE = 16
#: How long an idle connection is kept (seconds); klock serve closes them after 60 s.
IDLE_S = 5.0

# Failures of a reused connection that mean the server closed it before answering: nothing of
# the answer was read (http.client.RemoteDisconnected is a ConnectionResetError raised only
# for an empty status line).
_STALE = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


class TransportError(Exception):
    """No answer came: ``str()`` says what failed, in words (e.g. "connection refused")."""


class TransportClosed(Exception):
    """The transport was closed before or while the request ran."""


class Response:
    """A whole answer: ``status_code``, ``headers`` (case-insensitive ``get``), ``content``."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: http.client.HTTPMessage, content: bytes):
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (``ValueError`` if it is not)."""
        return json.loads(self.content)


def tls_context(verify: bool | ssl.SSLContext) -> ssl.SSLContext:
    """The context an ``https://`` server's certificate is checked with: ``True``, the
    system's default roots; ``False``, no check at all; a context, itself."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _Connection:
    """An open socket (TLS-wrapped for ``https://``) and when it was last given back."""

    __slots__ = ("sock", "idle_since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0

    def close(self) -> None:
        self.sock.close()


class Transport:
    """Requests to one origin over pooled keep-alive connections; see the module contract."""

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL: {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._tls = (tls or tls_context(True)) if self._https else None
        host = f"[{self._host}]" if ":" in self._host else self._host
        if parts.port is not None:
            host += f":{parts.port}"
        # The headers every request carries, encoded once.
        static = {"Host": host, **(headers or {})}
        _check_headers(static)
        self._static = "".join(f"{k}: {v}\r\n" for k, v in static.items()).encode("latin-1")
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []  # most recently used last
        self._busy: set[_Connection] = set()
        self._closed = False

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float,
        read_timeout: float | None = None,
    ) -> Response:
        """One attempt (plus the one resend of a stale connection); see the module contract."""
        target = self._prefix + path
        if params:
            target += "?" + urlencode(params)
        if _UNSAFE.search(target):
            raise ValueError(f"a request target may not hold spaces or controls: {target!r}")
        lines = [f"{method} {target} HTTP/1.1\r\n"]
        if headers:
            _check_headers(headers)
            lines.extend(f"{k}: {v}\r\n" for k, v in headers.items())
        if content is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(content or b'')}\r\n")
        # One write for the head and the body: two would be two TCP segments.
        data = b"".join(
            (lines[0].encode("latin-1"), self._static, "".join(lines[1:]).encode("latin-1"))
        )
        data += b"\r\n" + (content or b"")
        conn, reused = self._take(timeout)
        try:
            return self._exchange(conn, method, data, timeout, read_timeout)
        except _STALE as e:
            safe = method in ("GET", "HEAD") or any(
                k.lower() == "idempotency-key" for k in headers or {}
            )
            if not reused or not safe:
                raise self._failed(e, "the connection was cut") from e
        # The server closed the pooled connection while it was idle: once, on a fresh one.
        try:
            return self._exchange(self._open(timeout), method, data, timeout, read_timeout)
        except _STALE as e:
            raise self._failed(e, "the connection was cut") from e

    def _exchange(
        self,
        conn: _Connection,
        method: str,
        data: bytes,
        timeout: float,
        read_timeout: float | None,
    ) -> Response:
        """Sends the request on ``conn`` and reads the whole answer; the connection goes back
        to the pool after a complete answer, and is closed after anything else."""
        done = False
        try:
            sock = conn.sock
            sock.settimeout(timeout)
            try:
                sock.sendall(data)
            except _STALE:
                raise
            except OSError as e:
                raise self._failed(e, "the connection was cut") from e
            if read_timeout is not None:
                sock.settimeout(read_timeout)
            answer = http.client.HTTPResponse(sock, method=method)
            try:
                answer.begin()
                body = answer.read()
            except _STALE:
                raise
            except (OSError, http.client.HTTPException) as e:
                raise self._failed(e, "the connection was cut") from e
            finally:
                answer.close()
            done = not answer.will_close
            return Response(answer.status, answer.headers, body)
        finally:
            self._give_back(conn, keep=done)

    def _failed(self, e: BaseException, what: str) -> Exception:
        """The error to raise for a failed attempt: closed, or what failed in words."""
        if self._closed:
            return TransportClosed("the transport was closed")
        if isinstance(e, ConnectionRefusedError):
            return TransportError("connection refused")
        if isinstance(e, TimeoutError):
            return TransportError(
                "timed out (connecting)" if what == "cannot connect" else "timed out (no answer)"
            )
        return TransportError(f"{what} ({e or type(e).__name__})")

    # ---- the pool -----------------------------------------------------------------------------

    def _take(self, timeout: float) -> tuple[_Connection, bool]:
        """An idle connection still open (and whether it was reused), else a new one."""
        now = time.monotonic()
        while True:
            with self._lock:
                if self._closed:
                    raise TransportClosed("the transport was closed")
                conn = self._idle.pop() if self._idle else None
                if conn is not None:
                    self._busy.add(conn)
            if conn is None:
                return self._open(timeout), False
            if now - conn.idle_since < IDLE_S and not _readable(conn.sock):
                return conn, True
            self._give_back(conn, keep=False)

    def _open(self, timeout: float) -> _Connection:
        """A new connection (``timeout``: of the connect and the TLS handshake), counted busy."""
        try:
            sock = socket.create_connection((self._host, self._port), timeout)
        except OSError as e:
            raise self._failed(e, "cannot connect") from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
        except OSError as e:
            sock.close()
            raise self._failed(e, "cannot connect") from e
        made = _Connection(sock)
        with self._lock:
            if self._closed:
                sock.close()
                raise TransportClosed("the transport was closed")
            self._busy.add(made)
        return made

    def _give_back(self, conn: _Connection, *, keep: bool) -> None:
        with self._lock:
            self._busy.discard(conn)
            keep = keep and not self._closed and len(self._idle) < MAX_IDLE
            if keep:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
        if not keep:
            conn.close()

    def close(self) -> None:
        """Closes the idle connections and shuts down the busy ones (their requests end)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for conn in idle:
            conn.close()
        for conn in busy:
            try:
                # The plain socket's shutdown (an SSLSocket's would drop its TLS state under
                # the thread reading it): the blocked read returns at once.
                socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)
            except OSError:
                pass


# A request target or header value must not carry what would end or split it.
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_UNSAFE_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _check_headers(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        if not name or _UNSAFE.search(name) or ":" in name or _UNSAFE_VALUE.search(value):
            raise ValueError(f"header {name!r}: {value!r} would not be one header line")


def _readable(sock: socket.socket | None) -> bool:
    """Whether an idle connection has something to read: the server closed it (or broke the
    protocol), either way it cannot carry a request."""
    if sock is None:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
