"""The remote client over several server URLs (klock.remote, "Failover"; the core's
``client::failover`` rules): against a real three-process cluster (``server.cluster``), a lease
block survives a SIGKILL of the leader; a client on a follower goes to the leader once an
answer names it; a list whose every node is down gives ``Unreachable``
naming the URLs; a bad URL in a list is refused by name."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import klock
from klock import _core
from server import Server, cluster, free_port


def test_a_lease_block_survives_a_leader_killed_and_a_waiter_then_gets_a_higher_fence() -> None:
    started = time.monotonic()
    with cluster() as nodes:
        leader = nodes.leader()
        # The leader first: the client's calls (and its event reader) start there.
        urls = [nodes.urls[leader]] + [u for i, u in enumerate(nodes.urls) if i != leader]
        holder = klock.connect(urls, reconnect_timeout=15)
        # The waiter's client names the nodes in one string; its event reader starts on the
        # leader too, so its grant is heard through a survivor.
        waiter = klock.connect(",".join(urls), reconnect_timeout=15)
        got: dict[str, Any] = {}

        # The waiter's session is the older: its acquire waits on a ticket (a younger one
        # would be told to die and ask again), so only its event reader can tell it of the
        # grant (or its ticket's re-poll after a switch of node).
        elder = waiter.session("waiter")

        def wait_for_it() -> None:
            try:
                with elder.lease("MUTATES FILE:/x", timeout=30) as lease:
                    got["fence"] = lease.fence
            except BaseException as e:  # noqa: BLE001 (reported by the test below)
                got["error"] = e

        try:
            with holder.session("holder") as s:
                # A TTL well above an election plus a 503's Retry-After (the renewal due while
                # the cluster has no leader waits that long), even on a loaded machine.
                with s.lease("MUTATES FILE:/x", ttl=8) as lease:
                    fence = lease.fence
                    thread = threading.Thread(target=wait_for_it, daemon=True)
                    thread.start()
                    waited = time.monotonic()
                    while waiter.counters.waits < 1:  # the waiter's acquire is waiting
                        assert time.monotonic() - waited < 10, got
                        time.sleep(0.05)
                    assert "fence" not in got and "error" not in got, got
                    nodes.kill(leader)
                    killed_at = time.monotonic()
                    before = lease.expires_at
                    # Longer than the TTL: the lease lives only if renewals reach a survivor.
                    time.sleep(9)
                    assert lease.held, lease
                    assert lease.expires_at > before, "no renewal through a survivor"
                    assert holder.kernel._servers.preferred != 0  # type: ignore[attr-defined]
                # The block ended normally (no LeaseLost) and its release was answered.
                assert not lease.held
            thread.join(timeout=20)
            assert not thread.is_alive(), "the waiter never got the lease"
            assert "error" not in got, got.get("error")
            assert got["fence"] > fence, (got["fence"], fence)
            assert time.monotonic() - killed_at < 30
        finally:
            holder.close()
            waiter.close()
    assert time.monotonic() - started < 50


def test_a_client_on_a_follower_goes_to_the_leader_once_an_answer_names_it() -> None:
    """A follower's answers name the leader (``Klock-Leader``); the core's ``Servers.led_by``
    then makes the leader the node every call starts at (a follower heard from its leader
    lately names it: calls are made until one does, within a bound)."""
    with cluster() as nodes:
        leader = nodes.leader()
        follower = (leader + 1) % 3
        client = klock.connect([nodes.urls[follower], nodes.urls[leader]], reconnect_timeout=15)
        servers = client.kernel._servers  # type: ignore[attr-defined]
        try:
            # The follower answers first (connect's own call, then these), naming the leader.
            with client.session("named") as s:
                started = time.monotonic()
                while servers.preferred == 0:
                    assert time.monotonic() - started < 15, "no answer named the leader"
                    with s.lease("MUTATES FILE:/named", ttl=30) as lease:
                        assert lease.held
                # The leader names none: the client stays there.
                for _ in range(5):
                    with s.lease("MUTATES FILE:/named", ttl=30):
                        pass
                assert servers.preferred == 1
        finally:
            client.close()


def test_every_node_down_is_unreachable_naming_each_url_after_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(3)]
    monkeypatch.setenv("KLOCK_SERVER", ",".join(dead))
    start = time.monotonic()
    with pytest.raises(klock.Unreachable) as info:
        klock.connect(reconnect_timeout=0.5)
    took = time.monotonic() - start
    assert 0.3 < took < 3, took
    for url in dead:
        assert f"{url}: connection refused" in str(info.value), str(info.value)
    assert "reconnect_timeout=0.5 s" in str(info.value)


def test_a_dead_node_in_the_list_is_passed_over() -> None:
    server = Server("--memory")
    try:
        dead = f"http://127.0.0.1:{free_port()}"
        with klock.connect([dead, server.url], reconnect_timeout=5) as k:
            with k.session("over") as s, s.lease("MUTATES FILE:/over") as lease:
                assert lease.held
            assert k.kernel._servers.preferred == 1  # type: ignore[attr-defined]
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("url", "named"),
    [
        (["http://127.0.0.1:1", "ftp://127.0.0.1:2"], "'ftp://127.0.0.1:2'"),
        ("http://127.0.0.1:1,127.0.0.1:2", "'127.0.0.1:2'"),
        ("http://127.0.0.1:1,,http://127.0.0.1:2", "got ''"),
        (["http://127.0.0.1:1", "http://"], "'http://'"),
        (["http://127.0.0.1:99999"], "'http://127.0.0.1:99999'"),
    ],
)
def test_a_bad_url_in_a_list_is_refused_by_name(url: Any, named: str) -> None:
    with pytest.raises(ValueError, match="url must be an http") as info:
        klock.connect(url, reconnect_timeout=0.2)
    assert named in str(info.value), str(info.value)


def test_a_list_must_name_distinct_urls_as_strings() -> None:
    with pytest.raises(ValueError, match="given twice"):
        klock.connect(["http://127.0.0.1:1", "http://127.0.0.1:1/"])
    with pytest.raises(ValueError, match="empty list"):
        klock.connect([])
    with pytest.raises(TypeError, match="must be a str, got int"):
        klock.connect(["http://127.0.0.1:1", 7])  # type: ignore[list-item]


def test_the_core_rules_cross_the_binding_as_plain_values() -> None:
    """klock._core.Servers/Attempts translate the core's failover rules (its own tests hold
    the rules): a round over every node at once, then the backoff; an answer is preferred."""
    servers = _core.Servers(3)
    assert (servers.count, servers.preferred) == (3, 0)
    call = servers.call(1_000, 10_000)
    assert (call.node, call.ends_ms) == (0, 11_000)
    assert call.attempt_limit_ms(10_000, 5_000) == 1_000
    assert call.after(servers, "unreachable", None, 1_000) == ("retry", 1, 0)
    assert call.after(servers, "unavailable", 2_000, 1_000) == ("retry", 2, 0)
    assert call.after(servers, "unavailable", None, 1_000) == ("retry", 0, 50)
    assert call.after(servers, "busy", 700, 1_050) == ("retry", 0, 700)
    assert call.after(servers, "unreachable", None, 1_750) == ("retry", 1, 0)
    assert call.after(servers, "answered", None, 1_760) == ("done", 1, 0)
    assert servers.preferred == 1
    once = servers.call_once(0, 100)
    for node in (2, 0):
        assert once.after(servers, "unreachable", None, 0) == ("retry", node, 0)
    assert once.after(servers, "unreachable", None, 0) == ("gave_up_unreachable", 0, 0)
    busy = servers.call(0, 100)
    assert busy.after(servers, "busy", 1_000, 0) == ("gave_up_busy", 1, 0)
    with pytest.raises(ValueError, match="at least one server URL"):
        _core.Servers(0)
    with pytest.raises(ValueError, match="outcome must be one of"):
        servers.call(0, 1).after(servers, "lost", None, 0)  # type: ignore[arg-type]
