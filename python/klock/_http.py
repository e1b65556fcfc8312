"""The remote client's HTTP/1.1 transport: stdlib sockets, keep-alive connections in a pool.

Contract
--------
* :class:`Transport` sends requests to one ``http://`` or ``https://`` origin (a path in the URL
  prefixes every request's path). :meth:`Transport.request` makes **one attempt** and returns
  the whole answer (:class:`Response`, any status), or raises :class:`TransportError` when no
  whole answer came (what failed in words, the ``OSError`` or ``ssl`` error as ``__cause__``),
  or :class:`TransportClosed` once :meth:`Transport.close` was called. Retries, budgets and
  backoff are the caller's (:mod:`klock.remote`); this module decides nothing about them,
  except the one resend of a stale connection below.
* **Framing.** Only what ``klock serve`` needs, with the standard library alone: the request is
  written in one send (head and body together: two writes are two TCP segments, and a body
  held back by Nagle's algorithm waits for a delayed ACK); the answer's status line and
  headers are read by hand (``Content-Length``, ``Transfer-Encoding: chunked``, or to the end
  of the connection; ``Connection: close``; 1xx skipped), at most :data:`MAX_LINE` bytes a
  line, :data:`MAX_HEADERS` headers and :data:`MAX_BODY` bytes of body (a larger answer is
  refused by its declared length or chunk size before it is read, or once that many bytes have
  come). ``http.client`` did the same at several times the
  cost (docs/DECISIONS.md, "Issue 27 item 3"). An answer that is not HTTP/1.x is a
  :class:`TransportError`.
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
  pipe, or closed) before any byte of the answer arrived was closed by the server while idle.
  The request is then sent once more, on a fresh connection, if it is safe to send twice: a
  ``GET``/``HEAD``, or a request with an ``Idempotency-Key`` (the server acts on a key once and
  answers its retries with the first answer). Otherwise the error is raised to the caller's
  retry rules. A fresh connection's failure, and any failure after the first byte of the
  answer, is always raised.
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

import io
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
    "MAX_BODY",
    "MAX_HEADERS",
    "MAX_IDLE",
    "MAX_LINE",
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
#: The longest status line, header line or chunk-size line of an answer (bytes).
MAX_LINE = 65536
#: The most headers an answer may have.
MAX_HEADERS = 100
#: The largest body of an answer (bytes). ``klock serve``'s largest answers, a namespace's
#: state or an events batch (about 1 MiB at most), are far below it; a server (or something
#: posing as one) that declares or sends more cannot make the client allocate it.
MAX_BODY = 64 << 20

# What a connection the server closed fails with, on the send or while waiting for the first
# byte of the answer.
_STALE = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)
# A request target, header name or header value must not carry what would end or split it.
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_UNSAFE_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_DECIMAL = re.compile(r"[0-9]+")
_HEX = re.compile(rb"[0-9a-fA-F]+")


class TransportError(Exception):
    """No whole answer came: ``str()`` says what failed, in words (e.g. "connection refused")."""


class TransportClosed(Exception):
    """The transport was closed before or while the request ran."""


class _BadAnswer(Exception):
    """The answer is not the HTTP/1.x this module reads (or not all of it came)."""


class _Stale(Exception):
    """The connection failed before any byte of the answer arrived (``__cause__``: how)."""


class Response:
    """A whole answer: ``status_code``, ``headers`` (names in lower case), ``content``."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
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
    """An open socket (TLS-wrapped for ``https://``), the buffered reader of its answers (one
    for the connection's life, so nothing read ahead is lost), when it was last given back."""

    __slots__ = ("sock", "reader", "idle_since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader: io.BufferedReader = sock.makefile("rb")
        self.idle_since = 0.0

    def close(self) -> None:
        self.reader.close()
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
        if _UNSAFE.search(target) or _UNSAFE.search(method):
            raise ValueError(f"{method} {target!r}: spaces or controls in a request line")
        head = [f"{method} {target} HTTP/1.1\r\n"]
        if headers:
            _check_headers(headers)
            head.extend(f"{k}: {v}\r\n" for k, v in headers.items())
        if content is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(content or b'')}\r\n")
        head.append("\r\n")
        data = b"".join(
            (head[0].encode("latin-1"), self._static, "".join(head[1:]).encode("latin-1"))
        )
        if content:
            data += content
        conn, reused = self._take(timeout)
        try:
            return self._exchange(conn, method, data, timeout, read_timeout)
        except _Stale as e:
            safe = method in ("GET", "HEAD") or any(
                k.lower() == "idempotency-key" for k in headers or {}
            )
            if not reused or not safe:
                raise self._failed(e.__cause__ or e, "the connection was cut") from e.__cause__
        # The server closed the pooled connection while it was idle: once, on a fresh one.
        try:
            return self._exchange(self._open(timeout), method, data, timeout, read_timeout)
        except _Stale as e:
            raise self._failed(e.__cause__ or e, "the connection was cut") from e.__cause__

    def _exchange(
        self,
        conn: _Connection,
        method: str,
        data: bytes,
        timeout: float,
        read_timeout: float | None,
    ) -> Response:
        """Sends the request on ``conn`` and reads the whole answer; the connection goes back
        to the pool after a complete answer, and is closed after anything else. Raises
        :class:`_Stale` for a failure before any byte of the answer."""
        keep = False
        try:
            sock, reader = conn.sock, conn.reader
            sock.settimeout(timeout)
            try:
                sock.sendall(data)
            except _STALE as e:
                raise _Stale() from e
            except OSError as e:
                raise self._failed(e, "the connection was cut") from e
            if read_timeout is not None:
                sock.settimeout(read_timeout)
            try:
                # Blocks until the first byte of the answer (or the end of the connection).
                if not reader.peek(1):
                    raise _Stale() from ConnectionResetError("closed with no answer")
            except _STALE as e:
                raise _Stale() from e
            except OSError as e:
                raise self._failed(e, "the connection was cut") from e
            try:
                status, answer_headers, body, keep = _read_answer(reader, method)
            except _BadAnswer as e:
                raise self._failed(e, "the answer was cut or malformed") from e
            except OSError as e:
                raise self._failed(e, "the connection was cut") from e
            return Response(status, answer_headers, body)
        finally:
            self._give_back(conn, keep=keep)

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
        if self._closed:
            # A request cut by close() looks like a stale connection: no new one for it.
            raise TransportClosed("the transport was closed")
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
            if self._closed:  # close() may have looked for this socket before it existed
                made.close()
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


def _check_headers(headers: dict[str, str]) -> None:
    """Refuses a header that would not be one header line, without repeating its value (the
    bearer token is one)."""
    for name, value in headers.items():
        if not name or _UNSAFE.search(name) or ":" in name or _UNSAFE_VALUE.search(value):
            raise ValueError(f"header {name!r} would not be one header line (a control character)")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(f"header {name!r} is not Latin-1 text") from None


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the server closed it (or broke the
    protocol), either way it cannot carry a request."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


# ---- reading an answer ------------------------------------------------------------------------


def _line(reader: io.BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise _BadAnswer(f"a line longer than {MAX_LINE} bytes")
    if not line.endswith(b"\n"):
        raise _BadAnswer("the connection ended inside the answer's head")
    return line


def _read_answer(reader: io.BufferedReader, method: str) -> tuple[int, dict[str, str], bytes, bool]:
    """One whole answer: (status, headers, body, whether the connection can carry another)."""
    while True:
        status_line = _line(reader)
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise _BadAnswer(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        count = 0
        while (line := _line(reader)) not in (b"\r\n", b"\n"):
            count += 1
            if count > MAX_HEADERS:
                raise _BadAnswer(f"more than {MAX_HEADERS} headers")
            name, colon, value = line.partition(b":")
            if not colon or not name or name[:1] in b" \t":
                raise _BadAnswer(f"not a header line: {line[:80]!r}")
            headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        if not 100 <= status < 200:
            break  # an interim answer (1xx) is followed by the real one
    tokens = headers.get("connection", "").lower()
    keep = "close" not in tokens if version == b"HTTP/1.1" else "keep-alive" in tokens
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, headers, _read_chunked(reader), keep
    length = headers.get("content-length")
    if length is None:
        body = reader.read(MAX_BODY + 1)  # to the end of the connection
        if len(body) > MAX_BODY:
            raise _BadAnswer(f"a body of more than {MAX_BODY} bytes")
        return status, headers, body, False
    if not _DECIMAL.fullmatch(length):
        raise _BadAnswer(f"Content-Length {length!r}")
    if int(length) > MAX_BODY:
        raise _BadAnswer(f"a body of {length} bytes, more than {MAX_BODY}")
    body = reader.read(int(length))
    if len(body) != int(length):
        raise _BadAnswer(f"the connection ended after {len(body)} of {length} bytes of the body")
    return status, headers, body, keep


def _read_chunked(reader: io.BufferedReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_field = _line(reader).split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_field):
            raise _BadAnswer(f"chunk size {size_field[:40]!r}")
        size = int(size_field, 16)
        total += size
        if total > MAX_BODY:
            raise _BadAnswer(f"chunks of more than {MAX_BODY} bytes")
        if size == 0:
            while _line(reader) not in (b"\r\n", b"\n"):
                pass  # trailers: none that matter here
            return b"".join(parts)
        chunk = reader.read(size)
        if len(chunk) != size or _line(reader) not in (b"\r\n", b"\n"):
            raise _BadAnswer("the connection ended inside a chunk")
        parts.append(chunk)
