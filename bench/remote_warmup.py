"""A young client's cost per operation by operation index: remote_warmup.cjs for Python.

    .venv/bin/python bench/remote_warmup.py URL

One client of the `klock` package against `klock serve` at URL, `with session.lease(...)` on
its own resource in a loop; prints the process's CPU (time.process_time) per operation over
buckets of operation indexes: "0-50: us  50-100: us  ...  3200-6400: us".
"""

import os
import sys
import time

import klock

EDGES = [0, 50, 100, 200, 400, 800, 1600, 3200, 6400]


def main() -> None:
    k = klock.connect(sys.argv[1])
    s = k.session(f"warmup-{os.getpid()}")
    intent = f"MUTATES FILE:/bench/warmup-py-{os.getpid()}"
    out = []
    n = 0
    for e in range(1, len(EDGES)):
        cpu0 = time.process_time()
        while n < EDGES[e]:
            with s.lease(intent):
                pass
            n += 1
        us = 1e6 * (time.process_time() - cpu0) / (EDGES[e] - EDGES[e - 1])
        out.append(f"{EDGES[e - 1]}-{EDGES[e]}: {us:.0f}")
    print("  ".join(out))
    s.close()
    k.close()


if __name__ == "__main__":
    main()
