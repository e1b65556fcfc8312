"""Remote-only tests of klock.connect at the edges issue 22 names (items 17-19), against real
``klock serve`` processes: a session another client resumed (its token refused, 401) loses the
block at once with ``LeaseLost``; the server's documented 429s (``RATE_LIMITED``,
``TOO_MANY_WAITS``, from a token file with tiny limits) are asked again within the budget
instead of raised at once, and raised once it is spent; a frozen server (SIGSTOP) costs a call
at most its ``reconnect_timeout``, not the request timeout. Every test is bounded in time;
every frozen server is thawed in ``finally``."""

from __future__ import annotations

import http.server
import json
import pathlib
import signal
import threading
import time
from typing import Any

import pytest

import klock
from server import Server, call, token_server

# The bound of a call whose budget is B seconds: B plus room for a loaded two-core machine.
_SLACK_S = 2.0


# ---- item 17: a session taken by another client ----------------------------------------------


def test_a_session_resumed_by_another_client_loses_the_block_at_once(memory_server: Any) -> None:
    """Another client resumes the session (a new session token): this client's next renewal
    is refused with 401. The block is lost at once, LEASE_RELEASED, saying why, not an
    Unauthorized about the bearer token; the Klock closes cleanly."""
    with klock.connect(memory_server.url) as k, klock.connect(memory_server.url) as other:
        s = k.session("taken")
        with pytest.raises(klock.LeaseLost) as lost:
            with s.lease("MUTATES FILE:/taken", ttl=60) as block:
                taken = other.resume(s.digest())
                block.heartbeat()
        assert lost.value.name == "LEASE_RELEASED", lost.value
        assert "session token" in lost.value.message, lost.value
        assert "another client resumed" in lost.value.message, lost.value
        # The session is the other client's now: its lease is untouched there.
        assert [st for _, st, _, _ in taken.reconcile(lost.value.lease_ids)] == ["ACTIVE"]
        taken.close()
    assert k.timer_error is None, k.timer_error


def test_the_timer_loses_a_taken_session_block_before_its_deadline(memory_server: Any) -> None:
    """The same through the Klock's own heartbeat (due at a third of the TTL): the block is
    lost at that renewal, LEASE_RELEASED, long before its local deadline would say
    LEASE_EXPIRED."""
    with klock.connect(memory_server.url) as k, klock.connect(memory_server.url) as other:
        s = k.session("taken-by-timer")
        block = s.lease("MUTATES FILE:/taken-by-timer", ttl=6)
        block.__enter__()
        other.resume(s.digest())
        deadline = time.monotonic() + 5
        while not block.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(klock.LeaseLost) as lost:
            block.__exit__(None, None, None)
        assert lost.value.name == "LEASE_RELEASED", lost.value
        assert "session token" in lost.value.message, lost.value
        assert k.timer_error is None, k.timer_error


def test_a_session_closed_by_another_request_loses_the_block(memory_server: Any) -> None:
    """The session is closed by another request with its token: the next renewal finds it
    gone, and the block raises LeaseLost (LEASE_RELEASED)."""
    with klock.connect(memory_server.url) as k:
        s = k.session("closed-elsewhere")
        with pytest.raises(klock.LeaseLost) as lost:
            with s.lease("MUTATES FILE:/closed-elsewhere", ttl=60) as block:
                token = k.kernel._tokens[s.session_id]  # type: ignore[attr-defined]
                status, text = call(
                    "DELETE",
                    f"{memory_server.url}/v1/ns/default/sessions/{s.session_id}",
                    headers={"Klock-Session-Token": token, "Idempotency-Key": "close-1"},
                )
                assert status == 200, text
                block.heartbeat()
        assert lost.value.name == "LEASE_RELEASED", lost.value


# ---- item 18: the server's 429s ---------------------------------------------------------------


def test_rate_limited_calls_are_asked_again_within_the_budget(tmp_path: pathlib.Path) -> None:
    """A token of 4 requests a second: a burst of calls meets RATE_LIMITED (429) and each is
    asked again with backoff until it passes; none raises."""
    server = token_server(tmp_path, rate_per_second=4)
    try:
        with klock.connect(server.url, token="secret", reconnect_timeout=20) as k:
            for _ in range(12):  # three seconds' worth at the token's rate
                state = k.resource_state("FILE:/rate")
                assert state["holders"] == []
    finally:
        server.stop()


def test_rate_limited_past_the_budget_raises_the_servers_error(tmp_path: pathlib.Path) -> None:
    """One request a second and a budget of 0.3 s: the second call in a row cannot pass within
    its budget and raises the server's RATE_LIMITED, within the budget."""
    server = token_server(tmp_path, rate_per_second=1)
    try:
        k = klock.connect(server.url, token="secret", reconnect_timeout=0.3)
        try:
            started = time.monotonic()
            with pytest.raises(klock.KlockError) as refused:
                k.resource_state("FILE:/rate")
            assert refused.value.name == "RATE_LIMITED", refused.value
            assert time.monotonic() - started < 0.3 + _SLACK_S
        finally:
            k.close()
    finally:
        server.stop()


def test_too_many_waits_is_asked_again_once_a_slot_frees(tmp_path: pathlib.Path) -> None:
    """A token of one waiting request at a time, taken by another long-poll of the same
    token: opening a session (which reads its namespace's stream) meets TOO_MANY_WAITS (429)
    and is asked again until the long-poll ends, then succeeds."""
    server = token_server(tmp_path, max_long_polls=1)
    auth = {"Authorization": "Bearer secret"}
    watch = f"{server.url}/v1/ns/default/watch"
    try:
        with klock.connect(server.url, token="secret", reconnect_timeout=20) as k:

            def hold() -> None:
                # The probes below compete for the one slot: a long-poll refused because a
                # probe held it at that instant asks again, so the slot is taken in the end.
                while call("GET", watch, params={"wait_ms": 1500}, headers=auth)[0] == 429:
                    pass

            holder = threading.Thread(target=hold)
            holder.start()
            # Until a probe of our own is refused, the slot is not taken yet.
            until = time.monotonic() + 10
            while call("GET", watch, params={"wait_ms": 0}, headers=auth)[0] != 429:
                assert time.monotonic() < until, "the long-poll never took the slot"
                time.sleep(0.01)
            s = k.session("patient")
            assert s.session_id > 0
            holder.join(10)
    finally:
        server.stop()


def test_a_call_retrying_a_429_does_not_starve_other_sessions_heartbeats(
    tmp_path: pathlib.Path,
) -> None:
    """A token of one session: a second open meets TOO_MANY_SESSIONS (429) and is asked again
    for its whole budget (6 s), holding the client's lock. Meanwhile the first session's 3 s
    lease falls due for renewal twice over: the retrying call sends the heartbeats due between
    its attempts, so the lease is still held when the open gives up, and renewed."""
    server = token_server(tmp_path, "--max-sessions-per-token", "1")
    try:
        with klock.connect(server.url, token="secret", reconnect_timeout=6) as k:
            s = k.session("holder")
            with s.lease("MUTATES FILE:/kept", ttl=3) as block:
                granted_until = block.expires_at
                started = time.monotonic()
                with pytest.raises(klock.KlockError) as refused:
                    k.session("second")
                assert refused.value.name == "TOO_MANY_SESSIONS", refused.value
                assert time.monotonic() - started > 3  # the retries outlasted the lease's TTL
                assert block.held and not block.lost
                assert block.expires_at > granted_until
    finally:
        server.stop()


class _BusyOnce(http.server.BaseHTTPRequestHandler):
    """A stand-in for a server that sends ``Retry-After`` (klock serve may not): the first
    version request is a 429 asking for a 1 s pause, the rest are answered."""

    times: list[float] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.times.append(time.monotonic())
        status, extra = (429, {"Retry-After": "1"}) if len(self.times) == 1 else (200, {})
        body = json.dumps(
            {"error": {"code": 0, "name": "RATE_LIMITED", "message": "slow down"}}
            if status == 429
            else {"version": "stand-in"}
        ).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **extra}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_retry_after_is_honoured() -> None:
    """A 429 with ``Retry-After: 1`` is asked again no sooner than a second later (the
    backoff alone would ask after 50 ms)."""
    _BusyOnce.times = []
    stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BusyOnce)
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    try:
        k = klock.connect(f"http://127.0.0.1:{stand_in.server_port}", reconnect_timeout=10)
        k.close()
        first, second = _BusyOnce.times[:2]
        assert second - first >= 0.9, _BusyOnce.times
    finally:
        stand_in.shutdown()
        stand_in.server_close()


# ---- item 19: every call bounded by the budget ------------------------------------------------


def test_a_frozen_server_costs_a_call_at_most_its_budget() -> None:
    """The server is frozen (SIGSTOP): connections open but nothing answers. With a budget of
    1 s and the default 10 s request timeout, a session's close and a read each give up
    within the budget (plus slack), not after the request timeout."""
    server = Server("--memory")
    assert server.proc is not None
    try:
        k = klock.connect(server.url, reconnect_timeout=1.0)
        s = k.session("frozen")
        server.freeze()
        try:
            started = time.monotonic()
            s.close()  # its leases end at their TTL on a server that never answers
            assert time.monotonic() - started < 1.0 + _SLACK_S
            started = time.monotonic()
            with pytest.raises(klock.Unreachable) as info:
                k.resource_state("FILE:/frozen")
            assert time.monotonic() - started < 1.0 + _SLACK_S
            assert "timed out" in info.value.message, info.value
            started = time.monotonic()
            k.close()
            assert time.monotonic() - started < 1.0 + _SLACK_S
        finally:
            server.proc.send_signal(signal.SIGCONT)
    finally:
        server.stop()


def test_request_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="request_timeout"):
        klock.connect("http://127.0.0.1:1", request_timeout=0)
