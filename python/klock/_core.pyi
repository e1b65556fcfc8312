"""The Klock kernel (``klock-core``), 1:1: every SPEC.md operation, the drive contract, events
and errors. Translation only: the kernel decides everything.

Drive loop: call operations with your own ``now`` (u64 milliseconds, any epoch, never going
back); after every call drain :meth:`Kernel.drain_events` (or :meth:`Kernel.poll_event`
until ``None``); arm one timer for :meth:`Kernel.next_deadline` and call
:meth:`Kernel.advance` when it fires.

Arguments: integers (times, ids, TTLs) must be ``int`` (``bool``, ``float`` and ``None`` are
``TypeError``), ``>= 0`` (else ``ValueError``) and ``<= 2**64-1`` (else ``OverflowError``);
strings must be ``str`` (else ``TypeError``) and valid Unicode (lone surrogates are
``ValueError``); lists must not be a bare ``str``. Bad arguments raise before the kernel is
touched, so they never change state. Kernel errors raise a :class:`KlockError` subclass.

Thread-safe: a :class:`Kernel` may be shared by any number of threads (calls are serialised).
"""

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, Self, TypedDict, final

from typing_extensions import Unpack, disjoint_base

__all__ = [
    "Kernel",
    "Ledger",
    "Block",
    "Acquisition",
    "SessionInfo",
    "Lease",
    "Blocker",
    "Verdict",
    "Event",
    "KlockError",
    "InvalidInput",
    "UnknownId",
    "StateError",
    "QuotaExceeded",
    "parse_intent",
    "AFTER_NO_WAIT_DIE",
    "ends",
    "Servers",
    "Attempts",
    "Follow",
    "ERROR_CODES",
    "PREDICATES",
    "EVENT_KINDS",
    "CONFIG_FIELDS",
    "MAX_MANIFEST_INTENTS",
    "MAX_RESOURCE_BYTES",
    "MAX_NAME_BYTES",
    "LOST_AT_LOCAL_DEADLINE",
    "LEADER_HEADER",
    "MAX_RENEWALS_IN_FLIGHT",
    "__version__",
]

__version__: Final[str]
ERROR_CODES: Final[dict[str, int]]
"""Every stable error name and its numeric code, e.g. ``{"INVALID_RESOURCE": 100, ...}``."""
PREDICATES: Final[tuple[str, ...]]
"""The six predicates in the conflict matrix's order (the kernel's list)."""
EVENT_KINDS: Final[tuple[str, ...]]
"""Every event kind's name (the kernel's list)."""
CONFIG_FIELDS: Final[tuple[str, ...]]
"""Every configuration field: ``policy``, then the numeric ones (the kernel's list)."""
MAX_MANIFEST_INTENTS: Final[int]
MAX_RESOURCE_BYTES: Final[int]
MAX_NAME_BYTES: Final[int]
LOST_AT_LOCAL_DEADLINE: Final[Literal["LEASE_EXPIRED"]]
"""The name of a lease a remote client found lost at its local deadline (no renewal answered
before the send time of its last granting or renewing request plus its TTL): the kernel's
expiry name, in every driver (``klock_core::client::watch::LOST_AT_LOCAL_DEADLINE``)."""
LEADER_HEADER: Final[Literal["klock-leader"]]
"""The header in which a cluster node that does not lead names the node that does (its API
URL), for ``Servers.led_by`` (``klock_core::client::failover::LEADER_HEADER``)."""
MAX_RENEWALS_IN_FLIGHT: Final[int]
"""How many heartbeats one remote client has in flight at most (the core's
``klock_core::client::renewals`` rule): a renewal due while that many are out waits for one
to end."""

class KlockError(Exception):
    """Base class of every Klock error."""

    code: int
    """The stable numeric code (1xx bad input, 2xx unknown id, 3xx state, 4xx limits)."""
    name: str
    """The stable upper-case name, e.g. ``"INVALID_RESOURCE"``."""
    message: str
    """What went wrong and what to fix."""

class InvalidInput(KlockError):
    """Codes 1xx: INVALID_RESOURCE, INVALID_PREDICATE, INVALID_MANIFEST, INVALID_TTL,
    INVALID_DIGEST, INVALID_AGENT_ID, INVALID_NAMESPACE, INVALID_CONFIG."""

class UnknownId(KlockError):
    """Codes 2xx: UNKNOWN_SESSION, UNKNOWN_LEASE, UNKNOWN_TICKET."""

class StateError(KlockError):
    """Codes 3xx: NOT_OWNER, LEASE_EXPIRED, LEASE_RELEASED, HOLD_AND_WAIT, LIFETIME_EXCEEDED."""

class QuotaExceeded(KlockError):
    """Codes 4xx: QUOTA_EXCEEDED."""

def parse_intent(intent: str) -> tuple[str, str]:
    """Validates ``"PREDICATE TYPE:/path"``: ``(canonical predicate, canonical resource)``."""

@final
class Acquisition:
    """One acquisition's budget and what follows a setback (klock_core::client::Acquisition):
    ``Acquisition(now, timeout_ms)`` from its first attempt at ``now`` (``timeout_ms`` ``None``:
    no client-side limit), or :meth:`kernel_default` (each attempt waits the kernel's default
    wait, then asks again)."""

    def __new__(cls, now: int, timeout_ms: int | None) -> Acquisition: ...
    @staticmethod
    def kernel_default() -> Acquisition: ...
    @property
    def deadline(self) -> int | None:
        """The end of the budget (``None``: no client-side limit)."""
    def wait_ms(self, now: int) -> int | None:
        """The wait an attempt at ``now`` asks for (``0``: no wait; ``2**64-1``: no limit;
        ``None``: the kernel's default)."""
    def after(
        self,
        setback: str,
        retry_after_ms: int,
        asked_wait_ms: int | None,
        holds_others: bool,
        now: int,
    ) -> tuple[
        Literal[
            "ask_again",
            "sleep",
            "died",
            "timeout_no_wait",
            "timeout_wait_ended",
            "timeout_retry_too_late",
        ],
        int,
    ]:
        """What to do after a setback (``"DIE"``, ``"DIED"``, ``"WOUNDED"``,
        ``"WAIT_TIMEOUT"``): ``(what, ms)``."""

#: The answer to a DIE to an attempt that asked for no wait (it depends on nothing else).
AFTER_NO_WAIT_DIE: Final[str]

def ends(
    event: object,
) -> tuple[list[int] | None, Literal["LEASE_EXPIRED", "WOUNDED", "SESSION_CLOSED"]] | None:
    """Which of its session's leases ``event`` ends (``klock_core::client::watch::ends``), for
    an :class:`Event` or any object with the server's field names (``event``, ``lease``,
    ``lost_leases``): ``None`` when it ends none, else ``(lease_ids, name)``, ``lease_ids``
    ``None`` when every lease of the session ends (it was closed), ``name`` the kernel's. A
    field of the wrong type is a ``TypeError`` naming it."""

@final
class Servers:
    """A remote client's servers, by position in its list of URLs, and the node it prefers:
    the last that answered, or the leader an answer named (``klock_core::client::failover``).
    ``ValueError`` for none."""

    def __new__(cls, count: int) -> Self: ...
    @property
    def count(self) -> int:
        """How many servers."""
    @property
    def preferred(self) -> int:
        """The node a call starts with: the last that answered."""
    def led_by(self, leader: str, urls: list[str]) -> int | None:
        """An answer named ``leader`` (its ``Klock-Leader``) as the cluster's leader: the node
        among ``urls`` (the client's, in order) that it names is preferred from now on and
        returned; ``None`` when it names none of them."""
    def call(self, now_ms: int, budget_ms: int) -> Attempts:
        """A call started at ``now_ms`` (monotonic milliseconds) with ``budget_ms``."""
    def call_once(self, now_ms: int, budget_ms: int) -> Attempts:
        """A best-effort call: every node once, without pauses, within ``budget_ms``."""

@final
class Attempts:
    """One call's attempts over the servers (``klock_core::client::failover::Attempts``)."""

    @property
    def node(self) -> int:
        """The node the next attempt goes to."""
    @property
    def ends_ms(self) -> int:
        """When the budget ends, on the client's clock."""
    def attempt_limit_ms(self, now_ms: int, request_limit_ms: int) -> int:
        """How long the attempt sent at ``now_ms`` may take."""
    def after(
        self,
        servers: Servers,
        outcome: Literal["answered", "unreachable", "unavailable", "busy"],
        retry_after_ms: int | None,
        now_ms: int,
    ) -> tuple[Literal["done", "retry", "gave_up_unreachable", "gave_up_busy"], int, int]:
        """What to do after the attempt to :attr:`node` ended with ``outcome`` (``unavailable``:
        a 503, ``busy``: a 429, with its ``Retry-After`` in ms): ``(what, node, ms)``; ``retry``
        asks ``node`` after ``ms``."""

@final
class Follow:
    """Where a remote client's watch of one namespace resumes, and whether it may have missed
    events (``klock_core::client::watch::Follow``). ``Follow(entry, log)`` reads from log
    entry ``entry`` (an open's ``Klock-Index``) of log ``log`` (its answer's ``log``) on,
    ``Follow()`` from the oldest kept event."""

    def __new__(cls, entry: int | None = None, log: str | None = None) -> Self: ...
    @property
    def after(self) -> str | None:
        """The event id to ask after (``None``: from the oldest kept event)."""
    @property
    def log(self) -> str | None:
        """The log the cursor is of (the query's ``log=``); ``None``: not known yet."""
    def opened(self, entry: int, log: str | None = None) -> None:
        """A session of the stream was opened (or resumed) by log entry ``entry`` of log
        ``log``: on another log than the stream's, the stream moves to read it from there."""
    def wait_ms(self, long: int) -> int:
        """How long the next poll asks the server to wait for an event: ``long``, or 0 right
        after a failed poll (its answer is the resync's)."""
    def failed(self) -> None:
        """A poll gave up: the next answer may follow missed events."""
    def answered(self, node: int, next: str, gap: bool, log: str | None = None) -> bool:
        """A poll answered by ``node`` with ``next``, ``gap`` and ``log``: whether events may
        have been missed (renew every held lease now). ``ValueError`` if ``next`` is not an
        event id."""

_Predicate = Literal["PROVIDES", "CONSUMES", "MUTATES", "DELETES", "DEPENDS_ON", "RENAMES"]
_EventName = Literal[
    "GRANTED",
    "WAIT_TIMEOUT",
    "DIED",
    "LEASE_EXPIRED",
    "WOUNDED",
    "SESSION_CLOSED",
    "ACQUIRED",
    "RELEASED",
]
_HeartbeatStatus = Literal[
    "OK", "LEASE_EXPIRED", "LEASE_RELEASED", "NOT_OWNER", "UNKNOWN_LEASE", "LIFETIME_EXCEEDED"
]
_LeaseStatusName = Literal["ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN"]

class _Config(TypedDict, total=False):
    """The numeric settings :class:`Kernel` takes by name (``None`` = SPEC.md's default)."""

    seed: int | None
    default_ttl_ms: int | None
    max_ttl_ms: int | None
    default_wait_timeout_ms: int | None
    backoff_base_ms: int | None
    backoff_cap_ms: int | None
    grace_ms: int | None
    session_idle_ms: int | None
    max_leases_per_session: int | None
    max_lease_lifetime_ms: int | None

@final
class SessionInfo:
    """A session as opened or resumed."""

    @property
    def session_id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def priority(self) -> int:
        """Smaller = older = higher priority; only the order is meaningful."""
    @property
    def epoch(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Lease:
    """A granted lease. ``fence`` strictly increases with every grant of the kernel: the
    protected resource must reject writes carrying a smaller fence than it has seen."""

    @property
    def lease_id(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def resource(self) -> str:
        """Canonical ``TYPE:/path``."""
    @property
    def predicate(self) -> _Predicate: ...
    @property
    def fence(self) -> int: ...
    @property
    def acquired_at(self) -> int: ...
    @property
    def expires_at(self) -> int:
        """Effective expiry (suspension grace included)."""
    @property
    def ttl_ms(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class Blocker:
    """A session that blocks a request, with its conflicting intents."""

    @property
    def session_id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def intents(self) -> list[tuple[_Predicate, str]]:
        """``(predicate, resource)`` pairs, held or queued ahead."""

@final
class Verdict:
    """The immediate answer to :meth:`Kernel.acquire`."""

    @property
    def verdict(self) -> Literal["GRANTED", "WAIT", "DIE"]: ...
    @property
    def leases(self) -> list[Lease]:
        """GRANTED: one lease per distinct intent, in order of first appearance; else empty."""
    @property
    def ticket(self) -> int | None:
        """WAIT: the ticket a later GRANTED/WAIT_TIMEOUT/DIED/WOUNDED event resolves."""
    @property
    def retry_after_ms(self) -> int | None:
        """DIE: sleep at least this long before retrying (with the same session)."""
    @property
    def held_by(self) -> list[Blocker]:
        """WAIT and DIE: the blocking sessions; empty when GRANTED."""
    @property
    def cycle(self) -> list[int]:
        """DIE under ``detect``: the session ids of the wait-for cycle this request was the
        victim of, this session first (SPEC.md §6.1); else empty."""

@final
class Event:
    """Something that happened other than as a direct answer (SPEC.md §9).

    ============== ==========================================================
    ``event``      fields set (the others are ``None``)
    ============== ==========================================================
    GRANTED        ``session``, ``ticket``, ``leases``
    ACQUIRED       ``session``, ``leases`` (an acquire granted at once: the verdict's)
    RELEASED       ``session``, ``leases`` (lease ids, ascending: what a ``release``,
                   ``release_all`` or ``close_session`` ended)
    WAIT_TIMEOUT   ``session``, ``ticket``
    DIED           ``session``, ``ticket``, ``retry_after_ms``, ``cycle`` (empty unless
                   the victim of a wait-for cycle under ``detect``)
    LEASE_EXPIRED  ``session``, ``lease``
    WOUNDED        ``session``, ``by``, ``lost_leases``, ``lost_tickets``, ``retry_after_ms``
    SESSION_CLOSED ``session``, ``reason`` (``"IDLE"``)
    ============== ==========================================================
    """

    @property
    def event(self) -> _EventName: ...
    @property
    def session(self) -> int: ...
    @property
    def ticket(self) -> int | None: ...
    @property
    def leases(self) -> list[Lease] | list[int] | None:
        """GRANTED and ACQUIRED: the leases; RELEASED: the released leases' ids."""
    @property
    def retry_after_ms(self) -> int | None:
        """DIED and WOUNDED: sleep at least this long before retrying (both count as a DIE)."""
    @property
    def lease(self) -> int | None: ...
    @property
    def by(self) -> int | None: ...
    @property
    def lost_leases(self) -> list[int] | None: ...
    @property
    def lost_tickets(self) -> list[int] | None: ...
    @property
    def cycle(self) -> list[int] | None:
        """DIED: the session ids of the wait-for cycle it was the victim of under ``detect``,
        this session first (SPEC.md §6.1); empty for another reason."""
    @property
    def reason(self) -> Literal["IDLE"] | None: ...

@final
class Kernel:
    """The coordination kernel (SPEC.md). Every state-changing call takes ``now`` last.

    ``policy`` is ``"wait_die"`` (default), ``"wound_wait"``, ``"lanes"`` or ``"detect"``; the
    numeric settings are named as in :data:`CONFIG_FIELDS`, and each takes SPEC.md's default when not
    given or ``None``. An unknown setting or an unusable configuration raises
    :class:`InvalidInput` (INVALID_CONFIG).
    """

    def __new__(cls, policy: str | None = None, **config: Unpack[_Config]) -> Kernel: ...
    @property
    def config(self) -> dict[str, Any]:
        """Every field of :data:`CONFIG_FIELDS`: ``policy`` (str) and the numeric settings."""
    def clone(self) -> Kernel:
        """An independent kernel in the same state."""
    def now(self) -> int:
        """The largest ``now`` the kernel has seen."""
    def open_session(self, agent_id: str, namespace: str, now: int) -> SessionInfo:
        """INVALID_AGENT_ID / INVALID_NAMESPACE unless 1..=256 bytes without control characters."""
    def close_session(self, session: int, now: int) -> None:
        """Releases every lease and cancels every wait (emits the grants this unblocks)."""
    def suspend_session(self, session: int, now: int) -> None:
        """Keeps the session's leases past a missed heartbeat for ``grace_ms``."""
    def digest(self, session: int, now: int) -> dict[str, Any]:
        """``{"version", "identity": {"agent_id", "namespace", "session_id",
        "priority_timestamp", "epoch"}, "recovery": {"last_phase", "pending_intents"}}``."""
    def resume_session(self, digest: dict[str, Any], now: int) -> SessionInfo:
        """Re-attaches to the session of a digest from :meth:`digest` (same priority, epoch+1).

        A digest of the wrong shape raises ``TypeError``/``ValueError``; one that does not
        match the kernel's record INVALID_DIGEST."""
    def acquire(
        self,
        session: int,
        intents: Sequence[str] | Iterable[str],
        now: int,
        *,
        ttl_ms: int | None = None,
        wait: bool = True,
        wait_timeout_ms: int | None = None,
    ) -> Verdict:
        """Asks for every intent (``"PREDICATE TYPE:/path"``) at once, all-or-nothing."""
    def heartbeat(
        self, session: int, leases: Sequence[int] | Iterable[int] | None, now: int
    ) -> list[tuple[int, _HeartbeatStatus, int | None]]:
        """Renews leases (``None`` = all of the session's): ``(lease_id, status, expires_at)``
        per lease, ``expires_at`` set when status is ``"OK"``."""
    def release(self, session: int, lease: int, now: int) -> bool:
        """``True`` if this call released the lease, ``False`` if it had already ended."""
    def release_all(self, session: int, now: int) -> int:
        """Releases every active lease of the session; returns how many."""
    def reconcile(
        self, session: int, leases: Sequence[int] | Iterable[int], now: int
    ) -> list[tuple[int, _LeaseStatusName, int | None, int | None]]:
        """``(lease_id, status, expires_at, fence)`` per lease; the last two are set when ACTIVE."""
    def cancel_wait(self, session: int, ticket: int, now: int) -> None:
        """Withdraws a waiting ticket (NOT_OWNER, UNKNOWN_TICKET)."""
    def advance(self, now: int) -> None:
        """Settles everything due at or before ``now``; calling early is harmless."""
    def next_deadline(self) -> int | None:
        """The earliest pending deadline (possibly already past), or ``None``."""
    def poll_event(self) -> Event | None:
        """The next queued event, oldest first."""
    def drain_events(self) -> list[Event]:
        """Every queued event, oldest first."""
    def pending_events(self) -> int: ...
    @property
    def holder_events(self) -> bool:
        """Whether ACQUIRED and RELEASED are emitted (default ``True``, SPEC.md §9); a host
        that reads them nowhere may turn them off."""
    @holder_events.setter
    def holder_events(self, on: bool) -> None: ...
    def resource_state(self, resource: str, namespace: str, now: int) -> dict[str, Any]:
        """``{"resource", "namespace", "holders": [...], "waiting": [...], "covering": [...]}``."""
    def stats(self) -> dict[str, Any]:
        """``{"counters": {...}, "active_sessions", "active_leases", "waiting_tickets",
        "top_contended": [...], "ghost_agents": [...]}``."""
    def snapshot(self, now: int) -> dict[str, Any]:
        """``{"now", "policy", "next_deadline", "sessions", "leases", "tickets", "stats"}``, in
        the kernel's serde shape (the canonical JSON of the conformance scripts and the
        server), like the other dicts of this class."""

@final
class Ledger:
    """The core's ledger of one Klock's lease blocks (klock_core::client::Ledger): which blocks
    hold which leases, what a block's end releases, and when each block's next heartbeat is
    due. Translation only: the client calls it under its lock, with its clock's ``now``."""

    def __new__(cls) -> Ledger: ...
    def grant(self, block: Block, leases: Iterable[Any], renew: list[int] | None, now: int) -> int:
        """Records a grant; the block's first heartbeat time (``2**64-1``: never)."""
    def acquire_in(
        self, kernel: Kernel, block: Block, wait_ms: int | None, now: int
    ) -> Verdict | int | None:
        """The in-process kernel's acquire for the block, recorded when granted: the verdict
        when not granted; else the earliest time the timer is wanted for (``None``: events to
        route)."""
    def releasable(self, block: Block) -> list[int]: ...
    def release_in(self, kernel: Kernel, block: Block, now: int) -> int | list[int] | None:
        """The in-process kernel's release of what the block's end releases: the kernel's next
        deadline once the block left the ledger (nothing to route); ``None``: events to route;
        a list: the lease ids found ended already (the block is still held)."""
    def finish(self, block: Block) -> None: ...
    def is_held(self, block: Block) -> bool: ...
    def lose(self, lease_ids: list[int]) -> list[tuple[Any, int]]:
        """The leases ended: ``(block, lease_id)`` for every held block holding one."""
    def session_leases(self, session: int) -> list[int]: ...
    def holds_leases(self, session: int) -> bool: ...
    def renewed(
        self,
        lease_id: int,
        expires_at: int,
        ttl_ms: int | None = None,
        renew_at: int | None = None,
    ) -> None: ...
    def pop_due(self, now: int) -> tuple[Any, list[int]] | None:
        """The next block whose heartbeat is due: ``(block, lease_ids)``."""
    def schedule(self, block: Block, at: int) -> None: ...
    def renew_due(self, block: Block) -> int: ...
    def scheduled_blocks(self) -> list[Any]: ...
    def next_heartbeat(self) -> int | None: ...

@disjoint_base
class Block:
    """The native base of ``klock.Lease``: a block's values (its session, intents, TTL,
    timeout, its id in the ledger, its leases once it ended) and the storage of the client's
    ``_state``, ``_ticket`` and ``_lost``."""

    def __new__(
        cls,
        session: Any,
        ledger: Ledger,
        session_id: int,
        intents: tuple[str, ...],
        ttl_ms: int | None,
        timeout: float | None,
    ) -> Block: ...
    @property
    def session(self) -> Any: ...
    @property
    def intents(self) -> list[str]: ...
    @property
    def ttl_ms(self) -> int | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def _state(self) -> str: ...
    @_state.setter
    def _state(self, name: str) -> None: ...
    @property
    def _lost(self) -> tuple[str, str, list[int]] | None: ...
    @_lost.setter
    def _lost(self, lost: tuple[str, str, list[int]] | None) -> None: ...
    @property
    def _ticket(self) -> int | None: ...
    @_ticket.setter
    def _ticket(self, ticket: int | None) -> None: ...
    def _leases(self) -> list[Lease]: ...
    def _lease_ids(self) -> list[int]: ...
