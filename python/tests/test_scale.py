"""A fleet behind one token, from one process (issue 27 item 2): 2,000 sessions, each holding a
lease and renewing it, through one ``klock.connect`` against a real ``klock serve``
with a token file and every limit at its default. Shows that the default limits fit a fleet of
thousands behind one token, and that one client process reads one event stream, not one per
session. Bounded: the whole test takes well under a minute on a loaded two-core machine."""

from __future__ import annotations

import contextlib
import pathlib
import re
import time

import klock
from server import call, token_server

SESSIONS = 2_000
TTL_S = 30
#: Every lease is renewed a third of the way through its TTL: wait well past that for the last
#: one (a loaded machine answers heartbeats late), well before any deadline.
HOLD_S = TTL_S / 2


def _gauge(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_two_thousand_sessions_behind_one_token_hold_and_renew_their_leases(
    tmp_path: pathlib.Path,
) -> None:
    server = token_server(tmp_path, secret="fleet-secret")  # every limit at its default
    auth = {"Authorization": "Bearer fleet-secret"}
    try:
        with klock.connect(server.url, token="fleet-secret", namespace="fleet") as k:
            with contextlib.ExitStack() as held:
                blocks = []
                for i in range(SESSIONS):
                    s = k.session(f"agent-{i}")
                    blocks.append(
                        held.enter_context(s.lease(f"MUTATES FILE:/fleet/{i}", ttl=TTL_S))
                    )
                first = [b.expires_at for b in blocks]
                _, metrics = call("GET", f"{server.url}/metrics", headers=auth)
                assert _gauge(metrics, "klock_active_sessions") == SESSIONS
                assert _gauge(metrics, "klock_active_leases") == SESSIONS
                # One stream for the whole process: the namespace's watch, not one per session.
                assert _gauge(metrics, "klock_event_readers") <= 1

                # Past every lease's first renewal: each is held and was renewed.
                time.sleep(HOLD_S)
                lost = [i for i, b in enumerate(blocks) if b.lost or not b.held]
                assert not lost, f"{len(lost)} leases lost, the first {lost[:5]}"
                renewed = sum(b.expires_at > f for b, f in zip(blocks, first, strict=True))
                assert renewed == SESSIONS, f"only {renewed} of {SESSIONS} leases renewed"
                _, metrics = call("GET", f"{server.url}/metrics", headers=auth)
                assert _gauge(metrics, "klock_active_leases") == SESSIONS
            # Leaving the blocks released every lease.
            _, metrics = call("GET", f"{server.url}/metrics", headers=auth)
            assert _gauge(metrics, "klock_active_leases") == 0
    finally:
        server.stop()
