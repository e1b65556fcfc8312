"""The friendly client: :class:`Klock`, :class:`Session` and :class:`Lease`.

Contract
--------
* A :class:`Klock` owns one kernel (``klock._core.Kernel``), a monotonic clock in
  milliseconds since the Klock was created (``time.monotonic_ns() // 1_000_000``, relative),
  and one timer thread. Every kernel call is made under one lock together with draining the
  kernel's events, so an event is always routed to whoever waits for it. The timer thread
  sleeps on a condition until the earliest of the kernel's ``next_deadline()`` and the next
  heartbeat that is due; any call that may have moved that earlier wakes it. Nothing polls.
* The kernel decides everything (grants, waits, deaths, expiries, timeouts); this module only
  carries the decisions out: it blocks a waiter until its GRANTED/WAIT_TIMEOUT/DIED/WOUNDED
  event arrives, sleeps ``retry_after_ms`` after a DIE before retrying with the same session
  (same priority), heartbeats held leases every ``ttl/3``, and releases on exit.
* A DIE is retried only while the session holds nothing else; otherwise :class:`Died` is
  raised so the caller's unit of work releases everything and starts over (SPEC.md §6).
* Threads and asyncio: a :class:`Lease` is a context manager for both ``with`` (the calling
  thread blocks) and ``async with`` (the task awaits a future that the dispatcher resolves
  with ``loop.call_soon_threadsafe``; no thread is blocked per waiter).
* A lease alone is not mutual exclusion when a holder can pause past its expiry. Pass
  :attr:`Lease.fence` to the protected resource and have it reject smaller fences.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math
import random
import threading
import time
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Callable, Generator, Iterable, Union

from . import _core
from .errors import Died, KlockError, LeaseLost, Timeout, UnknownId

__all__ = ["Klock", "Session", "Lease", "ClientCounters", "current_session"]

_current: contextvars.ContextVar[Session | None] = contextvars.ContextVar("klock_current_session", default=None)
# The tokens to restore `_current` with, per context (thread or task), innermost last.
_restore: contextvars.ContextVar[tuple[contextvars.Token[Session | None], ...]] = contextvars.ContextVar(
    "klock_current_session_tokens", default=()
)


def current_session() -> Session | None:
    """The session of the innermost ``with session:`` block in this thread or task."""
    return _current.get()


@dataclass
class ClientCounters:
    """What the client did on the kernel's answers (kernel-side counts are in ``Klock.stats()``)."""

    grants: int = 0
    waits: int = 0
    deaths: int = 0
    retries: int = 0
    timeouts: int = 0
    lost: int = 0


class _Closed:
    """Delivered to waiters when their Klock or session closes under them."""

    event = "CLOSED"


_CLOSED = _Closed()
_Delivered = Union[_core.Event, _Closed]


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

    def wait(self, fallback_s: float, klock: Klock) -> _Delivered:
        # The timer thread delivers every resolution; the fallback only guards against a
        # stalled timer (it settles time itself and keeps waiting).
        while not self._flag.wait(fallback_s):
            klock._advance()
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

    async def wait(self, fallback_s: float, klock: Klock) -> _Delivered:
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(self._future), fallback_s)
            except asyncio.TimeoutError:
                klock._advance()


_Waiter = Union[_ThreadWaiter, _AsyncWaiter]


@dataclass
class _Sleep:
    """An acquisition step: sleep this long (the backoff after a DIE)."""

    seconds: float


@dataclass
class _Wait:
    """An acquisition step: wait for the event that resolves the waiter's ticket."""

    waiter: _Waiter
    fallback_s: float


_Step = Union[_Sleep, _Wait]


def _timer_main(ref: weakref.ref[Klock], wake: threading.Condition) -> None:
    """The timer thread: sleeps until the kernel's next deadline or the next heartbeat."""
    with wake:
        while True:
            klock = ref()
            if klock is None or klock._closed:
                return
            try:
                sleep = klock._timer_step_locked()
            except Exception as e:  # a bug: keep the timer alive, expose what happened
                klock.timer_error = e
                klock._armed = None
                sleep = 0.05
            del klock
            if sleep is not True:
                wake.wait(sleep)


def _wake(wake: threading.Condition) -> None:
    with wake:
        wake.notify_all()


class Klock:
    """One kernel, its clock and its timer thread. Thread-safe; use one per process (or per
    coordination domain) and share it among threads and tasks.

    ``policy`` is ``"wait_die"`` (default), ``"wound_wait"`` or ``"lanes"``; the other
    settings are the kernel's (SPEC.md defaults when ``None``).
    """

    def __init__(
        self,
        policy: str = "wait_die",
        *,
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
    ) -> None:
        self.kernel = _core.Kernel(
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
        self.counters = ClientCounters()
        self._t0 = time.monotonic_ns()
        # Re-entrant so that the finalizer below may wake the timer from any thread, the
        # timer thread included (see _timer_main).
        self._lock = threading.RLock()
        self._timer_wake = threading.Condition(self._lock)
        self._waiters: dict[int, _Waiter] = {}
        self._holders: dict[int, list[Lease]] = {}
        self._sessions: dict[int, Session] = {}
        self._heartbeats: list[tuple[int, int, Lease]] = []
        self._heartbeat_stale = 0
        self._seq = itertools.count(1)
        self._armed: int | None = None
        self._closed = False
        self.timer_error: BaseException | None = None
        # The timer thread holds the Klock only weakly between steps, so a Klock that is
        # dropped without close() is still collected; the finalizer wakes the thread to exit.
        self._thread = threading.Thread(
            target=_timer_main, args=(weakref.ref(self), self._timer_wake), name="klock-timer", daemon=True
        )
        weakref.finalize(self, _wake, self._timer_wake).atexit = False
        self._thread.start()

    # ---- clock and plumbing -------------------------------------------------------------

    def now(self) -> int:
        """Milliseconds since this Klock was created (monotonic)."""
        return (time.monotonic_ns() - self._t0) // 1_000_000

    def _settled_locked(self) -> None:
        """After any kernel call: route its events, and wake the timer if it must fire sooner."""
        for event in self.kernel.drain_events():
            self._dispatch_locked(event)
        deadline = self.kernel.next_deadline()
        if deadline is not None and (self._armed is None or deadline < self._armed):
            self._timer_wake.notify()

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One kernel call at the current time, with its events routed."""
        with self._lock:
            try:
                return method(*args, self.now(), **kwargs)
            finally:
                self._settled_locked()

    def _advance(self) -> None:
        with self._lock:
            self.kernel.advance(self.now())
            self._settled_locked()

    def _dispatch_locked(self, event: _core.Event) -> None:
        kind = event.event
        if kind == "GRANTED" or kind == "WAIT_TIMEOUT" or kind == "DIED":
            assert event.ticket is not None
            waiter = self._waiters.pop(event.ticket, None)
            if waiter is None:
                return  # a ticket made directly on .kernel: its caller drains its own events
            if kind == "GRANTED":
                assert event.leases is not None
                waiter.block._granted_locked(event.leases)
            elif kind == "DIED":
                self.counters.deaths += 1
            waiter.resolve(event)
        elif kind == "LEASE_EXPIRED":
            assert event.lease is not None
            self._lose_locked([event.lease], "LEASE_EXPIRED", "the lease expired before the block ended (heartbeats came too late)")
        elif kind == "WOUNDED":
            for ticket in event.lost_tickets or []:
                waiter = self._waiters.pop(ticket, None)
                if waiter is not None:
                    waiter.resolve(event)
            self._lose_locked(event.lost_leases or [], "LEASE_RELEASED", f"the lease was revoked (wounded) by the older session {event.by}")
        elif kind == "SESSION_CLOSED":
            session = self._sessions.pop(event.session, None)
            if session is not None:
                session._closed = True

    def _lose_locked(self, lease_ids: Iterable[int], name: str, message: str) -> None:
        for lease_id in lease_ids:
            for block in self._holders.pop(lease_id, []):
                block.session._refs.pop(lease_id, None)
                block._lost_locked(name, message, lease_id)

    def _schedule_heartbeat_locked(self, block: Lease, due: int) -> None:
        seq = next(self._seq)
        block._heartbeat_seq = seq
        heapq.heappush(self._heartbeats, (due, seq, block))
        if self._armed is None or due < self._armed:
            self._timer_wake.notify()

    def _unschedule_heartbeat_locked(self, block: Lease) -> None:
        if block._heartbeat_seq:
            block._heartbeat_seq = 0
            self._heartbeat_stale += 1
            if self._heartbeat_stale > 64 and self._heartbeat_stale * 2 > len(self._heartbeats):
                self._heartbeats = [e for e in self._heartbeats if e[2]._heartbeat_seq == e[1]]
                heapq.heapify(self._heartbeats)
                self._heartbeat_stale = 0

    def _heartbeat_locked(self, block: Lease, now: int) -> None:
        ids = [lease.lease_id for lease in block.leases]
        try:
            results = self.kernel.heartbeat(block.session.session_id, ids, now)
        except KlockError as e:  # the session is gone (closed elsewhere, idle-closed)
            self._lose_locked(ids, e.name, e.message)
            return
        finally:
            self._settled_locked()
        renewable = True
        for lease_id, status, _expires_at in results:
            if status == "LIFETIME_EXCEEDED":
                renewable = False  # it stays valid until its capped expiry, then LEASE_EXPIRED
            elif status != "OK":
                self._lose_locked([lease_id], status, f"a heartbeat found the lease {status.lower().replace('_', ' ')}")
        if block._state == "held" and block._lost is None and renewable:
            self._schedule_heartbeat_locked(block, now + block._heartbeat_ms)

    def _timer_step_locked(self) -> float | None | bool:
        """One pass of the timer thread: settle what is due or run one due heartbeat (then
        ``True``: look again), or arm for the next wake-up and return the seconds to sleep
        (``None``: until woken)."""
        self._armed = None
        now = self.now()
        deadline = self.kernel.next_deadline()
        if deadline is not None and deadline <= now:
            self.kernel.advance(now)
            self._settled_locked()
            return True
        beats = self._heartbeats
        if beats and beats[0][0] <= now:
            _, seq, block = heapq.heappop(beats)
            if block._heartbeat_seq == seq:
                block._heartbeat_seq = 0
                self._heartbeat_locked(block, now)
            else:
                self._heartbeat_stale = max(0, self._heartbeat_stale - 1)
            return True
        wake = deadline
        if beats and (wake is None or beats[0][0] < wake):
            wake = beats[0][0]
        self._armed = wake
        if wake is None:
            return None
        return max(0.0, (self._t0 + wake * 1_000_000 - time.monotonic_ns()) / 1e9 + 0.0005)

    # ---- public API ---------------------------------------------------------------------

    def session(self, agent_id: str, namespace: str = "default") -> Session:
        """Opens a session (a context manager that closes it). The kernel assigns its priority."""
        self._check_open()
        with self._lock:
            try:
                info = self.kernel.open_session(agent_id, namespace, self.now())
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
                return session
            finally:
                self._settled_locked()

    def lease(
        self,
        *intents: str,
        agent_id: str = "anonymous",
        namespace: str = "default",
        ttl_ms: int | None = None,
        timeout: float | None = None,
    ) -> OwnSessionLease:
        """A lease block with a session of its own, opened on entry and closed on exit."""
        return OwnSessionLease(self, intents, agent_id, namespace, ttl_ms, timeout)

    def stats(self) -> dict[str, Any]:
        """The kernel's counters, top contended resources and ghost agents."""
        with self._lock:
            return self.kernel.stats()

    def snapshot(self) -> dict[str, Any]:
        """The kernel's whole state now (sessions, leases, tickets, stats)."""
        return self._call(self.kernel.snapshot)  # type: ignore[no-any-return]

    def resource_state(self, resource: str, namespace: str = "default") -> dict[str, Any]:
        """Holders and queue of one resource node, and the holders covering it."""
        return self._call(self.kernel.resource_state, resource, namespace)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stops the timer thread; waiters still blocked get an error. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiters = list(self._waiters.values())
            self._waiters.clear()
            for waiter in waiters:
                waiter.resolve(_CLOSED)
            self._timer_wake.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Klock is closed")

    def __enter__(self) -> Klock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Klock:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Klock(policy={self.kernel.config['policy']!r}, now={self.now()}, sessions={len(self._sessions)})"


class Session:
    """One run of one agent: owns leases and waits, keeps its kernel-assigned priority for
    life (across every DIE and retry). A context manager that closes it. Do not share one
    session among workers that must exclude each other: a session never conflicts with
    itself."""

    def __init__(self, klock: Klock, info: _core.SessionInfo) -> None:
        self.klock = klock
        self.info = info
        self._refs: dict[int, int] = {}  # lease id -> blocks of this session holding it
        self._closed = False

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
        """Smaller = older = wins conflicts (only the order is meaningful)."""
        return self.info.priority

    @property
    def closed(self) -> bool:
        return self._closed

    def holds_leases(self) -> bool:
        """Whether a lease block of this session is holding leases now."""
        return bool(self._refs)

    def lease(self, *intents: str, ttl_ms: int | None = None, timeout: float | None = None) -> Lease:
        """A block holding every intent (``"PREDICATE TYPE:/path"``) at once; use it with
        ``with`` or ``async with``. ``timeout`` (seconds, ``None`` = no limit) bounds the
        whole acquisition including waits and DIE retries; ``ttl_ms`` is each lease's TTL."""
        return Lease(self, intents, ttl_ms, timeout)

    def digest(self) -> dict[str, Any]:
        """The recovery digest to save for :meth:`Klock.resume`."""
        return self.klock._call(self.klock.kernel.digest, self.session_id)  # type: ignore[no-any-return]

    def suspend(self) -> None:
        """Marks the session as restarting: its leases survive a missed heartbeat for grace_ms."""
        self.klock._call(self.klock.kernel.suspend_session, self.session_id)

    def reconcile(self, lease_ids: Iterable[int]) -> list[tuple[int, str, int | None, int | None]]:
        """The kernel's truth for each lease: ``(lease_id, status, expires_at, fence)``."""
        return self.klock._call(self.klock.kernel.reconcile, self.session_id, list(lease_ids))  # type: ignore[no-any-return]

    def close(self) -> None:
        """Releases every lease and cancels every wait of the session. Idempotent."""
        k = self.klock
        with k._lock:
            if self._closed:
                return
            self._closed = True
            k._sessions.pop(self.session_id, None)
            try:
                k.kernel.close_session(self.session_id, k.now())
            except UnknownId:
                pass  # already closed by the kernel (idle)
            k._lose_locked(list(self._refs), "UNKNOWN_SESSION", "the session was closed while the block ran")
            for ticket, waiter in list(k._waiters.items()):
                if waiter.block.session is self:
                    del k._waiters[ticket]
                    waiter.resolve(_CLOSED)
            k._settled_locked()

    def __enter__(self) -> Session:
        _restore.set(_restore.get() + (_current.set(self),))
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            tokens = _restore.get()
            if tokens:
                _restore.set(tokens[:-1])
                _current.reset(tokens[-1])
        finally:
            self.close()

    async def __aenter__(self) -> Session:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._refs)} leases"
        return f"Session(session_id={self.session_id}, agent_id={self.agent_id!r}, priority={self.priority}, {state})"


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


class Lease:
    """The leases of one manifest, held for the duration of a ``with`` / ``async with`` block.

    On entry it acquires every intent at once (all-or-nothing), blocking through WAIT until
    GRANTED and retrying after DIE as the module docs describe; while held, the timer thread
    heartbeats it every ``ttl/3``; on exit it is released, even when the block raises. If a
    lease of the block was lost meanwhile (expired, wounded, session closed), :meth:`check`
    and :meth:`heartbeat` raise :class:`LeaseLost`, and so does the exit of a block that
    raised nothing else. Nested blocks of one session may ask again for what an outer block
    holds: the kernel reuses the lease, and it is released when the last block holding it
    ends.
    """

    def __init__(self, session: Session, intents: tuple[str, ...], ttl_ms: int | None, timeout: float | None) -> None:
        for i, intent in enumerate(intents):
            if not isinstance(intent, str):
                raise TypeError(
                    f"intent {i} must be a str like 'MUTATES FILE:/src/a.ts', got {type(intent).__name__}"
                    + (" (pass intents as separate arguments: lease(*intents))" if isinstance(intent, (list, tuple)) else "")
                )
        self.session = session
        self.intents = list(intents)
        self.ttl_ms = ttl_ms
        self.timeout = _check_timeout(timeout)
        self.leases: list[_core.Lease] = []
        self._state = "new"  # new -> acquiring -> held -> done | failed
        self._ticket: int | None = None
        self._lost: tuple[str, str, list[int]] | None = None
        self._heartbeat_ms = 0
        self._heartbeat_seq = 0

    # ---- what the block holds -----------------------------------------------------------

    @property
    def fence(self) -> int:
        """The largest fence of the block's leases: pass it to the protected resource."""
        return max(lease.fence for lease in self.leases)

    @property
    def fences(self) -> dict[str, int]:
        """Fence per canonical resource (the largest when one resource has two predicates)."""
        out: dict[str, int] = {}
        for lease in self.leases:
            out[lease.resource] = max(out.get(lease.resource, 0), lease.fence)
        return out

    @property
    def lease_ids(self) -> list[int]:
        return [lease.lease_id for lease in self.leases]

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
        """Renews every lease of the block now (the timer thread also does it every ttl/3).

        Raises :class:`LeaseLost` if one has ended."""
        k = self.session.klock
        if self._state != "held":
            raise RuntimeError("heartbeat() needs a held lease block")
        with k._lock:
            if self._lost is None:
                k._heartbeat_locked(self, k.now())
        self.check()

    # ---- kernel bookkeeping (under the Klock's lock) -------------------------------------

    def _granted_locked(self, leases: list[_core.Lease]) -> None:
        k = self.session.klock
        self.leases = leases
        self._state = "held"
        refs = self.session._refs
        for lease in leases:
            refs[lease.lease_id] = refs.get(lease.lease_id, 0) + 1
            k._holders.setdefault(lease.lease_id, []).append(self)
        k.counters.grants += 1
        self._heartbeat_ms = max(1, min(lease.ttl_ms for lease in leases) // 3)
        k._schedule_heartbeat_locked(self, k.now() + self._heartbeat_ms)

    def _lost_locked(self, name: str, message: str, lease_id: int) -> None:
        if self._lost is None:
            self._lost = (name, message, [lease_id])
            self.session.klock.counters.lost += 1
            self.session.klock._unschedule_heartbeat_locked(self)
        else:
            self._lost[2].append(lease_id)

    def _release(self) -> None:
        """Releases what this block holds (leases shared with an outer block stay held)."""
        k = self.session.klock
        with k._lock:
            if self._state != "held":
                return
            self._state = "done"
            k._unschedule_heartbeat_locked(self)
            refs = self.session._refs
            ending: list[int] = []
            for lease in self.leases:
                lid = lease.lease_id
                holders = k._holders.get(lid)
                if holders is not None and self in holders:
                    holders.remove(self)
                    if not holders:
                        del k._holders[lid]
                count = refs.get(lid)
                if count is None:
                    continue  # lost already
                if count > 1:
                    refs[lid] = count - 1
                else:
                    del refs[lid]
                    ending.append(lid)
            if ending and not self.session._closed:
                now = k.now()
                try:
                    for lid in ending:
                        k.kernel.release(self.session.session_id, lid, now)
                except UnknownId:
                    pass  # the kernel closed the session (idle): nothing is held any more
                finally:
                    k._settled_locked()

    # ---- acquisition ----------------------------------------------------------------------

    def _acquire_steps(self, make_waiter: Callable[[Lease], _Waiter]) -> Generator[_Step, Any, None]:
        """The acquisition as a generator shared by the thread and asyncio drivers: it yields
        :class:`_Sleep` or :class:`_Wait` steps and receives the delivered event after a wait.
        Returns once the block holds its leases."""
        k = self.session.klock
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        config = k.kernel.config
        default_wait_s = config["default_wait_timeout_ms"] / 1000
        attempt = 0
        wounds = 0
        while True:
            if deadline is None:
                wait_ms: int | None = None
            else:
                wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
            waiter: _Waiter | None = None
            with k._lock:
                if attempt:
                    k.counters.retries += 1
                attempt += 1
                try:
                    verdict = k.kernel.acquire(
                        self.session.session_id,
                        self.intents,
                        k.now(),
                        ttl_ms=self.ttl_ms,
                        wait=wait_ms != 0,
                        wait_timeout_ms=wait_ms,
                    )
                    kind = verdict.verdict
                    if kind == "GRANTED":
                        self._granted_locked(verdict.leases)
                    elif kind == "WAIT":
                        k.counters.waits += 1
                        assert verdict.ticket is not None
                        waiter = make_waiter(self)
                        self._ticket = verdict.ticket
                        k._waiters[verdict.ticket] = waiter
                    else:
                        k.counters.deaths += 1
                finally:
                    k._settled_locked()
            if kind == "GRANTED":
                return
            held_by = [b.session_id for b in verdict.held_by]
            if waiter is not None:
                budget = (wait_ms / 1000 if wait_ms is not None else default_wait_s) + 1.0
                event = yield _Wait(waiter, budget)
                self._ticket = None
                outcome = event.event
                if outcome == "GRANTED":
                    return
                if outcome == "CLOSED":
                    raise RuntimeError("the Klock or the session was closed while this block waited")
                if outcome == "WOUNDED":
                    # wound_wait: an older session took precedence. Asking again at once only
                    # gets this block wounded again by the next older requester, so it backs
                    # off by the kernel's DIE formula (SPEC §8): WOUNDED carries no hint.
                    base, cap = config["backoff_base_ms"], config["backoff_cap_ms"]
                    pause_ms = _core.retry_after_ms(base, cap, wounds, random.getrandbits(64))
                    wounds += 1
                    if deadline is not None and time.monotonic() + pause_ms / 1000 > deadline:
                        k.counters.timeouts += 1
                        raise Timeout(f"{self.intents}: wounded by older sessions; the next retry ({pause_ms} ms) would pass the timeout", held_by)
                    yield _Sleep(pause_ms / 1000)
                    continue
                if outcome == "WAIT_TIMEOUT":
                    if deadline is not None and time.monotonic() >= deadline - 0.0005:
                        k.counters.timeouts += 1
                        raise Timeout(f"waited {self.timeout} s for {self.intents}; still held by sessions {held_by}", held_by)
                    continue
                assert isinstance(event, _core.Event) and event.retry_after_ms is not None
                retry_after_ms = event.retry_after_ms  # DIED
            else:
                assert verdict.retry_after_ms is not None
                retry_after_ms = verdict.retry_after_ms
                if wait_ms == 0:
                    k.counters.timeouts += 1
                    raise Timeout(f"{self.intents} are held by sessions {held_by} (timeout {self.timeout} s)", held_by)
            if self.session._refs:
                raise Died(
                    f"session {self.session.session_id} must roll back: it holds other leases while younger than "
                    f"sessions {held_by} blocking {self.intents}; release everything, sleep retry_after_ms, and "
                    "acquire all intents in one manifest",
                    retry_after_ms,
                    held_by,
                )
            pause = retry_after_ms / 1000
            if deadline is not None and time.monotonic() + pause > deadline:
                k.counters.timeouts += 1
                raise Timeout(
                    f"{self.intents} are held by sessions {held_by}; the next retry ({retry_after_ms} ms) would pass the timeout",
                    held_by,
                )
            yield _Sleep(pause)

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

    def _exit(self, exc: BaseException | None) -> None:
        self._release()
        if self._lost is not None:
            name, message, ids = self._lost
            if exc is None:
                raise LeaseLost(name, message, list(ids))
            if hasattr(exc, "add_note"):
                exc.add_note(f"klock: a lease of this block was lost ({name}: {message})")

    def _begin(self) -> None:
        if self._state != "new":
            raise RuntimeError("a Lease block can be entered once; call session.lease(...) again")
        self.session.klock._check_open()
        self._state = "acquiring"

    def __enter__(self) -> Lease:
        self._begin()
        steps = self._acquire_steps(_ThreadWaiter)
        k = self.session.klock
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    step = steps.send(None)
                else:
                    assert isinstance(step.waiter, _ThreadWaiter)
                    step = steps.send(step.waiter.wait(step.fallback_s, k))
        except StopIteration:
            return self
        except BaseException:
            self._abort()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._exit(exc)

    async def __aenter__(self) -> Lease:
        loop = asyncio.get_running_loop()
        self._begin()
        steps = self._acquire_steps(lambda block: _AsyncWaiter(block, loop))
        k = self.session.klock
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    step = steps.send(None)
                else:
                    assert isinstance(step.waiter, _AsyncWaiter)
                    step = steps.send(await step.waiter.wait(step.fallback_s, k))
        except StopIteration:
            return self
        except BaseException:
            self._abort()
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._exit(exc)

    def __repr__(self) -> str:
        if self._state == "held":
            return f"Lease({self.intents}, fences={self.fences}{', LOST' if self._lost else ''})"
        return f"Lease({self.intents}, {self._state})"


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
        self.lease = self.session.lease(*intents, ttl_ms=ttl_ms, timeout=timeout)
        return self.lease

    def __enter__(self) -> Lease:
        lease = self._open()
        try:
            return lease.__enter__()
        except BaseException:
            assert self.session is not None
            self.session.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
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

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self.lease is not None and self.session is not None
        try:
            await self.lease.__aexit__(exc_type, exc, tb)
        finally:
            self.session.close()
