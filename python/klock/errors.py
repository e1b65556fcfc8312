"""Every error the klock package raises.

Kernel errors come from ``klock._core`` as one class per code family, all subclasses of
:class:`KlockError` with ``.code`` (the stable number), ``.name`` (the stable upper-case name)
and ``.message``:

========================  =====  ===========================================================
class                     codes  names
========================  =====  ===========================================================
:class:`InvalidInput`     1xx    INVALID_RESOURCE, INVALID_PREDICATE, INVALID_MANIFEST, ...
:class:`UnknownId`        2xx    UNKNOWN_SESSION, UNKNOWN_LEASE, UNKNOWN_TICKET
:class:`StateError`       3xx    NOT_OWNER, LEASE_EXPIRED, LEASE_RELEASED, HOLD_AND_WAIT, ...
:class:`QuotaExceeded`    4xx    QUOTA_EXCEEDED
========================  =====  ===========================================================

The friendly client adds conditions of its own, also :class:`KlockError`\\ s:

* :class:`LeaseLost` (a :class:`StateError`): a held lease ended while its block ran;
  ``.name`` says how, as the kernel would: ``LEASE_EXPIRED`` (heartbeats came too late, or a
  lifetime cap was reached), ``LEASE_RELEASED`` (taken away: wounded by an older session, or
  released because its session was closed, by ``Session.close()``, ``Klock.close()`` or
  directly in the kernel, or, remotely, taken over by another client's resume or refused by
  the server; the message says which).
* :class:`Died`: the kernel answered DIE while the session holds other leases, so retrying
  in place could keep Wait-Die from making progress (SPEC.md §6 rule 3): release everything
  and start the unit of work again, after ``retry_after_ms``. ``.code`` is 0, ``.name`` "DIE".
  Under ``detect`` (SPEC.md §6.1) ``.cycle`` names the wait-for cycle it died to break (session
  ids, this session first; the message says "died breaking a wait-for cycle with ..."); empty
  for any other death.
* :class:`Timeout`: the lease could not be had within ``timeout``. ``.code`` is 0,
  ``.name`` "TIMEOUT".
* :class:`Closed`: the :class:`~klock.Klock` or the session was closed (by ``close()``)
  before or while the call ran; the message says which ("this Klock is closed" or "this
  session is closed"). An acquisition in progress (waiting or backing off) ends with it and
  withdraws its ticket. ``.code`` is 0, ``.name`` "CLOSED".

The remote client (:func:`klock.connect`) adds three more, ``.code`` 0:

* :class:`Unreachable` (``.name`` "UNREACHABLE"): ``klock serve`` could not be reached (refused,
  reset, timed out) within the reconnect budget; the message names the URL and what failed.
* :class:`Unauthorized` (``.name`` "UNAUTHORIZED" or "FORBIDDEN"): the server refused the
  bearer token (HTTP 401/403); the message names the URL. Never retried. ``.name``
  "RESUME_SECRET_REFUSED": a resume without the session's current resume secret (401). With
  ``.name`` "SESSION_TOKEN_REFUSED" and ``.session``
  set (else ``None``): the server refused that session's token (401), because another client
  resumed the session (a resume issues a new token); a block holding one of its leases is
  lost (``LEASE_RELEASED``) at once, and the session is closed for this client.
* :class:`CertificateError` (``.name`` "CERTIFICATE"): the server's TLS certificate was
  refused; raised at once, never retried as if the server were unreachable.

Every other error answer of the server (``{"error": {code, name, message}}``) becomes the
class of its code, as in-process: 1xx :class:`InvalidInput`, 2xx :class:`UnknownId`, 3xx
:class:`StateError`, 4xx :class:`QuotaExceeded`; protocol errors of the server itself (code 0:
BAD_REQUEST, RATE_LIMITED, ...) a plain :class:`KlockError` with its name. A 429
(``RATE_LIMITED``, ``TOO_MANY_WAITS``) is raised only once the request, asked again after the
server's ``Retry-After`` (else with backoff), is still refused when the reconnect budget ends.

Wrong Python types raise ``TypeError``; out-of-range numbers ``ValueError`` (negative) or
``OverflowError`` (above 2**64-1); text that is not valid Unicode ``ValueError``. The client's
``timeout`` (seconds) is checked by the client: NaN, negative, or finite but above
(2**64-1)/1000 seconds is a ``ValueError`` naming ``timeout``.
"""

from __future__ import annotations

from ._core import ERROR_CODES, InvalidInput, KlockError, QuotaExceeded, StateError, UnknownId

__all__ = [
    "KlockError",
    "InvalidInput",
    "UnknownId",
    "StateError",
    "QuotaExceeded",
    "LeaseLost",
    "Died",
    "Timeout",
    "Closed",
    "Unreachable",
    "Unauthorized",
    "CertificateError",
    "ERROR_CODES",
]


class LeaseLost(StateError):
    """A lease of the block ended before the block did: ``LEASE_EXPIRED`` or
    ``LEASE_RELEASED`` (wounded, or its session closed)."""

    code: int
    name: str
    message: str
    lease_ids: list[int]

    def __init__(self, name: str, message: str, lease_ids: list[int]) -> None:
        super().__init__(f"{name}: {message}")
        self.code = ERROR_CODES.get(name, 0)
        self.name = name
        self.message = message
        self.lease_ids = lease_ids


class Died(KlockError):
    """DIE while the session holds other leases: roll back and retry after ``retry_after_ms``.
    ``cycle``: under ``detect``, the session ids of the wait-for cycle this session died to
    break, itself first and following the edges, as the kernel named it (SPEC.md §6.1); empty
    for any other death."""

    code: int
    name: str
    message: str
    retry_after_ms: int
    held_by: list[int]
    cycle: list[int]

    def __init__(
        self,
        message: str,
        retry_after_ms: int,
        held_by: list[int],
        cycle: list[int] | None = None,
    ) -> None:
        super().__init__(f"DIE: {message}")
        self.code = 0
        self.name = "DIE"
        self.message = message
        self.retry_after_ms = retry_after_ms
        self.held_by = held_by
        self.cycle = [] if cycle is None else cycle


class Timeout(KlockError):
    """The manifest could not be acquired within the caller's ``timeout``."""

    # Class attributes, and ``args`` set directly (what ``Exception.__init__`` would do):
    # a refused try-lock (``timeout=0``) makes one, and its cost counts (issue 27).
    code: int = 0
    name: str = "TIMEOUT"
    message: str
    held_by: list[int]

    def __init__(self, message: str, held_by: list[int]) -> None:
        self.args = (f"TIMEOUT: {message}",)
        self.message = message
        self.held_by = held_by


class Closed(KlockError):
    """The Klock or the session was closed: ``.message`` is "this Klock is closed" or "this
    session is closed" (what the call needed), possibly followed by what was abandoned."""

    code: int
    name: str
    message: str

    def __init__(self, message: str) -> None:
        super().__init__(f"CLOSED: {message}")
        self.code = 0
        self.name = "CLOSED"
        self.message = message


class Unreachable(KlockError):
    """``klock serve`` could not be reached within the reconnect budget (remote client)."""

    code: int
    name: str
    message: str

    def __init__(self, message: str) -> None:
        super().__init__(f"UNREACHABLE: {message}")
        self.code = 0
        self.name = "UNREACHABLE"
        self.message = message


class Unauthorized(KlockError):
    """The server refused the bearer token: 401 (``UNAUTHORIZED``) or 403 (``FORBIDDEN``); or
    the session token of session ``.session`` (401 ``SESSION_TOKEN_REFUSED``: another client
    resumed the session); or a resume's secret (401 ``RESUME_SECRET_REFUSED``)."""

    code: int
    name: str
    message: str
    session: int | None

    def __init__(self, name: str, message: str, *, session: int | None = None) -> None:
        super().__init__(f"{name}: {message}")
        self.code = 0
        self.name = name
        self.message = message
        self.session = session


class CertificateError(KlockError):
    """The server's TLS certificate was refused (remote client): not signed by a trusted CA
    (``connect(ca=PATH)`` names the bundle to trust), expired, or issued for another host.
    ``.name`` is "CERTIFICATE". Raised at once, never retried: waiting does not fix a
    certificate, and retrying would spend the whole reconnect budget before saying why."""

    code: int
    name: str
    message: str

    def __init__(self, message: str) -> None:
        super().__init__(f"CERTIFICATE: {message}")
        self.code = 0
        self.name = "CERTIFICATE"
        self.message = message
