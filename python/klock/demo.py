"""``python -m klock demo``: agents editing real files, without and then with Klock.

N agent threads (default 16) each make read-modify-write edits to JSON files in a temporary
directory: read the file, "think" for a moment (as an LLM agent would), append its edit and
write the file back. Some edits touch one file; others move work between two files and take
the second file's lease while holding the first (a nested lease, the classic recipe for a
deadlock when two agents take the same two files in opposite orders).

Without Klock, concurrent read-modify-write cycles overwrite each other and edits are lost.
With Klock every edit holds ``MUTATES FILE:/<name>`` (and the nested one the second file);
the kernel makes older agents wait and younger ones die and retry (Wait-Die), so no edit is
lost and nobody deadlocks. Every access also carries the lease's fence, and each file refuses
one with a fence older than the newest it has seen: the check that keeps a paused holder, or
under ``--policy wound_wait`` a holder whose lease an older agent revoked, harmless.

The final table shows edits attempted, edits lost, waits, deaths, retries and throughput.
The exit status is 0 when the Klock run lost nothing and finished (no deadlock), 1 otherwise,
and 130 on Ctrl-C: the agents are stopped (the Klock is closed, so those waiting or backing
off end at once), the temporary folder is removed and one line says so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from .client import Klock, Session
from .errors import Closed, Died, KlockError, LeaseLost

__all__ = ["main", "run_demo"]


@dataclass
class PhaseResult:
    name: str
    attempted: int = 0
    recorded: int = 0
    waits: int = 0
    deaths: int = 0
    retries: int = 0
    fenced_out: int = 0
    lost_leases: int = 0
    elapsed_s: float = 0.0
    finished: bool = True
    errors: list[str] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.attempted - self.recorded

    @property
    def throughput(self) -> float:
        return self.recorded / self.elapsed_s if self.elapsed_s > 0 else 0.0


class FencedFile:
    """A file behind a tiny storage service that, given a fence with an access, refuses it if
    a newer fence was already seen on that file (reads count: a holder that read with fence
    10 makes a late write with fence 9 fail). Each single read or write is atomic, as with a
    real store; a read-modify-write is not."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.max_fence = 0
        self._atomic = threading.Lock()
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"edits": []}, f)

    def _admit(self, fence: int | None) -> bool:
        if fence is None:
            return True
        if fence < self.max_fence:
            return False
        self.max_fence = fence
        return True

    def read(self, fence: int | None = None) -> dict[str, list[str]] | None:
        with self._atomic:
            if not self._admit(fence):
                return None
            with open(self.path, encoding="utf-8") as f:
                data: dict[str, list[str]] = json.load(f)
                return data

    def write(self, data: dict[str, list[str]], fence: int | None) -> bool:
        """Writes unless ``fence`` is older than one already seen (then refuses)."""
        with self._atomic:
            if not self._admit(fence):
                return False
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
            return True

    def count(self) -> int:
        data = self.read()
        assert data is not None
        return len(data["edits"])


class Progress:
    """A progress bar on stderr (a line per quarter when stderr is not a terminal)."""

    def __init__(self, total: int, label: str, stream: TextIO) -> None:
        self.total, self.label, self.stream = total, label, stream
        self.done = 0
        self._lock = threading.Lock()
        self._tty = stream.isatty()
        self._next_quarter = 1
        self._last_draw = 0.0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            if self._tty:
                now = time.monotonic()
                if now - self._last_draw >= 0.05 or self.done >= self.total:
                    self._last_draw = now
                    self._draw()
            elif self.done * 4 >= self._next_quarter * self.total:
                self._next_quarter = self.done * 4 // self.total + 1
                self.stream.write(f"  {self.label}: {self.done}/{self.total} edits\n")
                self.stream.flush()

    def _draw(self) -> None:
        width = 30
        filled = width * min(self.done, self.total) // max(1, self.total)
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r  {self.label:<14} [{bar}] {self.done}/{self.total} edits")
        if self.done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _plan(agents: int, edits: int, files: int, seed: int) -> list[list[tuple[int, ...]]]:
    """Per agent, its units of work: one file index, or two (a nested two-file edit)."""
    plans = []
    for agent in range(agents):
        rng = random.Random(seed * 1_000_003 + agent)
        units: list[tuple[int, ...]] = []
        left = edits
        while left > 0:
            if left >= 2 and rng.random() < 0.3:
                a, b = rng.sample(range(files), 2)
                units.append((a, b))
                left -= 2
            else:
                units.append((rng.randrange(files),))
                left -= 1
        plans.append(units)
    return plans


def _edit(file: FencedFile, agent: int, serial: int, think: float, fence: int | None) -> bool:
    """One read-modify-write; False if the fence refused it."""
    data = file.read(fence)
    if data is None:
        return False
    time.sleep(think)  # the agent thinks between reading and writing
    data["edits"].append(f"agent{agent}-{serial}")
    return file.write(data, fence)


class Interrupted(Exception):
    """Ctrl-C reached the demo: its agents were stopped and its folder removed."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.root = root


def _run_phase(
    name: str,
    plans: list[list[tuple[int, ...]]],
    files: list[FencedFile],
    think_ms: float,
    seed: int,
    klock: Klock | None,
    deadline_s: float,
    stream: TextIO,
) -> PhaseResult:
    result = PhaseResult(name)
    result.attempted = sum(len(u) for plan in plans for u in plan)
    stream.write(f"  {name}: running\n")
    stream.flush()
    progress = Progress(result.attempted, name, stream)
    stop = threading.Event()  # set on Ctrl-C: agents finish the access in hand and return
    fenced_out = [0]
    rollbacks = [0]
    errors: list[str] = []
    lock = threading.Lock()
    sessions: list[Session] = (
        [klock.session(f"agent-{i}") for i in range(len(plans))] if klock else []
    )

    def agent(index: int) -> None:
        rng = random.Random(seed + 7919 * index)

        def think() -> float:
            return rng.uniform(0.2, 1.0) * think_ms / 1000

        try:
            for serial, unit in enumerate(plans[index]):
                if stop.is_set():
                    return
                if klock is None:
                    for f in unit:
                        _edit(files[f], index, serial, think(), None)
                    progress.add(len(unit))
                    continue
                session = sessions[index]
                pending = list(unit)  # the files of the unit not written yet
                while pending and not stop.is_set():  # a Died or a lost lease rolls the unit back
                    try:
                        if len(pending) == 1:
                            with session.lease(
                                f"MUTATES FILE:/file{pending[0]}.json", timeout=60
                            ) as held:
                                if _edit(files[pending[0]], index, serial, think(), held.fence):
                                    pending.clear()
                                else:
                                    with lock:
                                        fenced_out[0] += 1
                        else:
                            first, second = pending
                            with session.lease(
                                f"MUTATES FILE:/file{first}.json", timeout=60
                            ) as outer:
                                data_first = files[first].read(outer.fence)
                                time.sleep(think())
                                with session.lease(
                                    f"MUTATES FILE:/file{second}.json", timeout=60
                                ) as inner:
                                    if data_first is not None:
                                        data_first["edits"].append(f"agent{index}-{serial}a")
                                        if files[first].write(data_first, outer.fence):
                                            pending.remove(first)
                                    if _edit(files[second], index, serial, think(), inner.fence):
                                        pending.remove(second)
                                    if pending:
                                        with lock:
                                            fenced_out[0] += 1
                    except Died as died:
                        # Wait-Die rollback: everything is released; back off, then redo the unit.
                        with lock:
                            rollbacks[0] += 1
                        stop.wait(died.retry_after_ms / 1000)
                    except LeaseLost:
                        # wound_wait: an older agent revoked a lease; the fence kept any late
                        # write out, so redo what is still pending.
                        with lock:
                            rollbacks[0] += 1
                progress.add(len(unit))
        except (KlockError, OSError) as e:
            if stop.is_set() and isinstance(e, (Closed, LeaseLost, OSError)):
                return  # interrupted: the Klock was closed under this agent
            with lock:
                errors.append(f"agent {index}: {type(e).__name__}: {e}")

    threads = [
        threading.Thread(target=agent, args=(i,), name=f"agent-{i}", daemon=True)
        for i in range(len(plans))
    ]
    start = time.monotonic()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, start + deadline_s - time.monotonic()))
    except KeyboardInterrupt:
        # Stop every agent before anything is torn down: those acquiring (waiting or backing
        # off) end at once with Closed, the others after the access in hand.
        stop.set()
        if klock is not None:
            klock.close()
        end = time.monotonic() + 10
        for t in threads:
            if t.ident is not None:
                t.join(max(0.0, end - time.monotonic()))
        raise
    result.elapsed_s = time.monotonic() - start
    result.finished = not any(t.is_alive() for t in threads)
    if not result.finished:
        stream.write(f"\n  {name}: agents still running after {deadline_s:.0f} s\n")
    result.recorded = sum(f.count() for f in files)
    result.fenced_out = fenced_out[0]
    result.errors = errors
    if klock is not None:
        for s in sessions:
            s.close()
        c = klock.counters
        result.waits, result.deaths, result.retries = c.waits, c.deaths, c.retries + rollbacks[0]
        result.lost_leases = c.lost
    return result


def run_demo(
    agents: int = 16,
    edits: int = 40,
    files: int = 6,
    think_ms: float = 2.0,
    policy: str = "wait_die",
    seed: int = 1,
    deadline_s: float = 120.0,
    stream: TextIO = sys.stderr,
) -> tuple[PhaseResult, PhaseResult]:
    """Runs both phases and returns their results."""
    plans = _plan(agents, edits, files, seed)
    root = tempfile.mkdtemp(prefix="klock-demo-")
    try:
        stream.write(
            f"klock demo: {agents} agents x {edits} read-modify-write edits on {files} files in {root}\n"
        )
        plain_files = [FencedFile(os.path.join(root, f"plain{i}.json")) for i in range(files)]
        without = _run_phase(
            "without Klock", plans, plain_files, think_ms, seed, None, deadline_s, stream
        )
        guarded_files = [FencedFile(os.path.join(root, f"file{i}.json")) for i in range(files)]
        with Klock(policy, seed=seed) as klock:
            with_klock = _run_phase(
                "with Klock", plans, guarded_files, think_ms, seed, klock, deadline_s, stream
            )
    except KeyboardInterrupt:
        _ignore_ctrl_c()  # a second Ctrl-C must not interrupt the cleanup
        _remove(root)
        raise Interrupted(root) from None
    _remove(root)
    return without, with_klock


def _ignore_ctrl_c() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _remove(root: str) -> None:
    """Removes the demo's folder; a straggling agent (stuck past the 10 s join) may still be
    writing its temporary file, so try a few times."""
    for _ in range(50):
        shutil.rmtree(root, ignore_errors=True)
        if not os.path.exists(root):
            return
        time.sleep(0.1)


def format_table(results: tuple[PhaseResult, ...]) -> str:
    rows: list[tuple[str, Callable[[PhaseResult], str]]] = [
        ("edits attempted", lambda r: str(r.attempted)),
        ("edits lost", lambda r: str(r.lost)),
        ("waits", lambda r: str(r.waits) if r.name != "without Klock" else "-"),
        ("deaths (DIE)", lambda r: str(r.deaths) if r.name != "without Klock" else "-"),
        (
            "retries (incl. rollbacks)",
            lambda r: str(r.retries) if r.name != "without Klock" else "-",
        ),
        (
            "leases revoked (wounded)",
            lambda r: str(r.lost_leases) if r.name != "without Klock" else "-",
        ),
        (
            "stale accesses refused (fence)",
            lambda r: str(r.fenced_out) if r.name != "without Klock" else "-",
        ),
        ("deadlocked", lambda r: "no" if r.finished else "YES"),
        ("elapsed", lambda r: f"{r.elapsed_s:.2f} s"),
        ("throughput (kept edits)", lambda r: f"{r.throughput:,.0f} edits/s"),
    ]
    label_w = max(len(label) for label, _ in rows)
    col_w = max(16, *(len(r.name) for r in results))
    lines = [" " * label_w + "  " + "  ".join(r.name.rjust(col_w) for r in results)]
    for label, cell in rows:
        lines.append(label.ljust(label_w) + "  " + "  ".join(cell(r).rjust(col_w) for r in results))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m klock demo", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--agents", type=int, default=16, help="agent threads (default 16)")
    parser.add_argument("--edits", type=int, default=40, help="edits per agent (default 40)")
    parser.add_argument("--files", type=int, default=6, help="shared files (default 6)")
    parser.add_argument(
        "--think-ms",
        type=float,
        default=2.0,
        help="think time between read and write (default 2 ms)",
    )
    parser.add_argument("--policy", default="wait_die", choices=["wait_die", "wound_wait", "lanes"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.agents < 1 or args.edits < 1 or args.files < 2 or args.think_ms < 0:
        parser.error("need --agents >= 1, --edits >= 1, --files >= 2, --think-ms >= 0")
    if args.policy == "lanes":
        parser.error(
            "the demo nests leases (hold one file, then ask for another), which the lanes policy forbids (HOLD_AND_WAIT)"
        )
    try:
        without, with_klock = run_demo(
            args.agents, args.edits, args.files, args.think_ms, args.policy, args.seed
        )
    except (Interrupted, KeyboardInterrupt) as stopped:
        _ignore_ctrl_c()
        where = (
            f"; removed {stopped.root}"
            if isinstance(stopped, Interrupted) and not os.path.exists(stopped.root)
            else ""
        )
        sys.stderr.write(f"\nklock demo: interrupted{where}\n")
        sys.stderr.flush()
        return 130
    print()
    print(format_table((without, with_klock)))
    print()
    for r in (without, with_klock):
        for e in r.errors[:5]:
            print(f"error ({r.name}): {e}")
    ok = with_klock.finished and with_klock.lost == 0 and not with_klock.errors
    if ok:
        print(
            f"With Klock: {with_klock.attempted} edits, none lost, no deadlock "
            f"({with_klock.waits} waits, {with_klock.deaths} deaths, {with_klock.retries} retries). "
            f"Without it, {without.lost} of {without.attempted} edits were lost."
        )
    else:
        print("FAILED: the Klock run lost edits, failed, or did not finish")
    return 0 if ok else 1
