"""Benchmark of the Python host (a program, not a test).

Reports, with 0, 1k and 100k other active leases in the kernel:
- low-level ``klock._core`` acquire+release pairs per second (one session, one intent, the
  lease id read from the verdict: what a host's hot path does);
- friendly ``with session.lease(...)`` cycles per second (acquire, enter, exit, release,
  with the client's bookkeeping, event routing and heartbeat scheduling), threads and asyncio;
- the ratio of the two: what a friendly block costs in raw pairs (``pairs/s / cycles/s``; the
  target of issue 15 is at most 2.5). The runs are interleaved (pairs, ``with``, ``async
  with``, floor, then again), so a ratio compares runs made at the same time;
- a floor for any thread-safe block in pure Python: a ``with`` block of a minimal context
  manager class that takes a ``threading.Lock``, reads the monotonic clock and makes the raw
  acquire on entry, and takes the lock, reads the clock and makes the raw release on exit
  (no bookkeeping at all), as a ratio to the raw pair;
- a refused block: ``with session.lease(X, timeout=0)`` by a younger session while an older
  one holds X (``wait_die``: DIE, so :class:`klock.Timeout` at once), against the raw refused
  acquire (``_core`` acquire with ``wait=False`` answering DIE), interleaved; its ratio is what
  one refused block costs in raw DIEs (issue 27's target: at most 3);
- friendly lease blocks per second in-process vs remote (``klock.connect`` to a ``klock serve
  --memory`` the bench starts itself from the release build, ``--klock PATH``; build it with
  ``cargo build --release -p klock-cli --bin klock``), with 1 client and with 16 concurrent
  ones (16 threads, each its own session and resource; in-process they share one Klock, remotely
  each has its own connection, as 16 agent processes would).

Run: ``.venv/bin/python python/bench.py`` (``--quick`` for a short run). Each number is the
best of ``--repeat`` runs, because these machines are shared and noisy; ``--cpu-time`` times
the in-process runs by the thread's CPU time instead of the wall clock (steadier on a loaded
machine: time spent waiting for a core does not count).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import platform
import subprocess
import threading
import time

import klock
from klock import _core

LONG = 10**9  # a TTL no benchmark outlives

# What the in-process runs are timed with (--cpu-time: time.thread_time).
timer = time.perf_counter


def populate(kernel: _core.Kernel, count: int, now: int) -> None:
    """``count`` other active leases, held by background sessions (1000 per session)."""
    made = 0
    while made < count:
        session = kernel.open_session(f"background-{made}", "default", now).session_id
        for _ in range(5):
            batch = min(200, count - made)
            if batch <= 0:
                break
            intents = [f"MUTATES FILE:/background/{made + i}" for i in range(batch)]
            verdict = kernel.acquire(session, intents, now, ttl_ms=LONG)
            assert verdict.verdict == "GRANTED"
            made += batch
    assert kernel.stats()["active_leases"] == count


def low_level_pairs(background: int, pairs: int, repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        kernel = _core.Kernel(default_ttl_ms=LONG, max_ttl_ms=LONG)
        populate(kernel, background, 0)
        session = kernel.open_session("bench", "default", 1).session_id
        intents = ["MUTATES FILE:/bench/x"]
        acquire, release = kernel.acquire, kernel.release
        start = timer()
        for _ in range(pairs):
            verdict = acquire(session, intents, 1)
            release(session, verdict.leases[0].lease_id, 1)
        best = max(best, pairs / (timer() - start))
        assert kernel.stats()["active_leases"] == background
    return best


class _BareBlock:
    """The least a thread-safe lease block does around the raw calls (the floor row)."""

    __slots__ = ("kernel", "session", "intents", "lock", "lease_id", "t0")

    def __init__(self, kernel: _core.Kernel, session: int, intents: list[str]) -> None:
        self.kernel, self.session, self.intents = kernel, session, intents
        self.lock = threading.Lock()
        self.lease_id = 0
        self.t0 = time.monotonic_ns() - 1_000_000  # kernel time 1 ms now, as the session's open

    def __enter__(self) -> _BareBlock:
        with self.lock:
            now = (time.monotonic_ns() - self.t0) // 1_000_000
            verdict = self.kernel.acquire(self.session, self.intents, now)
            self.lease_id = verdict.leases[0].lease_id
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            now = (time.monotonic_ns() - self.t0) // 1_000_000
            self.kernel.release(self.session, self.lease_id, now)


def bare_block_floor(background: int, cycles: int) -> float:
    """Blocks/s of :class:`_BareBlock` (one fresh kernel, like the pairs)."""
    kernel = _core.Kernel(default_ttl_ms=LONG, max_ttl_ms=LONG)
    populate(kernel, background, 0)
    session = kernel.open_session("bench", "default", 1).session_id
    block = _BareBlock(kernel, session, ["MUTATES FILE:/bench/x"])
    start = timer()
    for _ in range(cycles):
        with block:
            pass
    rate = cycles / (timer() - start)
    assert kernel.stats()["active_leases"] == background
    return rate


def friendly_klock(background: int) -> tuple[klock.Klock, klock.Session]:
    k = klock.Klock(default_ttl_ms=LONG, max_ttl_ms=LONG)
    with k._lock:  # the benchmark fills the kernel directly, then hands over to the client
        populate(k.kernel, background, k.now())
        k._settled_locked()
    return k, k.session("bench")


def friendly_cycles(background: int, cycles: int, repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        k, s = friendly_klock(background)
        with k:
            start = timer()
            for _ in range(cycles):
                with s.lease("MUTATES FILE:/bench/x"):
                    pass
            best = max(best, cycles / (timer() - start))
            assert k.stats()["active_leases"] == background
    return best


def friendly_async_cycles(background: int, cycles: int, repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        k, s = friendly_klock(background)

        async def run(session: klock.Session) -> float:
            start = timer()
            for _ in range(cycles):
                async with session.lease("MUTATES FILE:/bench/x"):
                    pass
            return cycles / (timer() - start)

        with k:
            best = max(best, asyncio.run(run(s)))
    return best


def refused_blocks(cycles: int) -> tuple[float, float]:
    """(raw DIEs/s, refused blocks/s), one round each: a younger session asks for what an
    older one holds, under wait_die, with no wait."""
    intents = ["MUTATES FILE:/bench/x"]
    kernel = _core.Kernel("wait_die", default_ttl_ms=LONG, max_ttl_ms=LONG)
    old = kernel.open_session("old", "default", 1).session_id
    assert kernel.acquire(old, intents, 1).verdict == "GRANTED"
    young = kernel.open_session("young", "default", 1).session_id
    acquire = kernel.acquire
    start = timer()
    for _ in range(cycles):
        verdict = acquire(young, intents, 1, wait=False)
    raw = cycles / (timer() - start)
    assert verdict.verdict == "DIE"
    with klock.Klock("wait_die", default_ttl_ms=LONG, max_ttl_ms=LONG) as k:
        with k.session("old") as holder, holder.lease(*intents):
            session = k.session("young")
            timeout = klock.Timeout
            refused = 0
            start = timer()
            for _ in range(cycles):
                try:
                    with session.lease(*intents, timeout=0):
                        pass
                except timeout:
                    refused += 1
            block = cycles / (timer() - start)
            assert refused == cycles
            session.close()
    return raw, block


def blocks_per_second(klocks: list[klock.Klock], seconds: float) -> float:
    """Friendly lease blocks per second, one thread per Klock in ``klocks`` (the same Klock
    may appear several times), each its own session and resource, for ``seconds``."""
    counts = [0] * len(klocks)
    start_line = threading.Barrier(len(klocks) + 1)
    stop = threading.Event()

    def worker(i: int) -> None:
        with klocks[i].session(f"bench-{i}") as s:
            intent = f"MUTATES FILE:/bench/{i}"
            start_line.wait()
            n = 0
            while not stop.is_set():
                with s.lease(intent):
                    pass
                n += 1
            counts[i] = n

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(klocks))]
    for t in threads:
        t.start()
    start_line.wait()
    start = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def remote_vs_inprocess(binary: str, seconds: float, repeat: int) -> list[tuple[str, float, float]]:
    """(clients, in-process blocks/s, remote blocks/s) for 1 and 16 concurrent clients."""
    server = subprocess.Popen(
        [binary, "serve", "--memory", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if "listening on " not in line:
            raise SystemExit(f"{binary} serve did not start: {line!r}")
        url = line.split("listening on ", 1)[1].strip()
        rows = []
        for clients in (1, 16):
            local = remote = 0.0
            for _ in range(repeat):
                with klock.Klock() as k:
                    local = max(local, blocks_per_second([k] * clients, seconds))
                remotes = [klock.connect(url) for _ in range(clients)]
                try:
                    remote = max(remote, blocks_per_second(remotes, seconds))
                finally:
                    for k in remotes:
                        k.close()
            rows.append((f"{clients} client{'s' if clients > 1 else ''}", local, remote))
        return rows
    finally:
        server.terminate()
        server.wait(10)


def machine() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, Python {platform.python_version()}, klock {klock.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pairs", type=int, default=300_000, help="low-level pairs per run")
    parser.add_argument("--cycles", type=int, default=30_000, help="friendly cycles per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per number (the best is kept)")
    parser.add_argument("--quick", action="store_true", help="10x fewer iterations, one run")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the in-process runs by the thread's CPU time (steadier on a loaded machine)",
    )
    parser.add_argument(
        "--klock",
        default=str(pathlib.Path(__file__).resolve().parents[1] / "target" / "release" / "klock"),
        help="the klock binary for the remote rows (default: the release build)",
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="seconds per remote-vs-in-process run"
    )
    parser.add_argument(
        "--no-remote", action="store_true", help="leave out the in-process vs remote rows"
    )
    parser.add_argument(
        "--refused-only", action="store_true", help="only the refused-block row (no remote)"
    )
    args = parser.parse_args()
    global timer
    if args.cpu_time:
        timer = time.thread_time
    if args.quick:
        args.pairs, args.cycles, args.repeat = args.pairs // 10, args.cycles // 10, 1
        args.seconds = min(args.seconds, 1.0)
    if args.refused_only:
        args.no_remote = True
    if not args.no_remote and not os.access(args.klock, os.X_OK):
        raise SystemExit(
            f"{args.klock} is not an executable klock: build it with "
            "`cargo build --release -p klock-cli --bin klock`, or pass --klock PATH"
        )
    print(f"# klock Python host benchmark\n\nMachine: {machine()}\n")
    print(
        f"Best of {args.repeat} interleaved runs; {args.pairs:,} low-level pairs and {args.cycles:,} "
        f"friendly cycles per run; timed by {'CPU time' if args.cpu_time else 'the wall clock'}.\n"
    )
    if not args.refused_only:
        friendly_table(args)
    refused_row(args)
    if args.no_remote:
        return
    print(
        f"\nFriendly `with session.lease()` blocks/s, in-process vs remote (`klock serve --memory`, "
        f"{os.path.relpath(args.klock)}, loopback), {args.seconds:g} s per run:\n"
    )
    print("| concurrent clients | in-process blocks/s | remote blocks/s |")
    print("|---|---:|---:|")
    for clients, local, remote in remote_vs_inprocess(args.klock, args.seconds, args.repeat):
        print(f"| {clients} | {local:,.0f} | {remote:,.0f} |", flush=True)


def friendly_table(args: argparse.Namespace) -> None:
    """The friendly-vs-raw table, with 0, 1k and 100k other active leases."""
    print(
        "| other active leases | `_core` acquire+release pairs/s | `with session.lease()` cycles/s "
        "| `with` block / pair | `async with` cycles/s | `async with` block / pair "
        "| bare locked `with` floor / pair |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for background in (0, 1_000, 100_000):
        low = sync = asy = bare = 0.0
        for _ in range(args.repeat):
            low = max(low, low_level_pairs(background, args.pairs, 1))
            sync = max(sync, friendly_cycles(background, args.cycles, 1))
            asy = max(asy, friendly_async_cycles(background, args.cycles, 1))
            bare = max(bare, bare_block_floor(background, args.cycles))
        print(
            f"| {background:,} | {low:,.0f} | {sync:,.0f} | {low / sync:.2f}× | {asy:,.0f} "
            f"| {low / asy:.2f}× | {low / bare:.2f}× |",
            flush=True,
        )


def refused_row(args: argparse.Namespace) -> None:
    """The refused ``timeout=0`` block against the raw DIE, interleaved runs."""
    raw = block = 0.0
    ratios = []
    for _ in range(args.repeat):
        r, b = refused_blocks(args.cycles)
        raw, block = max(raw, r), max(block, b)
        ratios.append(r / b)
    print(
        f"\nRefused `with session.lease(X, timeout=0)` block (a younger session, wait_die: DIE): "
        f"{block:,.0f} blocks/s; raw refused `_core` acquire (DIE verdict, `wait=False`): "
        f"{raw:,.0f}/s; block / DIE {raw / block:.2f}× (per run: "
        f"{', '.join(f'{x:.2f}×' for x in ratios)}; issue 27's target: at most 3×).",
        flush=True,
    )


if __name__ == "__main__":
    main()
