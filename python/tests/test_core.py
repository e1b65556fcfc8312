"""klock._core: every operation 1:1, the drive contract, events, errors, thread-safety."""

from __future__ import annotations

import json
import threading

import pytest

from klock import _core
from klock._core import Kernel


def test_module_surface() -> None:
    assert _core.ERROR_CODES["INVALID_RESOURCE"] == 100
    assert _core.ERROR_CODES["UNKNOWN_SESSION"] == 200
    assert _core.ERROR_CODES["NOT_OWNER"] == 300
    assert _core.ERROR_CODES["QUOTA_EXCEEDED"] == 400
    assert _core.MAX_MANIFEST_INTENTS == 256
    assert _core.MAX_RESOURCE_BYTES == 4096
    assert _core.MAX_NAME_BYTES == 256
    assert isinstance(_core.__version__, str)
    assert _core.parse_intent("mutates FILE://src//./a.ts/") == ("MUTATES", "FILE:/src/a.ts")
    # SPEC rev 4 §8: every backoff (DIE, DIED, WOUNDED) is sized by the kernel's answer, so
    # the binding no longer exports the formula for clients to compute one themselves.
    assert not hasattr(_core, "retry_after_ms")
    for cls in (_core.InvalidInput, _core.UnknownId, _core.StateError, _core.QuotaExceeded):
        assert issubclass(cls, _core.KlockError) and cls.__module__ == "klock._core"


def test_config_defaults_and_overrides() -> None:
    k = Kernel()
    assert k.config == {
        "policy": "wait_die",
        "seed": 0,
        "default_ttl_ms": 60000,
        "max_ttl_ms": 300000,
        "default_wait_timeout_ms": 30000,
        "backoff_base_ms": 100,
        "backoff_cap_ms": 10000,
        "grace_ms": 15000,
        "session_idle_ms": 300000,
        "max_leases_per_session": 1024,
        "max_lease_lifetime_ms": 0,
    }
    k2 = Kernel("lanes", seed=7, default_ttl_ms=5, max_lease_lifetime_ms=2**64 - 1)
    assert (
        k2.config["policy"] == "lanes"
        and k2.config["seed"] == 7
        and k2.config["max_lease_lifetime_ms"] == 2**64 - 1
    )
    with pytest.raises(_core.InvalidInput) as e:
        Kernel("fifo")
    assert (
        e.value.name == "INVALID_CONFIG" and e.value.code == 107 and "wait_die" in e.value.message
    )
    with pytest.raises(_core.InvalidInput) as e:
        Kernel(max_ttl_ms=0)
    assert e.value.name == "INVALID_CONFIG"
    # Every setting not given, or given as None, is the default.
    assert Kernel(None, **{name: None for name in _core.CONFIG_FIELDS[1:]}).config == k.config
    # Every numeric field by its core name, each set to a value of its own.
    values = {name: 1000 + i for i, name in enumerate(_core.CONFIG_FIELDS[1:])}
    assert Kernel("wound_wait", **values).config == {"policy": "wound_wait", **values}
    assert repr(k).startswith("Kernel(policy=")


@pytest.mark.parametrize("value", [5, None, "five"])
def test_unknown_config_field_is_invalid_config(value: object) -> None:
    # The name is checked first, by the core's list: a typo is never ignored or written
    # into another field, whatever its value.
    with pytest.raises(_core.InvalidInput) as e:
        Kernel(max_lease_lifetme_ms=value)  # type: ignore[call-arg]
    assert e.value.name == "INVALID_CONFIG" and e.value.code == 107
    assert (
        '"max_lease_lifetme_ms"' in e.value.message and "max_lease_lifetime_ms" in e.value.message
    )


def test_sessions_digest_resume_suspend_close() -> None:
    k = Kernel()
    a = k.open_session("alice", "default", 0)
    b = k.open_session("bob", "team-2", 1)
    assert (a.agent_id, a.namespace, a.epoch) == ("alice", "default", 0)
    assert a.priority < b.priority and a.session_id != b.session_id
    assert a == a and a != b and "alice" in repr(a)
    k.acquire(a.session_id, ["MUTATES FILE:/x"], 2, ttl_ms=1000)
    d = k.digest(a.session_id, 3)
    assert d["version"] == 1
    assert d["identity"] == {
        "agent_id": "alice",
        "namespace": "default",
        "session_id": a.session_id,
        "priority_timestamp": a.priority,
        "epoch": 0,
    }
    assert d["recovery"] == {"last_phase": "HOLDING", "pending_intents": []}
    json.dumps(d)
    k.suspend_session(a.session_id, 4)
    assert k.digest(a.session_id, 5)["recovery"]["last_phase"] == "SUSPENDED"
    resumed = k.resume_session(json.loads(json.dumps(d)), 500)
    assert (
        resumed.session_id == a.session_id and resumed.priority == a.priority and resumed.epoch == 1
    )
    tampered = json.loads(json.dumps(d))
    tampered["identity"]["priority_timestamp"] = 0
    with pytest.raises(_core.InvalidInput) as e:
        k.resume_session(tampered, 501)
    assert e.value.name == "INVALID_DIGEST"
    k.close_session(a.session_id, 600)
    with pytest.raises(_core.UnknownId) as u:
        k.close_session(a.session_id, 601)
    assert u.value.name == "UNKNOWN_SESSION" and u.value.code == 200


def test_acquire_verdicts_events_and_drive_loop() -> None:
    k = Kernel(seed=3)
    k.holder_events = False  # ACQUIRED and RELEASED: test_holder_events
    old = k.open_session("old", "default", 0).session_id
    young = k.open_session("young", "default", 0).session_id
    g = k.acquire(young, ["MUTATES FILE:/a", "CONSUMES FILE:/readme"], 10, ttl_ms=1000)
    assert (
        g.verdict == "GRANTED" and g.ticket is None and g.retry_after_ms is None and g.held_by == []
    )
    la, lr = g.leases
    assert (la.resource, la.predicate, la.ttl_ms, la.expires_at, la.acquired_at) == (
        "FILE:/a",
        "MUTATES",
        1000,
        1010,
        10,
    )
    assert (
        lr.predicate == "CONSUMES"
        and lr.fence > la.fence
        and la.session_id == young
        and la.agent_id == "young"
    )
    assert "GRANTED" in repr(g) and "FILE:/a" in repr(la)
    w = k.acquire(old, ["MUTATES FILE:/a"], 20, wait_timeout_ms=5000)
    assert w.verdict == "WAIT" and w.leases == [] and w.ticket is not None
    (blocker,) = w.held_by
    assert (
        blocker.session_id == young
        and blocker.agent_id == "young"
        and blocker.intents == [("MUTATES", "FILE:/a")]
    )
    assert "Blocker" in repr(blocker)
    d = k.acquire(young, ["MUTATES FILE:/b"], 21)
    assert d.verdict == "GRANTED"
    die = k.acquire(young, ["MUTATES FILE:/a"], 22)  # own lease: idempotent re-acquire
    assert die.verdict == "GRANTED" and die.leases[0].lease_id == la.lease_id
    assert k.next_deadline() == 1010  # the CONSUMES lease
    assert k.pending_events() == 0 and k.poll_event() is None
    assert k.release(young, la.lease_id, 30) is True
    assert k.release(young, la.lease_id, 31) is False
    (ev,) = k.drain_events()
    assert ev.event == "GRANTED" and ev.session == old and ev.ticket == w.ticket
    assert ev.leases is not None and ev.leases[0].fence > lr.fence
    assert ev.lease is None and ev.by is None and ev.retry_after_ms is None and ev.reason is None
    assert ev.lost_leases is None and ev.lost_tickets is None and "GRANTED" in repr(ev)
    # The old session's lease expires at 30 + 60000; advancing past it emits LEASE_EXPIRED.
    k.advance(10**6)
    kinds = [e.event for e in k.drain_events()]
    assert kinds.count("LEASE_EXPIRED") == 3
    assert k.now() == 10**6


def test_holder_events() -> None:
    # SPEC §9, §13.8: an immediate grant and a release are events, unless the host turns them off.
    k = Kernel(seed=1)
    assert k.holder_events
    a = k.open_session("a", "default", 0).session_id
    g = k.acquire(a, ["MUTATES FILE:/x", "CONSUMES FILE:/y"], 1)
    assert k.release_all(a, 2) == 2
    assert k.release_all(a, 3) == 0  # nothing ended: nothing emitted
    acquired, released = k.drain_events()
    assert (acquired.event, acquired.session) == ("ACQUIRED", a)
    assert [x.lease_id for x in acquired.leases or []] == [x.lease_id for x in g.leases]
    assert (released.event, released.session) == ("RELEASED", a)
    assert released.leases == sorted(x.lease_id for x in g.leases)
    k.holder_events = False
    lease = k.acquire(a, ["MUTATES FILE:/x"], 4).leases[0]
    assert k.release(a, lease.lease_id, 5)
    assert k.drain_events() == []


def test_die_wait_timeout_cancel_and_heartbeat_reconcile() -> None:
    k = Kernel(seed=1)
    k.holder_events = False  # ACQUIRED and RELEASED: test_holder_events
    a = k.open_session("a", "default", 0).session_id
    b = k.open_session("b", "default", 0).session_id
    la = k.acquire(a, ["MUTATES FILE:/x"], 1, ttl_ms=100).leases[0].lease_id
    die = k.acquire(b, ["MUTATES FILE:/x"], 2)
    assert (
        die.verdict == "DIE" and die.retry_after_ms is not None and 100 <= die.retry_after_ms < 200
    )
    assert [x.session_id for x in die.held_by] == [a]
    assert k.heartbeat(a, [la], 50) == [(la, "OK", 150)]
    assert k.heartbeat(a, None, 60) == [(la, "OK", 160)]
    assert k.heartbeat(b, [la], 61) == [(la, "NOT_OWNER", None)]
    assert k.heartbeat(a, [999], 62) == [(999, "UNKNOWN_LEASE", None)]
    assert k.reconcile(a, [la, 999], 63) == [(la, "ACTIVE", 160, 1), (999, "UNKNOWN", None, None)]
    lb = k.acquire(b, ["MUTATES FILE:/y"], 64).leases[0].lease_id
    w = k.acquire(a, ["MUTATES FILE:/y"], 65, wait_timeout_ms=10)
    assert w.verdict == "WAIT"
    with pytest.raises(_core.StateError) as e:
        k.cancel_wait(b, w.ticket, 66)  # type: ignore[arg-type]
    assert e.value.name == "NOT_OWNER"
    k.advance(75)
    (timeout,) = k.drain_events()
    assert timeout.event == "WAIT_TIMEOUT" and timeout.ticket == w.ticket
    w2 = k.acquire(a, ["MUTATES FILE:/y"], 80)
    k.cancel_wait(a, w2.ticket, 81)  # type: ignore[arg-type]
    with pytest.raises(_core.UnknownId) as u:
        k.cancel_wait(a, w2.ticket, 82)  # type: ignore[arg-type]
    assert u.value.name == "UNKNOWN_TICKET"
    assert k.release_all(b, 83) == 1
    assert k.reconcile(b, [lb], 84) == [(lb, "RELEASED", None, None)]
    k.advance(200)
    assert [e.event for e in k.drain_events()] == ["LEASE_EXPIRED"]
    assert k.heartbeat(a, [la], 201) == [(la, "LEASE_EXPIRED", None)]


def test_wound_wait_and_session_closed_events() -> None:
    k = Kernel("wound_wait", session_idle_ms=50)
    k.holder_events = False  # ACQUIRED and RELEASED: test_holder_events
    old = k.open_session("old", "default", 0).session_id
    young = k.open_session("young", "default", 0).session_id
    ly = k.acquire(young, ["MUTATES FILE:/x"], 1).leases[0].lease_id
    v = k.acquire(old, ["MUTATES FILE:/x"], 2)
    assert v.verdict == "GRANTED"
    (wounded,) = k.drain_events()
    assert wounded.event == "WOUNDED" and wounded.session == young and wounded.by == old
    assert wounded.lost_leases == [ly] and wounded.lost_tickets == []
    # SPEC rev 4 §8/§9: WOUNDED carries the backoff (the first DIE of the unit: [base, 2*base)).
    assert wounded.retry_after_ms is not None and 100 <= wounded.retry_after_ms < 200
    assert "retry_after_ms=" in repr(wounded)
    k.advance(1000)
    closed = [e for e in k.drain_events() if e.event == "SESSION_CLOSED"]
    assert [(e.session, e.reason) for e in closed] == [(young, "IDLE")]


def test_detect_names_the_cycle_on_die_and_died() -> None:
    # SPEC rev 5 §6.1: the youngest member of the cycle dies, and both answers name the cycle.
    k = Kernel("detect")
    k.holder_events = False  # ACQUIRED and RELEASED: test_holder_events
    old = k.open_session("old", "default", 0).session_id
    young = k.open_session("young", "default", 0).session_id
    k.acquire(old, ["MUTATES FILE:/a"], 1)
    k.acquire(young, ["MUTATES FILE:/b"], 2)
    waiting = k.acquire(old, ["MUTATES FILE:/b"], 3)
    assert waiting.verdict == "WAIT" and waiting.cycle == []
    died = k.acquire(young, ["MUTATES FILE:/a"], 4)
    assert died.verdict == "DIE" and died.cycle == [young, old]
    assert f"cycle={[young, old]}" in repr(died)
    assert k.snapshot(5)["policy"] == "detect"
    # The other way round: the younger waits, the older closes the cycle, the waiter dies.
    k = Kernel("detect")
    k.holder_events = False
    old = k.open_session("old", "default", 0).session_id
    young = k.open_session("young", "default", 0).session_id
    k.acquire(young, ["MUTATES FILE:/a"], 1)
    k.acquire(old, ["MUTATES FILE:/b"], 2)
    t = k.acquire(young, ["MUTATES FILE:/b"], 3).ticket
    assert k.acquire(old, ["MUTATES FILE:/a"], 4).verdict == "WAIT"
    (victim,) = k.drain_events()
    assert victim.event == "DIED" and victim.ticket == t and victim.cycle == [young, old]


def test_observability_is_json_ready() -> None:
    k = Kernel()
    a = k.open_session("a", "default", 0).session_id
    b = k.open_session("b", "default", 0).session_id
    k.acquire(b, ["DELETES FILE:/src"], 1)
    k.acquire(a, ["MUTATES FILE:/src/a.ts"], 2)
    state = k.resource_state("FILE:/src/a.ts", "default", 3)
    assert state["resource"] == "FILE:/src/a.ts" and state["holders"] == []
    assert [w["session_id"] for w in state["waiting"]] == [a]
    assert [c["resource"] for c in state["covering"]] == ["FILE:/src"]
    stats = k.stats()
    assert stats["counters"]["granted"] == 1 and stats["counters"]["waited"] == 1
    assert stats["active_leases"] == 1 and stats["waiting_tickets"] == 1
    assert stats["top_contended"][0]["resource"] == "FILE:/src/a.ts"
    snap = k.snapshot(4)
    assert snap["now"] == 4 and snap["policy"] == "wait_die" and len(snap["sessions"]) == 2
    # The kernel's serde shape, as in the conformance scripts (python/tests/replay.py).
    assert snap["tickets"][0]["intents"] == [{"predicate": "MUTATES", "resource": "FILE:/src/a.ts"}]
    assert (
        snap["sessions"][0]["unit_granted"] is False and snap["sessions"][1]["unit_granted"] is True
    )
    json.dumps([state, stats, snap])


def test_clone_is_independent() -> None:
    k = Kernel()
    a = k.open_session("a", "default", 0).session_id
    c = k.clone()
    k.acquire(a, ["MUTATES FILE:/x"], 1)
    assert c.snapshot(1)["leases"] == [] and len(k.snapshot(1)["leases"]) == 1


def test_error_messages_say_what_to_fix() -> None:
    k = Kernel()
    a = k.open_session("a", "default", 0).session_id
    with pytest.raises(_core.InvalidInput) as e:
        k.acquire(a, ["MUTATES file:/x"], 1)
    assert e.value.name == "INVALID_RESOURCE" and e.value.code == 100
    assert "TYPE" in e.value.message and str(e.value).startswith("INVALID_RESOURCE: ")
    small = Kernel(max_leases_per_session=1)
    s = small.open_session("x", "default", 0).session_id
    with pytest.raises(_core.QuotaExceeded) as q:
        small.acquire(s, ["MUTATES FILE:/a", "MUTATES FILE:/b"], 1)
    assert q.value.name == "QUOTA_EXCEEDED" and q.value.code == 400


def test_shared_kernel_from_many_threads() -> None:
    """One Kernel object used by 8 threads at once: calls are serialised, nothing breaks."""
    k = Kernel(default_ttl_ms=10**9, max_ttl_ms=10**9)
    errors: list[BaseException] = []
    granted = [0] * 8

    def work(i: int) -> None:
        try:
            s = k.open_session(f"t{i}", "default", 0).session_id
            for n in range(2000):
                v = k.acquire(s, [f"MUTATES FILE:/t{i}/{n % 7}"], n)
                assert v.verdict == "GRANTED"
                granted[i] += 1
                k.release(s, v.leases[0].lease_id, n)
                k.drain_events()
            k.close_session(s, 2000)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and granted == [2000] * 8
    assert k.stats()["counters"]["granted"] == 16000 and k.stats()["active_sessions"] == 0
