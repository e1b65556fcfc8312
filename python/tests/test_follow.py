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
  so no poll fails and only the gap can say events were missed.

Every wait is bounded."""

from __future__ import annotations

import threading
import time

import klock
from klock.remote import RemoteEvent
from server import Link, Server


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
                assert lost.name != "NOT_RENEWED", lost
            else:
                raise AssertionError("the block's exit did not raise its loss")
    finally:
        go.set()
        server.stop()
