"""Many threads and many asyncio tasks hammering shared counters through lease blocks.

Each worker increments a shared per-resource counter with a read-yield-write, which loses
updates whenever two workers overlap. Under the leases (and, where the policy revokes leases,
the fences) no update may be lost, and every worker must finish (no deadlock)."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Callable

import pytest

import klock
import klock.remote
from klock import Klock

MakeKlock = Callable[..., Klock]

THREADS = 32
CYCLES = 1000
# On the remote backend every cycle is two HTTP requests to a debug-build server: fewer cycles
# (the same workers, contention and checks).
REMOTE_CYCLES = 40


def is_remote(k: Klock) -> bool:
    return isinstance(k.kernel, klock.remote.RemoteKernel)


RESOURCES = 50


class FencedCounter:
    """A shared counter that, like a fenced storage service, remembers the largest fence it
    has seen on any access and refuses accesses carrying a smaller one. Its value is read and
    written in two separate steps (a read-modify-write that loses updates if unprotected)."""

    def __init__(self) -> None:
        self.value = 0
        self.max_fence = 0
        self._atomic = threading.Lock()  # the storage's own per-operation atomicity

    def read(self, fence: int) -> int | None:
        with self._atomic:
            if fence < self.max_fence:
                return None
            self.max_fence = fence
            return self.value

    def write(self, fence: int, value: int) -> bool:
        with self._atomic:
            if fence < self.max_fence:
                return False
            self.max_fence = fence
            self.value = value
            return True


@pytest.mark.parametrize("policy", ["wait_die", "wound_wait"])
def test_threads_no_lost_update_no_deadlock(make_klock: MakeKlock, policy: str) -> None:
    # A small backoff base keeps the run short; the rules are the kernel's as always.
    k = make_klock(policy, backoff_base_ms=1, backoff_cap_ms=20, seed=11)
    cycles = REMOTE_CYCLES if is_remote(k) else CYCLES
    counters = [FencedCounter() for _ in range(RESOURCES)]
    increments = [0] * RESOURCES
    refused = [0]
    errors: list[BaseException] = []
    done = [0] * THREADS
    tally = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(index)
        mine = [0] * RESOURCES
        stale = 0
        try:
            with k.session(f"worker-{index}") as s:
                for _ in range(cycles):
                    r = rng.randrange(RESOURCES)
                    extra = rng.randrange(RESOURCES)  # some manifests name two counters
                    intents = [f"MUTATES COUNTER:/r{r}"] + (
                        [f"CONSUMES COUNTER:/r{extra}"] if extra != r and extra % 3 == 0 else []
                    )
                    while True:
                        written = False
                        try:
                            with s.lease(*intents, ttl=10, timeout=60) as lease:
                                fence = lease.fences[f"COUNTER:/r{r}"]
                                value = counters[r].read(fence)
                                time.sleep(0)  # let another thread in between read and write
                                if value is not None and counters[r].write(fence, value + 1):
                                    mine[r] += 1
                                    written = True
                                else:
                                    stale += 1
                        except klock.LeaseLost:
                            pass  # wound_wait: an older session revoked the lease
                        if written:
                            break
                    done[index] += 1
        except BaseException as e:
            errors.append(e)
        with tally:
            refused[0] += stale
            for i in range(RESOURCES):
                increments[i] += mine[i]

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, start + 240 - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, (
        f"deadlock or starvation: {len(alive)} workers still running, {sum(done)} cycles done"
    )
    assert not errors, errors[:3]
    assert done == [cycles] * THREADS
    assert [c.value for c in counters] == increments, "lost update"
    assert sum(increments) == THREADS * cycles
    if policy == "wait_die":
        # Nobody revokes a lease under Wait-Die and the TTL is long: the fence never refuses.
        assert refused[0] == 0
    stats = k.stats()
    assert stats["active_leases"] == 0 and stats["waiting_tickets"] == 0
    assert stats["counters"]["defensive_repairs"] == 0
    assert stats["counters"]["waited"] + stats["counters"]["died"] > 0  # there was contention


def test_asyncio_tasks_no_lost_update_no_thread_per_waiter(make_klock: MakeKlock) -> None:
    tasks = 200
    resources = 20
    k = make_klock(backoff_base_ms=1, backoff_cap_ms=20, seed=5)
    cycles = 4 if is_remote(k) else 25
    # Remotely the HTTP calls run in the event loop's default executor (a bounded pool, never
    # a thread per waiter) and one thread reads the event stream.
    extra_threads = min(32, (os.cpu_count() or 1) + 4) + 1 if is_remote(k) else 0
    counters = [0] * resources
    threads_seen: list[int] = []

    async def worker(index: int) -> int:
        rng = random.Random(index)
        n = 0
        async with k.session(f"task-{index}") as s:
            for _ in range(cycles):
                r = rng.randrange(resources)
                async with s.lease(f"MUTATES COUNTER:/r{r}", timeout=60) as lease:
                    assert lease.held
                    value = counters[r]
                    await asyncio.sleep(0)  # yield to the other tasks between read and write
                    counters[r] = value + 1
                    n += 1
                threads_seen.append(threading.active_count())
        return n

    async def main() -> list[int]:
        return await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(tasks))), 240)

    before = threading.active_count()
    results = asyncio.run(main())
    assert results == [cycles] * tasks
    assert sum(counters) == tasks * cycles, "lost update"
    assert max(threads_seen) <= before + extra_threads  # waiting tasks block no thread
    assert k.counters.waits > 0  # the tasks really did wait for each other
    assert k.stats()["active_leases"] == 0


def test_asyncio_cancelled_waiter_leaves_nothing_queued(make_klock: MakeKlock) -> None:
    k = make_klock()

    async def main() -> None:
        young = k.session("young")
        old = k.session("old")
        # Make "old" the older session by opening it first in a fresh Klock order.
        first, second = (young, old) if young.priority < old.priority else (old, young)
        async with second.lease("MUTATES FILE:/x"):
            waiting = asyncio.ensure_future(first.lease("MUTATES FILE:/x").__aenter__())
            for _ in range(200):
                if k.counters.waits:
                    break
                await asyncio.sleep(0.005)
            assert k.stats()["waiting_tickets"] == 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert k.stats()["waiting_tickets"] == 0
        first.close()
        second.close()

    asyncio.run(main())
    assert k.stats()["active_leases"] == 0


def test_asyncio_wait_resolved_by_event(make_klock: MakeKlock) -> None:
    k = make_klock()

    async def main() -> float:
        old = k.session("old")
        young = k.session("young")
        order: list[str] = []

        async def holder() -> None:
            async with young.lease("MUTATES FILE:/x"):
                order.append("young")
                await asyncio.sleep(0.1)

        task = asyncio.ensure_future(holder())
        await asyncio.sleep(0.02)
        start = time.monotonic()
        async with old.lease("MUTATES FILE:/x", timeout=10) as lease:
            order.append("old")
            assert lease.held
        await task
        assert order == ["young", "old"]
        old.close()
        young.close()
        return time.monotonic() - start

    waited = asyncio.run(main())
    assert 0.05 < waited < 2
    assert k.counters.waits == 1
