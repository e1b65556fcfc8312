"""The remote backend: the friendly client over HTTP to ``klock serve`` (:func:`connect`).

Contract
--------
:func:`connect` returns a :class:`~klock.Klock` whose kernel is a :class:`RemoteKernel`: the
same sessions, ``with`` / ``async with`` lease blocks, ``@protected``, events, reconcile and
resume, with every rule of :mod:`klock.client` (which exists once, for both backends; see
:mod:`klock.backend`). Sessions opened through it default to its ``namespace``.

* **Transport.** :mod:`klock._http` (HTTP/1.1 on stdlib sockets): the calls go through a pool of
  keep-alive connections per node, one per call in flight, and per namespace one reader thread
  with transports of its own long-polls the namespace's event stream
  (``GET /v1/ns/{ns}/watch?after=&wait_ms=``, on whichever node the failover rules name: it
  follows the node that last answered); it keeps the events of this client's sessions and
  hands them to the Klock's dispatch. Where the stream starts and resumes is the core's rule
  (``core/src/client/watch.rs`` through ``klock._core.Follow``): it starts at the log entry
  that opened (or resumed) the client's first session of the namespace (the answer's
  ``Klock-Index``), so it needs no read before the session is handed out, and resumes after
  the last event id taken in. Its polls leave the holder events (ACQUIRED, RELEASED) out
  (``holder_events=false``) unless something watches the namespace (``Klock._watch``, an
  election's ``observe``): the client learns its grants and releases from their answers, and
  every other process's would wake the poll for nothing. A first watcher has the held poll
  sent again at once, with them, from the same cursor.
  ``async with`` blocks run the calls in a worker thread, so the event loop never blocks
  (``offload_async``). The bearer ``token`` goes in ``Authorization``; session tokens
  (``Klock-Session-Token``) stay inside. Every mutating request carries an
  ``Idempotency-Key`` of its own, reused by its retries, so a retry never acts twice.
* **Errors.** The server's ``{"error": {code, name, message}}`` becomes the in-process class
  of its code (:mod:`klock.errors`); 401/403 :class:`~klock.Unauthorized` naming the URL.
  *Session token refused*: a 401 ``SESSION_TOKEN_REFUSED`` to a request naming a session
  means another client resumed the session (a resume issues a new token):
  :class:`~klock.Unauthorized` with ``.session`` set, never retried; the Klock loses the
  session's blocks at once (``LEASE_RELEASED``) and forgets the session. A resume without
  the session's current resume secret is 401 ``RESUME_SECRET_REFUSED``.
* **Bounded call.** ``reconnect_timeout`` (default 30 s) is every call's budget, counted from
  its start; one attempt waits at most ``request_timeout`` (default 10 s) and never past the
  budget, so a frozen server costs a call at most the budget.
* **Failover.** ``url`` is one server or the nodes of a cluster (a list, or URLs separated by
  commas; each checked, a bad one a ``ValueError`` naming it). Which node each attempt asks,
  how long the call pauses and when it gives up are the core's rules
  (``core/src/client/failover.rs`` through ``klock._core.Servers``/``Attempts``, SPEC.md
  §13.7): a call starts at the node that last answered; a node that does not answer
  (connection refused / reset / timed out), or answers 503, is followed at once by the next
  untried one; after a round of every node the call pauses (a 503's ``Retry-After``, else
  50 ms doubling to 1 s) and starts a new round. *Busy server*: a 429 (``RATE_LIMITED``,
  ``TOO_MANY_WAITS``: refused before it did anything) is asked again of the same node after
  its ``Retry-After``, else the backoff. Nothing waits past the budget: then a 429 raises the
  server's error, the rest :class:`~klock.Unreachable` ("cannot reach klock serve at URL:
  what failed", for each URL tried). Every call gets its whole budget, whatever the calls
  before it met. *Retries do not starve
  heartbeats*: a call holds the Klock's lock while it retries, so each pause between its
  attempts first sends the heartbeats due (but those of a session whose leases the call
  releases). When the core
  says the event stream may have missed events (an answer after a poll that gave up, from
  another node than the last, of another log than its cursor's, or with a ``gap``), the
  reader re-polls the open tickets (a restart may have dropped their
  events; a ticket whose outcome the server no longer has is asked again, which reuses a
  lease granted meanwhile) and has every held block renewed at once; the server restored
  the sessions in their suspension grace and extended the leases by the downtime, so a quick
  restart (or a cluster's failover) loses nothing, and a renewal the server refuses marks the
  lease lost as usual. If the reader's poll gives up (cut off past the budget), every waiting
  block raises :class:`~klock.Unreachable`.
* **Renewals paced.** The core's rule (``core/src/client/renewals.rs``): a client has at most
  ``klock._core.MAX_RENEWALS_IN_FLIGHT`` (32) heartbeats in flight. Here they go one at a
  time: the Klock sends them from its timer under its lock, as every call, so a resync of
  thousands of blocks takes one connection, not one per block; each takes its send time as it
  goes (where its local deadline counts from), not the time the batch fell due.
* **Lost-lease safety.** On the system clock, each lease has a local deadline on the Klock's
  monotonic clock: the send time of the request that granted or last renewed it, plus its TTL
  (never later than the server's expiry). A lease granted after a WAIT takes the *acquire's*
  send time (the grant may predate the event) and is renewed at once. *Long waits*: every
  third of the asked TTL a waiting ticket is polled (``GET …/tickets/{tid}?wait_ms=0``), and
  each WAIT answer moves that send time to the poll's (the grant comes after it), so a lease
  granted after a wait longer than its TTL (an election's campaign) is not lost on arrival.
  Heartbeats are due a third of the way to the deadline; when a deadline passes without a renewal the lease is lost
  (``LEASE_EXPIRED``, the core's name for it in every driver) at once, whatever the server
  says later. Which leases an event ends (expired, wounded, a closed session's) is the core's
  rule too (``klock._core.ends``). ``Lease.expires_at`` shows the
  server's value (server milliseconds).
* **Manual clock (tests).** With a :class:`~klock.ManualClock` the server must run
  ``--clock manual``: every request carries ``Klock-Now`` from the clock, the Klock's timer
  follows the server's next deadline (``GET /v1/deadline``) and settles time with ``POST
  /v1/advance``, and events are read synchronously after every call, so a run is exactly as
  deterministic as in-process (server time is then the client's time, and the server decides
  every expiry).
"""

from __future__ import annotations

import collections
import json
import os
import ssl
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import quote, urlsplit

from . import _core
from ._http import Response, Transport, TransportClosed, TransportError, tls_context
from .clock import Clock, ManualClock
from .errors import (
    ERROR_CODES,
    CertificateError,
    Closed,
    InvalidInput,
    KlockError,
    QuotaExceeded,
    StateError,
    Unauthorized,
    UnknownId,
    Unreachable,
)

if TYPE_CHECKING:
    from .client import Klock, LeaseInfo

__all__ = ["connect", "RemoteKernel"]

# The shortest pause a server's Retry-After asks for (a "0" must not make a busy loop).
_PAUSE_FLOOR_MS = 50
# How long the event reader waits after its call gave up before it asks again (every node
# once, the core's "down" state) and after an answer it could not use.
_READER_PAUSE_S = 1.0
# The longest a best-effort request (giving back a lease lost locally) may take.
_ONCE_TIMEOUT_S = 1.0
# A wait is refreshed every third of its TTL (the rule "long waits"), at most this often.
_REFRESH_MIN_MS = 50
# The kernel's ttl_ms when an acquire gives none (SPEC.md §6).
_DEFAULT_TTL_MS = 60_000
# How long one event long-poll waits on the server (it answers earlier when events come).
_WATCH_WAIT_MS = 10_000
# How an attempt ended, as the core's failover rules take it (a 503 is "unavailable", a 429
# "busy").
_Outcome = Literal["answered", "unreachable", "unavailable", "busy"]
_ERROR_CLASSES: dict[int, type[KlockError]] = {
    1: InvalidInput,
    2: UnknownId,
    3: StateError,
    4: QuotaExceeded,
}


_DEFAULT_URL = "http://127.0.0.1:7300"


def connect(
    url: str | Sequence[str] | None = None,
    token: str | None = None,
    namespace: str | None = None,
    *,
    clock: Clock | Callable[[], int] | None = None,
    reconnect_timeout: float = 30.0,
    request_timeout: float = 10.0,
    ca: str | os.PathLike[str] | None = None,
    verify: bool | ssl.SSLContext = True,
) -> Klock:
    """A :class:`~klock.Klock` on ``klock serve`` at ``url`` (e.g. ``http://127.0.0.1:7300``).

    ``url`` may name every node of a cluster: a list of URLs, or one string of URLs separated
    by commas (``"http://a:7300,http://b:7300,http://c:7300"``); each must be an ``http://``
    or ``https://`` URL with a host (else a ``ValueError`` naming it), none twice. Each call
    then starts at the node that last answered and fails over to the others (the module
    contract, "Failover").

    What is not given comes from the environment, as for the ``klock`` CLI (so a program
    started by ``klock exec`` reaches the same server): ``url`` from ``KLOCK_SERVER`` (several
    separated by commas; else ``http://127.0.0.1:7300``), ``token`` from ``KLOCK_TOKEN``, ``namespace`` from
    ``KLOCK_NAMESPACE`` (or the CLI's older ``KLOCK_NS``; both set and different is a
    ``ValueError``; else ``"default"``), ``ca`` from ``KLOCK_CA`` (for ``https://`` only).

    ``token``: the server's bearer token (``--tokens``), if it asks for one. ``namespace``: of
    the sessions opened without one. ``ca``: a PEM bundle of the CA certificates to trust for
    an ``https://`` server (a private CA, a self-signed certificate), instead of the default
    roots. ``verify``: ``True`` (the system's default roots, ``ssl.create_default_context()``;
    ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` move them), an ``ssl.SSLContext`` of your own, or
    ``False`` to skip verification (tests only: anyone on the path can then read the token).
    A refused certificate raises :class:`~klock.CertificateError` at once, never retried.
    ``clock``: as for :class:`~klock.Klock`; a
    :class:`~klock.ManualClock` needs a server started with ``--clock manual``.
    ``reconnect_timeout`` (seconds): every call's budget, from its start: how long it, or the
    event reader, keeps retrying an unreachable or busy (429, 503) server before raising
    (:class:`~klock.Unreachable`; a 429: the server's error). ``request_timeout`` (seconds):
    one attempt's connect/read limit, never past the budget (Node: ``requestTimeoutMs``). Checks the server (and the token) at
    once: a wrong token raises :class:`~klock.Unauthorized`, an unreachable URL
    :class:`~klock.Unreachable` once the budget is spent.
    """
    from .client import Klock

    if url is None:
        url = os.environ.get("KLOCK_SERVER") or _DEFAULT_URL
    if token is None:
        token = os.environ.get("KLOCK_TOKEN") or None
    if namespace is None:
        namespace = _env_namespace()
    urls = _server_urls(url)
    tls = _tls_verify(urls, ca, verify)
    for name, value in (
        ("reconnect_timeout", reconnect_timeout),
        ("request_timeout", request_timeout),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    backend = RemoteKernel(
        urls,
        token,
        manual=isinstance(clock, ManualClock),
        reconnect_timeout=float(reconnect_timeout),
        request_timeout=float(request_timeout),
        verify=tls,
    )
    try:
        backend.check()
        return Klock(clock=clock, _backend=backend, _namespace=namespace)
    except BaseException:
        backend.close()
        raise


def _env_namespace() -> str:
    """``KLOCK_NAMESPACE``, else ``KLOCK_NS`` (the CLI's older name), else ``"default"``."""
    long, short = os.environ.get("KLOCK_NAMESPACE") or None, os.environ.get("KLOCK_NS") or None
    if long is not None and short is not None and long != short:
        raise ValueError(
            f"KLOCK_NAMESPACE={long!r} and KLOCK_NS={short!r} disagree: set one of them"
        )
    return long or short or "default"


def _server_urls(url: object) -> list[str]:
    """The server URLs ``connect`` was given (one URL, several separated by commas, or a list
    of them), each checked: an ``http://`` or ``https://`` URL with a host and a valid port,
    none twice. A bad one is a ``ValueError`` naming it."""
    if isinstance(url, str):
        given: list[object] = [part.strip() for part in url.split(",")]
    elif isinstance(url, (list, tuple)):
        given = list(url)
    else:
        raise TypeError(
            "url must be a URL of klock serve, several separated by commas, or a list of them, "
            f"got {type(url).__name__}"
        )
    if not given:
        raise ValueError("url is an empty list: give at least one URL of klock serve")
    urls: list[str] = []
    for item in given:
        if not isinstance(item, str):
            raise TypeError(f"a server URL must be a str, got {type(item).__name__} {item!r}")
        parts = urlsplit(item)
        try:
            parts.port  # noqa: B018 (raises ValueError for a port that is not a number in range)
            good = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            good = False
        if not good:
            where = "" if given == [url] else f" (in {url!r})"
            raise ValueError(
                f"url must be an http:// or https:// URL of klock serve with a host, "
                f"got {item!r}{where}"
            )
        normal = item.rstrip("/")
        if normal in urls:
            raise ValueError(f"server URL {item!r} is given twice (in {url!r})")
        urls.append(normal)
    return urls


def _tls_verify(
    urls: list[str], ca: str | os.PathLike[str] | None, verify: bool | ssl.SSLContext
) -> bool | ssl.SSLContext:
    """What the servers' certificates are verified with (``verify=``;
    :func:`klock._http.tls_context` turns it into the ``ssl.SSLContext`` of ``https://``
    servers)."""
    if not isinstance(verify, (bool, ssl.SSLContext)):
        raise TypeError(f"verify must be True, False or an ssl.SSLContext, got {verify!r}")
    if ca is not None and verify is not True:
        raise ValueError("give ca=PATH or verify=..., not both")
    https = any(url.startswith("https://") for url in urls)
    if ca is not None and not https:
        raise ValueError(f"ca= is for an https:// server, and {', '.join(urls)!r} is not one")
    if ca is None and verify is True and https:
        ca = os.environ.get("KLOCK_CA") or None
    if ca is None:
        return verify
    if isinstance(ca, bytes) or not isinstance(ca, (str, os.PathLike)):
        raise TypeError(f"ca must be the path of a PEM file, got {type(ca).__name__}")
    try:
        return ssl.create_default_context(cafile=os.fspath(ca))
    except FileNotFoundError:
        raise ValueError(f"ca {os.fspath(ca)!r}: no such file") from None
    except (ssl.SSLError, OSError) as e:
        raise ValueError(
            f"ca {os.fspath(ca)!r} is not a PEM bundle of CA certificates: {e}"
        ) from None


def _refused_certificate(e: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind a transport error, if that is what it is."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@dataclass(frozen=True)
class RemoteSessionInfo:
    """A session as the server opened or resumed it (``klock._core.SessionInfo``'s fields)."""

    session_id: int
    agent_id: str
    namespace: str
    priority: int
    epoch: int


@dataclass(frozen=True)
class _Blocker:
    session_id: int
    agent_id: str
    intents: list[tuple[str, str]]


@dataclass(frozen=True)
class RemoteVerdict:
    """The server's answer to an acquire (``klock._core.Verdict``'s fields)."""

    verdict: str
    leases: list[LeaseInfo]
    ticket: int | None
    retry_after_ms: int | None
    held_by: list[_Blocker]
    cycle: list[int]


@dataclass(frozen=True)
class RemoteEvent:
    """An event of the server's stream (``klock._core.Event``'s fields; ``id`` its event id,
    empty for one the client made itself: a lease found past its local deadline, a ticket
    whose outcome the server no longer has)."""

    event: str
    session: int
    id: str = ""
    ticket: int | None = None
    leases: list[LeaseInfo] | list[int] | None = None
    retry_after_ms: int | None = None
    lease: int | None = None
    by: int | None = None
    lost_leases: list[int] | None = None
    lost_tickets: list[int] | None = None
    reason: str | None = None
    cycle: list[int] | None = None


def _lease(d: dict[str, Any]) -> LeaseInfo:
    from .client import LeaseInfo

    return LeaseInfo(
        d["lease_id"],
        d["session_id"],
        d["agent_id"],
        d["resource"],
        d["predicate"],
        d["fence"],
        d["acquired_at"],
        d["expires_at"],
        d["ttl_ms"],
    )


def _event(d: dict[str, Any]) -> RemoteEvent:
    leases = d.get("leases")
    return RemoteEvent(
        event=d["event"],
        session=d["session"],
        id=str(d.get("id") or d.get("event_id") or ""),
        ticket=d.get("ticket"),
        # RELEASED lists lease ids; GRANTED and ACQUIRED whole leases.
        leases=(
            None
            if leases is None
            else list(leases)
            if d["event"] == "RELEASED"
            else [_lease(x) for x in leases]
        ),
        retry_after_ms=d.get("retry_after_ms"),
        lease=d.get("lease"),
        by=d.get("by"),
        lost_leases=d.get("lost_leases"),
        lost_tickets=d.get("lost_tickets"),
        reason=d.get("reason"),
        # DIED: the server leaves out an empty cycle (any death but a detect victim's).
        cycle=d.get("cycle", []) if d["event"] == "DIED" else None,
    )


def _session_info(d: dict[str, Any]) -> RemoteSessionInfo:
    return RemoteSessionInfo(
        d["session_id"], d["agent_id"], d["namespace"], d["priority"], d["epoch"]
    )


class _Local:
    """A lease's local deadline (Klock milliseconds) and TTL; ``due_now``: renew at once."""

    __slots__ = ("deadline", "ttl_ms", "session", "due_now")

    def __init__(self, deadline: int, ttl_ms: int, session: int, due_now: bool) -> None:
        self.deadline = deadline
        self.ttl_ms = ttl_ms
        self.session = session
        self.due_now = due_now


class RemoteKernel:
    """``klock._core.Kernel``'s interface (:class:`klock.backend.Backend`) over HTTP to
    ``klock serve``; see the module contract. Made by :func:`connect`."""

    offload_async: bool

    def __init__(
        self,
        urls: Sequence[str],
        token: str | None,
        *,
        manual: bool,
        reconnect_timeout: float,
        request_timeout: float,
        verify: bool | ssl.SSLContext = True,
    ) -> None:
        #: The servers' URLs, in the order given (the core's node positions).
        self.urls = tuple(url.rstrip("/") for url in urls)
        #: The URLs as one text (the one URL of a single server), for messages.
        self.url = ",".join(self.urls)
        # Which node a call starts with and when it gives up: the core's rules (failover).
        self._servers = _core.Servers(len(self.urls))
        self._token = token
        self.manual = manual
        # Blocking calls leave the event loop, except in deterministic manual-clock runs.
        self.offload_async = not manual
        self.reconnect_timeout = reconnect_timeout
        self._request_timeout = request_timeout
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        self._headers = headers
        https = any(url.startswith("https://") for url in self.urls)
        self._tls = tls_context(verify) if https else None
        # One pool of keep-alive connections per node.
        self._http = [Transport(url, headers, tls=self._tls) for url in self.urls]
        self._klock: Callable[[], Klock | None] = lambda: None
        self._now: Callable[[], int] = lambda: 0
        self._tokens: dict[int, str] = {}  # session id -> session token
        # session id -> the resume secret its next resume must present (a digest is public)
        self._resume_secrets: dict[int, str] = {}
        self._ns: dict[int, str] = {}  # session id -> namespace
        self._local: dict[int, _Local] = {}  # lease id -> local deadline (system clock only)
        # ticket -> (the latest send time it was known to wait at: its acquire's, then each
        # refresh's that answered WAIT; session)
        self._tickets: dict[int, tuple[int, int]] = {}
        # ticket -> (when to refresh it next, every how many ms): see "Long waits" above.
        self._refresh: dict[int, tuple[int, int]] = {}
        self._events: collections.deque[RemoteEvent] = collections.deque()
        # namespace -> where its event stream resumes, and when it may have missed events
        # (the core's rules: core/src/client/watch.rs)
        self._follows: dict[str, _core.Follow] = {}
        # namespace -> its reader thread and that reader's transports, one per node
        self._readers: dict[str, tuple[threading.Thread, list[Transport]]] = {}
        # namespace -> who follows all its events (Klock._watch), under _state_lock
        self._watchers: dict[str, list[Callable[[RemoteEvent], None]]] = {}
        # Starting to read a namespace's events happens once (a session's open or a watch).
        self._follow_lock = threading.Lock()
        self._closed = False
        #: An unexpected error the event reader met (a bug; it kept reading), else None.
        self.reader_error: BaseException | None = None
        self._state_lock = threading.Lock()
        self.heartbeat_due: Callable[[int], int] | None = None if manual else self._heartbeat_due

    # ---- plumbing ---------------------------------------------------------------------------

    def attach(self, klock: Klock) -> None:
        """The Klock this backend serves (klock.backend's hook); held weakly."""
        ref = weakref.ref(klock)
        self._klock = ref
        self._now = klock.now

    def now(self) -> int:
        """The Klock's time (the kernel's ``now()`` in-process)."""
        return self._now()

    @property
    def config(self) -> dict[str, Any]:
        return {"policy": None, "server": self.url}

    def check(self) -> None:
        """One authenticated read: an unreachable server or a refused token fails here."""
        self._request("GET", "/v1/version", now=0)

    def _request(
        self,
        method: str,
        path: str,
        *,
        session: int | None = None,
        body: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        now: int | None = None,
        mutating: bool = False,
        give_up_at: int | None = None,
        once: bool = False,
        ends_leases: bool = False,
        with_index: bool = False,
        with_node: bool = False,
    ) -> Any:
        """One logical request, retried on connection failures within the reconnect budget
        (or until the Klock's clock reaches ``give_up_at``: then ``None`` is returned; or not
        at all with ``once``). ``ends_leases``: the request releases leases of ``session`` (a
        release, a close), whose heartbeats therefore wait for it to end. ``with_index``: the
        answer comes with its ``Klock-Index`` (the log entry of the command; ``None`` if the
        server did not say), as ``(answer, index)``; ``with_node``: with the node that answered
        (its position in ``urls``), as ``(answer, node)``: the node the next call starts at may
        be another, the leader that answer named."""
        if self._closed and method != "GET":
            raise Closed("this Klock is closed")
        headers: dict[str, str] = {}
        if self.manual:
            headers["Klock-Now"] = str(self._now() if now is None else now)
        if session is not None:
            token = self._tokens.get(session)
            if token is None:
                raise _error(
                    ERROR_CODES["UNKNOWN_SESSION"],
                    "UNKNOWN_SESSION",
                    f"no open session {session} (closed, expired for idleness, or never opened)",
                )
            headers["Klock-Session-Token"] = token
        if mutating:
            headers["Idempotency-Key"] = uuid.uuid4().hex
        content = None if body is None else json.dumps(body).encode()
        if content is not None:
            headers["Content-Type"] = "application/json"
        if self._closed:  # a read after close (stats, resource state): a connection of its own
            node = self._servers.preferred
            url = self.urls[node]
            one_off = Transport(url, self._headers, tls=self._tls)
            try:
                answer = self._answer(
                    one_off.request(
                        method, path, params=params, headers=headers, timeout=self._request_timeout
                    ),
                    session,
                )
                return (answer, node) if with_node else answer
            except TransportError as e:
                raise Unreachable(f"cannot reach klock serve at {url}: {e}") from None
            finally:
                one_off.close()
        # The call's whole budget (the rule "bounded call"): no attempt, pause or retry
        # outlives it, so a frozen server costs a call at most reconnect_timeout. Which node
        # each attempt asks, how long it pauses and when it gives up are the core's rules
        # (the rule "failover"); this loop sends, waits and words the errors.
        started = _monotonic_ms()
        servers = self._servers
        if once:
            attempts = servers.call_once(
                started, int(min(_ONCE_TIMEOUT_S, self._request_timeout) * 1000)
            )
        else:
            attempts = servers.call(started, int(self.reconnect_timeout * 1000))
        request_limit_ms = int(self._request_timeout * 1000)
        failures: dict[str, str] = {}  # URL -> what failed there last, in the order tried
        while True:
            node = attempts.node
            url = self.urls[node]
            limit_ms = attempts.attempt_limit_ms(_monotonic_ms(), request_limit_ms)
            if give_up_at is not None:
                # No attempt outlives the deadline it is racing (a frozen server answers nothing).
                limit_ms = min(limit_ms, max(50, give_up_at - self._now()))
            busy: Response | None = None
            retry_after_ms: int | None = None
            outcome: _Outcome
            try:
                response = self._http[node].request(
                    method,
                    path,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=limit_ms / 1000,
                )
                if response.status_code == 429:
                    outcome = "busy"
                elif response.status_code == 503:
                    outcome = "unavailable"
                else:
                    outcome = "answered"
                if outcome != "answered":
                    # The rule "busy server": a 429 (RATE_LIMITED, TOO_MANY_WAITS) refused the
                    # request before it did anything, a 503 could not take it (no leader).
                    busy = response
                    retry_after_ms = _retry_after_ms(response)
                    failures.pop(url, None)
                    failures[url] = f"unavailable ({response.status_code}: {response.text[:200]})"
            except TransportError as e:
                refused = _refused_certificate(e)
                if refused is not None:
                    # Waiting does not fix a certificate: say so now, not after the budget.
                    raise CertificateError(
                        f"klock serve at {url}: its TLS certificate was refused "
                        f"({refused.verify_message or refused}); trust the CA that signed it "
                        "with connect(ca=PATH) or $KLOCK_CA"
                    ) from None
                outcome = "unreachable"
                failures.pop(url, None)
                failures[url] = str(e)
            except TransportClosed:  # closed meanwhile (Klock.close)
                raise Closed("this Klock is closed") from None
            what, _, pause_ms = attempts.after(servers, outcome, retry_after_ms, _monotonic_ms())
            if what == "done":
                leader = response.headers.get(_core.LEADER_HEADER)
                if leader is not None:  # a follower's answer: the next calls go to the leader
                    servers.led_by(leader, list(self.urls))
                answer = self._answer(response, session, url)
                if with_node:
                    return answer, node
                return (answer, _klock_index(response)) if with_index else answer
            if what == "gave_up_busy":
                assert busy is not None
                return self._answer(busy, session, url)  # the server's own error, named
            if what == "gave_up_unreachable":
                spent = (_monotonic_ms() - started) / 1000
                tried = "; ".join(f"{u}: {failure}" for u, failure in failures.items())
                if once:
                    raise Unreachable(f"cannot reach klock serve at {tried}")
                raise Unreachable(
                    f"cannot reach klock serve at {tried} "
                    f"(retried for {spent:.1f} s, reconnect_timeout={self.reconnect_timeout:g} s)"
                ) from None
            if give_up_at is not None and self._now() >= give_up_at:
                return None
            if pause_ms > 0:
                self._pause_between_attempts(session if ends_leases else None, pause_ms / 1000)

    def _pause_between_attempts(self, session: int | None, pause: float) -> None:
        """Waits ``pause`` seconds before a call's next attempt, first sending the heartbeats
        that fall due (the rule "retries do not starve heartbeats"): the caller holds the
        Klock's lock, which the timer sending them waits for, so without this one call retried
        for its whole budget would lose every lease the Klock holds. ``session``: the session
        whose leases the call releases, if any; its blocks wait for the call to end."""
        ends = time.monotonic() + pause
        klock = self._klock()
        if klock is not None:
            klock._heartbeat_while_retrying(session)
        time.sleep(max(0.0, ends - time.monotonic()))

    def _answer(
        self, response: Response, session: int | None = None, url: str | None = None
    ) -> Any:
        """A response as its JSON, or the error it carries (``session``: the session whose
        token the request carried, if any; ``url``: the node that answered)."""
        url = self.url if url is None else url
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.is_success:
            return data
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            raise KlockError(
                f"HTTP_{response.status_code}: klock serve at {url} answered "
                f"{response.status_code}: {response.text[:200]}"
            )
        code, name, message = (
            int(error.get("code", 0)),
            str(error.get("name")),
            str(error.get("message")),
        )
        if response.status_code == 401 and name == "SESSION_TOKEN_REFUSED" and session is not None:
            # The rule "session token refused": the session is no longer this client's
            # (another client resumed it, which issues a new token): never retried, and
            # the leases of it this client held are lost (klock.client). Its events are
            # the other client's from now on.
            self._forget_session(session)
            raise Unauthorized(
                name,
                f"klock serve at {url} refused the session token of session {session} "
                f"({response.status_code}: {message}): another client resumed the session "
                "(a resume issues a new token), so it is no longer this client's",
                session=session,
            )
        if response.status_code == 401 and name == "RESUME_SECRET_REFUSED":
            raise Unauthorized(name, f"klock serve at {url}: {message}")
        if response.status_code in (401, 403) and name in ("UNAUTHORIZED", "FORBIDDEN"):
            given = (
                "no bearer token was given"
                if self._token is None
                else "the bearer token was refused"
            )
            raise Unauthorized(
                name, f"klock serve at {url}: {given} ({response.status_code}: {message})"
            )
        raise _error(code, name, message)

    def _path(self, session: int, tail: str = "") -> str:
        return f"/v1/ns/{quote(self._ns[session], safe='')}/sessions/{session}{tail}"

    # ---- sessions -----------------------------------------------------------------------------

    def open_session(self, agent_id: str, namespace: str, now: int) -> RemoteSessionInfo:
        _check_name("agent_id", agent_id)
        _check_name("namespace", namespace)
        answer, index = self._request(
            "POST",
            f"/v1/ns/{quote(namespace, safe='')}/sessions",
            body={"agent_id": agent_id},
            now=now,
            mutating=True,
            with_index=True,
        )
        return self._opened(namespace, answer, index)

    def _opened(
        self, namespace: str, answer: dict[str, Any], index: int | None
    ) -> RemoteSessionInfo:
        """Keeps an opened or resumed session's token, and starts reading its namespace's
        events from the log entry that opened it (``index``, of the answer's ``log``) if this
        is the client's first session there; else the stream is told of the session (the
        core moves it if the session is of another log: a restarted ``--memory`` server)."""
        info = _session_info(answer)
        self._tokens[info.session_id] = answer["session_token"]
        self._resume_secrets[info.session_id] = answer.get("resume_secret", "")
        self._ns[info.session_id] = info.namespace
        log = answer.get("log")
        log = log if isinstance(log, str) else None
        self._follow(namespace, _core.Follow(index, log), index, log)
        return info

    def _follow(
        self,
        namespace: str,
        follow: _core.Follow,
        index: int | None = None,
        log: str | None = None,
    ) -> None:
        """Reads the namespace's events from where ``follow`` starts, if it does not already;
        a running stream is told of the session opened by entry ``index`` of log ``log`` (on
        its own log, a later session's events all come after its open, sent after the stream
        started)."""
        with self._follow_lock:
            if namespace in self._follows:
                if index is not None:
                    self._follows[namespace].opened(index, log)
                return
            self._follows[namespace] = follow
            if not self.manual:
                self._start_reader(namespace)

    def watch(self, namespace: str, on_event: Callable[[RemoteEvent], None]) -> Callable[[], None]:
        """Klock._watch remotely: ``on_event`` gets every event of the namespace read from now
        on, every session's (the reader's thread, or a manual-clock drain), each with its id;
        returns the function that stops it."""
        with self._state_lock:
            first = not self._watchers.get(namespace)
            self._watchers.setdefault(namespace, []).append(on_event)
        if first:
            self._poll_again(namespace)
        if namespace not in self._follows:
            # No session there, so no open to start from: the server's newest event is "now"
            # (one read without a wait), and the stream goes on from it.
            follow = _core.Follow()
            latest, node = self._request(
                "GET", _watch_path(namespace), params={"wait_ms": 0}, with_node=True
            )
            _answered(follow, node, {**latest, "gap": False})
            self._follow(namespace, follow)

        def stop() -> None:
            with self._state_lock:
                watchers = self._watchers.get(namespace, [])
                if on_event in watchers:
                    watchers.remove(on_event)

        return stop

    def _watched(self, namespace: str) -> bool:
        """Whether someone follows every event of ``namespace`` (then its polls ask for the
        holder events too)."""
        with self._state_lock:
            return bool(self._watchers.get(namespace))

    def _poll_again(self, namespace: str) -> None:
        """The namespace's reader sends its poll again at once, from the same cursor, with the
        holder events: a poll held without them would move past those that come meanwhile,
        which the new watcher must see. Its transports are replaced (closing the old ones ends
        the held poll, unanswered, so nothing it would have skipped is lost)."""
        with self._follow_lock:
            reader = self._readers.get(namespace)
            if reader is None or self._closed:
                return
            thread, old = reader
            fresh = [Transport(url, self._headers, tls=self._tls) for url in self.urls]
            self._readers[namespace] = (thread, fresh)
        for client in old:
            client.close()

    def close_session(self, session: int, now: int) -> None:
        self._request(
            "DELETE", self._path(session), session=session, now=now, mutating=True, ends_leases=True
        )
        self._forget_session(session)

    def _forget_session(self, session: int) -> None:
        self._tokens.pop(session, None)
        self._resume_secrets.pop(session, None)
        with self._state_lock:
            for lease_id in [i for i, rec in self._local.items() if rec.session == session]:
                del self._local[lease_id]
            for ticket in [t for t, (_, s) in self._tickets.items() if s == session]:
                del self._tickets[ticket]

    def suspend_session(self, session: int, now: int) -> None:
        self._request(
            "POST", self._path(session, "/suspend"), session=session, now=now, mutating=True
        )

    def digest(self, session: int, now: int) -> dict[str, Any]:
        """The server's StateDigest, with ``resume_secret`` beside its fields: a resume needs
        the secret the session's open (or last resume) answered, since the digest itself is
        public data. Keep the dict as private as the session token."""
        digest: dict[str, Any] = self._request(
            "GET", self._path(session, "/digest"), session=session, now=now
        )
        secret = self._resume_secrets.get(session)
        if secret:
            digest["resume_secret"] = secret
        return digest

    def resume_session(self, digest: dict[str, Any], now: int) -> RemoteSessionInfo:
        try:
            namespace = digest["identity"]["namespace"]
        except (TypeError, KeyError):
            raise _error(
                ERROR_CODES["INVALID_DIGEST"],
                "INVALID_DIGEST",
                "a digest is the dict Session.digest() returned "
                "({'version', 'identity': {..., 'namespace', ...}, 'recovery'})",
            ) from None
        # The resume secret travels beside the digest, not in it (digest() put it there).
        fields = {k: v for k, v in digest.items() if k != "resume_secret"}
        body: dict[str, Any] = {"digest": fields}
        secret = digest.get("resume_secret") or self._resume_secrets.get(
            digest["identity"].get("session_id", -1)
        )
        if secret:
            body["resume_secret"] = secret
        answer = self._request(
            "POST",
            f"/v1/ns/{quote(str(namespace), safe='')}/sessions/resume",
            body=body,
            now=now,
            mutating=True,
            with_index=True,
        )
        return self._opened(str(namespace), *answer)

    # ---- leases -------------------------------------------------------------------------------

    def acquire(
        self,
        session: int,
        intents: Sequence[str] | Iterable[str],
        now: int,
        *,
        ttl_ms: int | None = None,
        wait: bool = True,
        wait_timeout_ms: int | None = None,
    ) -> RemoteVerdict:
        if isinstance(intents, str):
            raise TypeError("intents must be a list of str, not a bare str")
        intents = list(intents)
        for intent in intents:
            _check_name("intent", intent)
        body: dict[str, Any] = {"intents": intents, "wait": wait}
        if ttl_ms is not None:
            body["ttl_ms"] = _check_u64("ttl_ms", ttl_ms)
        if wait_timeout_ms is not None:
            body["wait_timeout_ms"] = _check_u64("wait_timeout_ms", wait_timeout_ms)
        d = self._request(
            "POST",
            self._path(session, "/acquire"),
            session=session,
            body=body,
            now=now,
            mutating=True,
        )
        leases = [_lease(x) for x in d.get("leases") or []]
        verdict = RemoteVerdict(
            d["verdict"],
            leases,
            d.get("ticket"),
            d.get("retry_after_ms"),
            [
                _Blocker(
                    b["session_id"],
                    b.get("agent_id", ""),
                    [(i["predicate"], i["resource"]) for i in b.get("intents", [])],
                )
                for b in d.get("held_by") or []
            ],
            d.get("cycle") or [],
        )
        with self._state_lock:
            if verdict.verdict == "WAIT" and verdict.ticket is not None:
                self._tickets[verdict.ticket] = (now, session)
                if not self.manual:
                    every = max(_REFRESH_MIN_MS, (ttl_ms or _DEFAULT_TTL_MS) // 3)
                    self._refresh[verdict.ticket] = (now + every, every)
            elif verdict.verdict == "GRANTED" and not self.manual:
                for lease in leases:
                    self._local[lease.lease_id] = _Local(
                        now + lease.ttl_ms, lease.ttl_ms, session, False
                    )
        return verdict

    def heartbeat(
        self, session: int, leases: Sequence[int] | Iterable[int] | None, now: int
    ) -> list[tuple[int, str, int | None]]:
        ids = None if leases is None else list(leases)
        body = {} if ids is None else {"lease_ids": ids}
        give_up_at = None
        if not self.manual and ids:
            known = [self._local[i].deadline for i in ids if i in self._local]
            give_up_at = min(known) if known else None
        d = self._request(
            "POST",
            self._path(session, "/heartbeat"),
            session=session,
            body=body,
            now=now,
            mutating=True,
            give_up_at=give_up_at,
        )
        if d is None:  # the server stayed away until the local deadline passed
            return [(i, _core.LOST_AT_LOCAL_DEADLINE, None) for i in ids or []]
        results = [(r["lease_id"], r["status"], r.get("expires_at")) for r in d["results"]]
        if not self.manual:
            with self._state_lock:
                for lease_id, status, _ in results:
                    rec = self._local.get(lease_id)
                    if rec is None:
                        continue
                    if status == "OK":
                        rec.deadline, rec.due_now = now + rec.ttl_ms, False
                    elif status != "LIFETIME_EXCEEDED":
                        del self._local[lease_id]
        return results

    def release(self, session: int, lease: int, now: int) -> bool:
        d = self._request(
            "POST",
            self._path(session, "/release"),
            session=session,
            body={"lease_ids": [lease]},
            now=now,
            mutating=True,
            ends_leases=True,
        )
        with self._state_lock:
            self._local.pop(lease, None)
        return bool(d.get("released"))

    def release_all(self, session: int, now: int) -> int:
        d = self._request(
            "POST",
            self._path(session, "/release"),
            session=session,
            body={"all": True},
            now=now,
            mutating=True,
            ends_leases=True,
        )
        with self._state_lock:
            for lease_id in [i for i, rec in self._local.items() if rec.session == session]:
                del self._local[lease_id]
        return int(d.get("released", 0)) if not isinstance(d.get("released"), bool) else 0

    def reconcile(
        self, session: int, leases: Sequence[int] | Iterable[int], now: int
    ) -> list[tuple[int, str, int | None, int | None]]:
        d = self._request(
            "POST",
            self._path(session, "/reconcile"),
            session=session,
            body={"lease_ids": list(leases)},
            now=now,
            mutating=True,
        )
        return [
            (s["lease_id"], s["status"], s.get("expires_at"), s.get("fence")) for s in d["statuses"]
        ]

    def cancel_wait(self, session: int, ticket: int, now: int) -> None:
        self._request(
            "DELETE",
            self._path(session, f"/tickets/{ticket}"),
            session=session,
            now=now,
            mutating=True,
        )
        with self._state_lock:
            self._tickets.pop(ticket, None)

    # ---- time and events ----------------------------------------------------------------------

    def advance(self, now: int) -> None:
        """Manual clock: settle the server's time. System clock: every lease whose local
        deadline has passed is lost (a LEASE_EXPIRED of the client's own: the core names a
        loss at the local deadline as the kernel's expiry, so it is that event, routed as the
        server's would be)."""
        if self.manual:
            self._request("POST", "/v1/advance", now=now, mutating=True)
            return
        with self._state_lock:
            due = [(i, rec) for i, rec in self._local.items() if rec.deadline <= now]
            for lease_id, rec in due:
                del self._local[lease_id]
                self._events.append(
                    RemoteEvent(_core.LOST_AT_LOCAL_DEADLINE, rec.session, lease=lease_id)
                )
            for ticket in [t for t in self._refresh if t not in self._tickets]:
                del self._refresh[ticket]  # resolved or withdrawn
            refresh = [t for t, (at, _) in self._refresh.items() if at <= now]
            for ticket in refresh:
                self._refresh[ticket] = (now + self._refresh[ticket][1], self._refresh[ticket][1])
        for ticket in refresh:
            self._refresh_ticket(ticket, now)
        for lease_id, rec in due:
            # The server may still hold it (extended, or renewals lost on the way): give it
            # back, in one attempt; if the server cannot be reached it ends at its TTL there.
            try:
                self._request(
                    "POST",
                    self._path(rec.session, "/release"),
                    session=rec.session,
                    body={"lease_ids": [lease_id]},
                    now=now,
                    mutating=True,
                    once=True,
                )
            except KlockError:
                pass

    def next_deadline(self) -> int | None:
        if self.manual:
            return self._request("GET", "/v1/deadline").get("deadline")  # type: ignore[no-any-return]
        with self._state_lock:
            return min(
                [rec.deadline for rec in self._local.values()]
                + [at for at, _ in self._refresh.values()],
                default=None,
            )

    def _refresh_ticket(self, ticket: int, now: int) -> None:
        """Asks whether a long wait still waits (the rule "long waits"): a WAIT answer moves
        the ticket's send time to this request's, an outcome is noted as its event would be.
        A failure changes nothing (the next refresh asks again; a reconnect re-polls)."""
        with self._state_lock:
            known = self._tickets.get(ticket)
        if known is None:
            return
        session = known[1]
        try:
            d = self._request(
                "GET",
                self._path(session, f"/tickets/{ticket}"),
                session=session,
                params={"wait_ms": 0},
                now=now,
                once=True,
            )
        except KlockError:
            return
        if isinstance(d, dict) and "event" in d:
            self._note(_event(d))
            return
        with self._state_lock:
            if ticket in self._tickets:  # not resolved meanwhile by the event reader
                self._tickets[ticket] = (max(now, self._tickets[ticket][0]), session)

    def _heartbeat_due(self, lease_id: int) -> int:
        """A third of the way from the last renewal's send time to the local deadline; at
        once for a lease granted after a WAIT (klock.backend's ``heartbeat_due``)."""
        rec = self._local.get(lease_id)
        if rec is None or rec.due_now:
            return 0
        return rec.deadline - (2 * rec.ttl_ms) // 3

    def drain_events(self) -> list[RemoteEvent]:
        if self.manual:
            for namespace, follow in list(self._follows.items()):
                params = _after(follow, 0, self._watched(namespace))
                d, node = self._request(
                    "GET", _watch_path(namespace), params=params, with_node=True
                )
                resync = _answered(follow, node, d)
                self._take(namespace, d)
                if resync:
                    self._resync()
        out: list[RemoteEvent] = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def _take(self, namespace: str, d: dict[str, Any]) -> bool:
        """Keeps the events of this client's sessions from a watch answer (in order), and
        hands every event to the namespace's watchers; whether any was kept."""
        kept = False
        with self._state_lock:
            watchers = list(self._watchers.get(namespace, ()))
        for raw in d.get("events") or []:
            own = raw.get("session") in self._tokens
            if own or watchers:
                event = _event(raw)
                for watcher in watchers:
                    watcher(event)
                if own:
                    self._note(event)
                    kept = True
        return kept

    def _note(self, event: RemoteEvent) -> None:
        """Bookkeeping of an event before the Klock routes it: local deadlines of a grant
        after a WAIT (the acquire's send time), tickets resolved, and the local deadlines of
        the leases it ends (the core's ``ends``: expired, wounded, or every lease of a closed
        session)."""
        ended = _core.ends(event)
        with self._state_lock:
            kind = event.event
            if kind in ("GRANTED", "WAIT_TIMEOUT", "DIED") and event.ticket is not None:
                sent = self._tickets.pop(event.ticket, None)
                if kind == "GRANTED" and sent is not None and not self.manual:
                    for lease in cast("list[LeaseInfo]", event.leases or []):
                        self._local[lease.lease_id] = _Local(
                            sent[0] + lease.ttl_ms, lease.ttl_ms, event.session, True
                        )
            elif kind == "WOUNDED":
                for ticket in event.lost_tickets or []:
                    self._tickets.pop(ticket, None)
            if ended is not None:
                lease_ids, _ = ended
                if lease_ids is None:
                    lease_ids = [
                        i for i, rec in self._local.items() if rec.session == event.session
                    ]
                for lease_id in lease_ids:
                    self._local.pop(lease_id, None)
            self._events.append(event)

    # ---- the event reader (system clock) ------------------------------------------------------

    def _start_reader(self, namespace: str) -> None:
        clients = [Transport(url, self._headers, tls=self._tls) for url in self.urls]
        thread = threading.Thread(
            target=self._read,
            args=(namespace, clients),
            name=f"klock-events-{namespace}",
            daemon=True,
        )
        self._readers[namespace] = (thread, clients)
        thread.start()

    def _read(self, namespace: str, clients: list[Transport]) -> None:
        """Long-polls the namespace's events until the backend closes, each poll a call of
        the core's failover rules (so it follows the node that last answered, and moves on
        when that one fails). Where it resumes and when it may have missed events are the
        core's rules (``_core.Follow``): a call that gave up and an answer it cannot use are
        failed polls (a server back within the call's budget missed nothing, or its answer
        names another log); when an answer says events may have been missed, it re-polls the
        open tickets and has the held blocks renewed. When a poll's call gives up (the
        servers stayed away past the budget), it fails the waiting blocks (once per
        outage)."""
        path = _watch_path(namespace)
        follow = self._follows[namespace]
        failed = False
        attempts = None
        failures: dict[str, str] = {}  # URL -> what failed there last, in this outage
        while not self._closed:
            if attempts is None:
                attempts = self._servers.call(_monotonic_ms(), int(self.reconnect_timeout * 1000))
            node = attempts.node
            retry_after_ms: int | None = None
            outcome: _Outcome
            failure = ""
            try:
                response = clients[node].request(
                    "GET",
                    path,
                    params=_after(follow, _WATCH_WAIT_MS, self._watched(namespace)),
                    timeout=self._request_timeout,
                    read_timeout=_WATCH_WAIT_MS / 1000 + 10,
                )
                if response.status_code in (429, 503):
                    outcome = "busy" if response.status_code == 429 else "unavailable"
                    retry_after_ms = _retry_after_ms(response)
                    failure = f"unavailable ({response.status_code}: {response.text[:200]})"
                elif response.is_success:
                    outcome = "answered"
                else:
                    # An error answer (a refused token, say): no events from that node; it
                    # counts as a node that could not serve the poll, so a lasting one fails
                    # the waiting blocks past the budget, as a server out of reach does.
                    outcome = "unavailable"
                    try:
                        self._answer(response, url=self.urls[node])
                    except KlockError as e:
                        failure = str(e)
            except TransportClosed:
                if self._closed:
                    break
                # Its transports were replaced (``_poll_again``): the poll goes again at once,
                # on the new ones, from the same cursor; nothing failed.
                with self._follow_lock:
                    clients = self._readers[namespace][1]
                continue
            except TransportError as e:
                outcome, failure = "unreachable", str(e)
            except Exception as e:  # a bug, kept and retried
                if self._closed:
                    break
                self.reader_error = e
                time.sleep(_READER_PAUSE_S)
                continue
            if self._closed:
                break
            what, _, pause_ms = attempts.after(
                self._servers, outcome, retry_after_ms, _monotonic_ms()
            )
            if what == "done":
                attempts = None
                d = self._answer(response, url=self.urls[node])
                try:
                    resync = _answered(follow, node, d)
                except (AttributeError, ValueError) as e:
                    # An answer this client cannot read: a failed poll, asked again later.
                    follow.failed()
                    failures[self.urls[node]] = f"an unreadable event batch ({e})"
                    time.sleep(_READER_PAUSE_S)
                    continue
                if self._served(namespace, d, resync):
                    break
                failed = False
                failures.clear()
                continue
            failures.pop(self.urls[node], None)
            failures[self.urls[node]] = failure
            if what == "retry":
                time.sleep(pause_ms / 1000)
                continue
            # Gave up: the servers stayed away (or busy) past the budget.
            follow.failed()
            attempts = None
            if not failed:
                failed = True
                klock = self._klock()
                if klock is not None:
                    tried = "; ".join(f"{u}: {f}" for u, f in failures.items())
                    klock._backend_failed(
                        Unreachable(
                            f"cannot reach klock serve at {tried} (the event stream was cut "
                            f"off for more than reconnect_timeout={self.reconnect_timeout:g} s)"
                        )
                    )
            time.sleep(_READER_PAUSE_S)
        for client in clients:
            client.close()

    def _served(self, namespace: str, d: dict[str, Any], resync: bool) -> bool:
        """Hands a watch answer's events to the Klock, then resyncs if ``resync`` (the core
        said events may have been missed). Whether the Klock is gone (the reader stops)."""
        klock = self._klock()
        if klock is None:
            return True
        try:
            kept = self._take(namespace, d)
            if resync:
                kept = self._resync() or kept
            if kept:
                klock._backend_events()
        except Exception as e:  # never let the reader die: keep what happened, go on
            if not self._closed:
                self.reader_error = e
        return False

    def _resync(self) -> bool:
        """Events of this client's sessions may have been missed: re-polls the open tickets
        (their outcomes) and has every held block renewed at once (a renewal the server
        refuses marks its lease lost). Whether a ticket's outcome was kept as an event."""
        kept = self._repoll_tickets()
        klock = self._klock()
        if klock is not None:
            klock._backend_reconnected()
        return kept

    def _repoll_tickets(self) -> bool:
        """Asks the server for the outcome of every open ticket (their events may be gone).

        A ticket that ended while this client could not hear of it, and whose outcome the
        server no longer has (``TICKET_ENDED``: it left the session's event stream, for
        instance across a restart from a snapshot; ``UNKNOWN_TICKET``: forgotten), is answered
        as a wait that timed out: its block asks again, which reuses any lease the session was
        granted meanwhile (an acquire of intents a session holds reuses its leases, SPEC.md
        §6), so nothing is held twice and the block does not wait for an event that will never
        come."""
        kept = False
        with self._state_lock:
            open_tickets = list(self._tickets.items())
        for ticket, (_, session) in open_tickets:
            if session not in self._tokens:
                continue
            try:
                d = self._request(
                    "GET",
                    self._path(session, f"/tickets/{ticket}"),
                    session=session,
                    params={"wait_ms": 0},
                )
            except KlockError as e:
                if e.name in ("TICKET_ENDED", "UNKNOWN_TICKET"):
                    self._note(RemoteEvent("WAIT_TIMEOUT", session, ticket=ticket))
                    kept = True
                continue  # unreachable again: the next reconnect asks again
            if isinstance(d, dict) and "event" in d:
                self._note(_event(d))
                kept = True
        return kept

    # ---- observability ------------------------------------------------------------------------

    def resource_state(self, resource: str, namespace: str, now: int) -> dict[str, Any]:
        return self._request(  # type: ignore[no-any-return]
            "GET",
            f"/v1/ns/{quote(namespace, safe='')}/resources/state",
            params={"resource": resource},
            now=now,
        )

    def stats(self) -> dict[str, Any]:
        """The server's counters, contention and ghost agents, kernel-wide as its
        ``/v1/ns/{ns}/stats`` reports them (asked through the Klock's namespace, which the
        token must cover)."""
        klock = self._klock()
        ns = klock.namespace if klock is not None else "default"
        return self._request("GET", f"/v1/ns/{quote(ns, safe='')}/stats")  # type: ignore[no-any-return]

    def snapshot(self, now: int) -> dict[str, Any]:
        raise NotImplementedError(
            f"klock serve ({self.url}) has no snapshot route: use Klock.stats(), "
            "Klock.resource_state() or its /metrics"
        )

    def close(self) -> None:
        """Stops the event readers and closes the connections (klock.backend's hook)."""
        self._closed = True
        for _, clients in self._readers.values():
            for client in clients:
                client.close()
        for client in self._http:
            client.close()


def _error(code: int, name: str, message: str) -> KlockError:
    """The in-process error class of a server error code, with its code, name and message."""
    cls = _ERROR_CLASSES.get(code // 100, KlockError) if code else KlockError
    err = cls(f"{name}: {message}")
    err.code, err.name, err.message = code, name, message
    return err


def _watch_path(namespace: str) -> str:
    return f"/v1/ns/{quote(namespace, safe='')}/watch"


def _after(follow: _core.Follow, wait_ms: int, holder_events: bool) -> dict[str, Any]:
    """A watch poll's query: after the id ``follow`` names (none: from the oldest kept event)
    of the log it names, held up to ``wait_ms`` for an event (none right after a failed poll:
    the core's rule); without the holder events (ACQUIRED, RELEASED) unless ``holder_events``
    (only a watcher of the namespace reads them: the client learns its own grants and
    releases from their answers, and every other process's would only wake the poll)."""
    query: dict[str, Any] = {"wait_ms": follow.wait_ms(wait_ms)}
    if not holder_events:
        query["holder_events"] = "false"
    if follow.after is not None:
        query["after"] = follow.after
    if follow.log is not None:
        query["log"] = follow.log
    return query


def _answered(follow: _core.Follow, node: int, d: Any) -> bool:
    """The core's word on a watch answer ``d`` from node ``node``: whether events may have been
    missed. ``AttributeError``/``ValueError`` (moving nothing) for an answer it cannot read."""
    log = d.get("log")
    return follow.answered(
        node, str(d.get("next")), d.get("gap") is True, log if isinstance(log, str) else None
    )


def _klock_index(response: Response) -> int | None:
    """The answer's ``Klock-Index`` (the log entry of its command), ``None`` if absent or not
    a number (a server that does not say: the stream then reads from the oldest kept event)."""
    index = response.headers.get("klock-index", "")
    return int(index) if index.isdigit() else None


def _retry_after_ms(response: Response) -> int | None:
    """The server's ``Retry-After`` (delta-seconds) in milliseconds, if it sent a usable one
    (an HTTP date, or nonsense: ``None``, the core's backoff then)."""
    raw = response.headers.get("retry-after")
    try:
        asked = float(raw) if raw is not None else None
    except ValueError:
        return None
    if asked is None or asked != asked or asked < 0 or asked > 86_400:
        return None
    return max(int(asked * 1000), _PAUSE_FLOOR_MS)


def _monotonic_ms() -> int:
    """The host's monotonic clock in milliseconds, as the core's failover rules count time."""
    return time.monotonic_ns() // 1_000_000


def _check_u64(what: str, value: object) -> int:
    """As ``klock._core`` checks an integer argument, before anything is sent."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    if value > 2**64 - 1:
        raise OverflowError(f"{what} must be <= 2**64-1, got {value}")
    return value


def _check_name(what: str, value: object) -> None:
    """As ``klock._core`` checks a string argument, before anything is sent."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode (a lone surrogate): {value!r}") from None
