#!/usr/bin/env python3
"""`klock exec ... -- true` against `flock FILE true`: the per-invocation cost of the wrapper
(issue 27 target: klock exec at most 2x flock's wall time). Stdlib only.

The script starts one `klock serve --memory` on a free loopback port (stopped when it exits,
passing or not), then runs rounds. Each round runs A and B alternately (A B A B ...), --runs
pairs after --warmup pairs that are not counted, where

* A = `KLOCK exec --server URL --intent "MUTATES FILE:/bench/exec" -- true` (one session
  opened, the lease acquired, `true` run, the session closed: the whole tool, as a shell
  script would call it), and
* B = `flock FILE true` (FILE in a scratch directory).

Each run is timed from the start of the process to its reaping (wall, `time.perf_counter`),
with its CPU (user + system of the reaped child, from getrusage). The ratio A/B is taken pair by
pair (one A run and the B run right after it, so a ratio holds while the machine's speed
drifts); each round reports the medians of A, B and of the pair ratios, and the run reports the
median of the per-round ratio medians and the range over rounds. Rounds are minutes apart at
most, so only ratios mean anything; absolute times depend on the machine and its load, printed
before and after each round (the 1-minute load average).

    python3 bench/exec_flock.py --klock target/release/klock [--rounds 5] [--runs 40] \\
        [--warmup 3] [--server-klock OTHER_KLOCK] [--b-klock OTHER_KLOCK] [--json OUT]

`--server-klock`: the binary that serves (default: --klock). `--b-klock`: compare two `klock`
builds instead (B is then `OTHER_KLOCK exec ...`, the same command with another binary).
Results and how they were taken: bench/remote.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def once(argv: list[str]) -> tuple[float, float, int]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ).returncode
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, rc


def serve(klock: str) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [klock, "serve", "--memory", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    if "listening on " not in line:
        server.kill()
        sys.exit(f"klock serve did not say where it listens: {line!r}")
    return server, line.split("listening on ", 1)[1].split()[0]


def load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--klock", required=True, help="the klock binary whose exec is A")
    ap.add_argument("--server-klock", help="the binary that serves (default: --klock)")
    ap.add_argument("--b-klock", help="B is this binary's exec instead of flock")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=40, help="pairs per round")
    ap.add_argument("--warmup", type=int, default=3, help="pairs per round not counted")
    ap.add_argument("--json", help="write every sample here")
    args = ap.parse_args()
    if not shutil.which("flock") and not args.b_klock:
        sys.exit("flock(1) is not on PATH (util-linux)")

    server, url = serve(args.server_klock or args.klock)
    scratch = tempfile.mkdtemp(prefix="exec-flock-")
    try:
        lock_file = os.path.join(scratch, "lock")
        open(lock_file, "w").close()
        exec_args = ["exec", "--server", url, "--intent", "MUTATES FILE:/bench/exec", "--", "true"]
        a = [args.klock, *exec_args]
        b = [args.b_klock, *exec_args] if args.b_klock else ["flock", lock_file, "true"]
        print(f"A: {' '.join(a)}\nB: {' '.join(b)}")
        print(
            f"{args.rounds} rounds of {args.runs} pairs (A then B), after {args.warmup} warm-up pairs each"
        )
        print(
            "| round | load before-after | A wall median ms | B wall median ms | A/B per pair: median (min-max) | A CPU ms | B CPU ms |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|")
        rounds = []
        for r in range(args.rounds):
            load0 = load()
            for _ in range(args.warmup):
                once(a)
                once(b)
            ra, rb = [], []
            for _ in range(args.runs):
                ra.append(once(a))
                rb.append(once(b))
            load1 = load()
            bad = sorted({x[2] for x in ra + rb} - {0})
            if bad:
                sys.exit(f"round {r}: a run exited {bad}; nothing is measured from failed runs")
            ratios = [x[0] / y[0] for x, y in zip(ra, rb, strict=True)]
            row = {
                "round": r,
                "load": [load0, load1],
                "a_wall_ms": statistics.median(x[0] for x in ra) * 1e3,
                "b_wall_ms": statistics.median(x[0] for x in rb) * 1e3,
                "a_cpu_ms": statistics.median(x[1] for x in ra) * 1e3,
                "b_cpu_ms": statistics.median(x[1] for x in rb) * 1e3,
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "a": ra,
                "b": rb,
            }
            rounds.append(row)
            print(
                f"| {r} | {load0:.1f}-{load1:.1f} | {row['a_wall_ms']:.2f} | {row['b_wall_ms']:.2f} | "
                f"**{row['ratio_median']:.2f}** ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) | "
                f"{row['a_cpu_ms']:.2f} | {row['b_cpu_ms']:.2f} |",
                flush=True,
            )
        medians = [row["ratio_median"] for row in rounds]
        print(
            f"A/B: median of the round medians {statistics.median(medians):.2f}, "
            f"rounds {min(medians):.2f}-{max(medians):.2f}"
        )
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"a": a, "b": b, "rounds": rounds}, f)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
