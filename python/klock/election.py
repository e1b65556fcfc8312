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
  leader) in term order, the current state first, driven by the kernel's events (SPEC.md §9):
  ACQUIRED and GRANTED begin a term, RELEASED, LEASE_EXPIRED and WOUNDED end it (a resign
  that hands over shows ``None`` and then the successor: the release comes first). Every lease's
  life is in the events, so every term is seen, even one that begins and ends between two
  reads of the state. In-process the events come from the Klock's dispatch (the state read
  and the start of the following are one step under the Klock's lock); remotely from the
  namespace's event stream the client reads, after the namespace's overview (the events up
  to its log index are in it, the later ones are applied).
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
import collections
import math
import os
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import quote

from .backend import Event, LeaseLike
from .client import Klock, Lease, Session, _check_timeout, _threadsafe_future
from .errors import ERROR_CODES, InvalidInput, LeaseLost, StateError

__all__ = ["Election", "Leader"]

# How often an idle observe() looks whether the Klock closed, and on a manual-clock remote Klock
# reads the event stream (seconds), by default.
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


def _index(event_id: str) -> int:
    """The log index of a server event id ``"<index>.<k>"``."""
    return int(event_id.split(".", 1)[0])


class _Follower:
    """One observer's view of an election, kept from the events as they are dispatched:
    the current leader and the changes not yet taken, in order.

    ``on_event`` takes note and returns (it runs inside the Klock's dispatch or the event
    reader); the observer takes the changes with :meth:`take`. Until :meth:`start` gives the
    initial state, events are kept aside (remotely they may arrive before the overview is
    read); those the initial state already holds (``through``: its log index) are skipped."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._cond = threading.Condition()
        self._changes: collections.deque[Leader | None] = collections.deque()
        self._early: list[Event] | None = []
        self._through: int | None = None
        self._current: Leader | None = None
        self._last_term = 0
        self._wakers: list[Callable[[], None]] = []
        self.scoped = True

    def start(self, initial: Leader | None, through: int | None) -> None:
        """The state the following starts from (the first change taken); then the events kept
        aside are applied."""
        with self._cond:
            self._last_term = 0 if initial is None else initial.term
            self._push(initial)
            self._through = through
            early, self._early = self._early or [], None
            for event in early:
                self._apply(event)

    def on_event(self, event: Event) -> None:
        with self._cond:
            if self._early is not None:
                self._early.append(event)
            else:
                self._apply(event)

    def _apply(self, event: Event) -> None:
        through = self._through
        if through is not None and _index(event.id) <= through:  # type: ignore[attr-defined]  # remote events carry ids
            return
        kind = event.event
        if kind == "ACQUIRED" or kind == "GRANTED":
            for lease in event.leases or []:
                if isinstance(lease, int) or not self._is_term(lease):
                    continue
                self._last_term = lease.fence
                self._push(
                    Leader(
                        agent_id=lease.agent_id,
                        session_id=lease.session_id,
                        term=lease.fence,
                        since=lease.acquired_at,
                        expires_at=lease.expires_at,
                        lease_id=lease.lease_id,
                    )
                )
            return
        if self._current is None:
            return
        if kind == "RELEASED":
            ended = [x for x in event.leases or [] if isinstance(x, int)]
        elif kind == "LEASE_EXPIRED":
            ended = [] if event.lease is None else [event.lease]
        elif kind == "WOUNDED":
            ended = list(event.lost_leases or [])
        else:
            return
        if self._current.lease_id in ended:
            self._push(None)

    def _is_term(self, lease: LeaseLike) -> bool:
        """A new term of this election: a MUTATES lease on its resource, newer than the last
        term seen (a grant reusing the leader's lease is not a new term), in its namespace."""
        election = self._election
        if (
            lease.resource != election.resource
            or lease.predicate != "MUTATES"
            or lease.fence <= self._last_term
        ):
            return False
        if self.scoped:  # remotely the stream is the namespace's own
            return True
        return election.klock._namespace_of_locked(lease.session_id) == election.namespace

    def _push(self, change: Leader | None) -> None:
        self._current = change
        self._changes.append(change)
        self._cond.notify_all()
        for wake in self._wakers:
            wake()
        self._wakers.clear()

    def take(self) -> tuple[bool, Leader | None]:
        """The next change if there is one: ``(True, change)``, else ``(False, None)``."""
        with self._cond:
            if self._changes:
                return True, self._changes.popleft()
            return False, None

    def wait(self, seconds: float) -> None:
        """Waits until a change is there or ``seconds`` pass."""
        with self._cond:
            if not self._changes:
                self._cond.wait(seconds)

    def wake_on_change(self, wake: Callable[[], None]) -> None:
        """Calls ``wake()`` (once) when a change is there, at once if one is."""
        with self._cond:
            if self._changes:
                wake()
            else:
                self._wakers.append(wake)


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
    own, with the :class:`~klock.LeaseLost`. ``poll`` (seconds): how often an idle :meth:`observe`
    looks whether the Klock closed (and, on a manual-clock remote Klock, reads the events).

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
            session._ledger,
            session._id,
            (f"MUTATES {self.resource}",),
            max(1, math.ceil(self.ttl * 1000)),
            _check_timeout(math.inf if timeout is None else timeout),
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

    def _follow(self) -> tuple[_Follower, Callable[[], None]]:
        """Starts following the election's events: the current state and every later change
        (see the module contract); returns the follower and the function that stops it."""
        follower = _Follower(self)
        k = self.klock
        if getattr(k.kernel, "watch", None) is not None:
            # Remotely: watch first, then the overview; the events it holds are skipped.
            watch = k._watch(self.namespace, follower.on_event)
            try:
                index, current = self._overview_leader()
            except BaseException:
                watch.stop()
                raise
            follower.start(current, index)
            return follower, watch.stop
        with k._lock:  # in-process: the read and the start are one step
            current = self.leader()
            watch = k._watch(self.namespace, follower.on_event)
            follower.scoped = watch.scoped
            follower.start(current, None)
        return follower, watch.stop

    def _overview_leader(self) -> tuple[int, Leader | None]:
        """Remotely: the namespace's overview's log index and the leader it shows."""
        request = self.klock.kernel._request  # type: ignore[attr-defined]
        overview = request("GET", f"/v1/ns/{quote(self.namespace, safe='')}/overview")
        for lease in overview["snapshot"]["leases"]:
            if lease["resource"] == self.resource and lease["predicate"] == "MUTATES":
                leader = Leader(
                    agent_id=lease["agent_id"],
                    session_id=lease["session_id"],
                    term=lease["fence"],
                    since=lease["acquired_at"],
                    expires_at=lease["expires_at"],
                    lease_id=lease["lease_id"],
                )
                return int(overview["index"]), leader
        return int(overview["index"]), None

    def observe(self) -> Iterator[Leader | None]:
        """Every change of :meth:`leader` (``None``: no leader), in term order, the current
        state first, from the kernel's events (see the module contract); ``expires_at`` is as
        of the change. Ends when the Klock closes."""
        k = self.klock
        follower, stop = self._follow()
        try:
            while not k._closed:
                ready, change = follower.take()
                if ready:
                    yield change
                    continue
                # Idle: let the Klock route what its backend read (a manual-clock remote
                # backend reads the stream only then); wake up every ``poll`` to see a close.
                k._backend_events()
                ready, change = follower.take()
                if ready:
                    yield change
                    continue
                follower.wait(self.poll)
        finally:
            stop()

    async def observe_async(self) -> AsyncIterator[Leader | None]:
        """:meth:`observe` for asyncio: the task awaits the next change (no thread is blocked;
        remotely the first read leaves the event loop); ends when the Klock closes."""
        loop = asyncio.get_running_loop()
        k = self.klock
        if k._offload_async:
            follower, stop = await loop.run_in_executor(None, self._follow)
        else:
            follower, stop = self._follow()
        try:
            while not k._closed:
                ready, change = follower.take()
                if ready:
                    yield change
                    continue
                if not k._offload_async:
                    k._backend_events()  # a manual clock: the stream is read on a drain
                    ready, change = follower.take()
                    if ready:
                        yield change
                        continue
                done, wake = _threadsafe_future()
                follower.wake_on_change(wake)
                try:
                    await asyncio.wait_for(asyncio.shield(done), self.poll)
                except TimeoutError:
                    pass
        finally:
            stop()

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
