"""Closing a Klock or a session ends every acquisition still in progress — waiting on a
ticket or backing off after a DIE, in threads and in asyncio tasks — promptly, with
:class:`klock.Closed`, with its ticket withdrawn, and nothing granted afterwards."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

import pytest
from support import REPO
from test_client import MakeKlock, in_thread, wait_until

import klock


def test_close_ends_an_acquisition_backing_off_after_a_die(make_klock: MakeKlock) -> None:
    k = make_klock(backoff_base_ms=2_000, backoff_cap_ms=2_000)
    old, young = k.session("old"), k.session("young")
    with pytest.raises(klock.LeaseLost, match="Klock was closed"):  # close() released it
        with old.lease("MUTATES FILE:/x"):
            t, errors = in_thread(lambda: young.lease("MUTATES FILE:/x").__enter__())
            wait_until(lambda: k.counters.deaths == 1)  # young sleeps 2-4 s before its retry
            start = time.monotonic()
            k.close()
            t.join(5)
            assert not t.is_alive() and time.monotonic() - start < 1.0
    assert len(errors) == 1 and isinstance(errors[0], klock.Closed), errors
    assert (
        errors[0].name == "CLOSED"
        and errors[0].code == 0
        and "this Klock is closed" in str(errors[0])
    )
    time.sleep(0.3)
    assert (
        k.counters.grants == 1 and k.kernel.stats()["active_leases"] == 0
    )  # nothing granted after close


def test_close_ends_a_waiter_and_withdraws_its_ticket(make_klock: MakeKlock) -> None:
    k = make_klock()
    old, young = k.session("old"), k.session("young")
    with pytest.raises(klock.LeaseLost, match="Klock was closed"):
        with young.lease("MUTATES FILE:/x"):
            t, errors = in_thread(lambda: old.lease("MUTATES FILE:/x").__enter__())
            wait_until(lambda: k.counters.waits == 1)
            k.close()
            t.join(5)
            assert not t.is_alive()
            assert k.kernel.stats()["waiting_tickets"] == 0  # withdrawn, not left queued
    assert (
        len(errors) == 1
        and isinstance(errors[0], klock.Closed)
        and "this Klock is closed" in str(errors[0])
    )
    assert k.kernel.stats()["active_leases"] == 0


def test_close_does_not_leave_a_ticket_granted_when_an_earlier_one_is_withdrawn(
    make_klock: MakeKlock,
) -> None:
    # Two waiters of this Klock queued on one resource: withdrawing the first must not grant
    # the second a lease that nobody would ever release.
    k = make_klock()
    b, a, holder = (
        k.session("b"),
        k.session("a"),
        k.session("holder"),
    )  # b oldest: it may queue behind a
    with pytest.raises(klock.LeaseLost, match="Klock was closed"):
        with holder.lease("MUTATES FILE:/x"):
            ta, ea = in_thread(lambda: a.lease("MUTATES FILE:/x").__enter__())
            wait_until(lambda: k.counters.waits == 1)
            tb, eb = in_thread(lambda: b.lease("MUTATES FILE:/x").__enter__())
            wait_until(lambda: k.counters.waits == 2)
            k.close()
            for t in (ta, tb):
                t.join(5)
            assert k.kernel.stats()["waiting_tickets"] == 0
    assert isinstance(ea[0], klock.Closed) and isinstance(eb[0], klock.Closed)
    assert k.kernel.stats()["active_leases"] == 0


def test_closing_a_session_ends_its_acquisition_backing_off(make_klock: MakeKlock) -> None:
    k = make_klock(backoff_base_ms=2_000, backoff_cap_ms=2_000)
    old, young = k.session("old"), k.session("young")
    with old.lease("MUTATES FILE:/x"):
        t, errors = in_thread(lambda: young.lease("MUTATES FILE:/x").__enter__())
        wait_until(lambda: k.counters.deaths == 1)
        start = time.monotonic()
        young.close()
        t.join(5)
        assert not t.is_alive() and time.monotonic() - start < 1.0
    assert (
        len(errors) == 1
        and isinstance(errors[0], klock.Closed)
        and "this session is closed" in str(errors[0])
    )


def test_close_ends_asyncio_acquisitions_waiting_and_backing_off() -> None:
    async def main() -> tuple[list[object], float, klock.Klock]:
        k = klock.Klock(backoff_base_ms=2_000, backoff_cap_ms=2_000)
        oldest, holder, young = k.session("oldest"), k.session("holder"), k.session("young")
        with pytest.raises(klock.LeaseLost, match="Klock was closed"):
            with holder.lease("MUTATES FILE:/x"):
                waiting = asyncio.create_task(oldest.lease("MUTATES FILE:/x").__aenter__())
                backing_off = asyncio.create_task(young.lease("MUTATES FILE:/x").__aenter__())
                end = time.monotonic() + 10
                while not (k.counters.waits == 1 and k.counters.deaths == 1):
                    assert time.monotonic() < end
                    await asyncio.sleep(0.005)
                start = time.monotonic()
                k.close()
                results = await asyncio.wait_for(
                    asyncio.gather(waiting, backing_off, return_exceptions=True), 5
                )
                elapsed = time.monotonic() - start
        return list(results), elapsed, k

    results, elapsed, k = asyncio.run(main())
    assert elapsed < 1.0
    assert all(isinstance(r, klock.Closed) and "this Klock is closed" in str(r) for r in results), (
        results
    )
    assert k.kernel.stats()["waiting_tickets"] == 0 and k.kernel.stats()["active_leases"] == 0


def test_closed_klock_and_session_raise_closed() -> None:
    k = klock.Klock()
    s = k.session("a")
    s.close()
    for call in (
        lambda: s.lease("MUTATES FILE:/x").__enter__(),
        s.digest,
        s.suspend,
        lambda: s.reconcile([]),
    ):
        with pytest.raises(klock.Closed, match="this session is closed") as e:
            call()
        assert (
            isinstance(e.value, klock.KlockError) and e.value.name == "CLOSED" and e.value.code == 0
        )
    k.close()
    for call in (lambda: k.session("b"), lambda: k.lease("MUTATES FILE:/x").__enter__()):
        with pytest.raises(klock.Closed, match="this Klock is closed") as e:
            call()
        assert e.value.name == "CLOSED" and e.value.message == "this Klock is closed"


CHILD = textwrap.dedent(
    """
    import threading, time, klock
    k = klock.Klock(backoff_base_ms=200, backoff_cap_ms=200)
    old, young = k.session("old"), k.session("young")
    old.lease("MUTATES FILE:/x", ttl=120).__enter__()  # held for good

    def agent():  # not a daemon: the process cannot exit while it runs
        try:
            with young.lease("MUTATES FILE:/x"):
                print("granted after close", flush=True)
        except klock.Closed as e:
            print("closed:", e.message, flush=True)

    threading.Thread(target=agent).start()
    while k.counters.deaths < 2:
        time.sleep(0.01)
    k.close()
    """
)


def test_a_process_whose_klock_is_closed_exits_while_an_acquisition_backs_off() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=REPO, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed: this Klock is closed", done.stdout + done.stderr


# ---- timeout: math.inf waits with no client-side limit; out-of-range values are named --------


def test_timeout_inf_waits_in_one_ticket_with_no_limit(make_klock: MakeKlock) -> None:
    import math

    k = make_klock()
    old, young = k.session("old"), k.session("young")
    with young.lease("MUTATES FILE:/x"):
        t, errors = in_thread(
            lambda: (
                old.lease("MUTATES FILE:/x", timeout=math.inf)
                .__enter__()
                .__exit__(None, None, None)
            )
        )
        wait_until(lambda: k.counters.waits == 1)
        (w,) = k.resource_state("FILE:/x")["waiting"]
        assert w["deadline"] == 2**64 - 1  # "never" (SPEC §2, saturating deadlines)
    t.join(10)
    assert not t.is_alive() and not errors, errors
    with k.lease("MUTATES FILE:/y", timeout=math.inf) as lease:
        assert lease.held


@pytest.mark.parametrize(
    "bad", [float("nan"), -1, -0.5, float("-inf"), 1e30, 2**64, 18446744073709552.0]
)
def test_timeout_out_of_range_is_a_value_error_naming_timeout(
    make_klock: MakeKlock, bad: float
) -> None:
    k = make_klock()
    s = k.session("a")
    for make in (
        lambda: s.lease("MUTATES FILE:/x", timeout=bad),
        lambda: k.lease("MUTATES FILE:/x", timeout=bad),
    ):
        with pytest.raises(ValueError) as e:
            make()
        text = str(e.value)
        assert (
            "timeout" in text
            and "wait_timeout_ms" not in text
            and "math.inf" in text
            and "seconds" in text
        ), text
    assert k.kernel.stats()["active_leases"] == 0


def test_timeout_just_inside_the_range_is_accepted(make_klock: MakeKlock) -> None:
    k = make_klock()
    with k.session("a") as s, s.lease("MUTATES FILE:/x", timeout=1.8e16) as lease:
        assert lease.held
