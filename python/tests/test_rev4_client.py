"""The client under SPEC rev 4: leases never shortened by a nested block, heartbeats that
follow the kernel's current view of a lease, WOUNDED backed off by the kernel's
``retry_after_ms`` (and treated as a DIE), and a lost lease reported even when the block's
own release is the call that settles its expiry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest
from support import REPO
from test_client import MakeKlock, in_thread, wait_until

import klock


class RecordingKernel:
    """Wraps a Klock's kernel and records, with the monotonic time, every acquire it answers
    and every event it hands out (the client drains every event through drain_events)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self.log: list[tuple[float, str, Any]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def acquire(self, session: int, intents: list[str], now: int, **kw: Any) -> Any:
        verdict = self._kernel.acquire(session, intents, now, **kw)
        with self._lock:
            self.log.append((time.monotonic(), "acquire", (session, verdict)))
        return verdict

    def drain_events(self) -> list[Any]:
        events = self._kernel.drain_events()
        t = time.monotonic()
        with self._lock:
            self.log.extend((t, "event", e) for e in events)
        return list(events)

    def events(self, kind: str, session: int) -> list[tuple[float, Any]]:
        with self._lock:
            return [
                (t, e)
                for t, what, e in self.log
                if what == "event" and e.event == kind and e.session == session
            ]

    def acquires(self, session: int) -> list[tuple[float, Any]]:
        with self._lock:
            return [
                (t, v)
                for t, what, (s, v) in ((t, w, x) for t, w, x in self.log if w == "acquire")
                if s == session
            ]


def recording(k: klock.Klock) -> RecordingKernel:
    rec = RecordingKernel(k.kernel)
    k.kernel = rec  # type: ignore[assignment]
    return rec


# ---- a nested block with a shorter TTL (defect 3) ---------------------------------------------


def test_a_nested_block_with_a_shorter_ttl_never_shortens_the_outer_lease(
    make_klock: MakeKlock,
) -> None:
    k = make_klock()
    s = k.session("outer-agent")
    other = k.session("other-agent")
    with s.lease("MUTATES FILE:/x", ttl=5) as outer:
        with s.lease("MUTATES FILE:/x", ttl=0.2) as inner:
            assert inner.leases[0].lease_id == outer.leases[0].lease_id
            assert inner.leases[0].ttl_ms == 5_000  # the kernel kept the larger TTL
        # The outer body keeps running five times longer than the inner TTL; nobody else may
        # get the resource meanwhile.
        end = time.monotonic() + 1.0
        tries = 0
        while time.monotonic() < end:
            with pytest.raises(klock.Timeout):
                with other.lease("MUTATES FILE:/x", timeout=0):
                    pass
            tries += 1
            time.sleep(0.05)
        assert tries >= 5
        outer.check()
        (status,) = s.reconcile(outer.lease_ids)
        assert status[1] == "ACTIVE"
    assert k.stats()["counters"]["expired"] == 0


def test_expires_at_and_ttl_follow_the_kernel_after_heartbeat_reacquire_and_resume(
    make_klock: MakeKlock,
) -> None:
    k = make_klock()
    s = k.session("a")
    with s.lease("MUTATES FILE:/x", ttl=10) as lease:
        first = lease.leases[0].expires_at
        time.sleep(0.05)
        lease.heartbeat()
        (status,) = s.reconcile(lease.lease_ids)
        assert status[2] is not None and status[2] > first
        assert lease.leases[0].expires_at == status[2] == lease.expires_at
        # A nested block asking again with a longer TTL renews the lease for the outer
        # block too: both report what the kernel now holds.
        with s.lease("MUTATES FILE:/x", ttl=20) as inner:
            assert inner.leases[0].ttl_ms == 20_000
            assert lease.leases[0].ttl_ms == 20_000
            assert lease.leases[0].expires_at == inner.leases[0].expires_at
            (status,) = s.reconcile(lease.lease_ids)
            assert lease.expires_at == status[2]
        # A resume renews every lease of the session (SPEC §5): the block sees it.
        digest = s.digest()
        before = lease.expires_at
        time.sleep(0.05)
        k.resume(digest)
        (status,) = s.reconcile(lease.lease_ids)
        assert lease.expires_at == status[2] and lease.expires_at > before


def test_a_grant_settled_late_is_heartbeaten_by_its_expiry_not_by_the_time_it_was_seen(
    make_klock: MakeKlock,
) -> None:
    # A ticket granted while settling an overdue instant T gets acquired_at = T and
    # expires_at = T + ttl (SPEC §2), even when the client hears of it much later (here the
    # timer is stalled for 800 ms of a 1000 ms TTL). The first heartbeat must be due by the
    # lease's own expiry, not ttl/3 after the moment the client saw the grant.
    k = make_klock()
    waiter = k.session("older")
    holder = k.session("younger")
    # The holder's lease is made on the kernel directly: no heartbeats, it expires at T.
    verdict = k._call(k.kernel.acquire, holder.session_id, ["MUTATES FILE:/x"], ttl_ms=300)
    expires = verdict.leases[0].expires_at
    granted = threading.Event()
    done = threading.Event()
    seen: list[Any] = []

    def wait_then_hold() -> None:
        with waiter.lease("MUTATES FILE:/x", ttl=1, timeout=20) as lease:
            seen.append(lease.leases[0])
            granted.set()
            done.wait(10)
            lease.check()

    t, errors = in_thread(wait_then_hold)
    wait_until(lambda: k.counters.waits == 1)
    with k._lock:  # a stalled timer (a long synchronous callback, a paused process)
        while k.now() < expires + 800:
            time.sleep(0.01)
    assert granted.wait(10)
    assert seen[0].acquired_at == expires  # granted at T, seen ~800 ms later
    time.sleep(0.6)  # past T + 1000: only a timely heartbeat keeps the lease
    done.set()
    t.join(10)
    assert not errors, errors
    assert k.stats()["counters"]["expired"] == 1  # the holder's lease, nothing else


# ---- WOUNDED backs off by the kernel's answer, as a DIE (defect 4) ----------------------------


def test_a_wounded_waiter_backs_off_by_the_events_retry_after_ms(make_klock: MakeKlock) -> None:
    k = make_klock("wound_wait", backoff_base_ms=300, backoff_cap_ms=10_000, seed=7)
    rec = recording(k)
    oldest, middle, young = k.session("oldest"), k.session("middle"), k.session("young")
    queued = lambda: len(k.resource_state("FILE:/x")["waiting"])  # noqa: E731
    release = threading.Event()
    t1, e1 = in_thread(lambda: _hold(middle, release))
    wait_until(lambda: len(k.resource_state("FILE:/x")["holders"]) == 1)
    # A failed try-lock is a DIE: young's next backoff is twice the base (SPEC §8).
    with pytest.raises(klock.Timeout):
        with young.lease("MUTATES FILE:/x", timeout=0):
            pass
    t2, e2 = in_thread(lambda: _hold(young, release, timeout=20))
    wait_until(lambda: queued() == 1)
    t3, e3 = in_thread(lambda: _hold(oldest, release))
    wait_until(lambda: bool(rec.events("WOUNDED", young.session_id)))
    ((wounded_at, wounded),) = rec.events("WOUNDED", young.session_id)
    assert wounded.retry_after_ms is not None and 600 <= wounded.retry_after_ms < 900
    wait_until(lambda: any(t > wounded_at for t, _ in rec.acquires(young.session_id)))
    next_try = min(t for t, _ in rec.acquires(young.session_id) if t > wounded_at)
    assert next_try - wounded_at >= wounded.retry_after_ms / 1000
    release.set()
    for t in (t1, t2, t3):
        t.join(20)
    assert isinstance(e1[0], klock.LeaseLost) and not e2 and not e3
    assert k.counters.wounds == 2  # middle (its lease) and young (its ticket)


def test_a_wounded_waiter_that_holds_other_leases_must_roll_back(make_klock: MakeKlock) -> None:
    # Like a DIE: a block whose session holds other leases does not back off in place, it
    # raises Died with the kernel's retry_after_ms (SPEC §6 rule 3, §8).
    k = make_klock("wound_wait", backoff_base_ms=100, seed=3)
    rec = recording(k)
    oldest, middle, young = k.session("oldest"), k.session("middle"), k.session("young")
    release_middle, release_oldest = threading.Event(), threading.Event()
    t1, e1 = in_thread(lambda: _hold(middle, release_middle))
    wait_until(lambda: len(k.resource_state("FILE:/x")["holders"]) == 1)
    outcome: list[BaseException] = []
    outer_kept: list[bool] = []

    def nested() -> None:
        with young.lease("MUTATES FILE:/a") as outer:
            try:
                with young.lease("MUTATES FILE:/x", timeout=20):
                    pass
            except klock.KlockError as e:
                outcome.append(e)
            outer_kept.append(outer.held)

    t2, e2 = in_thread(nested)
    wait_until(lambda: len(k.resource_state("FILE:/x")["waiting"]) == 1)
    t3, e3 = in_thread(lambda: _hold(oldest, release_oldest))
    t2.join(10)
    assert not t2.is_alive() and not e2
    (wounded,) = [e for _, e in rec.events("WOUNDED", young.session_id)]
    assert wounded.lost_leases == []  # only its ticket: it keeps FILE:/a
    assert len(outcome) == 1 and isinstance(outcome[0], klock.Died), outcome
    assert outcome[0].retry_after_ms == wounded.retry_after_ms
    assert outer_kept == [True]
    release_middle.set()
    release_oldest.set()
    for t in (t1, t3):
        t.join(10)
    assert isinstance(e1[0], klock.LeaseLost) and not e3


def _hold(session: klock.Session, release: threading.Event, timeout: float | None = None) -> None:
    with session.lease("MUTATES FILE:/x", timeout=timeout):
        release.wait(20)


# ---- a lost lease found by the block's own release (defect 6) ---------------------------------


def test_a_release_that_settles_the_expiry_raises_lease_lost(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s:
        with pytest.raises(klock.LeaseLost) as lost:
            with k._lock:  # a long synchronous callback: the timer thread cannot run
                with s.lease("MUTATES FILE:/x", ttl=0.05) as lease:
                    time.sleep(0.2)
                    assert not lease.lost  # nobody has settled the expiry yet
        assert lost.value.name == "LEASE_EXPIRED" and lost.value.lease_ids == lease.lease_ids
        assert lease.lost and k.counters.lost == 1
    assert k.stats()["counters"]["expired"] == 1


def test_a_release_that_settles_the_expiry_of_a_shared_lease_raises_lease_lost(
    make_klock: MakeKlock,
) -> None:
    k = make_klock()
    s = k.session("a")
    with pytest.raises(klock.LeaseLost) as outer_lost:
        with s.lease("MUTATES FILE:/x", ttl=0.05) as outer:
            with pytest.raises(klock.LeaseLost):
                with k._lock:
                    with s.lease("MUTATES FILE:/x", ttl=0.05):
                        time.sleep(0.2)
            assert outer.lost
    assert outer_lost.value.name == "LEASE_EXPIRED"
    s.close()


STOPPED_CHILD = textwrap.dedent(
    """
    import sys, klock
    with klock.Klock() as k, k.session("a") as s:
        try:
            with s.lease("MUTATES FILE:/x", ttl=0.3) as lease:
                print("held", flush=True)
                sys.stdin.readline()  # the parent stops us past the TTL, then writes a line
        except klock.LeaseLost as e:
            print("lost", e.name, flush=True)
            sys.exit(0)
        print("fine", flush=True)
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_process_stopped_past_its_ttl_learns_that_it_lost_the_lease() -> None:
    for _ in range(3):  # which of the timer and the release settles the expiry is a race
        child = subprocess.Popen(
            [sys.executable, "-c", STOPPED_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO / "python")},
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "held"
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(1.0)
            child.stdin.write("\n")
            child.stdin.flush()
            os.kill(child.pid, signal.SIGCONT)
            out, _ = child.communicate(timeout=20)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        assert child.returncode == 0 and out.strip() == "lost LEASE_EXPIRED", out
