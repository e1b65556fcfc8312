"""klock._core's client rules as the friendly client drives them: the core's Acquisition and
Ledger, translated (bindings/python/src/{acquire,block}.rs). Each answer is the core's; the
binding reads no clock and calls nothing of the client, so these tests drive it by hand."""

from __future__ import annotations

import pytest

from klock import _core

NEVER = 2**64 - 1


def test_the_acquisition_is_the_cores() -> None:
    assert _core.AFTER_NO_WAIT_DIE == "timeout_no_wait"
    a = _core.Acquisition(1_000, 500)
    assert a.deadline == 1_500 and a.wait_ms(1_400) == 100 and a.wait_ms(2_000) == 0
    assert _core.Acquisition(5, None).wait_ms(5) == NEVER
    assert _core.Acquisition(NEVER - 1, 10).deadline == NEVER  # saturates
    default = _core.Acquisition.kernel_default()
    assert default.deadline is None and default.wait_ms(0) is None
    # A DIE to an attempt that asked for no wait: a timeout, whatever else holds.
    assert a.after("DIE", 100, 0, True, 0) == ("timeout_no_wait", 0)
    assert a.after("DIE", 100, 500, True, 0) == ("died", 0)
    assert a.after("DIED", 100, None, False, 1_000) == ("sleep", 100)
    assert a.after("WOUNDED", 100, None, False, 1_401) == ("timeout_retry_too_late", 0)
    assert a.after("WAIT_TIMEOUT", 0, None, False, 1_499) == ("ask_again", 0)
    assert a.after("WAIT_TIMEOUT", 0, None, False, 1_500) == ("timeout_wait_ended", 0)
    with pytest.raises(ValueError, match="GRANTED"):
        a.after("GRANTED", 0, None, False, 0)
    with pytest.raises(OverflowError):
        _core.Acquisition(-1, None)


class _Session:
    """What a block keeps of its session (the binding only stores it)."""


def _kernel(default_ttl_ms: int) -> _core.Kernel:
    kernel = _core.Kernel(default_ttl_ms=default_ttl_ms, session_idle_ms=1_000_000)
    kernel.holder_events = False  # as the client has it while nobody follows them
    return kernel


def _block(ledger: _core.Ledger, sid: int, *intents: str, ttl_ms: int | None = None) -> _core.Block:
    return _core.Block(_Session(), ledger, sid, intents, ttl_ms, None)


def test_acquire_in_and_release_in_answer_what_the_client_does_next() -> None:
    kernel = _kernel(3_000)
    sid = kernel.open_session("a", "default", 0).session_id
    ledger = _core.Ledger()
    outer = _block(ledger, sid, "MUTATES FILE:/x")
    # Granted: the earliest time the timer is wanted for (the first heartbeat, at a third of
    # the TTL, before the lease's expiry), the block held in the ledger.
    assert ledger.acquire_in(kernel, outer, None, 0) == 1_000
    assert ledger.is_held(outer) and ledger.holds_leases(sid)
    (lease,) = outer._leases()
    # A nested block reuses the lease: its end releases nothing, the outer still holds it.
    inner = _block(ledger, sid, "MUTATES FILE:/x")
    # (Reused and renewed: both blocks follow the new expiry, 3_010, renewed at 1_010.)
    assert ledger.acquire_in(kernel, inner, None, 10) == 1_010
    assert ledger.releasable(inner) == []
    assert ledger.release_in(kernel, inner, 20) == 3_010  # left the ledger: the lease's expiry
    assert not ledger.is_held(inner) and ledger.releasable(outer) == [lease.lease_id]
    assert inner._lease_ids() == [lease.lease_id]  # its leases as last reported, after its end
    assert kernel.stats()["active_leases"] == 1
    # The outer block's end releases the lease; what is left is the session's idle deadline.
    assert ledger.release_in(kernel, outer, 30) == 1_000_030
    assert kernel.stats()["active_leases"] == 0 and not ledger.holds_leases(sid)
    # Not granted: the verdict, nothing recorded.
    other = kernel.open_session("b", "default", 40).session_id
    assert kernel.acquire(other, ["MUTATES FILE:/y"], 40).verdict == "GRANTED"
    refused = _block(ledger, sid, "MUTATES FILE:/y")
    verdict = ledger.acquire_in(kernel, refused, 0, 50)
    assert isinstance(verdict, _core.Verdict) and verdict.verdict == "DIE"
    assert not ledger.is_held(refused)


def test_release_in_names_a_lease_that_expired_unseen_and_leaves_the_block_held() -> None:
    kernel = _kernel(100)
    sid = kernel.open_session("a", "default", 0).session_id
    ledger = _core.Ledger()
    block = _block(ledger, sid, "MUTATES FILE:/x")
    assert isinstance(ledger.acquire_in(kernel, block, None, 0), int)
    # Past the TTL: the release settles the expiry first and finds the lease ended: its id is
    # the answer, the kernel has the event for the client to route, and the block stays held
    # until the client finishes it.
    (lease_id,) = block._lease_ids()
    assert ledger.release_in(kernel, block, 500) == [lease_id]
    assert ledger.is_held(block)
    (event,) = kernel.drain_events()
    assert event.event == "LEASE_EXPIRED"
    assert event.lease == lease_id and ledger.lose([lease_id]) == [(block, lease_id)]
    ledger.finish(block)
    assert not ledger.is_held(block) and len(block._leases()) == 1


def test_a_block_refuses_what_is_not_an_intent() -> None:
    ledger = _core.Ledger()
    with pytest.raises(TypeError, match="separate arguments"):
        _core.Block(_Session(), ledger, 1, (["MUTATES FILE:/x"],), None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _core.Block(_Session(), ledger, 1, ("MUTATES FILE:/x",), 1.5, None)  # type: ignore[arg-type]
    block = _block(ledger, 1, "MUTATES FILE:/x")
    with pytest.raises(ValueError, match="unknown block state"):
        block._state = "sleeping"
