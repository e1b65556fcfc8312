"""klock.Election on both backends: campaign, term, resign, leader(), observe(), losses, the
order of successors under each policy, bad input. (Five processes through a real server:
test_election_processes.py.)"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

import pytest

import klock
from klock import Election, Klock

MakeKlock = Callable[..., Klock]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def campaign_in_thread(e: Election) -> tuple[threading.Thread, list[object]]:
    """Runs e.campaign() in a thread; its result (term or exception) lands in the list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(e.campaign())
        except BaseException as err:  # reported by the caller
            out.append(err)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def queued(k: Klock, e: Election) -> int:
    return len(k.resource_state(e.resource)["waiting"])


def test_campaign_returns_the_fence_as_term_and_resign_hands_over(make_klock: MakeKlock) -> None:
    k = make_klock("detect")
    told: list[klock.LeaseLost] = []
    a = Election(k, "indexer", agent_id="a", ttl=5, on_lost=told.append)
    b = Election(k, "indexer", agent_id="b", ttl=5, on_lost=told.append)
    assert a.resource == "LEADER:/indexer" and a.name == "indexer"
    assert a.leader() is None and a.term is None and not a.is_leader()
    term = a.campaign()
    assert term == a.term == a.check()
    state = k.resource_state("LEADER:/indexer")
    (holder,) = state["holders"]
    assert (holder["agent_id"], holder["predicate"], holder["fence"]) == ("a", "MUTATES", term)
    seen = b.leader()
    assert seen is not None
    assert (seen.agent_id, seen.term, seen.lease_id) == ("a", term, holder["lease_id"])
    # In the kernel's milliseconds (the server's remotely): granted now, for the TTL.
    assert seen.expires_at - seen.since == 5000
    assert a.is_leader() and not b.is_leader()

    t, out = campaign_in_thread(b)
    wait_until(lambda: queued(k, b) == 1)
    a.resign()
    t.join(10)
    (b_term,) = out
    assert isinstance(b_term, int) and b_term > term
    assert not a.is_leader() and b.is_leader() and a.term is None
    now = a.leader()
    assert now is not None and (now.agent_id, now.term) == ("b", b_term)
    a.resign()  # idempotent
    b.resign()
    assert a.leader() is None
    assert told == [] and not a.lost and not b.lost  # a resign is not a loss
    # A resigned campaign's session is closed: nothing of it is left in the kernel.
    assert k.resource_state("LEADER:/indexer") == {
        "covering": [],
        "holders": [],
        "namespace": k.namespace,
        "resource": "LEADER:/indexer",
        "waiting": [],
    }


def test_bad_names_and_arguments_are_named_errors(make_klock: MakeKlock) -> None:
    k = make_klock()
    for bad, says in [
        ("", "root"),
        (".", "root"),
        ("/", "root"),
        ("a/../b", "'..'"),
        ("x\x07", "unprintable character U+0007"),
    ]:
        with pytest.raises(klock.InvalidInput) as info:
            Election(k, bad)
        assert info.value.name == "INVALID_RESOURCE" and says in info.value.message, bad
    assert Election(k, "a//b/").resource == "LEADER:/a/b"  # the kernel's normal form
    with pytest.raises(TypeError, match="name must be a str"):
        Election(k, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="klock must be a klock.Klock"):
        Election(object(), "x")  # type: ignore[arg-type]
    for ttl in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="ttl must be a finite number of seconds > 0"):
            Election(k, "x", ttl=ttl)
    with pytest.raises(TypeError, match="on_lost must be callable"):
        Election(k, "x", on_lost=1)  # type: ignore[arg-type]
    e = Election(k, "x")
    with pytest.raises(ValueError, match="timeout"):
        e.campaign(timeout=-1)
    assert k.resource_state("LEADER:/x")["waiting"] == [] and e.leader() is None
    with pytest.raises(klock.StateError, match="does not lead"):
        e.check()


def test_default_identity_and_a_second_campaign_while_leading(make_klock: MakeKlock) -> None:
    import os
    import socket

    k = make_klock()
    e = Election(k, "x")
    assert e.agent_id == f"{socket.gethostname()}/{os.getpid()}"
    e.campaign()
    with pytest.raises(klock.StateError, match="already leads"):
        e.campaign()
    assert e.is_leader()
    e.resign()


def test_campaign_timeout_gives_up_and_leaves_nothing(make_klock: MakeKlock) -> None:
    k = make_klock("detect")
    a = Election(k, "x", agent_id="a")
    b = Election(k, "x", agent_id="b")
    a.campaign()
    with pytest.raises(klock.Timeout):
        b.campaign(timeout=0.2)
    with pytest.raises(klock.Timeout):
        b.campaign(timeout=0)  # try once
    assert queued(k, b) == 0 and not b.is_leader() and b.term is None
    assert k.stats()["active_sessions"] == 1  # the failed campaigns' sessions are closed
    a.resign()


def test_resign_abandons_a_campaign_in_progress(make_klock: MakeKlock) -> None:
    k = make_klock("lanes")
    a = Election(k, "x", agent_id="a")
    b = Election(k, "x", agent_id="b")
    a.campaign()
    t, out = campaign_in_thread(b)
    wait_until(lambda: queued(k, b) == 1)
    b.resign()
    t.join(10)
    assert isinstance(out[0], klock.Closed)
    assert queued(k, b) == 0
    a.resign()


def test_loss_when_the_session_is_closed_behind_the_client(make_klock: MakeKlock) -> None:
    k = make_klock()
    told: list[klock.LeaseLost] = []
    e = Election(k, "x", agent_id="a", ttl=0.3, on_lost=told.append)
    term = e.campaign()
    assert not e.lost and not e.wait_lost(0.01)
    session = e._session
    assert session is not None
    k.kernel.close_session(session.session_id, k.now())  # not through this client
    assert e.wait_lost(10)  # the next heartbeat finds the session gone
    wait_until(lambda: len(told) == 1)
    assert told[0].name == "LEASE_RELEASED" and "closed in the kernel" in told[0].message
    assert e.lost and not e.is_leader() and e.term == term
    with pytest.raises(klock.LeaseLost):
        e.check()
    e.resign()
    assert not e.lost or e.term is None


def test_loss_by_a_wound_and_the_with_block_raises_it(make_klock: MakeKlock) -> None:
    k = make_klock("wound_wait")
    told: list[klock.LeaseLost] = []
    with k.session("older") as older:  # opened first: older than the campaign's session
        with pytest.raises(klock.LeaseLost) as info:
            with Election(k, "x", agent_id="a", on_lost=told.append) as e:
                assert e.is_leader()
                with older.lease("MUTATES LEADER:/x"):  # wounds the leader
                    assert e.wait_lost(10)
                    assert not e.is_leader()
        assert info.value.name == "LEASE_RELEASED" and "wounded" in info.value.message
    wait_until(lambda: len(told) == 1)
    assert told[0].name == "LEASE_RELEASED"


def test_a_pause_past_the_ttl_is_noticed_before_any_timer_runs(make_klock: MakeKlock) -> None:
    clock = klock.ManualClock()
    k = make_klock(clock=clock)
    told: list[klock.LeaseLost] = []
    a = Election(k, "x", agent_id="a", ttl=1, on_lost=told.append)
    a.campaign()
    clock.advance(5_000)  # heartbeats keep it
    assert a.is_leader()
    clock.jump(1_000)  # paused past the TTL: no timer ran
    assert not a.is_leader()  # settled on the spot
    assert a.lost
    wait_until(lambda: len(told) == 1)
    assert told[0].name == "LEASE_EXPIRED"
    b = Election(k, "x", agent_id="b", ttl=1)
    assert b.campaign(timeout=0) > told[0].lease_ids[0]
    a.resign()
    b.resign()


@pytest.mark.parametrize("policy", ["detect", "lanes", "wound_wait"])
def test_successors_are_served_in_campaign_order(make_klock: MakeKlock, policy: str) -> None:
    # Short kernel waits: a campaign that re-asked when its wait timed out would lose its place.
    k = make_klock(policy, default_wait_timeout_ms=100)
    first = Election(k, "x", agent_id="c0")
    first.campaign()
    others = [Election(k, "x", agent_id=f"c{i}") for i in range(1, 5)]
    runs = []
    for i, e in enumerate(others, start=1):
        runs.append(campaign_in_thread(e))
        wait_until(lambda i=i: queued(k, first) == i)  # queued in this order
    time.sleep(0.3)  # past the kernel's wait timeout
    order = ["c0"]
    leader: Election = first
    for _ in others:
        leader.resign()
        wait_until(lambda: any(e.is_leader() for e in others))
        (leader,) = [e for e in others if e.is_leader()]
        order.append(leader.agent_id)
    leader.resign()
    for t, out in runs:
        t.join(10)
        assert isinstance(out[0], int)
    assert order == ["c0", "c1", "c2", "c3", "c4"]
    terms = [out[0] for _, out in runs]
    assert terms == sorted(terms)


def test_wait_die_a_younger_campaigner_retries_and_is_elected(make_klock: MakeKlock) -> None:
    k = make_klock("wait_die", backoff_base_ms=20, backoff_cap_ms=100)
    a = Election(k, "x", agent_id="a")
    b = Election(k, "x", agent_id="b")
    a.campaign()
    t, out = campaign_in_thread(b)
    wait_until(lambda: k.counters.deaths >= 1)  # younger than the leader: DIE, not a wait
    assert queued(k, a) == 0
    a.resign()
    t.join(10)
    assert isinstance(out[0], int) and b.is_leader()
    b.resign()


def test_observe_yields_every_change_in_order(make_klock: MakeKlock) -> None:
    k = make_klock("detect")
    watcher = Election(k, "x", agent_id="w", poll=0.01)
    seen: list[klock.Leader | None] = []
    changes = watcher.observe()
    seen.append(next(changes))
    assert seen == [None]
    a = Election(k, "x", agent_id="a")
    b = Election(k, "x", agent_id="b")
    ta = a.campaign()
    seen.append(next(changes))
    t, out = campaign_in_thread(b)
    wait_until(lambda: queued(k, a) == 1)
    a.resign()
    t.join(10)
    # A resign ends the term (None) before the queue's next campaigner is granted (the
    # kernel's RELEASED, then GRANTED, in one operation).
    seen.append(next(changes))
    seen.append(next(changes))
    b.resign()
    seen.append(next(changes))
    assert [None if s is None else (s.agent_id, s.term) for s in seen] == [
        None,
        ("a", ta),
        None,
        ("b", out[0]),
        None,
    ]
    assert seen[1] is not None and seen[3] is not None and seen[1].since <= seen[3].since
    k.close()
    assert list(changes) == []  # ends with the Klock


def terms(seen: list[klock.Leader | None]) -> list[tuple[str, int] | None]:
    return [None if s is None else (s.agent_id, s.term) for s in seen]


def test_observe_sees_a_term_that_begins_and_ends_between_two_reads(
    make_klock: MakeKlock,
) -> None:
    # On a ManualClock that never advances, a reader of the state would see a's term at no
    # time: it begins and ends before the next read. The events tell it, in order, with its
    # fence; and a term in another namespace is not this election's.
    k = make_klock("detect", clock=klock.ManualClock())
    watcher = Election(k, "x", agent_id="w", poll=0.01)
    changes = watcher.observe()
    assert next(changes) is None
    a = Election(k, "x", agent_id="a")
    b = Election(k, "x", agent_id="b")
    other = Election(k, "x", agent_id="o", namespace="elsewhere")
    ta = a.campaign()
    a.resign()
    other.campaign()
    tb = b.campaign()
    seen = [next(changes) for _ in range(3)]
    assert terms(seen) == [("a", ta), None, ("b", tb)]
    first = seen[0]
    assert first is not None and first.since == k.now() and first.expires_at - first.since == 15000
    b.resign()
    other.resign()
    assert next(changes) is None
    k.close()
    assert list(changes) == []


def test_async_observe_sees_a_term_that_begins_and_ends_between_two_reads(
    make_klock: MakeKlock,
) -> None:
    k = make_klock("detect", clock=klock.ManualClock())

    async def main() -> None:
        watcher = Election(k, "x", agent_id="w", poll=0.01)
        changes = watcher.observe_async()
        assert await changes.__anext__() is None
        a = Election(k, "x", agent_id="a")
        ta = await a.campaign_async()
        await a.resign_async()
        seen = [await asyncio.wait_for(changes.__anext__(), 10) for _ in range(2)]
        assert terms(seen) == [("a", ta), None]
        await changes.aclose()

    asyncio.run(main())


def test_async_campaign_observe_and_loss(make_klock: MakeKlock) -> None:
    k = make_klock("detect")

    async def main() -> None:
        watcher = Election(k, "x", agent_id="w", poll=0.01)
        changes = watcher.observe_async()
        assert await changes.__anext__() is None
        a = Election(k, "x", agent_id="a")
        async with a:
            seen = await changes.__anext__()
            assert seen is not None and (seen.agent_id, seen.term) == ("a", a.term)
            b = Election(k, "x", agent_id="b", ttl=0.3)
            waiting = asyncio.ensure_future(b.campaign_async())
            await asyncio.sleep(0.05)
            assert not waiting.done()
        term = await asyncio.wait_for(waiting, 10)
        assert b.term == term and b.is_leader()
        lost = asyncio.ensure_future(b.wait_lost_async())
        await asyncio.sleep(0.01)
        assert not lost.done()
        session = b._session
        assert session is not None
        k.kernel.close_session(session.session_id, k.now())  # the next heartbeat finds it
        error = await asyncio.wait_for(lost, 10)
        assert error.name == "LEASE_RELEASED"
        await b.resign_async()
        await changes.aclose()

    asyncio.run(main())


def test_a_campaign_waiting_longer_than_its_ttl_leads_with_a_valid_lease(
    make_klock: MakeKlock,
) -> None:
    # Remotely a grant after a wait dates from the last moment the ticket was known to wait
    # (klock.remote, "long waits"): without the refreshes it would date from the acquire and
    # be lost on arrival, and every queued campaigner after it too.
    k = make_klock("detect")
    a = Election(k, "x", agent_id="a", ttl=0.3)
    b = Election(k, "x", agent_id="b", ttl=0.3)
    a.campaign()
    t, out = campaign_in_thread(b)
    wait_until(lambda: queued(k, a) == 1)
    time.sleep(1.0)  # more than three TTLs in the queue
    a.resign()
    t.join(10)
    assert isinstance(out[0], int)
    time.sleep(0.5)  # and it keeps it
    assert b.is_leader() and not b.lost
    b.resign()
