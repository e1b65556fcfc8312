"""The one interface between the friendly client (:mod:`klock.client`) and a kernel.

Contract
--------
The friendly layer (:class:`~klock.Klock`, :class:`~klock.Session`, :class:`~klock.Lease`)
exists once; what it talks to is a *backend* with the shape of ``klock._core.Kernel``: the
SPEC.md operations, each taking the caller's ``now`` (the Klock's clock, milliseconds) last,
``drain_events()`` for what happened besides direct answers, ``next_deadline()`` for the
Klock's one timer and ``advance(now)`` when it fires. Two implementations:

* **in-process**: ``klock._core.Kernel`` itself (the Rust kernel in this process). The Klock
  calls its methods directly, so the in-process path pays nothing for the abstraction.
* **remote**: :class:`klock.remote.RemoteKernel`, HTTP to ``klock serve`` (made by
  :func:`klock.connect`). Answers and events come back as objects with the same attributes
  (``verdict``, ``leases``, ``ticket``, ... see :class:`Verdict` and :class:`Event`), and
  kernel errors as the same exception classes (:mod:`klock.errors`). It also provides the
  optional hooks below, which the Klock looks up once, when it is made.

Optional hooks (a backend without them behaves like the in-process kernel):

* ``heartbeat_due(lease_id) -> int``: when the lease's next renewal is due on the Klock's clock.
  In-process that is ``expires_at - 2*ttl_ms/3`` (the kernel's figures are the Klock's
  times); remotely ``expires_at`` is the server's clock, so the backend answers from its own
  local deadline (the send time of the request that granted or last renewed the lease, plus
  its TTL).
* ``attach(klock)``: the backend learns its Klock, to hand it events that arrive on their own
  (an event stream) through :meth:`klock.Klock._backend_events`, to have every held block
  renewed at once after a reconnect (:meth:`klock.Klock._backend_reconnected`), and to fail
  every waiting block when the server cannot be reached
  (:meth:`klock.Klock._backend_failed`).
* ``offload_async``: ``True`` if its calls may block for long (network): ``async with``
  blocks then run them in a worker thread instead of on the event loop.
* ``close()``: called once by :meth:`klock.Klock.close`, after the sessions are closed.
* ``watch(namespace, on_event) -> stop``: every event of the namespace from now on, every
  session's, each with its ``id`` (remotely: the namespace's stream); the Klock's ``_watch``
  uses it for an election's observers. Without it the Klock hands its observers every event
  it drains itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = ["Backend", "LeaseLike", "Verdict", "Event", "SessionInfoLike"]


class LeaseLike(Protocol):
    """A granted lease as a backend reports it (``klock._core.Lease``, ``klock.LeaseInfo``)."""

    @property
    def lease_id(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def acquired_at(self) -> int: ...
    @property
    def expires_at(self) -> int: ...
    @property
    def ttl_ms(self) -> int: ...


class SessionInfoLike(Protocol):
    @property
    def session_id(self) -> int: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def epoch(self) -> int: ...


class Blocker(Protocol):
    @property
    def session_id(self) -> int: ...


class Verdict(Protocol):
    """The immediate answer to an acquire."""

    @property
    def verdict(self) -> str: ...
    @property
    def leases(self) -> Sequence[LeaseLike]: ...
    @property
    def ticket(self) -> int | None: ...
    @property
    def retry_after_ms(self) -> int | None: ...
    @property
    def held_by(self) -> Sequence[Blocker]: ...
    @property
    def cycle(self) -> Sequence[int]: ...


class Event(Protocol):
    """An event (SPEC.md §9); the fields an event kind does not set are ``None``."""

    @property
    def event(self) -> str: ...
    @property
    def session(self) -> int: ...
    @property
    def ticket(self) -> int | None: ...
    @property
    def leases(self) -> Sequence[LeaseLike] | Sequence[int] | None:
        """GRANTED and ACQUIRED: the leases; RELEASED: the ids of the leases released."""

    @property
    def retry_after_ms(self) -> int | None: ...
    @property
    def lease(self) -> int | None: ...
    @property
    def by(self) -> int | None: ...
    @property
    def lost_leases(self) -> Sequence[int] | None: ...
    @property
    def lost_tickets(self) -> Sequence[int] | None: ...
    @property
    def cycle(self) -> Sequence[int] | None: ...


class Backend(Protocol):
    """What the friendly client calls (``klock._core.Kernel``'s names and signatures)."""

    def open_session(self, agent_id: str, namespace: str, now: int) -> SessionInfoLike: ...
    def close_session(self, session: int, now: int) -> None: ...
    def suspend_session(self, session: int, now: int) -> None: ...
    def digest(self, session: int, now: int) -> dict[str, Any]: ...
    def resume_session(self, digest: dict[str, Any], now: int) -> SessionInfoLike: ...
    def acquire(
        self,
        session: int,
        intents: Sequence[str] | Iterable[str],
        now: int,
        *,
        ttl_ms: int | None = None,
        wait: bool = True,
        wait_timeout_ms: int | None = None,
    ) -> Verdict: ...
    def heartbeat(
        self, session: int, leases: Sequence[int] | Iterable[int] | None, now: int
    ) -> Sequence[tuple[int, str, int | None]]: ...
    def release(self, session: int, lease: int, now: int) -> bool: ...
    def reconcile(
        self, session: int, leases: Sequence[int] | Iterable[int], now: int
    ) -> Sequence[tuple[int, str, int | None, int | None]]: ...
    def cancel_wait(self, session: int, ticket: int, now: int) -> None: ...
    def advance(self, now: int) -> None: ...
    def next_deadline(self) -> int | None: ...
    def drain_events(self) -> Sequence[Event]: ...
    def resource_state(self, resource: str, namespace: str, now: int) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...
    def snapshot(self, now: int) -> dict[str, Any]: ...
    @property
    def config(self) -> dict[str, Any]: ...
