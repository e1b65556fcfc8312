"""One Python agent process of the fleet demo (`bash scripts/demo.sh`, examples/fleet/run.py).

It makes read-modify-write edits to JSON files in a shared folder: read a file, think for a
moment (as an LLM agent would), append the edit's id, write it back. A unit of work is one
file, or two (the second file's lease taken while holding the first: the classic recipe for
a deadlock when two agents take the same two files in opposite orders).

`--mode plain` edits with no coordination (edits get lost). `--mode klock` holds
`MUTATES FILE:/<name>` for every file it edits, through `klock.connect(URL)`, and writes with
`klock.fenced_write(path, data, fence)` so a holder whose lease ended can never overwrite a
newer holder's work. A Died (Wait-Die: a younger agent asked for what an older one holds) or
a lost lease rolls the unit back and redoes it; an edit id is appended only once, so a redo
after a write that did land changes nothing.

SIGUSR2 asks a `--mode klock` agent to be frozen: in its next edit, right after reading, it
says `{"frozen": path}` and the orchestrator stops the process (SIGSTOP) for longer than the
lease's TTL, as a long GC pause or a suspended laptop would. Its lease expires meanwhile,
another agent takes the file and writes, and when the agent wakes up its write carries a
fence older than the file's: `fenced_write` refuses it (counted as `fences_refused`).

Its twin in Node is agent.mjs: same arguments, same kind of plan, same output.
Output on stdout, one JSON object per line: `{"progress": [ids]}` after each unit (the ids of its edits, now written), then
`{"done": {...counts...}}`. Exit status 0, or 1 with `{"error": "..."}` on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from typing import Any

import klock


def plan(seed: int, edits: int, files: int) -> list[list[int]]:
    """The agent's units: one file index, or two (nested), about 30 % of them two."""
    rng = random.Random(seed)
    units: list[list[int]] = []
    left = edits
    while left > 0:
        if left >= 2 and rng.random() < 0.3:
            a = rng.randrange(files)
            b = (a + 1 + rng.randrange(files - 1)) % files
            units.append([a, b])
            left -= 2
        else:
            units.append([rng.randrange(files)])
            left -= 1
    return units


def read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def add(data: dict[str, Any], edit: str) -> bytes:
    if edit not in data["edits"]:
        data["edits"].append(edit)
    return json.dumps(data).encode()


def plain_write(path: str, body: bytes) -> None:
    """Whole-file replace (readers never see half a file), with no coordination at all."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, path)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="agent id; edit ids are NAME-SERIAL")
    p.add_argument("--root", required=True, help="the shared folder of file<i>.json")
    p.add_argument("--files", type=int, required=True)
    p.add_argument("--edits", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--think-ms", type=float, default=5.0)
    p.add_argument("--mode", choices=["plain", "klock"], required=True)
    p.add_argument("--server", help="klock serve URL (--mode klock)")
    p.add_argument("--namespace", default="fleet")
    p.add_argument("--ttl-ms", type=int, default=2000, help="lease TTL (--mode klock)")
    args = p.parse_args()
    if args.mode == "klock" and not args.server:
        p.error("--mode klock needs --server URL")
    rng = random.Random(args.seed ^ 0x5EED)

    def think() -> None:
        time.sleep(rng.uniform(0.5, 1.5) * args.think_ms / 1000)

    def path(i: int) -> str:
        return os.path.join(args.root, f"file{i}.json")

    def intent(i: int) -> str:
        return f"MUTATES FILE:/file{i}.json"

    counts = {"edits": 0, "fences_refused": 0, "rollbacks": 0}
    units = plan(args.seed, args.edits, args.files)
    if args.mode == "plain":
        for serial, unit in enumerate(units):
            for k, i in enumerate(unit):
                data = read(path(i))
                think()
                plain_write(path(i), add(data, f"{args.name}-{serial}.{k}"))
            counts["edits"] += len(unit)
            emit({"progress": [f"{args.name}-{serial}.{k}" for k in range(len(unit))]})
        emit({"done": counts})
        return 0

    client = klock.connect(args.server, namespace=args.namespace)
    session = client.session(args.name)
    freeze = {"asked": False}
    signal.signal(signal.SIGUSR2, lambda *_: freeze.update(asked=True))

    def edit(i: int, serial: int, k: int, fence: int) -> bool:
        """One fenced read-modify-write; False if the file refused the fence."""
        data = read(path(i))
        if freeze["asked"]:
            freeze["asked"] = False
            emit({"frozen": path(i)})
            time.sleep(0.5)  # stopped in here by the orchestrator, past the lease's TTL
        else:
            think()
        try:
            klock.fenced_write(path(i), add(data, f"{args.name}-{serial}.{k}"), fence)
        except klock.StaleFence:
            counts["fences_refused"] += 1
            return False
        return True

    for serial, unit in enumerate(units):
        done = False
        while not done:
            try:
                with session.lease(intent(unit[0]), ttl=args.ttl_ms / 1000, timeout=120) as outer:
                    ok = edit(unit[0], serial, 0, outer.fence)
                    if len(unit) == 2:
                        with session.lease(
                            intent(unit[1]), ttl=args.ttl_ms / 1000, timeout=120
                        ) as inner:
                            ok = edit(unit[1], serial, 1, inner.fence) and ok
                # Only once the block has ended without a lost lease: its exit raises LeaseLost
                # when a lease ended under it, and the unit is then redone, not counted.
                done = ok
            except klock.Died as died:
                # Wait-Die rollback: everything is released; back off as told, redo the unit.
                counts["rollbacks"] += 1
                time.sleep(died.retry_after_ms / 1000)
            except klock.LeaseLost:
                counts["rollbacks"] += 1
        counts["edits"] += len(unit)
        emit({"progress": [f"{args.name}-{serial}.{k}" for k in range(len(unit))]})
    c = client.counters
    counts.update(
        waits=c.waits, deaths=c.deaths, retries=c.retries + counts["rollbacks"], lost_leases=c.lost
    )
    session.close()
    client.close()
    emit({"done": counts})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # the orchestrator shows it; the process must say why it failed
        emit({"error": f"{type(e).__name__}: {e}"})
        sys.exit(1)
