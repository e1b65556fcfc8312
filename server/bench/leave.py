"""How long a three-node cluster takes a write after its leader stops: SIGTERM (the leader
hands its leadership over, docs/DECISIONS.md "a graceful leave") against SIGKILL (the others
wait out an election timeout), in the same run.

Usage: python3 server/bench/leave.py --klock target/release/klock [--rounds 10]

Three `klock serve --node-id` processes on free loopback ports, durable, default election
settings. Each round stops the leader with SIGTERM, then (after the restarted node rejoined)
with SIGKILL; the time is from the signal to the first acknowledged write (a session open,
retried every 5 ms) through a survivor. Prints p50 and max of each. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

SECRET = "a-cluster-secret-of-the-leave-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(
    port: int,
    method: str,
    path: str,
    body: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


class Cluster:
    def __init__(self, klock: str, workdir: str) -> None:
        self.klock, self.dir = klock, workdir
        with open(f"{workdir}/secret", "w") as f:
            f.write(SECRET)
        self.ports = [free_port() for _ in range(3)]
        self.peers = ",".join(f"{i + 1}=http://127.0.0.1:{p}" for i, p in enumerate(self.ports))
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * 3
        for i in range(3):
            self.start(i)
        subprocess.run(
            [
                klock,
                "cluster",
                "init",
                "--node",
                f"http://127.0.0.1:{self.ports[0]}",
                "--cluster-secret-file",
                f"{workdir}/secret",
            ],
            check=True,
            capture_output=True,
        )

    def start(self, i: int) -> None:
        proc = subprocess.Popen(
            [
                self.klock,
                "serve",
                "--listen",
                f"127.0.0.1:{self.ports[i]}",
                "--data",
                f"{self.dir}/n{i}.redb",
                "--node-id",
                str(i + 1),
                "--cluster-peers",
                self.peers,
                "--cluster-secret-file",
                f"{self.dir}/secret",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        proc.stdout.readline()  # "listening on ..."
        self.procs[i] = proc

    def leader(self) -> int:
        """The node (index) every running node says leads, once they agree."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = set()
            for i, proc in enumerate(self.procs):
                if proc is None:
                    continue
                try:
                    status, body = ask(
                        self.ports[i],
                        "GET",
                        "/raft/status",
                        headers={"klock-cluster-secret": SECRET},
                    )
                    seen.add(json.loads(body).get("leader") if status == 200 else None)
                except OSError:
                    seen.add(None)
            if len(seen) == 1 and None not in seen:
                return int(seen.pop()) - 1
            time.sleep(0.02)
        raise SystemExit("no leader agreed on within 30 s")

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                proc.kill()
                proc.wait()


def first_write_after(
    cluster: Cluster, leader: int, survivor: int, sig: signal.Signals, key: str
) -> float:
    """Seconds from `sig` to the leader to the first acknowledged write through `survivor`."""
    proc = cluster.procs[leader]
    assert proc is not None
    started = time.monotonic()
    proc.send_signal(sig)
    body = json.dumps({"agent_id": key})
    headers = {"content-type": "application/json", "idempotency-key": key}
    while True:
        try:
            status, _ = ask(
                cluster.ports[survivor], "POST", "/v1/ns/default/sessions", body, headers
            )
            if status == 200:
                break
        except OSError:
            pass
        time.sleep(0.005)
    elapsed = time.monotonic() - started
    proc.wait()
    cluster.procs[leader] = None
    cluster.start(leader)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--klock", required=True, help="the klock binary")
    parser.add_argument("--rounds", type=int, default=10, help="stops of each kind (default 10)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    workdir = tempfile.mkdtemp(prefix="klock-leave-")
    cluster = Cluster(args.klock, workdir)
    times: dict[str, list[float]] = {"SIGTERM": [], "SIGKILL": []}
    try:
        for n in range(args.rounds):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                leader = cluster.leader()
                time.sleep(0.3)  # the leader's first entry is in; the cluster is quiet
                survivor = [i for i in range(3) if i != leader][n % 2]
                times[sig.name].append(
                    first_write_after(cluster, leader, survivor, sig, f"leave-{n}-{sig.name}")
                )
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    for name, spans in times.items():
        print(
            f"{name}: n={len(spans)} p50={statistics.median(spans) * 1000:.0f} ms max={max(spans) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
