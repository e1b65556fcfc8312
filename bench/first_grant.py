"""The time from a fresh ``klock.connect()`` to the first grant of its first lease block
(bench/first_grant.sh runs it; klock comes from PYTHONPATH).

``first_grant.py seed HOST PORT EVENTS``: fills the default namespace with EVENTS events
(acquire/release pairs of one session, by hand). ``first_grant.py time URL N``: N fresh
clients, one after the other, each connect + open + acquire timed; prints the median and
quartiles in ms."""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import time
from typing import Any


def seed(host: str, port: int, events: int) -> None:
    conn = http.client.HTTPConnection(host, port)

    def call(method: str, path: str, body: Any = None, token: str = "") -> Any:
        headers = {"content-type": "application/json"}
        if token:
            headers["klock-session-token"] = token
        conn.request(method, path, None if body is None else json.dumps(body), headers)
        answer = conn.getresponse()
        data = json.loads(answer.read() or b"{}")
        if answer.status >= 300:
            raise SystemExit(f"{method} {path}: {answer.status} {data}")
        return data

    opened = call("POST", "/v1/ns/default/sessions", {"agent_id": "seed"})
    path, token = f"/v1/ns/default/sessions/{opened['session_id']}", opened["session_token"]
    for i in range(events // 2):
        granted = call("POST", f"{path}/acquire", {"intents": [f"MUTATES FILE:/seed/{i}"]}, token)
        ids = [lease["lease_id"] for lease in granted["leases"]]
        call("POST", f"{path}/release", {"lease_ids": ids}, token)


def timed(url: str, n: int) -> None:
    import klock

    times = []
    for _ in range(n):
        start = time.perf_counter()
        with klock.connect(url) as k, k.session("m") as s, s.lease("MUTATES FILE:/m"):
            times.append((time.perf_counter() - start) * 1000)
    q1, _, q3 = statistics.quantiles(times, n=4)
    print(f"n={n} median {statistics.median(times):.2f} ms (q1 {q1:.2f}, q3 {q3:.2f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["seed"]:
        seed(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1:2] == ["time"]:
        timed(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit("usage: first_grant.py seed HOST PORT EVENTS | time URL N")
