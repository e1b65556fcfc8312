"""Leader election on leases: :class:`Election`.

Contract
--------
* **The resource.** An election named ``NAME`` is the resource ``LEADER:/NAME`` in the Klock's
  namespace (or the one given). The kernel's resource parser decides what a valid name is
  (SPEC.md §3): a bad one is :class:`~klock.InvalidInput` (``INVALID_RESOURCE``) from the
  constructor, which asks the kernel once. A name that normalises to the root (``""``,
  ``"."``, ``"/"``) is refused the same way: ``LEADER:/`` covers every election. Names are
  paths, so an election ``a`` covers ``a/b`` (SPEC.md §3): a leader of ``a`` blocks ``a/b``.
* **A campaign** opens one session of its own (``agent_id`` is the candidate's identity, which
  :meth:`Election.leader` shows) and acquires ``MUTATES LEADER:/NAME`` with the election's
  ``ttl`` through the client's ordinary acquire rules (one wait in the kernel's queue, the
  kernel's ``retry_after_ms`` after a DIE keeping the session's priority). With no
  ``timeout`` it waits with no limit as *one* ticket (``math.inf``), so it never loses its
  place in the queue; a ``timeout`` (seconds) bounds it and raises :class:`~klock.Timeout`.
  A fresh session per campaign fixes the campaigner's priority (its age) at the campaign's
  start, which is what orders successors (below).
* **The term** is the lease's fence: it strictly increases per resource, across the whole
  kernel and across server restarts (SPEC.md §7; server/README.md "Durability"). Give it to
  whatever the leader writes to (:func:`klock.fenced_write`): a store that refuses a smaller
  term is what makes a paused ex-leader harmless.
* **While leading**, the client's heartbeats renew the lease. When it is lost (expired, revoked
  by a wound, its session closed, remotely its local deadline passed while the server was
  unreachable) the election is told at once, from the client's lock: :attr:`lost` is set,
  :meth:`wait_lost` / :meth:`wait_lost_async` return, and ``on_lost(error)`` runs in a thread
  of its own with the :class:`~klock.LeaseLost` saying how. :meth:`is_leader` also settles the
  clock before answering, so a process resumed after a pause (SIGSTOP, swap) past its lease
  learns it lost before its timer thread runs.
* :meth:`resign` releases (the next campaigner in the queue is granted) and closes the
  campaign's session; :meth:`leader` reads who leads now from the resource's state (holder,
  term, and since when: the lease's ``acquired_at`` in the kernel's milliseconds — the Klock's
  in-process, the server's remotely).
* :meth:`observe` / :meth:`observe_async` yield every change of :meth:`leader` (``None``: no
  leader) in term order. They re-read the resource state every ``poll`` seconds: the kernel's
  event stream carries grants after a wait and expiries, but not an immediate grant nor a
  release (SPEC.md §9), so events alone would miss a vacancy and the next leader. A term that
  starts and ends within one ``poll`` can be missed; terms are never seen out of order.
* **Order of successors** (the kernel's policy decides; SPEC.md §6): under ``detect``,
  ``lanes`` and ``wound_wait`` campaigners wait in the resource's FIFO queue and are granted in
  the order of their campaigns (a campaign's fresh session is younger than every earlier one,
  so under ``wound_wait`` it never wounds the leader nor those queued ahead; a campaign holds
  nothing else, so ``detect`` finds no cycle). Under ``wait_die`` (the default) a campaigner
  younger than the leader or than one queued ahead DIEs and retries after ``retry_after_ms``:
  those older than the leader wait in the queue and come first, in queue order; the others
  are served in the order their retries reach a free resource, not in campaign order. Use
  ``detect`` or ``lanes`` when the order matters.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import quote

from .client import Klock, Lease, Session, _check_timeout, _threadsafe_future
from .errors import ERROR_CODES, InvalidInput, LeaseLost, StateError

__all__ = ["Election", "Leader"]

# How often observe() re-reads the resource state by default (seconds): the dashboard's pace.
_DEFAULT_POLL_S = 0.25


@dataclass(frozen=True)
class Leader:
    """Who leads an election: the campaigner's ``agent_id`` and session, its ``term`` (the
    lease's fence), ``since`` (the lease's ``acquired_at``) and ``expires_at`` (its current
    expiry), both in the kernel's milliseconds (the Klock's in-process, the server's
    remotely)."""

    agent_id: str
    session_id: int
    term: int
    since: int
    expires_at: int
    lease_id: int


def _invalid_resource(message: str) -> InvalidInput:
    err = InvalidInput(f"INVALID_RESOURCE: {message}")
    err.code, err.name, err.message = ERROR_CODES["INVALID_RESOURCE"], "INVALID_RESOURCE", message
    return err


def _check_seconds(what: str, value: object) -> float:
    """A finite number of seconds > 0 (``ttl``, ``poll``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    if math.isnan(value) or value <= 0 or value == math.inf:
        raise ValueError(f"{what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class _Changes:
    """Which reads of :meth:`Election.leader` are changes: another term, or a vacancy after a
    term (terms only grow, so the changes come in term order)."""

    def __init__(self) -> None:
        self._last: int | None | str = "start"

    def is_new(self, leader: Leader | None) -> bool:
        term = None if leader is None else leader.term
        if term == self._last:
            return False
        self._last = term
        return True


class _LeaderLease(Lease):
    """The campaign's lease block: a :class:`~klock.Lease` that tells its election when a
    lease of it is lost (called by the client under the Klock's lock)."""

    #: The election to tell (weakly).
    election: weakref.ref[Election]

    def _lost_locked(self, name: str, message: str, lease_id: int) -> None:
        first = self._lost is None
        super()._lost_locked(name, message, lease_id)
        target = self.election()
        if first and target is not None:  # once per term
            target._lost_locked(LeaseLost(name, message, [lease_id]))


class Election:
    """Leader election named ``name`` on ``klock`` (in-process or :func:`klock.connect`): see
    the module contract.

    ``agent_id``: the candidate's identity (default ``"HOST/PID"``). ``ttl`` (seconds, default
    15): the leader's lease TTL, so how long a dead leader keeps the election. ``namespace``:
    the Klock's by default. ``on_lost(error)``: called once per lost term, in a thread of its
    own, with the :class:`~klock.LeaseLost`. ``poll`` (seconds): :meth:`observe`'s pace.

    Use it as ``with Election(k, "indexer") as e:`` (campaigns on entry, resigns on exit;
    the exit raises :class:`~klock.LeaseLost` if leadership was lost meanwhile and the block
    raised nothing else), or ``async with``.
    """

    def __init__(
        self,
        klock: Klock,
        name: str,
        *,
        agent_id: str | None = None,
        ttl: float = 15.0,
        namespace: str | None = None,
        on_lost: Callable[[LeaseLost], None] | None = None,
        poll: float = _DEFAULT_POLL_S,
    ) -> None:
        if not isinstance(klock, Klock):
            raise TypeError(f"klock must be a klock.Klock, got {type(klock).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        self.ttl = _check_seconds("ttl", ttl)
        self.poll = _check_seconds("poll", poll)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, got {type(on_lost).__name__}")
        self.klock = klock
        self.namespace = klock.namespace if namespace is None else namespace
        self.agent_id = f"{socket.gethostname()}/{os.getpid()}" if agent_id is None else agent_id
        # The kernel's parser decides what a valid name is: one read of the resource.
        state = klock.resource_state(f"LEADER:/{name}", self.namespace)
        self.resource: str = state["resource"]
        if self.resource == "LEADER:/":
            raise _invalid_resource(
                f"election name {name!r} names the root LEADER:/, which covers every election; "
                "give a name such as 'indexer'"
            )
        self.name = self.resource[len("LEADER:/") :]
        self.on_lost = on_lost
        self._lock = threading.Lock()  # campaign / resign / lost bookkeeping
        self._session: Session | None = None
        self._block: _LeaderLease | None = None
        self._term: int | None = None
        self._lost_error: LeaseLost | None = None
        self._lost_flag = threading.Event()
        # Tasks awaiting the loss; a leaf lock: taken under the Klock's lock by _lost_locked.
        self._lost_waiters: list[Callable[[], None]] = []
        self._waiters_lock = threading.Lock()
        # Lease ids -> acquired_at already read (leader() asks the kernel once per term).
        self._since: dict[int, int] = {}

    # ---- campaigning --------------------------------------------------------------------

    def _open_block(self, timeout: float | None) -> _LeaderLease:
        """The one call into the client's lease API: a fresh session and the block asking for
        ``MUTATES LEADER:/NAME`` with the election's TTL (``timeout`` ``None``: no limit, as
        one wait)."""
        session = self.klock.session(self.agent_id, self.namespace)
        block = _LeaderLease(
            session,
            session._handle,
            (f"MUTATES {self.resource}",),
            max(1, math.ceil(self.ttl * 1000)),
            math.inf if timeout is None else timeout,
        )
        block.election = weakref.ref(self)
        return block

    def _start(self, timeout: float | None) -> _LeaderLease:
        _check_timeout(timeout)
        with self._lock:
            if self._block is not None and self._block.held:
                raise StateError(
                    f"STATE_ERROR: {self.agent_id} already leads {self.resource} "
                    f"(term {self._term}); resign() first"
                )
            self._forget_locked()
            block = self._open_block(timeout)
            self._session = block.session
            self._block = block
            self._lost_flag.clear()
            self._lost_error = None
            return block

    def _won(self, block: _LeaderLease) -> int:
        with self._lock:
            self._term = block.fence
            lease = block.leases[0]
            self._since[lease.lease_id] = lease.acquired_at
            return self._term

    def _failed(self, block: _LeaderLease) -> None:
        with self._lock:
            if self._block is block:
                self._block = None
                self._session = None
        block.session.close()

    def campaign(self, timeout: float | None = None) -> int:
        """Blocks until this candidate leads; returns the term. ``timeout`` (seconds): give up
        with :class:`~klock.Timeout` (0: try once). A second campaign while leading is a
        :class:`~klock.StateError`."""
        block = self._start(timeout)
        try:
            block.__enter__()
        except BaseException:
            self._failed(block)
            raise
        return self._won(block)

    async def campaign_async(self, timeout: float | None = None) -> int:
        """:meth:`campaign` for asyncio: the task awaits (no thread is blocked)."""
        block = self._start(timeout)
        try:
            await block.__aenter__()
        except BaseException:
            if self.klock._offload_async:
                await asyncio.get_running_loop().run_in_executor(None, self._failed, block)
            else:
                self._failed(block)
            raise
        return self._won(block)

    def resign(self) -> None:
        """Stops leading (or campaigning): releases the lease, so the next campaigner is
        granted, and closes the campaign's session. Idempotent; never raises for a lease that
        was lost already (``on_lost`` said so)."""
        with self._lock:
            self._forget_locked()

    async def resign_async(self) -> None:
        """:meth:`resign` for asyncio (remotely the calls leave the event loop)."""
        if self.klock._offload_async:
            await asyncio.get_running_loop().run_in_executor(None, self.resign)
        else:
            self.resign()

    def _forget_locked(self) -> None:
        block, session = self._block, self._session
        self._block = self._session = None
        self._term = None
        try:
            # (Released first, so closing the session loses nothing: a resign is not a loss.)
            if block is not None and block._state == "held":
                try:
                    block.__exit__(None, None, None)
                except LeaseLost:
                    pass  # lost before the resign: on_lost was told
        finally:
            if session is not None:
                session.close()

    # ---- while leading ------------------------------------------------------------------

    @property
    def term(self) -> int | None:
        """The current term while this candidate leads (or led until a loss it has not
        resigned from), else ``None``."""
        return self._term

    @property
    def lost(self) -> bool:
        """Leadership won by the last campaign was lost (not resigned)."""
        return self._lost_flag.is_set()

    def is_leader(self) -> bool:
        """Whether this candidate leads now with a valid lease. Settles the Klock's clock
        first (expiries due, remotely the local deadline), so the answer is current even
        right after the process was paused past its lease."""
        block = self._block
        if block is None or not block.held:
            return False
        k = self.klock
        with k._lock:
            if not k._closed and block._lost is None:
                try:
                    k.kernel.advance(k.now())
                finally:
                    k._settled_locked()
        return block.held

    def check(self) -> int:
        """The term, or :class:`~klock.LeaseLost` (or :class:`~klock.StateError` when not
        campaigning) if this candidate does not lead now (see :meth:`is_leader`)."""
        block = self._block
        if block is None or self._term is None:
            raise StateError(f"STATE_ERROR: {self.agent_id} does not lead {self.resource}")
        if not self.is_leader():
            block.check()
        assert self._term is not None
        return self._term

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Blocks until leadership is lost (``True``) or ``timeout`` seconds pass (``False``)."""
        return self._lost_flag.wait(timeout)

    async def wait_lost_async(self) -> LeaseLost:
        """Awaits the loss of leadership; returns how it was lost."""
        done, wake = _threadsafe_future()
        with self._waiters_lock:
            if not self._lost_flag.is_set():
                self._lost_waiters.append(wake)
            else:
                done.set_result(None)
        try:
            await done
        finally:
            with self._waiters_lock:
                if wake in self._lost_waiters:
                    self._lost_waiters.remove(wake)
        assert self._lost_error is not None
        return self._lost_error

    def _lost_locked(self, error: LeaseLost) -> None:
        """The campaign's lease was lost (under the Klock's lock): flag it, wake the waiters,
        and run ``on_lost`` in a thread of its own (it may call back into the client)."""
        self._lost_error = error
        with self._waiters_lock:
            self._lost_flag.set()
            for wake in self._lost_waiters:
                wake()
            self._lost_waiters.clear()
        if self.on_lost is not None:
            threading.Thread(
                target=self.on_lost, args=(error,), name=f"klock-election-lost-{self.name}"
            ).start()

    # ---- who leads ----------------------------------------------------------------------

    def leader(self) -> Leader | None:
        """Who leads now (``None``: nobody), from the resource's state."""
        state = self.klock.resource_state(self.resource, self.namespace)
        for holder in state["holders"]:
            if holder["predicate"] == "MUTATES":
                lease_id = holder["lease_id"]
                return Leader(
                    agent_id=holder["agent_id"],
                    session_id=holder["session_id"],
                    term=holder["fence"],
                    since=self._acquired_at(lease_id),
                    expires_at=holder["expires_at"],
                    lease_id=lease_id,
                )
        return None

    def _acquired_at(self, lease_id: int) -> int:
        """When a lease was granted (the resource state does not say): from the kernel's
        snapshot in-process, the namespace's overview remotely; read once per lease."""
        since = self._since.get(lease_id)
        if since is not None:
            return since
        k = self.klock
        request = getattr(k.kernel, "_request", None)
        if request is not None:  # klock.connect: the server's overview of the namespace
            leases = request("GET", f"/v1/ns/{quote(self.namespace, safe='')}/overview")[
                "snapshot"
            ]["leases"]
        else:
            leases = k.snapshot()["leases"]
        for lease in leases:
            if lease["lease_id"] == lease_id:
                self._since[lease_id] = lease["acquired_at"]
                return int(lease["acquired_at"])
        return 0  # ended between the two reads: the next read shows its successor

    def observe(self) -> Iterator[Leader | None]:
        """Every change of :meth:`leader` (``None``: no leader), in term order, the current
        state first; re-read every ``poll`` seconds (on the Klock's clock, so a ManualClock's
        advance wakes it). Ends when the Klock closes."""
        changes = _Changes()
        while not self.klock._closed:
            current = self.leader()
            if changes.is_new(current):
                yield current
            if not self._sleep(self.poll):
                return

    async def observe_async(self) -> AsyncIterator[Leader | None]:
        """:meth:`observe` for asyncio (remotely the reads leave the event loop); ends when
        the Klock closes."""
        loop = asyncio.get_running_loop()
        changes = _Changes()
        while not self.klock._closed:
            if self.klock._offload_async:
                current = await loop.run_in_executor(None, self.leader)
            else:
                current = self.leader()
            if changes.is_new(current):
                yield current
            await asyncio.sleep(self.poll)

    def _sleep(self, seconds: float) -> bool:
        """Sleeps ``seconds`` (on the Klock's clock, and at most that long in real time: a
        closed Klock's clock fires no more timers); ``False`` if the Klock closed."""
        k = self.klock
        flag = threading.Event()
        timer = k.clock.set_timer(k.now() + max(1, math.ceil(seconds * 1000)), flag.set)
        try:
            flag.wait(seconds)
        finally:
            k.clock.clear_timer(timer)
        return not k._closed

    # ---- context managers ---------------------------------------------------------------

    def __enter__(self) -> Election:
        self.campaign()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        error = self._lost_error if self._lost_flag.is_set() else None
        self.resign()
        if error is not None and exc is None:
            raise error

    async def __aenter__(self) -> Election:
        await self.campaign_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        error = self._lost_error if self._lost_flag.is_set() else None
        await self.resign_async()
        if error is not None and exc is None:
            raise error

    def __repr__(self) -> str:
        state = (
            f"leading, term {self._term}"
            if self._block is not None and self._block.held
            else ("lost" if self.lost else "not leading")
        )
        return f"Election({self.resource!r}, agent_id={self.agent_id!r}, {state})"
