"""The friendly client: Klock, sessions, lease blocks (threads), heartbeats, losses, errors."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import klock
import klock.remote
from klock import Klock

MakeKlock = Callable[..., Klock]


def in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # reported by the caller
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.002)


def test_clock_is_monotonic_ms_since_creation(make_klock: MakeKlock) -> None:
    k = make_klock()
    first = k.now()
    assert 0 <= first < 1000
    time.sleep(0.02)
    assert k.now() >= first + 19
    if isinstance(k.kernel, klock.remote.RemoteKernel):  # the server does not report its policy
        assert repr(k).startswith(f"Klock(server={k.kernel.url!r}, now=")
    else:
        assert "Klock(policy='wait_die'" in repr(k)


def test_session_is_a_context_manager_and_current(make_klock: MakeKlock) -> None:
    k = make_klock()
    assert klock.current_session() is None
    with k.session("agent-1", namespace="team") as s:
        assert klock.current_session() is s
        assert (s.agent_id, s.namespace, s.closed) == ("agent-1", "team", False)
        with k.session("agent-2") as inner:
            assert klock.current_session() is inner
            assert s.priority < inner.priority
        assert klock.current_session() is s
    assert klock.current_session() is None and s.closed
    s.close()  # idempotent
    with pytest.raises(klock.Closed) as e:  # closed by the user: says so (not UNKNOWN_SESSION)
        with s.lease("MUTATES FILE:/x"):
            pass
    assert e.value.name == "CLOSED" and e.value.message == "this session is closed"


def test_lease_grants_exposes_fences_and_releases(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with s.lease("MUTATES FILE:/src/a.ts", "CONSUMES FILE://README.md", ttl=30) as lease:
            assert lease.held and not lease.lost and s.holds_leases()
            first, second = lease.leases
            assert (first.resource, first.predicate, second.resource) == (
                "FILE:/src/a.ts",
                "MUTATES",
                "FILE:/README.md",
            )
            assert lease.fences == {"FILE:/src/a.ts": first.fence, "FILE:/README.md": second.fence}
            assert lease.fence == max(first.fence, second.fence)
            assert lease.lease_ids == [first.lease_id, second.lease_id]
            assert "fences=" in repr(lease)
            lease.check()
            lease.heartbeat()
            held_fence = lease.fence
        assert not s.holds_leases() and k.stats()["active_leases"] == 0
        with s.lease("MUTATES FILE:/src/a.ts") as again:
            assert again.fence > held_fence  # fences strictly increase across grants
        with pytest.raises(RuntimeError, match="entered once"):
            with again:
                pass


def test_release_on_exception(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with pytest.raises(ZeroDivisionError):
            with s.lease("MUTATES FILE:/x"):
                _ = 1 / 0
        assert k.stats()["active_leases"] == 0
        with s.lease("MUTATES FILE:/x", timeout=0):
            pass  # free again


def test_invalid_intents_raise_the_kernel_error(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with pytest.raises(klock.InvalidInput) as e:
            with s.lease("WRITES FILE:/x"):
                pass
        assert e.value.name == "INVALID_PREDICATE"
        with pytest.raises(klock.InvalidInput) as e:
            with s.lease():
                pass
        assert e.value.name == "INVALID_MANIFEST"
        with pytest.raises(TypeError, match="separate arguments"):
            s.lease(["MUTATES FILE:/x"])  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            s.lease(b"MUTATES FILE:/x")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.lease("MUTATES FILE:/x", timeout=-1)
        with pytest.raises(ValueError):
            s.lease("MUTATES FILE:/x", timeout=float("nan"))
        with pytest.raises(TypeError):
            s.lease("MUTATES FILE:/x", timeout="5")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            with s.lease("MUTATES FILE:/x", ttl="1.5"):  # type: ignore[arg-type]
                pass
        with pytest.raises(ValueError):
            with s.lease("MUTATES FILE:/\udc80"):
                pass
        assert k.stats()["active_leases"] == 0 and not s.holds_leases()


def test_older_session_waits_and_is_woken_by_the_grant(make_klock: MakeKlock) -> None:
    k = make_klock()
    old = k.session("old")
    young = k.session("young")
    holding = threading.Event()
    let_go = threading.Event()

    def hold() -> None:
        with young.lease("MUTATES FILE:/x"):
            holding.set()
            let_go.wait(10)

    t, errors = in_thread(hold)
    holding.wait(10)
    woke: list[float] = []

    def wait_for_it() -> None:
        with old.lease("MUTATES FILE:/x") as lease:
            woke.append(time.monotonic())
            assert lease.held

    t2, errors2 = in_thread(wait_for_it)
    wait_until(lambda: k.counters.waits == 1)
    time.sleep(0.05)
    assert not woke  # still blocked: the kernel said WAIT
    released = time.monotonic()
    let_go.set()
    t.join(10)
    t2.join(10)
    assert not errors and not errors2 and woke
    assert woke[0] - released < 0.5  # woken by the GRANTED event, not by a poll interval
    assert k.counters.deaths == 0 and k.counters.grants == 2


def test_younger_session_dies_sleeps_and_retries_with_the_same_priority(
    make_klock: MakeKlock,
) -> None:
    k = make_klock(backoff_base_ms=20, seed=4)
    old = k.session("old")
    young = k.session("young")
    priority = young.priority
    holding = threading.Event()

    def hold() -> None:
        with old.lease("MUTATES FILE:/x"):
            holding.set()
            time.sleep(0.15)

    # Timed from before the holder starts: the young block cannot hold the file until the
    # holder's 150 ms are over, however late this thread runs after `holding` is set.
    start = time.monotonic()
    t, errors = in_thread(hold)
    holding.wait(10)
    with young.lease("MUTATES FILE:/x", timeout=10) as lease:
        assert lease.held
    t.join(10)
    assert not errors
    assert time.monotonic() - start >= 0.15
    assert k.counters.deaths >= 1 and k.counters.retries >= 1
    assert young.priority == priority and young.session_id == lease.leases[0].session_id


def test_died_when_the_session_holds_other_leases(make_klock: MakeKlock) -> None:
    k = make_klock()
    old = k.session("old")
    young = k.session("young")
    holding = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with old.lease("MUTATES FILE:/b"):
            holding.set()
            done.wait(10)

    t, errors = in_thread(hold)
    holding.wait(10)
    with young.lease("MUTATES FILE:/a") as outer:
        with pytest.raises(klock.Died) as died:
            with young.lease("MUTATES FILE:/b"):
                pass
        assert outer.held  # the DIE kept the session's other leases (SPEC.md §6)
    done.set()
    t.join(10)
    assert not errors
    e = died.value
    assert isinstance(e, klock.KlockError) and e.name == "DIE" and e.code == 0
    assert e.retry_after_ms >= 100 and e.held_by == [old.session_id]
    assert "roll back" in str(e)


def test_timeout_and_try_lock(make_klock: MakeKlock) -> None:
    k = make_klock()
    old = k.session("old")
    young = k.session("young")
    with young.lease("MUTATES FILE:/x"):
        start = time.monotonic()
        with pytest.raises(klock.Timeout) as e:
            with old.lease("MUTATES FILE:/x", timeout=0.2):
                pass
        assert 0.15 < time.monotonic() - start < 5
        assert e.value.name == "TIMEOUT" and e.value.held_by == [young.session_id]
        with pytest.raises(klock.Timeout):
            with old.lease("MUTATES FILE:/x", timeout=0):  # try-lock
                pass
        # A younger session whose backoff would pass the timeout gives up at once.
        with pytest.raises(klock.Timeout):
            with k.session("younger").lease("MUTATES FILE:/x", timeout=0.01):
                pass
    assert k.counters.timeouts == 3
    assert k.stats()["waiting_tickets"] == 0  # the timed-out wait left nothing queued


def test_a_refused_try_lock_fails_at_once_and_is_counted(make_klock: MakeKlock) -> None:
    # Issue 27: a DIE to a block that asked for no wait (timeout=0) is the core's
    # timeout_no_wait, raised by the native attempt: the same Timeout, message and counts as
    # the acquisition loop's, in threads and in asyncio, on every backend.
    k = make_klock()
    old, young = k.session("old"), k.session("young")
    x = "MUTATES FILE:/x"
    expected = f"['{x}'] are held by sessions [{old.session_id}] (timeout 0.0 s)"
    with old.lease(x):
        for timeout in (0, 0.0):
            block = young.lease(x, timeout=timeout)
            assert block.timeout == 0.0 and isinstance(block.timeout, float)
            with pytest.raises(klock.Timeout) as e:
                with block:
                    pass
            assert (e.value.code, e.value.name, e.value.message) == (0, "TIMEOUT", expected)
            assert e.value.held_by == [old.session_id]
            assert e.value.args == (f"TIMEOUT: {expected}",) and str(e.value) == e.value.args[0]
            assert not block.held and not block.lost and block._state == "failed"
            with pytest.raises(RuntimeError, match="entered once"):
                block.__enter__()

        async def refused() -> klock.Timeout:
            try:
                async with young.lease(x, timeout=0):
                    pass
            except klock.Timeout as error:
                return error
            raise AssertionError("not refused")

        assert asyncio.run(refused()).message == expected
        # Holding other leases changes nothing: it asked not to wait, so it never rolls back.
        with young.lease("MUTATES FILE:/y"), pytest.raises(klock.Timeout):
            with young.lease(x, timeout=0):
                pass
        with pytest.raises(TypeError, match="timeout must be a number"):
            young.lease(x, timeout=False)  # type: ignore[arg-type]
    counters = k.counters
    assert (counters.deaths, counters.timeouts, counters.retries, counters.waits) == (4, 4, 0, 0)
    assert k.stats()["waiting_tickets"] == 0


def test_whole_millisecond_timeouts_are_seconds_as_floats(make_klock: MakeKlock) -> None:
    # _check_timeout: its quick range and its full check give the same answers.
    k = make_klock()
    s = k.session("a")
    for given, seconds in (
        (2, 2.0),
        (0.25, 0.25),
        (0.3, 0.3),
        (1e-4, 1e-4),
        (0.0001234, 0.0001234),
        (1e16, 1e16),  # past the quick check's range, still within u64 milliseconds
    ):
        block = s.lease("MUTATES FILE:/x", timeout=given)
        assert block.timeout == seconds and isinstance(block.timeout, float)
    # 1.85e16 s is just past (2**64-1) ms: refused, however quickly common values pass.
    for bad in (-1, -0.5, 2**64, 1.85e16, float("nan")):
        with pytest.raises(ValueError, match="timeout must be a number"):
            s.lease("MUTATES FILE:/x", timeout=bad)


def test_a_retry_left_with_no_budget_is_refused_like_a_try_lock(make_klock: MakeKlock) -> None:
    # seed 4, base 100: the first backoff is 178 ms; a 178 ms budget retries at its very end,
    # asking for no wait, and that DIE ends it (timeout_no_wait, from a retry).
    clock = klock.ManualClock()
    k = make_klock(clock=clock, seed=4, backoff_base_ms=100)
    old, young = k.session("old"), k.session("young")
    with old.lease("MUTATES FILE:/x"):
        t, errors = in_thread(lambda: young.lease("MUTATES FILE:/x", timeout=0.178).__enter__())
        wait_until(lambda: clock.next_timer() == 178)
        clock.advance(178)
        t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], klock.Timeout), errors
    assert errors[0].message.endswith(f"held by sessions [{old.session_id}] (timeout 0.178 s)")
    assert (k.counters.deaths, k.counters.retries, k.counters.timeouts) == (2, 1, 1)


def test_heartbeats_keep_a_short_lease_alive(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s, s.lease("MUTATES FILE:/x", ttl=0.6) as lease:
        first_expiry = lease.leases[0].expires_at
        time.sleep(2.0)  # over three times the TTL: only the timer thread's heartbeats keep it
        lease.check()
        (status,) = s.reconcile(lease.lease_ids)
        assert status[1] == "ACTIVE" and status[2] is not None and status[2] > first_expiry + 1000


def test_lease_lost_when_heartbeats_cannot_run(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with pytest.raises(klock.LeaseLost) as lost:
            with s.lease("MUTATES FILE:/x", ttl=0.06) as lease:
                with k._lock:  # stall the timer thread past the TTL (a paused process)
                    time.sleep(0.2)
                wait_until(lambda: lease.lost)
                with pytest.raises(klock.LeaseLost):
                    lease.check()
                with pytest.raises(klock.LeaseLost):
                    lease.heartbeat()
        e = lost.value
        assert isinstance(e, klock.StateError) and e.name == "LEASE_EXPIRED" and e.code == 301
        assert e.lease_ids == lease.lease_ids
        assert k.counters.lost == 1
        # The loss does not hide the body's own exception; it is noted on it.
        with pytest.raises(KeyError) as other:
            with s.lease("MUTATES FILE:/y", ttl=0.06) as lease2:
                with k._lock:
                    time.sleep(0.2)
                wait_until(lambda: lease2.lost)
                raise KeyError("body")
        assert any("lost" in note for note in getattr(other.value, "__notes__", []))


def test_nested_blocks_share_a_reacquired_lease(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with s.lease("MUTATES FILE:/a") as outer:
            with s.lease("MUTATES FILE:/a", "MUTATES FILE:/b") as inner:
                assert inner.leases[0].lease_id == outer.leases[0].lease_id
            # The inner block released FILE:/b but not the lease the outer block still holds.
            assert outer.held
            (status,) = s.reconcile(outer.lease_ids)
            assert status[1] == "ACTIVE"
            assert k.stats()["active_leases"] == 1
        assert k.stats()["active_leases"] == 0


def test_wounded_holder_loses_its_lease(make_klock: MakeKlock) -> None:
    k = make_klock("wound_wait")
    old = k.session("old")
    young = k.session("young")
    with pytest.raises(klock.LeaseLost) as lost:
        with young.lease("MUTATES FILE:/x") as lease:
            with old.lease("MUTATES FILE:/x") as taken:
                assert taken.held
            # Remotely the WOUNDED event reaches the young session's client through the event
            # stream, a moment after the old one's acquire returned.
            wait_until(lambda: lease.lost)
    assert lost.value.name == "LEASE_RELEASED" and "wounded" in lost.value.message


def test_wound_wait_younger_waits_then_proceeds(make_klock: MakeKlock) -> None:
    k = make_klock("wound_wait")
    old = k.session("old")
    young = k.session("young")
    holding = threading.Event()

    def hold() -> None:
        with old.lease("MUTATES FILE:/x"):
            holding.set()
            time.sleep(0.1)

    t, errors = in_thread(hold)
    holding.wait(10)
    with young.lease("MUTATES FILE:/x", timeout=10) as lease:
        assert lease.held
    t.join(10)
    assert not errors and k.counters.waits == 1


def test_a_wounded_waiter_backs_off_before_asking_again(make_klock: MakeKlock) -> None:
    # oldest < middle < young. young waits behind middle; oldest then wounds both, so young's
    # block must pause (backoff base 300 ms) before it queues again, behind oldest.
    k = make_klock("wound_wait", backoff_base_ms=300, backoff_cap_ms=300)
    oldest, middle, young = k.session("oldest"), k.session("middle"), k.session("young")
    queued = lambda: len(k.resource_state("FILE:/x")["waiting"])  # noqa: E731
    release_middle, release_oldest, release_young = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
    )
    t1, e1 = in_thread(lambda: _hold(middle, release_middle))
    wait_until(lambda: len(k.resource_state("FILE:/x")["holders"]) == 1)
    t2, e2 = in_thread(lambda: _hold(young, release_young, timeout=10))
    wait_until(lambda: queued() == 1)
    # The wound comes after oldest asks and before this thread sees oldest hold the file, so
    # the backoff ends 300 ms or more after `asked_at` (seeing the hold comes a little later).
    asked_at = time.monotonic()
    t3, e3 = in_thread(lambda: _hold(oldest, release_oldest))
    wait_until(
        lambda: (
            k.resource_state("FILE:/x")["holders"][:1]
            and k.resource_state("FILE:/x")["holders"][0]["agent_id"] == "oldest"
        )
    )
    time.sleep(0.15)
    assert queued() == 0, "the wounded block asked again before its backoff"
    wait_until(lambda: queued() == 1)
    assert time.monotonic() - asked_at >= 0.3
    for release in (release_oldest, release_middle, release_young):
        release.set()
    for t in (t1, t2, t3):
        t.join(10)
    assert isinstance(e1[0], klock.LeaseLost) and not e2 and not e3


def _hold(session: klock.Session, release: threading.Event, timeout: float | None = None) -> None:
    with session.lease("MUTATES FILE:/x", timeout=timeout):
        release.wait(10)


def test_lanes_policy_blocks(make_klock: MakeKlock) -> None:
    k = make_klock("lanes")
    with k.session("a") as a, k.session("b") as b:
        with a.lease("MUTATES FILE:/x", "MUTATES FILE:/y"):
            with pytest.raises(klock.StateError) as e:
                with a.lease("MUTATES FILE:/z"):
                    pass
            assert e.value.name == "HOLD_AND_WAIT"
            t, errors = in_thread(
                lambda: (
                    b.lease("MUTATES FILE:/y", timeout=10).__enter__().__exit__(None, None, None)
                )
            )
            wait_until(lambda: k.counters.waits == 1)
        t.join(10)
        assert not errors


def test_closing_the_session_under_a_waiter(make_klock: MakeKlock) -> None:
    k = make_klock()
    old = k.session("old")
    young = k.session("young")
    with young.lease("MUTATES FILE:/x"):
        t, errors = in_thread(lambda: old.lease("MUTATES FILE:/x").__enter__())
        wait_until(lambda: k.counters.waits == 1)
        old.close()
        t.join(10)
    assert (
        len(errors) == 1
        and isinstance(errors[0], klock.Closed)
        and "this session is closed" in str(errors[0])
    )
    assert k.stats()["waiting_tickets"] == 0


def test_closing_the_session_inside_a_block(make_klock: MakeKlock) -> None:
    k = make_klock()
    s = k.session("a")
    with pytest.raises(klock.LeaseLost) as lost:
        with s.lease("MUTATES FILE:/x"):
            s.close()
    # Closing a session releases what it holds (SPEC.md §5): the same name in both clients.
    assert (
        lost.value.name == "LEASE_RELEASED"
        and lost.value.code == klock.ERROR_CODES["LEASE_RELEASED"]
    )
    assert "session was closed" in lost.value.message
    assert k.stats()["active_leases"] == 0


def test_idle_closed_session(make_klock: MakeKlock) -> None:
    k = make_klock(session_idle_ms=50)
    s = k.session("a")
    wait_until(lambda: s.closed)  # SESSION_CLOSED, delivered by the timer thread
    with pytest.raises(klock.UnknownId):
        with s.lease("MUTATES FILE:/x"):
            pass


def test_the_same_session_entered_in_two_threads(make_klock: MakeKlock) -> None:
    k = make_klock()
    s = k.session("shared")
    inside = threading.Barrier(2)
    seen: list[object] = []

    def use() -> None:
        with s:
            inside.wait(5)
            seen.append(klock.current_session())
            inside.wait(5)

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [s, s] and s.closed


def test_klock_lease_with_its_own_session(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.lease("MUTATES FILE:/x", agent_id="tool") as lease:
        assert lease.session.agent_id == "tool" and lease.held
    assert lease.session.closed and k.stats()["active_sessions"] == 0


def test_digest_suspend_resume(make_klock: MakeKlock) -> None:
    k = make_klock()
    s = k.session("a")
    with s.lease("MUTATES FILE:/x") as lease:
        digest = s.digest()
        s.suspend()
        again = k.resume(digest)
        assert again is s and s.info.epoch == 1
        assert lease.held
    s.close()


def test_close_klock_fails_waiters_and_is_idempotent(make_klock: MakeKlock) -> None:
    k = make_klock()
    old = k.session("old")
    young = k.session("young")
    with pytest.raises(klock.LeaseLost) as lost:  # close() closed the session holding it
        with young.lease("MUTATES FILE:/x") as held:
            t, errors = in_thread(lambda: old.lease("MUTATES FILE:/x").__enter__())
            wait_until(lambda: k.counters.waits == 1)
            k.close()
            t.join(10)
            assert held.lost and young.closed and old.closed
    assert lost.value.name == "LEASE_RELEASED" and "Klock was closed" in lost.value.message
    k.close()
    assert (
        len(errors) == 1
        and isinstance(errors[0], klock.Closed)
        and "this Klock is closed" in str(errors[0])
    )
    assert k.kernel.stats()["active_sessions"] == 0 and k.kernel.stats()["active_leases"] == 0
    with pytest.raises(klock.Closed, match="this Klock is closed"):
        k.session("late")


def test_snapshot_stats_resource_state(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s, s.lease("DELETES FILE:/build"):
        state = k.resource_state("FILE:/build/out.o")
        assert [c["resource"] for c in state["covering"]] == ["FILE:/build"]
        snap = k.snapshot()
        assert len(snap["leases"]) == 1 and snap["sessions"][0]["agent_id"] == "a"
        assert k.stats()["counters"]["granted"] == 1


def test_timer_wakes_for_an_earlier_deadline(make_klock: MakeKlock) -> None:
    """A wait with a short timeout, made while the timer sleeps until a far deadline, must
    time out on time: the call wakes the timer."""
    k = make_klock()
    holder = k.session("holder")
    with k.session("far") as far, far.lease("MUTATES FILE:/far", ttl=300):
        time.sleep(0.05)  # the timer now sleeps for ~100 s (the heartbeat)
        young = k.session("young")
        with young.lease("MUTATES FILE:/x"):
            start = time.monotonic()
            with pytest.raises(klock.Timeout):
                with holder.lease("MUTATES FILE:/x", timeout=0.1):
                    pass
            assert time.monotonic() - start < 2


def test_a_dropped_klock_is_collected_and_its_timer_ends() -> None:
    import gc
    import weakref

    k = Klock()
    ref = weakref.ref(k)
    assert isinstance(k.clock, klock.SystemClock)
    thread = k.clock._thread
    with k.session("a") as s, s.lease("MUTATES FILE:/x"):
        pass
    k.session("idle")  # left open: its idle deadline keeps a timer armed
    assert k.kernel.next_deadline() is not None
    del k, s
    gc.collect()
    assert ref() is None
    thread.join(5)
    assert not thread.is_alive()


def test_a_klock_dropped_with_a_block_still_held_is_collected() -> None:
    # The held block is in the native ledger, and refers back to its Klock: the garbage
    # collector must see that cycle through the native objects.
    import gc
    import weakref

    k = Klock()
    ref = weakref.ref(k)
    thread = k.clock._thread
    block = k.session("a").lease("MUTATES FILE:/x")
    block.__enter__()  # never left
    assert block.held
    del k, block
    gc.collect()
    assert ref() is None
    thread.join(5)
    assert not thread.is_alive()


def test_a_block_is_dated_on_its_klocks_system_clock() -> None:
    # The native block edges read a SystemClock themselves: on the clock's own scale, from
    # its creation, not from the Klock's.
    clock = klock.SystemClock()
    try:
        time.sleep(0.05)
        with Klock(clock=clock) as k, k.session("a") as s:
            before = k.now()
            assert before >= 50
            with s.lease("MUTATES FILE:/x", "CONSUMES FILE:/y") as block:
                (mutates, consumes) = block.leases
                assert block.intents == ["MUTATES FILE:/x", "CONSUMES FILE:/y"]
            after = k.now()
            assert before <= mutates.acquired_at <= after
            assert consumes.acquired_at == mutates.acquired_at
    finally:
        clock.close()


def test_an_async_exit_releases_before_its_coroutine_runs() -> None:
    # In-process, `__aexit__` releases when called: a task of it cancelled before it ran
    # still leaves nothing held (remotely the release is the coroutine's, off the loop).
    async def main() -> None:
        with Klock() as k, k.session("a") as s:
            block = s.lease("MUTATES FILE:/x")
            await block.__aenter__()
            exiting = asyncio.ensure_future(block.__aexit__(None, None, None))
            exiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await exiting
            assert k.stats()["active_leases"] == 0 and not s.holds_leases()
            assert block._state == "done"

    asyncio.run(main())


def test_close_stops_the_clock_the_klock_made_but_not_one_it_was_given() -> None:
    own = Klock()
    assert isinstance(own.clock, klock.SystemClock)
    own.session("a")
    own.close()
    assert not own.clock._thread.is_alive()
    shared = klock.SystemClock()
    k = Klock(clock=shared)
    k.session("a")
    k.close()
    assert shared._thread.is_alive()
    fired: list[int] = []
    shared.set_timer(shared.now(), lambda: fired.append(1))
    wait_until(lambda: fired == [1])
    shared.close()
    assert not shared._thread.is_alive()


# ---- clocks: every time the client uses comes from its clock ----------------------------------


def test_manual_clock_runs_timers_in_time_order_each_at_its_own_time() -> None:
    clock = klock.ManualClock(start=5)
    seen: list[tuple[str, int]] = []
    clock.set_timer(30, lambda: seen.append(("b", clock.now())))
    clock.set_timer(10, lambda: seen.append(("a", clock.now())))
    dropped = clock.set_timer(20, lambda: seen.append(("dropped", clock.now())))
    clock.clear_timer(dropped)
    clock.clear_timer(dropped)  # harmless
    clock.set_timer(
        30, lambda: clock.set_timer(35, lambda: seen.append(("set by a callback", clock.now())))
    )
    assert clock.next_timer() == 10
    clock.jump(10)  # a paused process: time passes, nothing runs
    assert seen == [] and clock.now() == 15
    clock.advance(0)  # the overdue timer runs now, late
    assert seen == [("a", 15)]
    clock.advance(25)
    assert seen == [("a", 15), ("b", 30), ("set by a callback", 35)]
    assert clock.now() == 40 and clock.next_timer() is None
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="ms"):
            clock.advance(bad)  # type: ignore[arg-type]
        with pytest.raises(error, match="at"):
            clock.set_timer(bad, lambda: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        clock.set_timer(1, "later")  # type: ignore[arg-type]
    assert clock.now() == 40


def test_a_klock_takes_a_clock_object_or_a_function_and_names_a_bad_one() -> None:
    with pytest.raises(TypeError, match="clock must be"):
        Klock(clock=5)  # type: ignore[arg-type]
    reading: list[object] = [1.5]
    k = Klock(clock=lambda: reading[0])  # type: ignore[arg-type,return-value]
    try:
        for bad in (1.5, -1, "5", None):
            reading[0] = bad
            with pytest.raises(TypeError, match=r"clock\.now\(\)"):
                k.session("a")
    finally:
        reading[0] = 0
        k.close()
    ticks = iter(range(100, 10_000, 100))
    k = Klock(clock=lambda: next(ticks))
    try:
        assert isinstance(k.clock, klock.SystemClock)
        assert k.now() == 100 and k.now() == 200  # that function is the Klock's time
    finally:
        k.close()


def test_a_manual_clock_drives_blocking_threads_through_backoffs_and_timeouts(
    make_klock: MakeKlock,
) -> None:
    # The thread API in virtual time: a DIE backoff (seed 4, base 100: 178 ms, then 204 ms)
    # and a timeout end when the test advances the clock, never by real time passing.
    clock = klock.ManualClock()
    k = make_klock(clock=clock, seed=4, backoff_base_ms=100)
    old, young, waiter = k.session("old"), k.session("young"), k.session("waiter")
    started = time.monotonic()
    granted_at: list[int] = []

    def young_block() -> None:
        with young.lease("MUTATES FILE:/x", timeout=10):
            granted_at.append(clock.now())

    with old.lease("MUTATES FILE:/x"):
        t, errors = in_thread(young_block)
        wait_until(lambda: clock.next_timer() == 178)
        time.sleep(0.05)
        assert k.counters.retries == 0  # real time passing changes nothing
        clock.advance(178)
        wait_until(lambda: clock.next_timer() == 178 + 204)  # retried at 178, died again
        assert k.counters.deaths == 2 and k.counters.retries == 1
    clock.advance(204)
    t.join(10)
    assert not errors and granted_at == [382] and k.counters.grants == 2
    with young.lease("MUTATES FILE:/x"):  # young's new unit of work: younger than waiter
        t, errors = in_thread(lambda: waiter.lease("MUTATES FILE:/x", timeout=0.3).__enter__())
        wait_until(lambda: k.counters.waits == 1)
        clock.advance(299)
        time.sleep(0.05)
        assert t.is_alive()
        clock.advance(1)
        t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], klock.Timeout) and clock.now() == 682
    assert time.monotonic() - started < 5


def test_a_failing_timer_is_exposed_and_tries_again_later() -> None:
    clock = klock.ManualClock()
    k = Klock(clock=clock)
    real = k.kernel
    failures = [RuntimeError("boom")]

    class FailingOnce:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def advance(self, now: int) -> None:
            if failures:
                raise failures.pop()
            real.advance(now)

    try:
        s = k.session("a")
        k.kernel = FailingOnce()  # type: ignore[assignment]
        with s.lease("MUTATES FILE:/x", ttl=0.3) as lease:
            clock.advance(100)  # the heartbeat's timer fires; settling time raises (a bug)
            assert isinstance(k.timer_error, RuntimeError) and lease.expires_at == 300
            assert clock.next_timer() == 150  # tried again 50 ms later, not in a busy loop
            clock.advance(50)
            assert lease.expires_at == 450 and not lease.lost
    finally:
        k.close()
