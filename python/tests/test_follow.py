"""How the remote client follows its namespace's event stream (the core's ``Follow``, through
``klock._core.Follow``), against real ``klock serve --memory`` processes in real time:

* the stream starts at the log entry that opened the client's first session (its
  ``Klock-Index``), so a grant that happens before the reader's first poll reaches the server
  (held back at a link, not failed) is still read from the stream, long before the ticket's
  own refresh would find it; a stream started later (at the newest event when it first
  polls, say) misses it;
* an answer with a ``gap`` (the server dropped events the reader had not read: its byte
  budget) has every held block renewed at once, so a wound the dropped events told is learnt
  then, not at the renewal due a third of the TTL after the grant. The reader is kept from
  polling by a watcher of the namespace that takes its time (it runs in the reader's thread),
  so no poll fails and only the gap can say events were missed;
* a ``--memory`` server restarted on its port starts a new log, whose entries begin below the
  stream's cursor: the stream names its cursor's log (``log=``), the server reads it from its
  log's start, and a session opened there hears of its wound through the stream, long before
  its renewal would tell;
* a poll right after a failed one asks with ``wait_ms=0`` (the core's ``Follow.wait_ms``): its
  answer is the one that has the held leases renewed;
* which leases an event ends is the core's rule (``klock._core.ends``), for the kernel's
  events and the remote client's alike, and a lease an event of the stream ends no longer has
  a local deadline (the client's timer no longer wakes for it); a lease lost at its local
  deadline is named by the core (``LOST_AT_LOCAL_DEADLINE``: ``LEASE_EXPIRED``).

Every wait is bounded."""

from __future__ import annotations

import threading
import time

import pytest

import klock
from klock import _core
from klock.remote import RemoteEvent
from server import Link, Server


def test_a_poll_right_after_a_failed_one_is_not_held_for_an_event() -> None:
    """The core's rule, through the binding: the answer after a failed poll is the resync's,
    so that poll asks with ``wait_ms=0``, and the long wait comes back once one answers."""
    follow = _core.Follow(3)
    assert follow.wait_ms(10_000) == 10_000
    follow.failed()
    assert follow.wait_ms(10_000) == 0
    assert follow.answered(0, "3.0", False) is True
    assert follow.wait_ms(10_000) == 10_000


def test_ends_is_the_cores_rule_for_kernel_and_remote_events() -> None:
    k = _core.Kernel("wound_wait")
    old = k.open_session("old", "default", 0).session_id
    young = k.open_session("young", "default", 0).session_id
    a, b = k.acquire(young, ["MUTATES FILE:/a", "MUTATES FILE:/b"], 1, ttl_ms=1000).leases
    k.acquire(old, ["MUTATES FILE:/a"], 2)  # wounds the younger holder
    events = k.drain_events()
    by_kind = {e.event: e for e in events}
    assert _core.ends(by_kind["ACQUIRED"]) is None
    assert _core.ends(by_kind["WOUNDED"]) == ([a.lease_id, b.lease_id], "WOUNDED")
    k.advance(10**6)
    expired = [e for e in k.drain_events() if e.event == "LEASE_EXPIRED"]
    assert expired and all(_core.ends(e) == ([e.lease], "LEASE_EXPIRED") for e in expired)
    # The remote client's events: the server's field names.
    assert _core.ends(RemoteEvent("LEASE_EXPIRED", 1, lease=7)) == ([7], "LEASE_EXPIRED")
    assert _core.ends(RemoteEvent("WOUNDED", 1, by=2, lost_leases=[3, 4], lost_tickets=[])) == (
        [3, 4],
        "WOUNDED",
    )
    assert _core.ends(RemoteEvent("WOUNDED", 1, lost_leases=None)) == ([], "WOUNDED")
    assert _core.ends(RemoteEvent("SESSION_CLOSED", 1, reason="IDLE")) == (None, "SESSION_CLOSED")
    for kind in ("GRANTED", "ACQUIRED", "RELEASED", "WAIT_TIMEOUT", "DIED", "LEASE_LOST"):
        assert _core.ends(RemoteEvent(kind, 1, lease=7, lost_leases=[7])) is None, kind
    # Bad fields are named.
    with pytest.raises(TypeError, match="event.lease"):
        _core.ends(RemoteEvent("LEASE_EXPIRED", 1, lease="7"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"event.lost_leases"):
        _core.ends(RemoteEvent("WOUNDED", 1, lost_leases=[1, "2"]))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="event.event"):
        _core.ends(RemoteEvent(None, 1))  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        _core.ends(object())
    assert _core.LOST_AT_LOCAL_DEADLINE == "LEASE_EXPIRED"


def test_an_event_that_ends_a_lease_drops_its_local_deadline() -> None:
    server = Server("--memory", "--config", "policy=wound_wait")
    try:
        with (
            klock.connect(server.url) as direct,
            direct.session("older") as older,
            klock.connect(server.url) as k,
            k.session("younger") as younger,
        ):
            block = younger.lease("MUTATES FILE:/x")
            block.__enter__()
            assert k.kernel.next_deadline() is not None, "a held lease has a local deadline"
            with older.lease("MUTATES FILE:/x"):  # wounds the holder: a WOUNDED on the stream
                pass
            deadline = time.monotonic() + 8
            while not block.lost and time.monotonic() < deadline:
                time.sleep(0.02)
            assert block.lost, "the wound was not heard within 8 s"
            # Its local deadline is gone with it: nothing is left for the timer.
            assert k.kernel.next_deadline() is None
            with pytest.raises(klock.LeaseLost) as lost:
                block.__exit__(None, None, None)
            assert lost.value.name == "LEASE_RELEASED", lost.value
    finally:
        server.stop()


def test_a_grant_before_the_readers_first_poll_is_read_from_the_stream() -> None:
    # Under wound_wait the younger session waits for the older holder (under wait_die it dies).
    server = Server("--memory", "--config", "policy=wound_wait")
    link = Link(server.port)
    granted = threading.Event()
    release_holder = threading.Event()
    try:
        with klock.connect(server.url) as direct, direct.session("holder") as holder:
            held = holder.lease("MUTATES FILE:/x")
            held.__enter__()
            # Every event poll of the client waits at the link: its first one reaches the
            # server only after the grant below.
            link.hold("GET /v1/ns/default/watch")
            with klock.connect(link.url) as k, k.session("late") as late:

                def wait_for_x() -> None:
                    with late.lease("MUTATES FILE:/x", timeout=30):
                        granted.set()
                        release_holder.wait(10)

                waiter = threading.Thread(target=wait_for_x, daemon=True)
                waiter.start()
                deadline = time.monotonic() + 10
                while not direct.resource_state("FILE:/x")["waiting"]:
                    assert time.monotonic() < deadline, "the waiter never queued"
                    time.sleep(0.02)
                held.__exit__(None, None, None)  # the grant: an event of a later entry
                assert not granted.wait(0.3), "granted before any poll read the grant"
                link.release()
                # The ticket's own refresh comes a third of the TTL (20 s) after its acquire:
                # only the stream can tell the grant this soon.
                assert granted.wait(5), "the grant was not read from the stream"
                release_holder.set()
                waiter.join(10)
                assert not waiter.is_alive()
    finally:
        link.release()
        release_holder.set()
        link.close()
        server.stop()


def test_a_gap_renews_the_held_blocks_at_once() -> None:
    # A budget of a few events: a burst of others' events drops the wound that concerns us.
    server = Server("--memory", "--config", "policy=wound_wait", "--event-bytes", "4096")
    stalled, go = threading.Event(), threading.Event()

    def slow_watcher(event: RemoteEvent) -> None:
        if event.event == "ACQUIRED" and not stalled.is_set():
            trip = [x for x in event.leases or [] if getattr(x, "resource", None) == "FILE:/trip"]
            if trip:
                stalled.set()
                go.wait(20)  # the reader does not poll meanwhile

    try:
        with (
            klock.connect(server.url) as direct,
            direct.session("older") as older,
            klock.connect(server.url) as k,
            k.session("younger") as younger,
            direct.session("tripper") as tripper,
        ):
            granted = time.monotonic()
            block = younger.lease("MUTATES FILE:/x")
            block.__enter__()
            watch = k._watch("default", slow_watcher)
            # Not the older session: a release would make it younger (a new priority).
            with tripper.lease("MUTATES FILE:/trip"):
                pass
            assert stalled.wait(10), "the watcher never saw the trip"
            # The older session wounds the holder, and a burst of its own events pushes the
            # WOUNDED out of the server's budget before the reader polls again.
            with older.lease("MUTATES FILE:/x"):
                pass
            for _ in range(100):
                with older.lease("MUTATES FILE:/burst"):
                    pass
            assert not block.lost, "the loss cannot have been heard yet"
            go.set()
            deadline = time.monotonic() + 8
            while not block.lost and time.monotonic() < deadline:
                time.sleep(0.02)
            assert block.lost, "no loss learnt within 8 s of the gap"
            assert time.monotonic() - granted < 18, "too slow to tell a resync from the renewal"
            watch.stop()
            try:
                block.__exit__(None, None, None)
            except klock.LeaseLost as lost:
                # The renewal's answer (a wounded lease counts as released), not the local
                # deadline's LEASE_EXPIRED.
                assert lost.name == "LEASE_RELEASED", lost
            else:
                raise AssertionError("the block's exit did not raise its loss")
    finally:
        go.set()
        server.stop()


def test_after_a_memory_servers_restart_the_stream_reads_the_new_log() -> None:
    server = Server("--memory", "--config", "policy=wound_wait")
    try:
        with klock.connect(server.url, reconnect_timeout=15) as k, k.session("first") as first:
            for _ in range(20):  # entries push the stream's cursor past where a new log starts
                with first.lease("MUTATES FILE:/warm"):
                    pass
            log = k.kernel._follows["default"].log  # type: ignore[attr-defined]
            assert isinstance(log, str) and len(log) == 32, log
            server.kill()
            server.start()  # the same port, a new log
            with (
                klock.connect(server.url) as direct,
                direct.session("older") as older,
                k.session("younger") as younger,
            ):
                granted = time.monotonic()
                block = younger.lease("MUTATES FILE:/x")
                block.__enter__()
                # Wound-Wait: the older session takes /x; the WOUNDED is an early entry of the
                # new log, below the old cursor.
                with older.lease("MUTATES FILE:/x"):
                    pass
                deadline = time.monotonic() + 8
                while not block.lost and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert block.lost, "no loss heard within 8 s: the stream did not read the new log"
                assert time.monotonic() - granted < 18, "too slow to tell from the renewal at 20 s"
                assert k.kernel._follows["default"].log  # type: ignore[attr-defined] not in (None, log)
                with pytest.raises(klock.LeaseLost):
                    block.__exit__(None, None, None)
    finally:
        server.stop()
