"""A resync's renewals are paced (issue 27; the core's rule, core/src/client/renewals.rs, as
client/tests/scale.rs and node/test/renewal-pace.test.mjs): hundreds of sessions of one
``klock.connect`` each hold a lease against a durable ``klock serve`` whose connections per
peer are capped at ``MAX_RENEWALS_IN_FLIGHT + 8``; the server is SIGKILLed and restarted on its
port and data file after the client's reconnect budget, so the event reader's poll gives up,
its next answer may follow missed events, and every block is renewed at once. Checked: every lease held and renewed by the restarted server, none lost;
no connection closed or refused at the per-peer cap; and never more than
``MAX_RENEWALS_IN_FLIGHT`` heartbeats in flight at once (this driver sends them one at a time,
under the Klock's lock), each with its send time (where its local deadline counts from) taken
as it goes. Bounded: about 15 s in a debug build."""

from __future__ import annotations

import contextlib
import pathlib
import re
import threading
import time
from typing import Any

import klock
from klock import _core
from server import Server, call

SESSIONS = 400
#: No renewal falls due on its schedule (a third of the TTL) during the test: every renewal
#: it sees is the resync's, and the local deadlines stay far beyond the downtime.
TTL_S = 240
#: The client's reconnect budget: a call gives up once the server has been away this long.
RECONNECT_S = 1.5
#: How long the server stays away: longer than the budget, so the event reader's poll gives
#: up and its next answer has every block renewed (a server back within the budget, on the
#: same data file, kept every event after the cursor: nothing to resync, as in Rust's
#: client/tests/scale.rs).
DOWN_S = 3.5
#: How long after the restart every lease must have been renewed (generous: a loaded machine).
BURST_S = 30.0
#: Room under the per-peer cap for the client's other connections (its event reader, a call
#: in flight) and this test's reads of /metrics, above the renewals' bound.
ROOM = 8
#: How much older than the moment a heartbeat goes its send time may be (the time to call it).
LAG_MS = 50


def _metric(url: str, name: str, label: str = "") -> float:
    """The sum of the samples of ``name`` (those whose labels contain ``label``) in /metrics."""
    status, text = call("GET", f"{url}/metrics")
    assert status == 200, text
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(\{{.*\}})? (\S+)$", line)
        if match and label in (match.group(1) or ""):
            total += float(match.group(2))
    return total


class _InFlight:
    """Counts the backend's heartbeats in flight (the most at once), and how much older than
    the moment it went the send time each was given is (the most, in milliseconds)."""

    def __init__(self, k: klock.Klock) -> None:
        self.now = self.most = self.lag_ms = 0
        self._lock = threading.Lock()
        self._clock = k.now
        self._heartbeat = k.kernel.heartbeat
        k.kernel.heartbeat = self  # type: ignore[method-assign]

    def __call__(self, session: int, leases: Any, now: int) -> Any:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.lag_ms = max(self.lag_ms, self._clock() - now)
        try:
            return self._heartbeat(session, leases, now)
        finally:
            with self._lock:
                self.now -= 1


def test_after_a_restart_hundreds_of_leases_renew_paced_and_all_survive(
    tmp_path: pathlib.Path,
) -> None:
    cap = _core.MAX_RENEWALS_IN_FLIGHT + ROOM
    data = str(tmp_path / "klock.redb")
    server = Server("--data", data, "--max-connections-per-peer", str(cap))
    try:
        with klock.connect(server.url, namespace="pace", reconnect_timeout=RECONNECT_S) as k:
            flight = _InFlight(k)
            with contextlib.ExitStack() as held:
                blocks = [
                    held.enter_context(
                        k.session(f"agent-{i}").lease(f"MUTATES FILE:/pace/{i}", ttl=TTL_S)
                    )
                    for i in range(SESSIONS)
                ]
                before = [b.expires_at for b in blocks]
                assert flight.most == 0  # nothing renewed yet: every renewal below is the resync's

                server.kill()  # SIGKILL: a crash
                time.sleep(DOWN_S)
                server.start()  # the same port and data file
                back = time.monotonic()

                renewed = 0
                while time.monotonic() - back < BURST_S:
                    renewed = sum(b.expires_at > f for b, f in zip(blocks, before, strict=True))
                    if renewed == SESSIONS or any(b.lost for b in blocks):
                        break
                    time.sleep(0.05)
                took = time.monotonic() - back
                lost = [i for i, b in enumerate(blocks) if b.lost or not b.held]
                assert not lost, (
                    f"{len(lost)} leases lost after the restart: {blocks[lost[0]].lost}"
                )
                assert renewed == SESSIONS, (
                    f"only {renewed} of {SESSIONS} leases renewed within {BURST_S} s of the restart"
                )
                heartbeats = _metric(
                    server.url, "klock_http_requests_total", '/heartbeat",status="200"'
                )
                evicted = _metric(server.url, "klock_connections_closed_total", '"evicted_idle"')
                refused = _metric(
                    server.url, "klock_connections_closed_total", '"too_many_connections_from_peer"'
                )
                accepted = _metric(server.url, "klock_connections_accepted_total")
                print(
                    f"burst: {SESSIONS} leases renewed {took:.2f} s after the restart; "
                    f"{heartbeats:g} heartbeats answered 200, {accepted:g} connections accepted, "
                    f"{evicted:g} evicted at the cap of {cap}, {refused:g} refused; at most "
                    f"{flight.most} heartbeats in flight, send times at most {flight.lag_ms} ms old"
                )
                assert heartbeats >= SESSIONS
                # Paced: the burst stayed under the per-peer cap, which closed or refused nothing.
                assert (evicted, refused) == (0, 0), "connections closed at the per-peer cap"
                assert 1 <= flight.most <= _core.MAX_RENEWALS_IN_FLIGHT
                # Each renewal's local deadline counts from when it went, not from when the
                # burst fell due (the last of 400 goes about a second later).
                assert flight.lag_ms <= LAG_MS, f"a send time {flight.lag_ms} ms old"
                assert _metric(server.url, "klock_active_leases") == SESSIONS
            assert _metric(server.url, "klock_active_leases") == 0
    finally:
        server.stop()


def test_the_bound_is_the_cores() -> None:
    assert _core.MAX_RENEWALS_IN_FLIGHT == 32
