"""What a client gains by going to the leader (docs/DECISIONS.md, "clients go to the leader"):
one Python client of a real three-node cluster, one `with session.lease(...)` block per
operation, given [a follower] (it stays there: every write proxied) against [a follower, the
leader] (it moves to the leader once an answer names it), in alternating order, 4 rounds of 3 s
after 200 blocks of warm-up; ops/s per case and the ratio per round. A benchmark, not a test:

    KLOCK_BIN=target/release/klock .venv/bin/python bench/leader_hint.py
"""

import pathlib
import sys
import time

sys.path.insert(
    0, str(pathlib.Path(__file__).resolve().parent.parent / "python" / "tests")
)
import klock

from server import cluster

ROUNDS, SECONDS = 4, 3.0
with cluster() as nodes:
    leader = nodes.leader()
    follower = (leader + 1) % 3
    cases = {
        "follower only": [nodes.urls[follower]],
        "follower, then leader": [nodes.urls[follower], nodes.urls[leader]],
    }
    for r in range(ROUNDS):
        rates = {}
        for name, urls in cases.items() if r % 2 == 0 else reversed(cases.items()):
            client = klock.connect(urls, reconnect_timeout=15)
            with client.session(f"b{r}") as s:
                for _ in range(200):  # warm-up (and the move to the leader)
                    with s.lease("MUTATES FILE:/bench"):
                        pass
                n, t0 = 0, time.monotonic()
                while time.monotonic() - t0 < SECONDS:
                    with s.lease("MUTATES FILE:/bench"):
                        pass
                    n += 1
                rates[name] = n / (time.monotonic() - t0)
                pref = client.kernel._servers.preferred
            client.close()
            print(
                f"round {r} {name}: {rates[name]:.0f} ops/s (preferred node {pref})",
                flush=True,
            )
        print(
            f"round {r} ratio moved/proxied: {rates['follower, then leader'] / rates['follower only']:.2f}",
            flush=True,
        )
