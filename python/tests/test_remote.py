"""Remote-only tests of klock.connect against real ``klock serve`` processes, in real time:
a server restart mid-lease (SIGKILL, restarted on the same data file and port: the lease
survives through the restart grace and the client's reconnect), a server killed while a block
waits (a clear error within the reconnect budget, never a hang), a wait whose grant went
unheard and then left the server's event stream (asked again, never a hang), the local lease
deadline when renewals cannot get through, wrong and missing bearer tokens, an unreachable URL,
asyncio blocks that never block the loop, and the error mapping. Every test is bounded in
time."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import klock
from klock._http import TransportError
from server import Link, Server


def test_an_unreachable_url_is_a_clear_error_within_the_budget() -> None:
    start = time.monotonic()
    with pytest.raises(klock.Unreachable) as info:
        klock.connect("http://127.0.0.1:1", reconnect_timeout=0.3)
    assert time.monotonic() - start < 3
    assert "cannot reach klock serve at http://127.0.0.1:1: connection refused" in str(info.value)
    assert info.value.name == "UNREACHABLE"


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="url must be an http"):
        klock.connect("127.0.0.1:7300")
    with pytest.raises(ValueError, match="reconnect_timeout"):
        klock.connect("http://127.0.0.1:1", reconnect_timeout=0)


def test_a_wrong_or_missing_bearer_token_is_refused_naming_the_url(tmp_path: pathlib.Path) -> None:
    tokens = tmp_path / "tokens.json"
    digest = hashlib.sha256(b"right-secret").hexdigest()
    tokens.write_text(
        json.dumps(
            {"tokens": [{"name": "t", "sha256": digest, "role": "agent", "namespaces": ["ci"]}]}
        )
    )
    server = Server("--memory", "--tokens", str(tokens))
    try:
        with pytest.raises(klock.Unauthorized) as info:
            klock.connect(server.url, token="wrong-secret", namespace="ci")
        assert info.value.name == "UNAUTHORIZED"
        assert (
            f"klock serve at {server.url}: the bearer token was refused (401" in info.value.message
        )
        with pytest.raises(klock.Unauthorized, match="no bearer token was given"):
            klock.connect(server.url, namespace="ci")
        with klock.connect(server.url, token="right-secret", namespace="ci") as k:
            with k.session("a") as s, s.lease("MUTATES FILE:/x") as lease:
                assert lease.fence >= 1
            with pytest.raises(klock.Unauthorized) as forbidden, k.session("b", namespace="other"):
                pass
            assert forbidden.value.name == "FORBIDDEN"
    finally:
        server.stop()


def test_server_errors_become_the_in_process_classes(memory_server: Any) -> None:
    with klock.connect(memory_server.url) as k, k.session("errors") as s:
        with pytest.raises(klock.InvalidInput) as info, s.lease("GRABS FILE:/x"):
            pass
        assert (info.value.code, info.value.name) == (101, "INVALID_PREDICATE")
        with pytest.raises(klock.UnknownId) as unknown:
            k.kernel.release(s.session_id, 10**12, k.now())
        assert (unknown.value.code, unknown.value.name) == (201, "UNKNOWN_LEASE")
        assert s.reconcile([10**12]) == [(10**12, "UNKNOWN", None, None)]


def test_a_lease_survives_a_server_restart(tmp_path: pathlib.Path) -> None:
    """SIGKILL mid-lease, restart on the same file and port: the server restores the session
    in its grace and extends the lease; the client reconnects, renews, and the block exits
    cleanly with the same lease and fence."""
    server = Server("--data", str(tmp_path / "klock.redb"))
    try:
        with klock.connect(server.url, reconnect_timeout=15) as k, k.session("survivor") as s:
            with s.lease("MUTATES FILE:/r", ttl=3) as lease:
                fence, ids = lease.fence, lease.lease_ids
                server.kill()
                time.sleep(0.5)
                server.start()
                time.sleep(2.5)  # past a TTL/3 heartbeat and the reconnect
                lease.check()
                lease.heartbeat()
                assert (lease.fence, lease.lease_ids) == (fence, ids)
            assert k.counters.lost == 0
            with s.lease("MUTATES FILE:/r") as again:  # the server goes on after the restart
                assert again.fence > fence
    finally:
        server.stop()


def test_a_call_after_a_failed_best_effort_release_gets_its_whole_budget(
    tmp_path: pathlib.Path,
) -> None:
    """The server is SIGKILLed under a held lease: the lease's local deadline passes, and the
    client's best-effort release of it (one attempt per node) fails. A call made next, while
    the server is still down, waits for it within its own budget: it is answered once the
    server is back, never failed at once because an earlier call gave up (the fleet demo's
    agents failed so through a server restart)."""
    server = Server("--data", str(tmp_path / "klock.redb"))
    restarted = threading.Timer(1.5, server.start)
    try:
        with klock.connect(server.url, reconnect_timeout=15) as k, k.session("lost") as s:
            block = s.lease("MUTATES FILE:/gone", ttl=0.6)
            block.__enter__()
            server.kill()
            deadline = time.monotonic() + 5
            while not block.lost and time.monotonic() < deadline:
                time.sleep(0.02)
            assert block.lost
            time.sleep(0.3)  # the release of the lost lease was sent to nobody, and gave up
            restarted.start()
            started = time.monotonic()
            with k.session("after") as after, after.lease("MUTATES FILE:/next") as lease:
                assert lease.fence >= 1
            assert time.monotonic() - started > 1.0, "answered before the server was back?"
            with pytest.raises(klock.LeaseLost):
                block.__exit__(None, None, None)
    finally:
        restarted.cancel()
        if restarted.ident is not None:
            restarted.join()
        server.stop()


def test_a_server_killed_while_a_block_waits_is_a_clear_error() -> None:
    server = Server("--memory")
    outcome: list[BaseException | str] = []
    try:
        k = klock.connect(server.url, reconnect_timeout=1.0)
        old, young = k.session("old"), k.session("young")  # old is older: it waits
        waiter = threading.Thread()
        # Leaving the held block tries to release on the dead server: a clear error too.
        with pytest.raises(klock.Unreachable, match="cannot reach klock serve at"):
            with young.lease("MUTATES FILE:/w", ttl=60):

                def wait() -> None:
                    try:
                        with old.lease("MUTATES FILE:/w"):
                            outcome.append("granted")
                    except BaseException as e:  # the test inspects it
                        outcome.append(e)

                waiter = threading.Thread(target=wait)
                waiter.start()
                deadline = time.monotonic() + 5
                while k.counters.waits == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert k.counters.waits == 1
                started = time.monotonic()
                server.kill()
                waiter.join(10)
                assert not waiter.is_alive(), "the waiting block hung"
                assert time.monotonic() - started < 6
        (error,) = outcome
        assert isinstance(error, klock.Unreachable), error
        assert f"cannot reach klock serve at {server.url}" in str(error)
        k.close()
    finally:
        server.stop()


def test_a_lease_is_lost_at_its_local_deadline_when_renewals_cannot_get_through() -> None:
    """The server is frozen (SIGSTOP): requests time out. The lease's local deadline (the
    grant's send time + TTL) passes without a renewal, so the client marks it lost at once
    (LEASE_EXPIRED), before the server would."""
    server = Server("--memory")
    try:
        k = klock.connect(server.url, reconnect_timeout=30, request_timeout=0.2)
        s = k.session("frozen")
        block = s.lease("MUTATES FILE:/f", ttl=0.9)
        block.__enter__()
        sent = k.now()
        assert server.proc is not None
        server.freeze()
        try:
            deadline = time.monotonic() + 5
            while not block.lost and time.monotonic() < deadline:
                time.sleep(0.02)
            assert block.lost
            assert k.now() - sent < 900 + 800  # at the local deadline, not much later
            with pytest.raises(klock.LeaseLost) as lost:
                block.check()
            assert lost.value.name == "LEASE_EXPIRED"
        finally:
            server.proc.send_signal(signal.SIGCONT)
        with pytest.raises(klock.LeaseLost):
            block.__exit__(None, None, None)
        k.close()
    finally:
        server.stop()


def test_a_lease_the_exit_finds_ended_is_lost_before_its_event_arrives(
    memory_server: Any,
) -> None:
    """A process paused past its lease's TTL (here: the Klock's timer kept from renewing it)
    wakes up and leaves the block before the server's LEASE_EXPIRED has reached it (here: the
    event reader held back). The release finds the lease ended on the server: the exit raises
    LeaseLost, as in one process, instead of passing the work done under it off as safe."""
    with klock.connect(memory_server.url) as k:
        backend = k.kernel
        gate = threading.Event()
        take = backend._take  # type: ignore[attr-defined]

        def late_take(namespace: str, d: dict[str, Any]) -> bool:
            gate.wait(10)  # events reach the client only after the release
            return take(namespace, d)  # type: ignore[no-any-return]

        backend._take = late_take  # type: ignore[attr-defined]
        s = k.session("paused")
        try:
            with pytest.raises(klock.LeaseLost) as lost:
                with s.lease("MUTATES FILE:/paused", ttl=0.3):
                    with k._lock:  # the timer can neither renew the lease nor give it up
                        time.sleep(1.0)  # past the server's expiry
        finally:
            gate.set()
        assert lost.value.name == "LEASE_EXPIRED", lost.value
        assert k.counters.lost == 1
        s.close()


def test_async_blocks_wait_without_blocking_the_loop(memory_server: Any) -> None:
    async def main() -> list[str]:
        order: list[str] = []
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        async with klock.connect(memory_server.url) as k:
            old, young = k.session("a-old"), k.session("a-young")
            tick_task = asyncio.ensure_future(ticker())
            async with young.lease("MUTATES FILE:/async", ttl=5):

                async def waiter() -> None:
                    async with old.lease("MUTATES FILE:/async", timeout=10):
                        order.append("old")

                task = asyncio.ensure_future(waiter())
                before = ticks
                await asyncio.sleep(0.3)
                assert ticks - before > 10, "the event loop was blocked"
                order.append("young")
            await task
            stop.set()
            await tick_task
            old.close()
            young.close()
        return order

    assert asyncio.run(asyncio.wait_for(main(), 20)) == ["young", "old"]


def test_protected_and_resume_work_remotely(memory_server: Any) -> None:
    with klock.connect(memory_server.url) as k:
        calls: list[int] = []

        @klock.protected("MUTATES FILE:{path}", klock=k)
        def edit(path: str) -> None:
            calls.append(k.counters.grants)

        edit("/p")
        assert calls == [1]
        s = k.session("resumable")
        with s.lease("MUTATES FILE:/digest", ttl=5) as lease:
            digest = s.digest()
            s.suspend()
            again = k.resume(digest)
            assert again is s and again.priority == s.priority
            assert not lease.lost
        s.close()


def test_a_retried_request_carries_the_same_idempotency_key_and_acts_once(
    memory_server: Any,
) -> None:
    """The answer to an open is lost on the way back (the connection drops after the server
    acted): the retry carries the same Idempotency-Key, so the server answers the first
    answer instead of opening a second session."""
    with klock.connect(memory_server.url) as k:
        http = k.kernel._http[0]  # type: ignore[attr-defined]  (the one node's transport)
        real = http.request
        keys: list[str] = []

        def lossy(method: str, path: str, **kwargs: Any) -> Any:
            response = real(method, path, **kwargs)
            if method == "POST" and path.endswith("/sessions"):
                keys.append(kwargs["headers"]["Idempotency-Key"])
                if len(keys) == 1:
                    raise TransportError("connection reset after the request was sent")
            return response

        before = k.stats()["counters"]["sessions_opened"]
        http.request = lossy
        try:
            s = k.session("once")
        finally:
            http.request = real
        assert len(keys) == 2 and keys[0] == keys[1]
        assert k.stats()["counters"]["sessions_opened"] == before + 1
        with s.lease("MUTATES FILE:/once") as lease:
            assert lease.held
        s.close()


def test_a_grant_after_a_wait_is_renewed_at_once(memory_server: Any) -> None:
    """The grant may predate the event that tells of it, so its local deadline counts from the
    acquire's send time, and the client renews it as soon as it learns of it (not TTL/3
    later)."""
    with klock.connect(memory_server.url) as k:
        old, young = k.session("renew-old"), k.session("renew-young")
        beats: list[float] = []
        http = k.kernel._http[0]  # type: ignore[attr-defined]  (the one node's transport)
        real = http.request

        def spy(method: str, path: str, **kwargs: Any) -> Any:
            if path.endswith(f"/sessions/{old.session_id}/heartbeat"):
                beats.append(time.monotonic())
            return real(method, path, **kwargs)

        http.request = spy
        got: list[float] = []
        with young.lease("MUTATES FILE:/renew", ttl=30):
            t = threading.Thread(
                target=lambda: _hold_and_note(old, "MUTATES FILE:/renew", got), daemon=True
            )
            t.start()
            deadline = time.monotonic() + 5
            while k.counters.waits == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
        t.join(10)
        http.request = real
        assert got and beats, (got, beats)
        assert beats[0] - got[0] < 1.0  # at once, not 10 s (TTL/3) later
        old.close()
        young.close()


def _hold_and_note(session: klock.Session, intent: str, got: list[float]) -> None:
    with session.lease(intent, ttl=30):
        got.append(time.monotonic())
        time.sleep(0.5)


def test_a_grant_heard_of_after_its_local_deadline_is_lost_at_once(memory_server: Any) -> None:
    """The remote side of test_rev4_client's settled-late grant: the client counts a grant
    after a WAIT from the acquire's send time, so when it learns of the grant only after
    send time + TTL (here its lock is held, as by a long synchronous callback), the lease is
    lost at once (LEASE_EXPIRED), even if the server would still renew it."""
    with klock.connect(memory_server.url) as k:
        waiter, holder = k.session("late-older"), k.session("late-younger")
        expired_before = k.stats()["counters"]["expired"]
        k._call(k.kernel.acquire, holder.session_id, ["MUTATES FILE:/late"], ttl_ms=600)
        outcome: list[BaseException | str] = []

        def wait_then_hold() -> None:
            try:
                with waiter.lease("MUTATES FILE:/late", ttl=1, timeout=20):
                    time.sleep(0.3)
                outcome.append("exited cleanly")
            except BaseException as e:  # the test inspects it
                outcome.append(e)

        t = threading.Thread(target=wait_then_hold, daemon=True)
        with k._lock:  # the acquire is sent, then nothing is routed for 1.5 s
            t.start()
            deadline = time.monotonic() + 5
            while k.counters.waits == 0 and time.monotonic() < deadline:
                k._lock.release()
                time.sleep(0.005)
                k._lock.acquire()
            # The holder's lease expires at 600 ms and the grant comes then: on the server the
            # waiter's lease lasts until 1600 ms, locally until 1000 ms (acquire sent at ~0).
            time.sleep(1.3)
        t.join(10)
        (error,) = outcome
        assert isinstance(error, klock.LeaseLost) and error.name == "LEASE_EXPIRED", error
        # Lost by the client's rule, not by the server: only the holder's lease expired there.
        assert k.stats()["counters"]["expired"] == expired_before + 1
        waiter.close()
        holder.close()


def _waiting_block(
    k: klock.Klock,
    session: klock.Session,
    intent: str,
    timeout: float,
    outcome: list[Any],
    result: Callable[[klock.Lease], Any],
) -> threading.Thread:
    """Runs ``with session.lease(intent, timeout=timeout)`` in a thread that appends
    ``result(lease)``, or the exception, to ``outcome``; returns once the block waits (``k``
    counted its WAIT)."""

    def wait() -> None:
        try:
            with session.lease(intent, timeout=timeout) as lease:
                outcome.append(result(lease))
        except BaseException as e:  # the test inspects it
            outcome.append(e)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    deadline = time.monotonic() + 5
    while k.counters.waits == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert k.counters.waits == 1
    return waiter


def test_a_wait_whose_outcome_the_server_no_longer_has_asks_again(tmp_path: pathlib.Path) -> None:
    """The waiter's client loses its network while the holder (another client) releases, so
    the grant's event goes unheard; the server then restarts from a snapshot taken after it,
    so the event is gone from the session's stream. Back on the network, the client's poll of
    the ticket answers TICKET_ENDED, and the block asks again instead of waiting for an event
    that will never come: the acquire reuses the lease granted meanwhile."""
    server = Server("--data", str(tmp_path / "klock.redb"), "--snapshot-every", "1")
    link = Link(server.port)
    outcome: list[BaseException | tuple[int, list[int]]] = []
    try:
        with (
            klock.connect(link.url, reconnect_timeout=30) as k,
            klock.connect(server.url, reconnect_timeout=30) as other,
        ):
            waiting = k.session("ended-old")  # the older: under wait_die it waits
            holder = other.session("ended-young")
            held = holder.lease("MUTATES FILE:/ended", ttl=60)
            held.__enter__()
            waiter = _waiting_block(
                k,
                waiting,
                "MUTATES FILE:/ended",
                40,
                outcome,
                lambda got: (got.fence, got.lease_ids),
            )
            link.cut()
            held.__exit__(None, None, None)  # the waiter's ticket is granted, unheard
            # The server snapshots after a batch before it takes the next: once this later
            # call is answered, the grant is in the snapshot, not in a log a restart replays.
            other.session("ended-later")
            server.kill()
            server.start()  # from the snapshot: the grant's event is gone
            link.restore()
            waiter.join(30)
            assert not waiter.is_alive(), "the waiter hung on a ticket that had ended"
            ((fence, lease_ids),) = outcome
            assert fence > held.fence, outcome
            assert k.counters.retries == 1, "the block asked again (no event delivered the grant)"
            # The lease the server granted meanwhile is the one the block got: nothing held twice.
            statuses = waiting.reconcile(lease_ids)
            assert [status for _, status, _, _ in statuses] == ["RELEASED"]
            assert other.stats()["active_leases"] == 0
            waiting.close()
            holder.close()
    finally:
        link.close()
        server.stop()


def test_a_wait_survives_a_server_restart(tmp_path: pathlib.Path) -> None:
    """A block waits while the server is SIGKILLed and restarted on its file and port: the
    event reader reconnects after the last event id, and the grant that follows the holder's
    release reaches the waiter."""
    server = Server("--data", str(tmp_path / "klock.redb"))
    outcome: list[BaseException | int] = []
    try:
        with klock.connect(server.url, reconnect_timeout=15) as k:
            old, young = k.session("restart-old"), k.session("restart-young")
            with young.lease("MUTATES FILE:/restart", ttl=5) as held:
                waiter = _waiting_block(
                    k, old, "MUTATES FILE:/restart", 20, outcome, lambda got: got.fence
                )
                server.kill()
                time.sleep(0.3)
                server.start()
                time.sleep(1.0)
                assert not outcome  # still waiting: the holder holds on
            waiter.join(15)
            assert not waiter.is_alive(), "the waiter hung after the restart"
            (fence,) = outcome
            assert isinstance(fence, int) and fence > held.fence, outcome
            assert k.counters.lost == 0
            old.close()
            young.close()
    finally:
        server.stop()
