"""The remote client's transport (klock._http) against a real ``klock serve``, through the
tests' own TCP link (server.Link) that counts the connections clients make and can lose a
request or an answer: calls reuse one keep-alive connection; threads and asyncio tasks each
get a connection of their own, never one in the middle of another request; a connection the
server closed (idle, or at its requests-per-connection cap) is replaced without an error; a
stale pooled connection's request is sent again once, on a fresh connection, only when that
is safe (a read, or an Idempotency-Key), so nothing is done twice; and close() ends a long
poll at once. Every test is bounded in time."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import klock
from klock import _http
from server import Link, Server, call


@pytest.fixture
def link(memory_server: Any) -> Iterator[Link]:
    """A link of the test's own to the shared ``klock serve --memory``."""
    made = Link(memory_server.port)
    yield made
    made.close()


def _opened(memory_server: Any) -> int:
    """The server's count of sessions opened so far (asked on a connection of its own)."""
    status, text = call("GET", f"{memory_server.url}/v1/ns/default/stats")
    assert status == 200, text
    return int(json.loads(text)["counters"]["sessions_opened"])


def _open_session(transport: _http.Transport, agent: str, **headers: str) -> _http.Response:
    return transport.request(
        "POST",
        "/v1/ns/default/sessions",
        content=json.dumps({"agent_id": agent}).encode(),
        headers={"Content-Type": "application/json", **headers},
        timeout=5,
    )


def test_many_calls_share_one_keep_alive_connection(link: Link) -> None:
    with klock.connect(link.url) as k, k.session("reuse") as s:
        for _ in range(100):
            with s.lease("MUTATES FILE:/reuse") as lease:
                assert lease.held
        # One connection for every call (the check, the open, 200 acquires and releases),
        # and one for the event reader's long poll.
        assert link.accepted == 2, link.accepted


def test_threads_and_tasks_never_share_a_connection_mid_request(link: Link) -> None:
    """Eight threads and eight asyncio tasks, each in its own session and resource, at once:
    every answer is the caller's own, and the pool opens no more connections than calls in
    flight (one per thread or executor thread, plus the event reader)."""
    with klock.connect(link.url) as k:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                with k.session(f"thread-{n}") as s:
                    for _ in range(25):
                        with s.lease(f"MUTATES FILE:/threads/{n}") as lease:
                            (info,) = lease.leases
                            assert info.resource == f"FILE:/threads/{n}", info
                            assert info.session_id == s.session_id
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert link.accepted <= 8 + 1, link.accepted

        async def task(n: int) -> None:
            s = k.session(f"task-{n}")
            for _ in range(25):
                async with s.lease(f"MUTATES FILE:/tasks/{n}") as lease:
                    (info,) = lease.leases
                    assert info.resource == f"FILE:/tasks/{n}", info
                    assert info.session_id == s.session_id
            s.close()

        async def tasks() -> None:
            await asyncio.gather(*(task(n) for n in range(8)))

        asyncio.run(asyncio.wait_for(tasks(), 60))
        assert k.stats()["active_leases"] == 0


def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    server = Server("--memory", "--idle-timeout-ms", "200")
    own = Link(server.port)
    try:
        transport = _http.Transport(own.url)
        try:
            assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
            time.sleep(0.6)  # the server closes the idle connection
            # A write without an Idempotency-Key, which a stale connection may not resend: the
            # closed connection is found before it is used.
            assert _open_session(transport, "after-idle").is_success
            assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
            assert own.accepted == 2, own.accepted
        finally:
            transport.close()
    finally:
        own.close()
        server.stop()


def test_the_servers_requests_per_connection_cap_is_followed() -> None:
    server = Server("--memory", "--max-requests-per-connection", "3")
    own = Link(server.port)
    try:
        transport = _http.Transport(own.url)
        try:
            for _ in range(10):
                assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
            assert own.accepted == 4, own.accepted  # 3 + 3 + 3 + 1
        finally:
            transport.close()
    finally:
        own.close()
        server.stop()


def test_idle_connections_expire(link: Link, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "IDLE_S", 0.2)
    transport = _http.Transport(link.url)
    try:
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        assert link.accepted == 1
        time.sleep(0.3)
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        assert link.accepted == 2, link.accepted
    finally:
        transport.close()


def test_a_stale_connection_resends_a_read_once_on_a_fresh_connection(link: Link) -> None:
    transport = _http.Transport(link.url)
    try:
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        link.lose("request", "GET /v1/version ")  # the pooled connection: closed, no answer
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        assert (link.lost, link.accepted) == (1, 2)
    finally:
        transport.close()


def test_a_stale_connection_resends_a_keyed_request_which_acts_once(
    link: Link, memory_server: Any
) -> None:
    """The server acted, and the pooled connection closed before the answer: the request is
    sent again on a fresh connection with the same Idempotency-Key, and the server answers it
    with the first answer instead of opening a second session."""
    transport = _http.Transport(link.url)
    try:
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        before = _opened(memory_server)
        link.lose("answer", "POST /v1/ns/default/sessions ")
        first = _open_session(transport, "keyed", **{"Idempotency-Key": "stale-keyed-1"})
        assert first.is_success, first.text
        assert (link.lost, link.accepted) == (1, 2)
        assert _opened(memory_server) == before + 1
        again = _open_session(transport, "keyed", **{"Idempotency-Key": "stale-keyed-1"})
        assert again.json()["session_id"] == first.json()["session_id"]
    finally:
        transport.close()


def test_a_stale_connection_never_resends_an_unkeyed_write(link: Link, memory_server: Any) -> None:
    """Without an Idempotency-Key a write may not be sent twice: the failure is raised (to the
    caller's retry rules), and the server acted once."""
    transport = _http.Transport(link.url)
    try:
        assert transport.request("GET", "/v1/version", timeout=5).status_code == 200
        before = _opened(memory_server)
        link.lose("answer", "POST /v1/ns/default/sessions ")
        with pytest.raises(_http.TransportError, match="the connection was cut"):
            _open_session(transport, "unkeyed")
        assert (link.lost, link.accepted) == (1, 1)
        assert _opened(memory_server) == before + 1
    finally:
        transport.close()


def test_a_fresh_connections_failure_is_raised_not_resent(link: Link) -> None:
    transport = _http.Transport(link.url)
    try:
        link.lose("request", "GET /v1/version ")
        with pytest.raises(_http.TransportError, match="the connection was cut"):
            transport.request("GET", "/v1/version", timeout=5)
        assert (link.lost, link.accepted) == (1, 1)
    finally:
        transport.close()


def test_a_keyed_call_whose_answer_is_lost_acts_once_through_the_client(
    link: Link, memory_server: Any
) -> None:
    with klock.connect(link.url) as k:
        before = _opened(memory_server)
        link.lose("answer", "POST /v1/ns/default/sessions ")
        with k.session("lost-answer") as s, s.lease("MUTATES FILE:/lost-answer") as lease:
            assert lease.held
        assert link.lost == 1
        assert _opened(memory_server) == before + 1


def test_a_read_after_close_that_cannot_reach_the_server_is_unreachable() -> None:
    """Reads still work after close() on a connection of their own; one that cannot reach
    the server is the usual Unreachable, not a transport error."""
    server = Server("--memory")
    try:
        k = klock.connect(server.url)
        k.close()
        assert k.stats()["active_leases"] == 0
        server.stop()
        with pytest.raises(klock.Unreachable, match="connection refused"):
            k.stats()
    finally:
        server.stop()


def test_close_ends_a_long_poll_at_once(link: Link) -> None:
    transport = _http.Transport(link.url)
    outcome: list[BaseException | _http.Response] = []
    # A namespace nobody uses, from its newest event on: the poll waits its whole wait_ms.
    watch = "/v1/ns/long-poll-closed/watch"
    latest = transport.request("GET", watch, params={"wait_ms": 0}, timeout=5).json()["next"]

    def poll() -> None:
        try:
            outcome.append(
                transport.request(
                    "GET",
                    watch,
                    params={"after": latest, "wait_ms": 10_000},
                    timeout=5,
                    read_timeout=20,
                )
            )
        except BaseException as e:  # checked below
            outcome.append(e)

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)  # the poll waits on the server
    started = time.monotonic()
    transport.close()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - started < 1.0
    assert len(outcome) == 1 and isinstance(outcome[0], _http.TransportClosed), outcome
    with pytest.raises(_http.TransportClosed):
        transport.request("GET", "/v1/version", timeout=5)
