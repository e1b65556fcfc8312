"""The friendly client: :class:`Klock`, :class:`Session` and :class:`Lease`.

Contract
--------
* A :class:`Klock` owns one kernel (``klock._core.Kernel``, or the remote backend
  :func:`klock.connect` gives it; see the last point) and takes every time it uses
  from one clock (:mod:`klock.clock`; by default a :class:`~klock.SystemClock` of its own:
  monotonic milliseconds since the Klock was created, and a timer thread): the ``now`` of
  every kernel call, its one timer, backoff sleeps and ``timeout`` budgets. Give it a
  :class:`~klock.ManualClock` and it runs in virtual time, without sleeping. Every kernel call
  is made under one lock together with draining the kernel's events, so an event is always
  routed to whoever waits for it; then the one timer is re-armed, on the clock, for the
  earliest of the kernel's ``next_deadline()`` and the next heartbeat due. Nothing polls.
  (Remotely a call is an HTTP request made under that lock, so one Klock's calls are
  serialised as in-process; agents that need parallel throughput use a Klock each.)
* The kernel decides everything (grants, waits, deaths, expiries, timeouts, backoffs); this
  module only carries the decisions out: it blocks a waiter until its
  GRANTED/WAIT_TIMEOUT/DIED/WOUNDED event arrives, sleeps the kernel's ``retry_after_ms``
  after a DIE verdict, a DIED event or a WOUNDED event (all three count as a DIE, SPEC.md
  §8; the client never sizes a backoff itself) before retrying with the same session,
  heartbeats held leases, and releases on exit.
* Heartbeats follow the lease as the kernel last reported it (grant, re-acquire, heartbeat,
  resume): a block's next heartbeat is due when a third of a lease's current ``ttl_ms`` has
  passed since its last renewal, i.e. at ``expires_at - 2*ttl_ms/3``, so a grant the client
  hears of late (settled at an earlier instant) is renewed at once, and :attr:`Lease.leases`
  always shows the current ``expires_at`` and ``ttl_ms``.
* A DIE (or WOUNDED) is retried only while the session holds nothing else; otherwise
  :class:`Died` is raised so the caller's unit of work releases everything and starts over
  (SPEC.md §6).
* :meth:`Klock.close` (and :meth:`Session.close` for its own blocks) ends every acquisition
  in progress, waiting or backing off, with :class:`Closed`, withdrawing its ticket, and
  closes the session(s) in the kernel, which releases what they hold: a block holding one of
  those leases is lost (``LEASE_RELEASED``) and its exit raises :class:`LeaseLost`. So does
  a session closed behind the client's back (directly on the kernel): the next heartbeat
  finds it gone.
* Threads and asyncio: a :class:`Lease` is a context manager for both ``with`` (the calling
  thread blocks) and ``async with`` (the task awaits a future that the dispatcher resolves
  with ``loop.call_soon_threadsafe``; no thread is blocked per waiter).
* A lease alone is not mutual exclusion when a holder can pause past its expiry. Pass
  :attr:`Lease.fence` to the protected resource and have it reject smaller fences
  (:func:`klock.fenced_write`).
* The kernel is a *backend* (:mod:`klock.backend`): the Rust kernel in this process (the
  default), or ``klock serve`` over HTTP (:func:`klock.connect`). This layer is the same for
  both; "the kernel" above means whichever the Klock talks to.
* Which blocks hold which leases (nested blocks share one), when each block's next heartbeat
  is due and what a block releases when it ends are the core's client ledger's decisions
  (``klock._core.Ledger``, ``klock_core::client::Ledger``); an acquisition's budget and what
  follows a setback are the core's too (``klock._core.Acquisition``). This module drives
  them: under its lock, with its clock, it makes the calls and acts on the answers (its
  errors, waiters, counters and timer). In process, a block's edges reach the kernel and the
  ledger in one native call each (``Ledger.acquire_in``, ``Ledger.release_in``).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from time import monotonic_ns as _monotonic_ns
from types import TracebackType
from typing import Any, cast

from . import _core
from .backend import Backend, Event, LeaseLike, SessionInfoLike
from .clock import Clock, SystemClock, Timer
from .errors import (
    Closed,
    Died,
    KlockError,
    LeaseLost,
    Timeout,
    Unauthorized,
    UnknownId,
    Unreachable,
)

__all__ = [
    "Klock",
    "Session",
    "Lease",
    "LeaseInfo",
    "ClientCounters",
    "current_session",
    "TtlCapped",
]

U64_MAX = 2**64 - 1
_Kernel = _core.Kernel
_Verdict = _core.Verdict
# The acquisitions that do not depend on their first attempt's time (klock_core's
# Acquisition): no timeout (each wait the kernel's default), and math.inf (no limit).
_KERNEL_WAITS = _core.Acquisition.kernel_default()
_NO_LIMIT = _core.Acquisition(0, None)
# The wait every attempt of _KERNEL_WAITS asks for (the core's answer, whatever the time).
_KERNEL_WAIT_MS = _KERNEL_WAITS.wait_ms(0)
# The core's answer to a DIE to an attempt that asked for no wait depends on nothing else: a
# timeout (its reason "no wait"), which the entry raises right after the verdict.
_NO_WAIT_DIE_TIMES_OUT = _core.AFTER_NO_WAIT_DIE == "timeout_no_wait"
# The largest finite `timeout` (seconds) whose milliseconds fit the kernel's u64.
_MAX_TIMEOUT_S = U64_MAX / 1000
# Seconds whose whole milliseconds are surely within u64 (far below _MAX_TIMEOUT_S, so no
# rounding question): _check_timeout accepts them with one comparison.
_SURELY_IN_RANGE_S = 1e15
# After an unexpected error in the timer callback (a bug), try again this much later.
_TIMER_RETRY_MS = 50

_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "klock_current_session", default=None
)
# The tokens to restore `_current` with, per context (thread or task), innermost last.
_restore: contextvars.ContextVar[tuple[contextvars.Token[Session | None], ...]] = (
    contextvars.ContextVar("klock_current_session_tokens", default=())
)


def current_session() -> Session | None:
    """The session of the innermost ``with session:`` block in this thread or task."""
    return _current.get()


@dataclass
class ClientCounters:
    """What the client did on the kernel's answers (kernel-side counts are in ``Klock.stats()``)."""

    grants: int = 0
    waits: int = 0
    #: DIE verdicts and DIED events (as the kernel's ``counters.died``).
    deaths: int = 0
    #: WOUNDED events received by this Klock's sessions (as the kernel's ``counters.wounded``).
    wounds: int = 0
    retries: int = 0
    timeouts: int = 0
    lost: int = 0


class _Closed:
    """Delivered to waiters when their Klock or session closes under them."""

    event = "CLOSED"

    def __init__(self, message: str) -> None:
        self.message = message


_KLOCK_CLOSED = "this Klock is closed"
_SESSION_CLOSED = "this session is closed"
# Why the leases of a closed session are lost (always LEASE_RELEASED: closing a session
# releases what it holds, SPEC.md §5).
_LOST_TO_SESSION_CLOSE = "the session was closed while the block held the lease"
_LOST_BEFORE_RELEASE = "the lease expired before it was released (heartbeats came too late)"
_LOST_TO_KLOCK_CLOSE = "the Klock was closed while the block held the lease"
_LOST_TO_KERNEL_CLOSE = (
    "the session was closed in the kernel (not through this client) while the block held the lease"
)


class _Failed:
    """Delivered to waiters when the backend cannot resolve their tickets any more (the
    server stayed unreachable past the reconnect budget): the block raises ``error``."""

    event = "FAILED"

    def __init__(self, error: KlockError) -> None:
        self.error = error


_Delivered = Event | _Closed | _Failed


@dataclass(frozen=True)
class LeaseInfo:
    """One lease of a block as the kernel last reported it: at the grant, and again after
    every re-acquire by a nested block, heartbeat and resume (``expires_at`` and ``ttl_ms``
    move; the rest never changes). Times are the Klock's milliseconds (:meth:`Klock.now`)."""

    lease_id: int
    session_id: int
    agent_id: str
    resource: str
    predicate: str
    fence: int
    acquired_at: int
    expires_at: int
    ttl_ms: int

    @classmethod
    def of(cls, lease: LeaseLike) -> LeaseInfo:
        if type(lease) is cls:
            return lease
        return cls(
            lease.lease_id,
            lease.session_id,
            lease.agent_id,
            lease.resource,
            lease.predicate,
            lease.fence,
            lease.acquired_at,
            lease.expires_at,
            lease.ttl_ms,
        )


class _ThreadWaiter:
    """A blocked thread waiting for the event that resolves its ticket."""

    __slots__ = ("block", "event", "_flag")

    def __init__(self, block: Lease) -> None:
        self.block = block
        self.event: _Delivered | None = None
        self._flag = threading.Event()

    def resolve(self, event: _Delivered) -> None:
        self.event = event
        self._flag.set()

    def wait(self) -> _Delivered:
        self._flag.wait()
        assert self.event is not None
        return self.event


class _AsyncWaiter:
    """An asyncio task waiting for the event that resolves its ticket."""

    __slots__ = ("block", "event", "_loop", "_future")

    def __init__(self, block: Lease, loop: asyncio.AbstractEventLoop) -> None:
        self.block = block
        self.event: _Delivered | None = None
        self._loop = loop
        self._future: asyncio.Future[_Delivered] = loop.create_future()

    def resolve(self, event: _Delivered) -> None:
        self.event = event
        try:
            self._loop.call_soon_threadsafe(self._set, event)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _set(self, event: _Delivered) -> None:
        if not self._future.done():
            self._future.set_result(event)

    async def wait(self) -> _Delivered:
        return await self._future


_Waiter = _ThreadWaiter | _AsyncWaiter


@dataclass
class _Sleep:
    """An acquisition step: sleep this many milliseconds of the clock (a backoff)."""

    ms: int


@dataclass
class _Wait:
    """An acquisition step: wait for the event that resolves the waiter's ticket."""

    waiter: _Waiter


_Step = _Sleep | _Wait
# What an acquire attempt that was not granted came to: (verdict, the waiter registered for a
# WAIT's ticket or None for a DIE, the wait_timeout_ms asked for).
_Attempt = tuple[Any, "_Waiter | None", "int | None"]


class _Alarm:
    """The Klock's one timer on its clock. It holds the Klock weakly, so a Klock dropped
    without close() is still collected (a finalizer then clears the timer)."""

    __slots__ = ("_ref", "timer", "at")

    def __init__(self, klock: Klock) -> None:
        self._ref = weakref.ref(klock)
        self.timer: Timer | None = None
        #: When the timer is armed for (``None``: not armed).
        self.at: int | None = None

    def fire(self) -> None:
        klock = self._ref()
        if klock is not None:
            klock._on_timer()


def _disarm(clock: Clock, alarm: _Alarm) -> None:
    if alarm.timer is not None:
        clock.clear_timer(alarm.timer)
        alarm.timer = alarm.at = None


def _as_clock(clock: object) -> tuple[Clock, SystemClock | None]:
    """The clock to use, and the same again if the Klock made it (then it closes it)."""
    if clock is None or (callable(clock) and not hasattr(clock, "set_timer")):
        own = SystemClock(clock)
        return own, own
    if all(callable(getattr(clock, name, None)) for name in ("now", "set_timer", "clear_timer")):
        return clock, None  # type: ignore[return-value]
    raise TypeError(
        "clock must be a klock.ManualClock / klock.SystemClock (an object with now(), set_timer(at, callback) "
        f"and clear_timer(timer)) or a function returning milliseconds; got {type(clock).__name__}"
    )


@dataclass(frozen=True)
class _Watch:
    """A following of every event (:meth:`Klock._watch`): ``stop()`` ends it; ``scoped``: the
    events are only those of the namespace asked for (remotely), with their ids."""

    stop: Callable[[], None]
    scoped: bool


class Klock:
    """One kernel, its clock and its timer thread. Thread-safe; use one per process (or per
    coordination domain) and share it among threads and tasks.

    ``policy`` is ``"wait_die"`` (default), ``"wound_wait"``, ``"lanes"`` or ``"detect"``; the
    other settings are the kernel's (SPEC.md defaults when ``None``). ``clock`` is where every time
    comes from (see :mod:`klock.clock`): by default a :class:`~klock.SystemClock` the Klock
    makes and closes; a :class:`~klock.ManualClock` for tests in virtual time; or a function
    returning integer milliseconds (a :class:`~klock.SystemClock` with that ``now``).
    """

    def __init__(
        self,
        policy: str = "wait_die",
        *,
        clock: Clock | Callable[[], int] | None = None,
        seed: int | None = None,
        default_ttl_ms: int | None = None,
        max_ttl_ms: int | None = None,
        default_wait_timeout_ms: int | None = None,
        backoff_base_ms: int | None = None,
        backoff_cap_ms: int | None = None,
        grace_ms: int | None = None,
        session_idle_ms: int | None = None,
        max_leases_per_session: int | None = None,
        max_lease_lifetime_ms: int | None = None,
        _backend: Backend | None = None,
        _namespace: str = "default",
    ) -> None:
        # The backend (klock.backend): the in-process kernel unless klock.connect() gave one.
        self.kernel: Backend = (
            _backend
            if _backend is not None
            else _core.Kernel(
                policy,
                seed=seed,
                default_ttl_ms=default_ttl_ms,
                max_ttl_ms=max_ttl_ms,
                default_wait_timeout_ms=default_wait_timeout_ms,
                backoff_base_ms=backoff_base_ms,
                backoff_cap_ms=backoff_cap_ms,
                grace_ms=grace_ms,
                session_idle_ms=session_idle_ms,
                max_leases_per_session=max_leases_per_session,
                max_lease_lifetime_ms=max_lease_lifetime_ms,
            )
        )
        #: The namespace of sessions opened without one (klock.connect's ``namespace``).
        self.namespace = _namespace
        # The backend's optional hooks (klock.backend), looked up once.
        self._heartbeat_due_of: Callable[[int], int] | None = getattr(
            self.kernel, "heartbeat_due", None
        )
        self._offload_async = bool(getattr(self.kernel, "offload_async", False))
        # How many events wait to be drained, if the backend can say so cheaply (the
        # in-process kernel): a settle with none pending skips the drain.
        self._pending_events: Callable[[], int] | None = getattr(
            self.kernel, "pending_events", None
        )
        #: What the client did on the kernel's answers.
        self.counters = ClientCounters()
        self.clock, self._own_clock = _as_clock(clock)
        # The start of a SystemClock's own monotonic milliseconds (now() then reads them
        # itself, as SystemClock.now does), or None: ask the clock.
        self._system_t0: int | None = (
            self.clock._t0 if type(self.clock) is SystemClock and self.clock._now is None else None
        )
        self._last_now = 0
        # Re-entrant: a clock may run a timer callback inside a call made under this lock
        # (a ManualClock advanced by a caller holding it).
        self._lock = threading.RLock()
        self._waiters: dict[int, _Waiter] = {}
        # Acquisitions backing off after a DIE/DIED/WOUNDED: how to wake each one early.
        self._sleepers: dict[Lease, Callable[[], None]] = {}
        self._sessions: dict[int, Session] = {}
        # Who follows every event (klock.election's observers, `_watch`), called in order
        # under this lock; while none does, the in-process kernel emits no ACQUIRED/RELEASED.
        self._watchers: list[Callable[[Event], None]] = []
        self._holder_events(False)
        # Which blocks hold which leases, and when each block's next heartbeat is due: the
        # core's ledger (klock_core::client::Ledger).
        self._ledger = _core.Ledger()
        self._closed = False
        self._firing = False  # in _on_timer: it arms the timer once, at the end
        self.timer_error: BaseException | None = None
        self._alarm = _Alarm(self)
        weakref.finalize(self, _disarm, self.clock, self._alarm).atexit = False
        attach = getattr(self.kernel, "attach", None)
        if attach is not None:
            attach(self)

    # ---- clock and plumbing -------------------------------------------------------------

    def now(self) -> int:
        """The clock's time in integer milliseconds (never going back)."""
        t0 = self._system_t0
        if t0 is not None:  # a SystemClock reading the monotonic clock: an int, never back
            t = (_monotonic_ns() - t0) // 1_000_000
            if t > self._last_now:
                self._last_now = t
            return self._last_now
        t = self.clock.now()
        if type(t) is not int or t < 0:
            raise TypeError(
                f"clock.now() must return an int number of milliseconds >= 0, got {t!r}"
            )
        if t > self._last_now:
            self._last_now = t
        return self._last_now

    def _settled_locked(self) -> None:
        """After any kernel call: route its events, and re-arm the timer if it must fire sooner.

        Only the kernel's deadline needs a look here: the timer is never armed later than
        the heartbeats scheduled (``_schedule_heartbeat_locked`` and a grant arm it for each
        one, and ``_on_timer`` re-arms it for all of them when it ends)."""
        pending = self._pending_events
        if pending is None or pending():
            for event in self.kernel.drain_events():
                self._dispatch_locked(event)
        if self._closed or self._firing:
            return
        wake = self.kernel.next_deadline()
        if wake is not None:
            at = self._alarm.at
            if at is None or wake < at:
                self._arm_locked()

    def _arm_locked(self) -> None:
        """Arms the one timer for the earliest kernel deadline or heartbeat, if sooner than armed."""
        if self._closed or self._firing:
            return
        wake = self.kernel.next_deadline()
        beat = self._ledger.next_heartbeat()
        if beat is not None and (wake is None or beat < wake):
            wake = beat
        if wake is not None and (self._alarm.at is None or wake < self._alarm.at):
            self._arm_at_locked(wake)

    def _arm_at_locked(self, at: int) -> None:
        _disarm(self.clock, self._alarm)
        self._alarm.at = at
        self._alarm.timer = self.clock.set_timer(at, self._alarm.fire)

    def _on_timer(self) -> None:
        """The timer fired: settle what is due, send the heartbeats due, re-arm (once, at the end)."""
        with self._lock:
            self._alarm.timer = self._alarm.at = None
            if self._closed:
                return
            self._firing = True
            now = self._last_now
            retry_at: int | None = None
            try:
                now = self.now()
                self.kernel.advance(now)
                self._settled_locked()
                # (The ledger moves a block renewed meanwhile, by a nested block's
                # re-acquire or a heartbeat of a lease it shares, to its later time.)
                while (due := self._ledger.pop_due(now)) is not None:
                    block, ids = due
                    # One at a time (the lock), each with its send time taken as it goes: a
                    # resync's renewals of many blocks do not count from the first one's.
                    self._heartbeat_locked(block, self.now(), ids)
            except Exception as e:  # a bug: keep the timer alive, expose what happened
                self.timer_error = e
                retry_at = now + _TIMER_RETRY_MS
            finally:
                self._firing = False
            if retry_at is None:
                self._arm_locked()
            else:
                self._arm_at_locked(retry_at)

    def _heartbeat_while_retrying(self, session: int | None) -> None:
        """A backend call is pausing between two attempts (a retry): if it holds the lock, send
        the heartbeats due now, which the timer cannot while the call holds it. ``session``:
        the session whose leases the call releases (a release, a close), if any: its blocks
        are skipped (due again at once, so the timer sends them when the call ends), since a
        renewal racing the release would report lost a lease released on purpose. No other
        call ends a lease of its own session, and none ends another session's. Not
        re-entered: a heartbeat that itself retries (here or in the timer) only waits."""
        if self._firing or self._closed or not self._lock._is_owned():  # type: ignore[attr-defined]
            return
        self._firing = True  # no re-arming meanwhile, and no nesting from the beats' retries
        skipped: list[Lease] = []
        now = self._last_now
        try:
            now = self.now()
            while (due := self._ledger.pop_due(now)) is not None:
                block, ids = due
                if block.session.session_id == session:
                    skipped.append(block)
                else:
                    self._heartbeat_locked(block, self.now(), ids)
        finally:
            for block in skipped:
                self._ledger.schedule(block, now)
            self._firing = False
        self._arm_locked()

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One kernel call at the current time, with its events routed."""
        with self._lock:
            try:
                return method(*args, self.now(), **kwargs)
            finally:
                self._settled_locked()

    # ---- following every event (klock.election's observers) -------------------------------

    def _watch(self, namespace: str, on_event: Callable[[Event], None]) -> _Watch:
        """Calls ``on_event(event)`` for every later event, in order, until the returned
        watch is stopped: in-process every event of the kernel, from the client's lock (the
        caller tells namespaces apart with :meth:`_namespace_of_locked`); remotely those of
        ``namespace``, from the event reader, each with its ``id`` (the backend's ``watch``).
        It must only take note: it runs inside the client's dispatch."""
        watch = getattr(self.kernel, "watch", None)
        if watch is not None:
            return _Watch(watch(namespace, on_event), scoped=True)
        with self._lock:
            self._watchers.append(on_event)
            self._holder_events(True)

        def stop() -> None:
            with self._lock:
                if on_event in self._watchers:
                    self._watchers.remove(on_event)
                self._holder_events(bool(self._watchers))

        return _Watch(stop, scoped=False)

    def _holder_events(self, on: bool) -> None:
        """In-process: ACQUIRED and RELEASED are emitted only while someone follows them (the
        client's own routing has no use for them, and they cost every acquire and release)."""
        if isinstance(self.kernel, _core.Kernel):
            self.kernel.holder_events = on

    def _namespace_of_locked(self, session_id: int) -> str | None:
        """The namespace of an open session of the in-process kernel (``None``: not open)."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session.info.namespace
        # Another client's session of this kernel: read once per new holder by an observer.
        for info in self.kernel.snapshot(0)["sessions"]:
            if info["session_id"] == session_id:
                return str(info["namespace"])
        return None

    # ---- what a backend reports on its own (klock.backend's hooks) --------------------------

    def _backend_events(self) -> None:
        """Events arrived on the backend's own (an event stream): route them now."""
        with self._lock:
            if not self._closed:
                self._settled_locked()

    def _backend_reconnected(self) -> None:
        """The backend reached its server again after losing it: renew every held block now
        (the server kept the leases through its restart grace; a renewal it refuses marks
        the lease lost, as any heartbeat does)."""
        with self._lock:
            if self._closed:
                return
            now = self.now()
            for block in self._ledger.scheduled_blocks():
                # Due now: the ledger moves a heartbeat whose leases are not due yet to
                # their renewal time, so their renewal time is made now first.
                for lease in block._leases():
                    self._ledger.renewed(lease.lease_id, lease.expires_at, None, now)
                self._schedule_heartbeat_locked(block, now)

    def _backend_failed(self, error: KlockError) -> None:
        """The backend cannot resolve the waiting tickets any more (the server stayed
        unreachable past the reconnect budget): every waiting block raises ``error``."""
        with self._lock:
            for ticket in list(self._waiters):
                waiter = self._waiters.pop(ticket)
                waiter.resolve(_Failed(error))

    def _dispatch_locked(self, event: Event) -> None:
        for watcher in self._watchers:
            watcher(event)
        kind = event.event
        if kind == "GRANTED" or kind == "WAIT_TIMEOUT" or kind == "DIED":
            assert event.ticket is not None
            waiter = self._waiters.pop(event.ticket, None)
            if waiter is None:
                return  # a ticket made directly on .kernel: its caller drains its own events
            if kind == "GRANTED":
                assert event.leases is not None
                # GRANTED lists whole leases (only RELEASED lists ids).
                granted = cast("Sequence[LeaseLike]", event.leases)
                waiter.block._granted_locked(granted, self.now())
            elif kind == "DIED":
                self.counters.deaths += 1
            waiter.resolve(event)
        elif kind == "LEASE_EXPIRED":
            assert event.lease is not None
            self._lose_locked(
                [event.lease],
                "LEASE_EXPIRED",
                "the lease expired before the block ended (heartbeats came too late)",
            )
        elif kind == "WOUNDED":
            if event.session in self._sessions:
                self.counters.wounds += 1
            for ticket in event.lost_tickets or []:
                waiter = self._waiters.pop(ticket, None)
                if waiter is not None:
                    waiter.resolve(event)
            self._lose_locked(
                event.lost_leases or [],
                "LEASE_RELEASED",
                f"the lease was revoked (wounded) by the older session {event.by}",
            )
        elif kind == "SESSION_CLOSED":
            session = self._sessions.pop(event.session, None)
            if session is not None:
                session._closed = True

    def _session_gone_locked(self, session: Session, why: str = _LOST_TO_KERNEL_CLOSE) -> None:
        """The kernel answered UNKNOWN_SESSION for a session this client thought open: it was
        closed in the kernel behind the client's back (directly on the kernel), which
        released its leases, or for idleness, when it held none. Remotely also: the server
        refused its session token (``why`` says so)."""
        self._sessions.pop(session.session_id, None)
        session._closed = True
        self._lose_locked(
            self._ledger.session_leases(session.session_id),
            "LEASE_RELEASED",
            why,
        )

    def _lose_locked(self, lease_ids: Iterable[int], name: str, message: str) -> None:
        for block, lease_id in self._ledger.lose(list(lease_ids)):
            block._lost_locked(name, message, lease_id)

    def _schedule_heartbeat_locked(self, block: Lease, due: int) -> None:
        """The block's next heartbeat is due at ``due``: the timer is armed for ``due`` if
        it would fire later."""
        self._ledger.schedule(block, due)
        at = self._alarm.at
        if at is None or due < at:
            self._arm_locked()

    def _heartbeat_locked(self, block: Lease, now: int, ids: list[int] | None = None) -> None:
        """Renews the block's leases (``ids``: those that did not end) now; schedules its
        next heartbeat unless one has ended or reached its lifetime."""
        if ids is None:
            ids = block._lease_ids()
        try:
            results = self.kernel.heartbeat(block.session.session_id, ids, now)
        except UnknownId:  # UNKNOWN_SESSION: the only error a heartbeat call raises
            self._session_gone_locked(block.session)
            return
        except Unreachable as e:  # a remote backend's server stayed away past its budget
            self._lose_locked(ids, e.name, f"no heartbeat could renew the lease: {e.message}")
            return
        except Unauthorized as e:
            # A remote server refused the renewal (401/403): it will never renew the lease, so
            # it is lost now, not at its deadline. A refused session token means the session
            # is another client's now (resumed there): it is gone for this client.
            why = f"the server refused the heartbeat: {e.message}"
            if e.session is not None:
                self._session_gone_locked(block.session, why)
            self._lose_locked(ids, "LEASE_RELEASED", why)
            return
        finally:
            self._settled_locked()
        renewable = True
        for lease_id, status, expires_at in results:
            if status == "OK" and expires_at is not None:
                self._refresh_locked(lease_id, expires_at)
            elif status == "LIFETIME_EXCEEDED":
                renewable = False  # it stays valid until its capped expiry, then LEASE_EXPIRED
            elif status != "OK":
                self._lose_locked(
                    [lease_id],
                    status,
                    f"a heartbeat found the lease {status.lower().replace('_', ' ')}",
                )
        if block._state == "held" and block._lost is None and renewable:
            self._schedule_heartbeat_locked(block, max(now + 1, self._ledger.renew_due(block)))

    def _refresh_locked(self, lease_id: int, expires_at: int) -> None:
        """The kernel renewed a lease (heartbeat, resume): every block holding it sees it (a
        backend that measures its own deadlines says when to renew it next)."""
        due_of = self._heartbeat_due_of
        self._ledger.renewed(
            lease_id, expires_at, renew_at=None if due_of is None else due_of(lease_id)
        )

    # ---- public API ---------------------------------------------------------------------

    def session(self, agent_id: str, namespace: str | None = None) -> Session:
        """Opens a session (a context manager that closes it). The kernel assigns its priority.
        ``namespace`` defaults to the Klock's (``"default"``, or :func:`klock.connect`'s)."""
        self._check_open()
        with self._lock:
            try:
                info = self.kernel.open_session(
                    agent_id, self.namespace if namespace is None else namespace, self.now()
                )
                session = Session(self, info)
                self._sessions[info.session_id] = session
                return session
            finally:
                self._settled_locked()

    def resume(self, digest: dict[str, Any]) -> Session:
        """Re-attaches a restarted agent to its session from :meth:`Session.digest`."""
        self._check_open()
        with self._lock:
            try:
                info = self.kernel.resume_session(digest, self.now())
                session = self._sessions.get(info.session_id)
                if session is None:
                    session = Session(self, info)
                    self._sessions[info.session_id] = session
                else:
                    session.info = info
                    self._renewed_locked(session)
                return session
            finally:
                self._settled_locked()

    def lease(
        self,
        *intents: str,
        agent_id: str = "anonymous",
        namespace: str | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
        ttl_ms: int | None = None,
    ) -> OwnSessionLease:
        """A lease block with a session of its own, opened on entry and closed on exit
        (``ttl`` and ``timeout`` as for :meth:`Session.lease`)."""
        ns = self.namespace if namespace is None else namespace
        return OwnSessionLease(self, intents, agent_id, ns, _lease_ttl_ms(ttl, ttl_ms), timeout)

    def _renewed_locked(self, session: Session) -> None:
        """A resume renewed every lease of the session in the kernel (SPEC.md §5): read the
        new expiries back and follow them."""
        ids = self._ledger.session_leases(session.session_id)
        if not ids:
            return
        try:
            statuses = self.kernel.reconcile(session.session_id, ids, self.now())
        finally:
            self._settled_locked()
        for lease_id, status, expires_at, _fence in statuses:
            if status == "ACTIVE" and expires_at is not None:
                self._refresh_locked(lease_id, expires_at)
        now = self.now()
        for block in self._ledger.scheduled_blocks():
            if block.session is session:
                self._schedule_heartbeat_locked(block, max(now, self._ledger.renew_due(block)))

    def stats(self) -> dict[str, Any]:
        """The kernel's counters, top contended resources and ghost agents."""
        with self._lock:
            return self.kernel.stats()

    def snapshot(self) -> dict[str, Any]:
        """The kernel's whole state now (sessions, leases, tickets, stats)."""
        return self._call(self.kernel.snapshot)  # type: ignore[no-any-return]

    def resource_state(self, resource: str, namespace: str | None = None) -> dict[str, Any]:
        """Holders and queue of one resource node, and the holders covering it."""
        ns = self.namespace if namespace is None else namespace
        return self._call(self.kernel.resource_state, resource, ns)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Ends every acquisition in progress: each block still waiting for a grant or backing
        off raises :class:`Closed` ("this Klock is closed") promptly, its ticket withdrawn
        from the kernel, and nothing is granted to it afterwards. Then closes every session
        of this Klock in the kernel, which releases what they hold (a block still holding one
        of those leases is lost, ``LEASE_RELEASED``, and its exit raises :class:`LeaseLost`),
        and stops the timer (and the clock's thread, if the Klock made its clock). Later
        calls raise :class:`Closed`. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._withdraw_locked(list(self._waiters), _KLOCK_CLOSED)
            for wake in list(self._sleepers.values()):
                wake()
            for session in list(self._sessions.values()):
                session._end_locked(_LOST_TO_KLOCK_CLOSE)
            _disarm(self.clock, self._alarm)
        backend_close = getattr(self.kernel, "close", None)
        if backend_close is not None:
            backend_close()
        if self._own_clock is not None:
            self._own_clock.close()

    def _withdraw_locked(self, tickets: list[int], message: str) -> None:
        """Cancels these tickets in the kernel and fails their waiters with ``Closed``.

        Youngest ticket first: a ticket only ever waits for older ones, so withdrawing in this
        order never grants one of the others on the way. Should a grant still reach one of
        them, its leases are released at once: nobody is left to hold them."""
        tickets = sorted(tickets, reverse=True)
        withdrawn = set(tickets)
        now = self.now()
        for ticket in tickets:
            waiter = self._waiters.get(ticket)
            if waiter is None:
                continue
            try:
                self.kernel.cancel_wait(waiter.block.session.session_id, ticket, now)
            except KlockError:
                pass  # already resolved or gone with its session; its event follows
        for event in self.kernel.drain_events():
            if (
                event.event == "GRANTED"
                and event.ticket in withdrawn
                and event.ticket in self._waiters
            ):
                for watcher in self._watchers:  # a term all the same, for those who follow
                    watcher(event)
                for lease in cast("Sequence[LeaseLike]", event.leases or []):
                    try:
                        self.kernel.release(event.session, lease.lease_id, now)
                    except KlockError:
                        pass
                continue
            self._dispatch_locked(event)
        for ticket in tickets:
            waiter = self._waiters.pop(ticket, None)
            if waiter is not None:
                waiter.resolve(_Closed(message))
        self._settled_locked()

    def _check_open(self) -> None:
        if self._closed:
            raise Closed(_KLOCK_CLOSED)

    def __enter__(self) -> Klock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Klock:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        config = self.kernel.config
        where = (
            f"server={config['server']!r}" if "server" in config else f"policy={config['policy']!r}"
        )
        return f"Klock({where}, now={self.now()}, sessions={len(self._sessions)})"


class Session:
    """One run of one agent: owns leases and waits. The kernel assigns its priority per unit
    of work (SPEC.md §5): kept across every DIE, WOUNDED and retry of a unit, renewed
    (youngest) when a release leaves the session holding nothing after a success — so one
    long-lived session per agent is fair to the others. A context manager that closes it.
    Do not share one session among workers that must exclude each other: a session never
    conflicts with itself."""

    def __init__(self, klock: Klock, info: SessionInfoLike) -> None:
        self.klock = klock
        self.info = info
        self._id: int = info.session_id  # never changes (a resume keeps it)
        self._ledger = klock._ledger
        #: Closed in the kernel.
        self._closed = False
        #: Closed by :meth:`close` or the Klock's (``Closed``), rather than by the kernel (idle:
        #: UNKNOWN_SESSION).
        self._closed_by_user = False

    @property
    def session_id(self) -> int:
        return self.info.session_id

    @property
    def agent_id(self) -> str:
        return self.info.agent_id

    @property
    def namespace(self) -> str:
        return self.info.namespace

    @property
    def priority(self) -> int:
        """The priority the session was opened (or last resumed) with: smaller = older = wins
        conflicts (only the order is meaningful). The kernel gives the session a new one
        when it starts a new unit of work (SPEC.md §5)."""
        return self.info.priority

    @property
    def closed(self) -> bool:
        return self._closed

    def holds_leases(self) -> bool:
        """Whether a lease block of this session is holding leases now."""
        return self.klock._ledger.holds_leases(self._id)

    def lease(
        self,
        *intents: str,
        ttl: float | None = None,
        timeout: float | None = None,
        ttl_ms: int | None = None,
    ) -> Lease:
        """A block holding every intent (``"PREDICATE TYPE:/path"``) at once; use it with
        ``with`` or ``async with``.

        ``ttl`` (seconds, rounded up to whole milliseconds) is each lease's TTL; ``None``
        takes the kernel's ``default_ttl_ms``. A TTL above the kernel's cap (``max_ttl_ms``,
        5 minutes by default) is cut to it by the kernel, and the grant then warns with
        :class:`TtlCapped`. ``ttl_ms`` is the deprecated spelling in milliseconds
        (``DeprecationWarning``); giving both is a ``TypeError``.

        ``timeout`` (seconds) bounds the whole acquisition, waits and DIE/WOUNDED backoffs
        included, and raises :class:`Timeout` when it passes: ``0`` is a try-lock;
        ``math.inf`` waits with no client-side limit (one wait the kernel never times out);
        ``None`` also has no client-side limit, but each wait uses the kernel's
        ``default_wait_timeout_ms`` and the block asks again when it passes. NaN, a negative
        value or a finite value above ``(2**64-1)/1000`` seconds is a ``ValueError``."""
        if ttl is None and ttl_ms is None:  # the common case: no other call on the way
            if timeout is not None:
                timeout = _check_timeout(timeout)
            return Lease(self, self._ledger, self._id, intents, None, timeout)
        return self._lease_ms(intents, _lease_ttl_ms(ttl, ttl_ms), timeout)

    def _lease_ms(
        self, intents: tuple[str, ...], asked: int | None, timeout: float | None
    ) -> Lease:
        timeout = _check_timeout(timeout)
        if asked is None:
            return Lease(self, self._ledger, self._id, intents, None, timeout)
        lease = _TtlLease(self, self._ledger, self._id, intents, asked, timeout)
        lease._asked_ttl_ms = asked
        return lease

    def _check_open(self) -> None:
        self.klock._check_open()
        if self._closed_by_user:
            raise Closed(_SESSION_CLOSED)

    def digest(self) -> dict[str, Any]:
        """The recovery digest to save for :meth:`Klock.resume`."""
        self._check_open()
        return self.klock._call(self.klock.kernel.digest, self.session_id)  # type: ignore[no-any-return]

    def suspend(self) -> None:
        """Marks the session as restarting: its leases survive a missed heartbeat for grace_ms."""
        self._check_open()
        self.klock._call(self.klock.kernel.suspend_session, self.session_id)

    def reconcile(self, lease_ids: Iterable[int]) -> list[tuple[int, str, int | None, int | None]]:
        """The kernel's truth for each lease: ``(lease_id, status, expires_at, fence)``."""
        self._check_open()
        return self.klock._call(self.klock.kernel.reconcile, self.session_id, list(lease_ids))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Closes the session in the kernel, which releases every lease and cancels every
        wait of it: a block of it still acquiring (waiting or backing off) raises
        :class:`Closed` ("this session is closed"), and so does any later use of the session;
        a block still holding a lease is lost (``LEASE_RELEASED``) and its exit raises
        :class:`LeaseLost`. Idempotent."""
        k = self.klock
        with k._lock:
            if self._closed_by_user:
                return
            self._closed_by_user = True
            mine = [ticket for ticket, waiter in k._waiters.items() if waiter.block.session is self]
            k._withdraw_locked(mine, _SESSION_CLOSED)
            for block, wake in list(k._sleepers.items()):
                if block.session is self:
                    wake()
            self._end_locked(_LOST_TO_SESSION_CLOSE)

    def _end_locked(self, why: str) -> None:
        """Closes the session in the kernel (unless the kernel closed it already) and marks
        every block holding one of its leases lost."""
        k = self.klock
        self._closed_by_user = True
        k._sessions.pop(self.session_id, None)
        if not self._closed:
            self._closed = True
            try:
                k.kernel.close_session(self.session_id, k.now())
            except UnknownId:
                pass  # closed in the kernel already (idle, or directly on the kernel)
            except Unreachable:
                pass  # a remote backend's server is gone: its leases end at their TTL
            except Unauthorized as e:
                if e.session is None:
                    raise
                # Resumed by another client, whose session it is now: not this one's to close.
            finally:
                k._settled_locked()
        k._lose_locked(k._ledger.session_leases(self._id), "LEASE_RELEASED", why)

    def __enter__(self) -> Session:
        _restore.set(_restore.get() + (_current.set(self),))
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._pop_current()
        finally:
            self.close()

    def _pop_current(self) -> None:
        tokens = _restore.get()
        if tokens:
            _restore.set(tokens[:-1])
            _current.reset(tokens[-1])

    async def __aenter__(self) -> Session:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        if not self.klock._offload_async:
            self.__exit__(*exc)
            return
        try:
            self._pop_current()  # in the task's own context
        finally:
            # A backend whose calls may block (klock.backend): the close leaves the loop.
            await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __repr__(self) -> str:
        state = (
            "closed"
            if self._closed
            else f"{len(self.klock._ledger.session_leases(self._id))} leases"
        )
        return f"Session(session_id={self.session_id}, agent_id={self.agent_id!r}, priority={self.priority}, {state})"


class TtlCapped(UserWarning):
    """A lease was granted with a shorter TTL than asked: the kernel cut it to its cap
    (``max_ttl_ms``, 5 minutes by default; SPEC.md §6). The lease is held and heartbeats keep
    it alive; only how long it outlives a stalled holder is shorter. A warning, not an error:
    the cap is the kernel's (a server's) configuration, which the client learns from the
    grant."""


def _lease_ttl_ms(ttl: float | None, ttl_ms: int | None) -> int | None:
    """The TTL in the kernel's milliseconds from ``ttl`` (seconds) or the deprecated
    ``ttl_ms``; ``None`` for the kernel's default."""
    if ttl_ms is not None:
        if ttl is not None:
            raise TypeError("give ttl (seconds) or the deprecated ttl_ms, not both")
        warnings.warn(
            f"ttl_ms is deprecated: give ttl in seconds (ttl={ttl_ms / 1000:g} for ttl_ms={ttl_ms})",
            DeprecationWarning,
            stacklevel=3,
        )
        return ttl_ms  # checked as an integer by the native block
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"ttl must be a number of seconds, got {type(ttl).__name__}")
    # 0 is the kernel's to refuse (INVALID_TTL), as it refuses ttl_ms=0.
    if not (0 <= ttl < math.inf) or _timeout_ms(ttl) > U64_MAX:
        raise ValueError(f"ttl must be a finite number of seconds, got {ttl!r}")
    return _timeout_ms(ttl)


def _died_why(cycle: list[int], intents: object, otherwise: str) -> str:
    """Why a DIE or DIED ended an attempt, for :class:`Died`'s message: the kernel's
    ``cycle`` (``detect``: the wait-for cycle the session was the victim of, itself first,
    SPEC.md §6.1) when it names one, else ``otherwise``."""
    if not cycle:
        return otherwise
    return (
        f"died breaking a wait-for cycle with sessions {cycle[1:]} while asking for {intents} "
        f"(the cycle {cycle}: the youngest unit of work on it dies)"
    )


def _timeout_ms(timeout: float) -> int:
    """A checked finite ``timeout`` in whole milliseconds, rounded up (rounded to a nanosecond
    first, so that 0.3 s is 300 ms however the float is represented)."""
    if timeout == 0:  # a try-lock: no arithmetic on the way
        return 0
    return math.ceil(round(timeout * 1000, 6))


def _check_timeout(timeout: float | None) -> float | None:
    """``None``, ``math.inf``, or seconds in ``[0, (2**64-1)/1000]`` (the kernel counts in u64
    milliseconds)."""
    if timeout is None:
        return None
    kind = type(timeout)
    if (kind is int or kind is float) and 0 <= timeout <= _SURELY_IN_RANGE_S:
        return float(timeout)  # the common case, decided with no call (NaN and inf fail the test)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"timeout must be a number of seconds, math.inf or None, got {type(timeout).__name__}"
        )
    if timeout == math.inf:
        return math.inf
    if math.isnan(timeout) or timeout < 0 or _timeout_ms(timeout) > U64_MAX:
        raise ValueError(
            f"timeout must be a number of seconds from 0 to {_MAX_TIMEOUT_S:.0f} ((2**64-1) milliseconds), "
            f"or math.inf to wait with no limit; got {timeout!r}"
        )
    return float(timeout)


def _threadsafe_future() -> tuple[asyncio.Future[None], Callable[[], None]]:
    """A future of the running loop, and a function any thread may call to resolve it: once
    (later calls do nothing), and nothing at all once the loop is closed (nobody awaits it any
    more)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not future.done():
            future.set_result(None)

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(resolve)
        except RuntimeError:  # the loop is closed
            pass

    return future, wake


class Lease(_core.Block):
    """The leases of one manifest, held for the duration of a ``with`` / ``async with`` block.

    On entry it acquires every intent at once (all-or-nothing), blocking through WAIT until
    GRANTED and retrying after DIE or WOUNDED as the module docs describe; while held, the
    timer thread heartbeats it a third of the way through each lease's current TTL; on exit
    it is released, even when the block raises. If a lease of the block was lost meanwhile
    (expired, wounded, session closed), :meth:`check` and :meth:`heartbeat` raise
    :class:`LeaseLost`, and so does the exit of a block that raised nothing else — also
    when the exit's own release is what finds the lease expired (a process paused past the
    TTL). Nested blocks of one session may ask again for what an outer block holds: the
    kernel reuses the lease and never shortens it (a shorter ``ttl_ms`` inside keeps the
    outer TTL; a longer one lengthens it for both), and it is released when the last block
    holding it ends.

    Its values (session, intents, TTL, timeout, its leases once it ended) are kept by its
    native base (``klock._core.Block``, which the core's ledger names); everything it does is
    here.
    """

    # Made by Block.__new__(session, ledger, session_id, intents, ttl_ms, timeout), which
    # checks the intents (the caller checks the timeout: _check_timeout); _state, _ticket and
    # _lost are kept by the native block for this class.
    __slots__ = ("__weakref__",)

    # ---- what the block holds -----------------------------------------------------------

    @property
    def leases(self) -> list[LeaseInfo]:
        """The block's leases as the kernel last reported them (see :class:`LeaseInfo`)."""
        return [LeaseInfo.of(lease) for lease in self._leases()]

    @property
    def fence(self) -> int:
        """The largest fence of the block's leases: pass it to the protected resource."""
        return max(lease.fence for lease in self._leases())

    @property
    def fences(self) -> dict[str, int]:
        """Fence per canonical resource (the largest when one resource has two predicates)."""
        out: dict[str, int] = {}
        for lease in self._leases():
            out[lease.resource] = max(out.get(lease.resource, 0), lease.fence)
        return out

    @property
    def lease_ids(self) -> list[int]:
        return self._lease_ids()

    @property
    def expires_at(self) -> int:
        """The earliest expiry of the block's leases (Klock milliseconds), kept current by
        every heartbeat, re-acquire and resume."""
        return min(lease.expires_at for lease in self._leases())

    @property
    def held(self) -> bool:
        return self._state == "held" and self._lost is None

    @property
    def lost(self) -> bool:
        return self._lost is not None

    def check(self) -> None:
        """Raises :class:`LeaseLost` if a lease of the block has ended."""
        if self._lost is not None:
            name, message, ids = self._lost
            raise LeaseLost(name, message, list(ids))

    def heartbeat(self) -> None:
        """Renews every lease of the block now (the Klock's timer also does it on its own).

        Raises :class:`LeaseLost` if one has ended."""
        k = self.session.klock
        if self._state != "held":
            raise RuntimeError("heartbeat() needs a held lease block")
        with k._lock:
            if self._lost is None:
                k._heartbeat_locked(self, k.now())
        self.check()

    # ---- the edges: each attempt, a grant, the release ---------------------------------------

    def _acquisition(self, now: int) -> _core.Acquisition:
        """The block's acquisition (klock_core::client::Acquisition) from its first attempt at
        ``now``: its ``timeout`` budget, which decides the wait of every attempt and what
        follows a setback."""
        timeout = self.timeout
        if timeout is None:
            return _KERNEL_WAITS
        if timeout == math.inf:
            return _NO_LIMIT
        return _core.Acquisition(now, _timeout_ms(timeout))

    def _attempt(
        self,
        loop: asyncio.AbstractEventLoop | bool | None,
        acquisition: _core.Acquisition,
        retry: bool,
    ) -> _Attempt | None:
        """One acquire attempt under the client's lock: ``None`` once granted (recorded in the
        ledger), else what :meth:`_not_granted_locked` made of the verdict. ``loop`` is the
        event loop of an ``async with`` (``True``: the running one), ``None`` for a thread."""
        session = self.session
        k = session.klock
        with k._lock:
            try:
                if k._closed or session._closed_by_user:
                    session._check_open()
                now = k.now()
                wait_ms = acquisition.wait_ms(now)
                if retry:
                    k.counters.retries += 1
                kernel = k.kernel
                if type(kernel) is _Kernel:
                    got = k._ledger.acquire_in(kernel, self, wait_ms, now)
                    if type(got) is not _Verdict:
                        self._held_locked(got)
                        return None
                    verdict: Any = got
                else:
                    # A backend (klock.backend): the client's call, the ledger's record.
                    if wait_ms is None and self.ttl_ms is None:
                        verdict = kernel.acquire(session._id, self.intents, now)
                    else:
                        verdict = kernel.acquire(
                            session._id,
                            self.intents,
                            now,
                            ttl_ms=self.ttl_ms,
                            wait=wait_ms != 0,
                            wait_timeout_ms=wait_ms,
                        )
                    if verdict.verdict == "GRANTED":
                        self._granted_locked(verdict.leases, now)
                        return None
                return self._not_granted_locked(verdict, loop, wait_ms)
            finally:
                k._settled_locked()

    def _held_locked(self, wake: int | None) -> None:
        """The in-process kernel granted the block and the ledger recorded it (``acquire_in``):
        held; the timer is armed sooner if ``wake`` (the earliest time the grant needs it) is
        sooner, and ``None`` (events to route first) settles in full."""
        self._state = "held"
        k = self.session.klock
        k.counters.grants += 1
        if wake is None:
            k._settled_locked()
            k._arm_locked()
        else:
            at = k._alarm.at
            if at is None or wake < at:
                k._arm_locked()

    def _granted_locked(self, leases: Sequence[LeaseLike], now: int) -> None:
        """A backend granted the block ``leases`` at ``now`` (its verdict, or a GRANTED
        event): recorded in the ledger, its first heartbeat scheduled (a backend that measures
        its own deadlines says when), the timer armed if it would fire later."""
        k = self.session.klock
        due_of = k._heartbeat_due_of
        renew = None if due_of is None else [due_of(lease.lease_id) for lease in leases]
        due = k._ledger.grant(self, leases, renew, now)
        self._state = "held"
        k.counters.grants += 1
        at = k._alarm.at
        if due != U64_MAX and (at is None or due < at):
            k._arm_locked()

    def _release(self) -> None:
        """Releases what this block holds (leases shared with an outer block stay held), once;
        the block then leaves the ledger. Raises :class:`Unreachable` when a remote server
        could not be reached (the block ends all the same: its leases end at their TTL). (The
        block's exit does the same in its own frame in the common case: :meth:`__exit__`.)"""
        session = self.session
        k = session.klock
        unreachable: Unreachable | None = None
        lock = k._lock  # (the lock's own methods, not `with`: a block's exit is hot)
        lock.acquire()
        try:
            if self._state != "held":
                return
            if session._closed:
                k._ledger.finish(self)
                self._state = "done"
                return
            # Kernel calls made while the block still holds its leases in the ledger: the first
            # settles time, so a lease that expired unseen (a long callback, a paused process)
            # reaches this block as LEASE_EXPIRED, and its exit raises LeaseLost instead of
            # reporting a lost lease as fine. Only the leases no other block of the session
            # holds are released (the ledger's answer).
            kernel = k.kernel
            ended: list[int] = []
            gone = False
            try:
                now = k.now()
                if type(kernel) is _Kernel:
                    got = k._ledger.release_in(kernel, self, now)
                    if type(got) is int:  # released, nothing to route: it left the ledger
                        self._state = "done"
                        at = k._alarm.at
                        if (at is None or got < at) and got != U64_MAX:
                            k._arm_locked()
                        return
                    if got is not None:
                        ended = got
                else:
                    ids = k._ledger.releasable(self)
                    for lease_id in ids:
                        if not kernel.release(session._id, lease_id, now):
                            ended.append(lease_id)
                    if not ids:
                        kernel.advance(now)
            except UnknownId:
                gone = True
            except Unreachable as e:
                unreachable = e
            except BaseException:
                k._settled_locked()
                raise
            self._released_locked(ended, gone)
        finally:
            lock.release()
        if unreachable is not None:
            raise unreachable

    def _released_locked(self, ended: Sequence[int] | None, gone: bool) -> None:
        """The end of a release whose answer was not the quiet one: ``gone``, the session was
        found closed in the kernel; events to route; ``ended``, leases the release found
        ended already, lost (the client says why). Then the block leaves the ledger."""
        k = self.session.klock
        if gone:
            k._session_gone_locked(self.session)
        k._settled_locked()
        for lease_id in ended or ():
            self._ended_before_release_locked(lease_id)
        k._ledger.finish(self)
        self._state = "done"

    def __enter__(self) -> Lease:
        first = self._enter_in_process(None)
        if first is None:
            return self
        return self._enter_contended(*first)

    def _enter_in_process(
        self, loop: asyncio.AbstractEventLoop | bool | None
    ) -> tuple[_Attempt, _core.Acquisition] | None:
        """:meth:`_enter_first` (``None`` when granted), in one frame for the in-process kernel
        (the common case): the first attempt, and when it is granted what :meth:`_held_locked`
        does; when it is a DIE to an attempt that asked for no wait, the Timeout."""
        session = self.session
        k = session.klock
        kernel = k.kernel
        if type(kernel) is not _Kernel or self._state != "new" or k._closed:
            return self._enter_first(loop)
        refused: Timeout | None = None
        lock = k._lock
        lock.acquire()
        try:
            if session._closed_by_user:
                session._check_open()
            t0 = k._system_t0
            if t0 is None:
                now = k.now()
            else:  # Klock.now() of a SystemClock, in this frame
                now = (_monotonic_ns() - t0) // 1_000_000
                if now > k._last_now:
                    k._last_now = now
                else:
                    now = k._last_now
            timeout = self.timeout
            if timeout is None:
                acquisition, wait_ms = _KERNEL_WAITS, _KERNEL_WAIT_MS
            else:
                acquisition = self._acquisition(now)
                wait_ms = acquisition.wait_ms(now)
            got = k._ledger.acquire_in(kernel, self, wait_ms, now)
            if type(got) is not _Verdict:
                self._state = "held"
                k.counters.grants += 1
                if got is None:
                    k._settled_locked()
                    k._arm_locked()
                else:
                    at = k._alarm.at
                    if at is None or got < at:
                        k._arm_locked()
                return None
            if wait_ms == 0 and _NO_WAIT_DIE_TIMES_OUT and got.verdict == "DIE":
                # The core's answer to a DIE to an attempt that asked for no wait depends on
                # nothing else (AFTER_NO_WAIT_DIE): the Timeout is raised here, with no
                # acquisition loop on the way (the block failed: nothing to withdraw).
                k._settled_locked()
                refused = self._refused_locked(got)
            else:
                first = self._not_granted_locked(got, loop, wait_ms)
                k._settled_locked()
        except BaseException:
            self._abort()
            raise
        finally:
            lock.release()
        if refused is not None:
            try:
                raise refused
            finally:
                # The traceback holds this frame: without its reference to the error, the
                # two make no cycle for the garbage collector to find.
                del refused
        return first, acquisition

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session = self.session
        k = session.klock
        kernel = k.kernel
        t0 = k._system_t0
        if type(kernel) is not _Kernel or t0 is None or session._closed:
            self._release()  # the general way
        else:
            # The in-process kernel and a SystemClock (the common case, in this frame): what
            # _release does.
            lock = k._lock
            lock.acquire()
            try:
                if self._state == "held":
                    now = (_monotonic_ns() - t0) // 1_000_000  # Klock.now(), in this frame
                    if now > k._last_now:
                        k._last_now = now
                    else:
                        now = k._last_now
                    try:
                        got = k._ledger.release_in(kernel, self, now)
                    except UnknownId:
                        self._released_locked(None, True)
                    except BaseException:
                        k._settled_locked()
                        raise
                    else:
                        if type(got) is int:  # released, nothing to route: it left the ledger
                            self._state = "done"
                            at = k._alarm.at
                            if (at is None or got < at) and got != U64_MAX:
                                k._arm_locked()
                        else:
                            self._released_locked(got, False)
            finally:
                lock.release()
        if self._lost is not None:
            self._exit_lost(exc)

    def _refused_locked(self, verdict: Any) -> Timeout:
        """The :class:`Timeout` of a DIE ``verdict`` to an attempt that asked for no wait (the
        core's ``AFTER_NO_WAIT_DIE``), counted; the block failed."""
        k = self.session.klock
        counters = k.counters
        counters.deaths += 1
        counters.timeouts += 1
        self._state = "failed"
        held_by = [b.session_id for b in verdict.held_by]
        return Timeout(
            f"{self.intents} are held by sessions {held_by} (timeout {self.timeout} s)", held_by
        )

    # ---- kernel bookkeeping (under the Klock's lock) -------------------------------------

    def _lost_locked(self, name: str, message: str, lease_id: int) -> None:
        if self._lost is None:
            self._lost = (name, message, [lease_id])
            self.session.klock.counters.lost += 1
        else:
            self._lost[2].append(lease_id)

    def _ended_before_release_locked(self, lease_id: int) -> None:
        """The release found the lease ended already, and no event said why yet (a remote
        server's LEASE_EXPIRED may still be on its way when a paused process wakes up and
        releases): lost all the same, so the work done under it is not passed off as safe."""
        if self._lost is None or lease_id not in self._lost[2]:
            self._lost_locked("LEASE_EXPIRED", _LOST_BEFORE_RELEASE, lease_id)

    def _not_granted_locked(
        self, verdict: Any, loop: asyncio.AbstractEventLoop | bool | None, wait_ms: int | None
    ) -> _Attempt:
        """An attempt's verdict was WAIT (its waiter registered for the ticket: the event that
        resolves it is routed under the same lock, so it cannot be missed) or DIE. ``loop``
        is the event loop of an ``async with`` (``True``: the running one), ``None`` for a
        thread."""
        k = self.session.klock
        waiter: _Waiter | None = None
        if isinstance(loop, bool):  # True: the running one
            loop = asyncio.get_running_loop()
        if verdict.verdict == "WAIT":
            k.counters.waits += 1
            assert verdict.ticket is not None
            waiter = _ThreadWaiter(self) if loop is None else _AsyncWaiter(self, loop)
            self._ticket = verdict.ticket
            k._waiters[verdict.ticket] = waiter
        else:
            k.counters.deaths += 1
        return (verdict, waiter, wait_ms)

    # ---- acquisition ----------------------------------------------------------------------

    def _acquire_steps(
        self,
        loop: asyncio.AbstractEventLoop | None,
        acquisition: _core.Acquisition,
        first: _Attempt,
    ) -> Generator[_Step, Any, None]:
        """The acquisition as a generator shared by the thread and asyncio drivers, from its
        ``first`` attempt, which was not granted (the driver makes it and returns at once on
        a grant: the common case pays for no generator): it yields :class:`_Sleep` or
        :class:`_Wait` steps and receives the delivered event after a wait. Returns once the
        block holds its leases.

        Every backoff is the kernel's ``retry_after_ms`` (DIE verdict, DIED or WOUNDED event,
        SPEC.md §8); all three follow the same rules: retry in place while the session holds
        nothing else, else raise :class:`Died`. Every attempt is :meth:`_attempt`. The
        ``timeout`` budget (``acquisition``) is counted on the Klock's clock, from the first
        attempt."""
        k = self.session.klock
        verdict, waiter, wait_ms = first
        while True:
            held_by = [b.session_id for b in verdict.held_by]
            # Under ``detect``, the wait-for cycle the session died to break (SPEC.md §6.1).
            cycle: list[int] = []
            retry_after_ms = 0
            if waiter is not None:
                event = yield _Wait(waiter)
                self._ticket = None
                outcome = event.event
                if outcome == "GRANTED":
                    return
                if isinstance(event, _Closed):
                    # Whoever closed withdrew the ticket from the kernel.
                    raise Closed(
                        f"{event.message}: the block waiting for {self.intents} was abandoned"
                    )
                if isinstance(event, _Failed):
                    raise event.error
                setback = outcome
                if outcome == "WOUNDED":
                    assert event.by is not None and event.retry_after_ms is not None
                    retry_after_ms = event.retry_after_ms
                    held_by = [event.by]  # the session that took precedence
                    why = f"was wounded by the older session {event.by} while waiting for {self.intents}"
                elif outcome == "DIED":
                    assert event.retry_after_ms is not None, event
                    retry_after_ms = event.retry_after_ms
                    cycle = list(event.cycle or [])
                    why = _died_why(
                        cycle, self.intents, f"its wait for {self.intents} was withdrawn (DIED)"
                    )
                else:
                    why = f"waited {self.timeout} s for {self.intents}"
            else:
                assert verdict.retry_after_ms is not None
                setback = "DIE"
                retry_after_ms = verdict.retry_after_ms
                cycle = list(verdict.cycle)
                why = _died_why(
                    cycle,
                    self.intents,
                    f"is younger than sessions {held_by} blocking {self.intents}",
                )
            # What comes next is the core's decision (klock_core::client::Acquisition).
            what, sleep_ms = acquisition.after(
                setback,
                retry_after_ms,
                wait_ms if waiter is None else None,
                self.session.holds_leases(),
                k.now(),
            )
            if what == "died":
                raise Died(
                    f"session {self.session.session_id} must roll back: it holds other leases and {why}; "
                    "release everything, sleep retry_after_ms, and acquire all intents in one manifest",
                    retry_after_ms,
                    held_by,
                    cycle,
                )
            if what.startswith("timeout"):
                k.counters.timeouts += 1
                if what == "timeout_no_wait":
                    message = (
                        f"{self.intents} are held by sessions {held_by} (timeout {self.timeout} s)"
                    )
                elif what == "timeout_wait_ended":
                    message = f"{why}; still held by sessions {held_by}"
                else:
                    message = (
                        f"session {self.session.session_id} {why}; "
                        f"the next retry ({retry_after_ms} ms) would pass the timeout"
                    )
                raise Timeout(message, held_by)
            if what == "sleep":
                yield _Sleep(sleep_ms)
            again = self._attempt(loop, acquisition, True)
            if again is None:
                return
            verdict, waiter, wait_ms = again

    def _acquire_all_steps(
        self, loop: asyncio.AbstractEventLoop | None, acquisition: _core.Acquisition
    ) -> Generator[_Step, Any, None]:
        """The whole acquisition as steps, its first attempt included (for drivers that run
        each step in a worker thread)."""
        first = self._attempt(loop, acquisition, False)
        if first is not None:
            yield from self._acquire_steps(loop, acquisition, first)

    def _sleep_thread(self, ms: int) -> None:
        """A backoff in a thread, on the Klock's clock, cut short by Klock.close() or
        Session.close()."""
        k = self.session.klock
        flag = threading.Event()
        with k._lock:
            if k._closed or self.session._closed_by_user:
                return
            k._sleepers[self] = flag.set
            timer = k.clock.set_timer(k.now() + ms, flag.set)
        try:
            flag.wait()
        finally:
            with k._lock:
                k._sleepers.pop(self, None)
            k.clock.clear_timer(timer)

    async def _sleep_async(self, ms: int) -> None:
        """A backoff in a task, on the Klock's clock, cut short by Klock.close() or
        Session.close() (from any thread)."""
        k = self.session.klock
        woken, wake = _threadsafe_future()
        with k._lock:
            if k._closed or self.session._closed_by_user:
                return
            k._sleepers[self] = wake
            timer = k.clock.set_timer(k.now() + ms, wake)
        try:
            await woken
        finally:
            with k._lock:
                k._sleepers.pop(self, None)
            k.clock.clear_timer(timer)
            woken.cancel()

    def _abort(self) -> None:
        """The acquisition failed or was interrupted: withdraw the wait, give back any grant."""
        k = self.session.klock
        with k._lock:
            ticket, self._ticket = self._ticket, None
            if ticket is not None and k._waiters.pop(ticket, None) is not None:
                try:
                    k.kernel.cancel_wait(self.session.session_id, ticket, k.now())
                except KlockError:
                    pass  # already resolved in the kernel; its event is routed below
                finally:
                    k._settled_locked()
        if self._state == "held":
            self._release()
        self._state = "failed"

    def _exit_lost(self, exc: BaseException | None) -> None:
        """The exit of a block that lost a lease: raises :class:`LeaseLost` unless the block
        raised something else (which gets a note)."""
        if self._lost is not None:
            name, message, ids = self._lost
            if exc is None:
                raise LeaseLost(name, message, list(ids))
            if hasattr(exc, "add_note"):
                exc.add_note(f"klock: a lease of this block was lost ({name}: {message})")

    def _begin(self) -> None:
        if self._state != "new":
            raise RuntimeError("a Lease block can be entered once; call session.lease(...) again")
        self._state = "acquiring"  # (a closed Klock or session: the attempt raises Closed)

    def _enter_first(
        self, loop: asyncio.AbstractEventLoop | bool | None
    ) -> tuple[_Attempt, _core.Acquisition] | None:
        """The entry's first attempt (``loop``: ``True`` for the running event loop of an
        ``async with``, ``None`` for a thread): ``None`` when granted, else what it came to and
        the block's acquisition. A failed attempt aborts the block."""
        self._begin()
        try:
            acquisition = self._acquisition(self.session.klock.now())
            first = self._attempt(loop, acquisition, False)
        except BaseException:
            self._abort()
            raise
        return None if first is None else (first, acquisition)

    def _enter_contended(self, first: _Attempt, acquisition: _core.Acquisition) -> Lease:
        """``__enter__`` after a first attempt that was not granted: waits and backoffs in
        this thread until the block holds its leases."""
        try:
            steps = self._acquire_steps(None, acquisition, first)
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    self._sleep_thread(step.ms)
                    step = steps.send(None)
                else:
                    assert isinstance(step.waiter, _ThreadWaiter)
                    step = steps.send(step.waiter.wait())
        except StopIteration:
            return self
        except BaseException:
            self._abort()
            raise

    async def __aenter__(self) -> Lease:
        # Everything happens in the coroutine: one cancelled before it ran (a task of
        # ``block.__aenter__()`` cancelled at once) has asked for nothing.
        if self.session.klock._offload_async:  # a backend whose calls may block
            return await self._aenter_offloading()
        first = self._enter_in_process(True)
        if first is None:  # granted
            return self
        return await self._acquire_async(*first)

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]:
        """``async with``'s exit: with a backend whose calls do not block, the release is made
        at once (so it happens even if the awaitable returned is never awaited)."""
        if self.session.klock._offload_async:
            return self._aexit_offloading(exc)
        Lease.__exit__(self, exc_type, exc, tb)
        return _ready(None)

    async def _acquire_async(self, first: _Attempt, acquisition: _core.Acquisition) -> Lease:
        """``__aenter__`` after a first attempt that was not granted: waits and backoffs on
        the event loop until the block holds its leases."""
        loop = asyncio.get_running_loop()
        try:
            steps = self._acquire_steps(loop, acquisition, first)
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    await self._sleep_async(step.ms)
                    step = steps.send(None)
                else:
                    assert isinstance(step.waiter, _AsyncWaiter)
                    step = steps.send(await step.waiter.wait())
        except StopIteration:
            return self
        except BaseException:
            self._abort()
            raise

    async def _aenter_offloading(self) -> Lease:
        """``__aenter__`` for a backend whose calls may block: the first attempt too runs in
        a worker thread (the generator makes it)."""
        loop = asyncio.get_running_loop()
        self._begin()
        acquisition = self._acquisition(self.session.klock.now())
        return await self._aenter_offloaded(loop, self._acquire_all_steps(loop, acquisition))

    async def _aenter_offloaded(
        self, loop: asyncio.AbstractEventLoop, steps: Generator[_Step, Any, None]
    ) -> Lease:
        """``__aenter__`` for a backend whose calls may block (network, klock.backend): each
        step of the acquisition (its kernel calls) runs in a worker thread, so the event loop
        never blocks; waits and backoffs are awaited on the loop as usual."""
        pending: asyncio.Future[_Step | None] | None = None
        try:
            pending = loop.run_in_executor(None, _next_step, steps, None)
            step = await pending
            while step is not None:
                if isinstance(step, _Sleep):
                    await self._sleep_async(step.ms)
                    delivered: _Delivered | None = None
                else:
                    assert isinstance(step.waiter, _AsyncWaiter)
                    delivered = await step.waiter.wait()
                pending = loop.run_in_executor(None, _next_step, steps, delivered)
                step = await pending
            return self
        except BaseException:
            if pending is not None and not pending.done():
                await asyncio.wait([pending])  # the step in flight ends before the abort
            await loop.run_in_executor(None, self._abort)
            raise

    async def _aexit_offloading(self, exc: BaseException | None) -> None:
        """``__aexit__`` for a backend whose calls may block: the release leaves the loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.__exit__, None, exc, None)

    def __repr__(self) -> str:
        if self._state == "held":
            return f"Lease({self.intents}, fences={self.fences}{', LOST' if self._lost else ''})"
        return f"Lease({self.intents}, {self._state})"


class _TtlLease(Lease):
    """A :class:`Lease` given a ``ttl``: once granted it compares what the kernel granted
    with what it asked and warns with :class:`TtlCapped` when the kernel's cap cut it (the
    blocks without a ``ttl`` take the kernel's default, which its configuration caps, and
    pay nothing for the check)."""

    __slots__ = ("_asked_ttl_ms",)
    _asked_ttl_ms: int

    def __enter__(self) -> _TtlLease:
        super().__enter__()
        self._warn_if_capped()
        return self

    async def __aenter__(self) -> _TtlLease:
        await super().__aenter__()
        self._warn_if_capped()
        return self

    def _warn_if_capped(self) -> None:
        got = min(lease.ttl_ms for lease in self._leases())
        if got >= self._asked_ttl_ms:
            return
        try:
            warnings.warn(
                TtlCapped(
                    f"asked for a TTL of {self._asked_ttl_ms / 1000:g} s for {self.intents}; "
                    f"the kernel granted {got / 1000:g} s, its cap (max_ttl_ms)"
                ),
                stacklevel=3,
            )
        except BaseException as e:
            # Warnings raised as errors (-W error): the block never starts, so it holds nothing.
            self.__exit__(type(e), e, e.__traceback__)
            raise


async def _ready(value: Any) -> Any:
    """An awaitable ready at once with ``value`` (an ``async with`` edge that did not wait:
    a coroutine, which the interpreter runs on its fast path)."""
    return value


def _next_step(steps: Generator[_Step, Any, None], value: _Delivered | None) -> _Step | None:
    """The acquisition's next step, ``None`` once it holds its leases (a StopIteration
    cannot cross a future)."""
    try:
        return steps.send(value)
    except StopIteration:
        return None


class OwnSessionLease:
    """A lease block with its own session: ``with klock.lease(...)`` (see :meth:`Klock.lease`)."""

    def __init__(
        self,
        klock: Klock,
        intents: tuple[str, ...],
        agent_id: str,
        namespace: str,
        ttl_ms: int | None,
        timeout: float | None,
    ) -> None:
        self._klock = klock
        self._args = (intents, agent_id, namespace, ttl_ms, _check_timeout(timeout))
        self.session: Session | None = None
        self.lease: Lease | None = None

    def _open(self) -> Lease:
        intents, agent_id, namespace, ttl_ms, timeout = self._args
        self.session = self._klock.session(agent_id, namespace)
        self.lease = self.session._lease_ms(intents, ttl_ms, timeout)
        return self.lease

    def __enter__(self) -> Lease:
        lease = self._open()
        try:
            return lease.__enter__()
        except BaseException:
            assert self.session is not None
            self.session.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.lease is not None and self.session is not None
        try:
            self.lease.__exit__(exc_type, exc, tb)
        finally:
            self.session.close()

    async def __aenter__(self) -> Lease:
        lease = self._open()
        try:
            return await lease.__aenter__()
        except BaseException:
            assert self.session is not None
            self.session.close()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.lease is not None and self.session is not None
        try:
            await self.lease.__aexit__(exc_type, exc, tb)
        finally:
            self.session.close()
