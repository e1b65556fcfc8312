#!/usr/bin/env python3
"""Remote locks side by side: Klock's remote clients vs what users would pick instead.

One driver (stdlib only) starts every server once -- `klock serve --memory`, `klock serve
--data FILE` (durable, group commit), `redis-server` with its default persistence (RDB
snapshots, no AOF), a second `redis-server --appendonly yes --appendfsync always` (durable
per write) and `etcd` (fsyncs its WAL on every write) -- all on loopback, then runs the cases
in rounds. Each round runs every case once per client count, in an order rotated from round to
round, so every comparison is made from samples taken minutes apart at most; each ratio is
computed inside one round and reported as min-max over the rounds.

A case run is one subprocess of this file (`--worker CASE`) under the interpreter that has the
case's client library (ours: the product's `.venv`; redis-py: a venv of its own); it forks
`--clients` client processes (one connection and one session or lock key each: an agent
process each, no GIL shared), each warms up, all start together (a barrier) and run for
`--seconds`; every operation is timed with `time.perf_counter_ns`.

One operation = one uncontended acquire + release of a lock on the client's own resource:

* `klock_friendly`: `with session.lease("MUTATES FILE:/bench/<c>"): pass` on
  `klock.connect(url)` (2 HTTP requests: acquire, release, through the client's stdlib
  transport, python/klock/_http.py; plus the client's bookkeeping and its background event
  reader).
* `klock_friendly_base_mem`: the same under `--klock-py-base`, the interpreter of another
  checkout's klock (e.g. main's `.venv/bin/python` before a change), for a before/after
  comparison inside one run.
* `klock_raw_httpclient`: the same two requests the friendly client sends (same bodies,
  `Klock-Session-Token`, an `Idempotency-Key` each), by hand, with `http.client` keep-alive.
* `klock_raw_httpx`: the same by hand with one `httpx.Client` (keep-alive), the library the
  friendly client used before issue 27; it runs under `--klock-py-base`, which must have
  httpx (this checkout's client does not need it).
* `redis_lock`: redis-py `with r.lock(key, timeout=60): pass` (SET NX PX + an EVALSHA
  compare-and-delete script).
* `etcd_session`: etcd's v3 JSON gateway with `http.client` keep-alive, the shape of etcd's own
  `concurrency.Mutex`: one lease per client granted once (its session), then per operation a
  txn "put the key with that lease if it does not exist" + a delete (2 requests).
* `etcd_lease`: a lease per operation: lease grant + the same txn + lease revoke (the revoke
  deletes the key; 3 requests).
* `fsync_floor`: no server: two appends of 100 bytes to a file in the scratch directory, each
  followed by `os.fdatasync` (what a durable acquire + release costs the disk at least; klock
  serve, redis `appendfsync always` and etcd's WAL all use fdatasync).
* `node_friendly`: Node, `await session.withLease(intent, async () => {})` on the project's
  `connect(url)` (`remote_locks_node.cjs`; one client per process, the process's event loop).
* `node_friendly_base_mem`: the same under `--node-client-base`, another checkout's Node client
  (e.g. a copy of main's node/ before a change), for a before/after comparison inside one run.
* `node_raw_fetch` / `node_raw_http`: the same two requests by hand in Node, with the built-in
  `fetch` (what the project's Node remote backend used before) / with `node:http` and a
  keep-alive Agent (what it uses now, node/http.js).

Reported per case and client count: operations/s (sum over clients of ops / own elapsed),
p50 and p99 latency of one operation, client CPU per operation (the client processes' user +
system time over the measured window / ops), and server CPU per operation (the server
process's user + system time over the whole case run, warm-up included, / all ops the clients
made, warm-up included: an approximation).

Usage (from the checkout's root, after building `klock` and the Node package; redis-py in a
venv of its own, e.g. `python3 -m venv REDIS_VENV && REDIS_VENV/bin/pip install redis`):

    python3 bench/remote_locks.py --klock target/release/klock --klock-py .venv/bin/python \
        --redis-py REDIS_VENV/bin/python --node-client node/client.js \
        [--klock-py-base OTHER_CHECKOUT/.venv/bin/python] \
        [--rounds 3] [--seconds 2] [--clients 1,16] [--cases a,b,...] [--json OUT]

Results and how they were taken: bench/remote.md.

Servers: `--redis-server`, `--etcd` (default: on PATH; a case whose server is missing is
skipped and said so). Scratch files go to a temporary directory (`--workdir` to choose).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# case -> (which interpreter runs it, which server it talks to)
CASES = {
    "klock_friendly_mem": ("klock", "klock_mem"),
    "klock_friendly_durable": ("klock", "klock_durable"),
    "klock_raw_httpclient_mem": ("klock", "klock_mem"),
    "klock_raw_httpclient_durable": ("klock", "klock_durable"),
    "klock_raw_httpx_mem": ("klock_base", "klock_mem"),
    "klock_friendly_base_mem": ("klock_base", "klock_mem"),
    "redis_lock_default": ("redis", "redis_default"),
    "redis_lock_fsync": ("redis", "redis_fsync"),
    "etcd_session": ("stdlib", "etcd"),
    "etcd_lease": ("stdlib", "etcd"),
    "fsync_floor": ("stdlib", "disk"),
    "node_friendly_mem": ("node", "klock_mem"),
    "node_friendly_durable": ("node", "klock_durable"),
    "node_friendly_base_mem": ("node_base", "klock_mem"),
    "node_raw_fetch_mem": ("node", "klock_mem"),
    "node_raw_http_mem": ("node", "klock_mem"),
}
NODE_CASES = {
    "node_friendly_mem",
    "node_friendly_durable",
    "node_friendly_base_mem",
    "node_raw_fetch_mem",
    "node_raw_http_mem",
}
SINGLE_CLIENT_CASES = NODE_CASES | {"fsync_floor"}


# ---------------------------------------------------------------------------------------------
# worker side: one case, N client processes
# ---------------------------------------------------------------------------------------------


def _hostport(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[1].rstrip("/")
    host, port = rest.rsplit(":", 1)
    return host, int(port)


def _raw_pair(post, agent_id: str, tag: str):
    """Opens a session through `post` (path, body, token) -> answer, and returns its id, its
    token and the operation: one acquire + release of the client's own resource."""
    opened = post("/v1/ns/default/sessions", {"agent_id": agent_id}, None)
    sid, token = opened["session_id"], opened["session_token"]
    acquire = f"/v1/ns/default/sessions/{sid}/acquire"
    release = f"/v1/ns/default/sessions/{sid}/release"
    intent = f"MUTATES FILE:/bench/{tag}"

    def op() -> None:
        d = post(acquire, {"intents": [intent], "wait": True}, token)
        lease_id = d["leases"][0]["lease_id"]
        post(release, {"lease_ids": [lease_id]}, token)

    return sid, token, op


def _klock_raw_httpclient(url: str, tag: str):
    import http.client
    import uuid

    host, port = _hostport(url)
    conn = http.client.HTTPConnection(host, port, timeout=30)

    def post(path: str, body: dict, token: str | None) -> dict:
        headers = {"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex}
        if token is not None:
            headers["Klock-Session-Token"] = token
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
        return json.loads(data)

    sid, token, op = _raw_pair(post, f"raw-{tag}", tag)

    def close() -> None:
        conn.request("DELETE", f"/v1/ns/default/sessions/{sid}", headers={"Klock-Session-Token": token})
        conn.getresponse().read()
        conn.close()

    return op, close


def _klock_raw_httpx(url: str, tag: str):
    import uuid

    import httpx

    http = httpx.Client(base_url=url, timeout=30)

    def post(path: str, body: dict, token: str | None) -> dict:
        headers = {"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex}
        if token is not None:
            headers["Klock-Session-Token"] = token
        r = http.request("POST", path, content=json.dumps(body), headers=headers)
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {r.text[:200]!r}")
        return r.json()

    sid, token, op = _raw_pair(post, f"rawx-{tag}", tag)

    def close() -> None:
        http.request("DELETE", f"/v1/ns/default/sessions/{sid}", headers={"Klock-Session-Token": token})
        http.close()

    return op, close


def _klock_friendly(url: str, tag: str):
    import klock

    k = klock.connect(url)
    s = k.session(f"friendly-{tag}")
    intent = f"MUTATES FILE:/bench/{tag}"

    def op() -> None:
        with s.lease(intent):
            pass

    def close() -> None:
        s.close()
        k.close()

    return op, close


def _redis_lock(url: str, tag: str):
    import redis

    host, port = _hostport(url)
    r = redis.Redis(host=host, port=port)
    key = f"bench:{tag}"

    def op() -> None:
        with r.lock(key, timeout=60):
            pass

    return op, r.close


def _etcd(url: str, tag: str, lease_per_op: bool):
    import http.client

    host, port = _hostport(url)
    conn = http.client.HTTPConnection(host, port, timeout=30)

    def post(path: str, body: dict) -> dict:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {data[:200]!r}")
        return json.loads(data)

    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    key = b64(f"/bench/lock/{tag}")
    value = b64("holder")

    def txn(lease_id: str) -> None:
        d = post(
            "/v3/kv/txn",
            {
                "compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": "0"}],
                "success": [{"request_put": {"key": key, "value": value, "lease": lease_id}}],
            },
        )
        if not d.get("succeeded"):
            raise RuntimeError(f"etcd txn: the key is held: {d}")

    if lease_per_op:

        def op() -> None:
            lease_id = post("/v3/lease/grant", {"TTL": 60})["ID"]
            txn(lease_id)
            post("/v3/lease/revoke", {"ID": lease_id})

        def close() -> None:
            conn.close()

    else:
        session_lease = post("/v3/lease/grant", {"TTL": 300})["ID"]

        def op() -> None:
            txn(session_lease)
            post("/v3/kv/deleterange", {"key": key})

        def close() -> None:
            post("/v3/lease/revoke", {"ID": session_lease})
            conn.close()

    return op, close


def _fsync_floor(url: str, tag: str):
    path = os.path.join(url, f"fsync-{tag}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    record = b"x" * 100

    def op() -> None:
        os.write(fd, record)
        os.fdatasync(fd)
        os.write(fd, record)
        os.fdatasync(fd)

    def close() -> None:
        os.close(fd)
        os.unlink(path)

    return op, close


def _make_client(case: str, url: str, tag: str):
    if case == "fsync_floor":
        return _fsync_floor(url, tag)
    if case.startswith("klock_friendly"):
        return _klock_friendly(url, tag)
    if case.startswith("klock_raw_httpclient"):
        return _klock_raw_httpclient(url, tag)
    if case.startswith("klock_raw_httpx"):
        return _klock_raw_httpx(url, tag)
    if case.startswith("redis_lock"):
        return _redis_lock(url, tag)
    if case == "etcd_session":
        return _etcd(url, tag, lease_per_op=False)
    if case == "etcd_lease":
        return _etcd(url, tag, lease_per_op=True)
    raise SystemExit(f"unknown case {case}")


def _client_main(case, url, tag, warmup, seconds, barrier, conn) -> None:
    try:
        op, close = _make_client(case, url, tag)
        warm = 0
        end = time.perf_counter() + warmup
        while time.perf_counter() < end:
            op()
            warm += 1
        barrier.wait(timeout=120)
        lat = []
        append = lat.append
        clock = time.perf_counter_ns
        cpu0 = time.process_time()
        start = clock()
        stop = start + int(seconds * 1e9)
        t = start
        while t < stop:
            t0 = clock()
            op()
            t = clock()
            append(t - t0)
        cpu = time.process_time() - cpu0
        elapsed = (t - start) / 1e9
        close()
        conn.send({"ops": len(lat), "warm": warm, "elapsed": elapsed, "cpu": cpu, "lat": lat})
    except BaseException as e:  # report, never hang the barrier
        try:
            barrier.abort()
        except Exception:
            pass
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def worker(case: str, url: str, clients: int, warmup: float, seconds: float) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients)
    pipes, procs = [], []
    for c in range(clients):
        recv, send = ctx.Pipe(duplex=False)
        tag = f"{os.getpid()}-{c}"
        p = ctx.Process(target=_client_main, args=(case, url, tag, warmup, seconds, barrier, send))
        p.start()
        send.close()
        pipes.append(recv)
        procs.append(p)
    results = [r.recv() for r in pipes]
    for p in procs:
        p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        print(json.dumps({"error": errors[0]}), flush=True)
        sys.exit(2)
    lat = sorted(x for r in results for x in r["lat"])
    ops = sum(r["ops"] for r in results)
    out = {
        "case": case,
        "clients": clients,
        "ops": ops,
        "ops_total": ops + sum(r["warm"] for r in results),
        "ops_per_s": sum(r["ops"] / r["elapsed"] for r in results),
        "p50_us": lat[len(lat) // 2] / 1e3,
        "p99_us": lat[min(len(lat) - 1, (len(lat) * 99) // 100)] / 1e3,
        "client_cpu_us": 1e6 * sum(r["cpu"] for r in results) / ops,
    }
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------
# driver side: servers, rounds, tables
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float = 20.0) -> None:
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port}")


def cpu_seconds(pid: int) -> float:
    """user + system seconds of a process and its reaped children (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


class Servers:
    def __init__(self, args, workdir: str) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.urls: dict[str, str] = {}
        self.missing: dict[str, str] = {}
        self.workdir = workdir
        self.args = args

    def start(self, wanted: set[str]) -> None:
        a = self.args
        if "klock_mem" in wanted:
            self._klock("klock_mem", ["--memory"])
        if "klock_durable" in wanted:
            self._klock("klock_durable", ["--data", os.path.join(self.workdir, "klock.redb")])
        for name, extra in (
            ("redis_default", []),
            ("redis_fsync", ["--appendonly", "yes", "--appendfsync", "always"]),
        ):
            if name not in wanted:
                continue
            if not shutil.which(a.redis_server):
                self.missing[name] = f"{a.redis_server} not found"
                continue
            port = free_port()
            d = os.path.join(self.workdir, name)
            os.makedirs(d, exist_ok=True)
            cmd = [a.redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                   "--daemonize", "no", "--logfile", os.path.join(d, "log"), *extra]
            self.procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            wait_port(port)
            self.urls[name] = f"redis://127.0.0.1:{port}"
        if "disk" in wanted:
            self.urls["disk"] = self.workdir
        if "etcd" in wanted:
            if not shutil.which(a.etcd):
                self.missing["etcd"] = f"{a.etcd} not found"
            else:
                cport, pport = free_port(), free_port()
                d = os.path.join(self.workdir, "etcd")
                cmd = [a.etcd, "--name", "bench", "--data-dir", d,
                       "--listen-client-urls", f"http://127.0.0.1:{cport}",
                       "--advertise-client-urls", f"http://127.0.0.1:{cport}",
                       "--listen-peer-urls", f"http://127.0.0.1:{pport}",
                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
                       "--initial-cluster", f"bench=http://127.0.0.1:{pport}",
                       "--log-level", "error"]
                self.procs["etcd"] = subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.workdir, "etcd.log"), "w")
                )
                wait_port(cport)
                time.sleep(1.0)  # leader election
                self.urls["etcd"] = f"http://127.0.0.1:{cport}"

    def _klock(self, name: str, extra: list[str]) -> None:
        p = subprocess.Popen(
            [self.args.klock, "serve", "--listen", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE, stderr=open(os.path.join(self.workdir, f"{name}.log"), "w"), text=True,
        )
        line = p.stdout.readline()
        if "listening on " not in line:
            raise SystemExit(f"klock serve did not start: {line!r}")
        self.procs[name] = p
        self.urls[name] = line.split("listening on ", 1)[1].strip()

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def run_case(args, servers: Servers, case: str, clients: int) -> dict:
    lang, server = CASES[case]
    url = servers.urls[server]
    if lang in ("node", "node_base"):
        client = args.node_client if lang == "node" else args.node_client_base
        cmd = [args.node, os.path.join(HERE, "remote_locks_node.cjs"), "--client", client,
               "--url", url, "--clients", str(clients), "--seconds", str(args.seconds),
               "--warmup", str(args.warmup), "--case", case,
               "--mode", "fetch" if "fetch" in case else "http" if "raw_http" in case else "friendly"]
    else:
        py = {
            "klock": args.klock_py,
            "klock_base": args.klock_py_base,
            "redis": args.redis_py,
            "stdlib": sys.executable,
        }[lang]
        cmd = [py, os.path.abspath(__file__), "--worker", case, "--url", url, "--clients",
               str(clients), "--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    pid = servers.procs[server].pid if server in servers.procs else None
    cpu0 = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    cpu1 = cpu_seconds(pid) if pid else 0.0
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"case": case, "clients": clients, "error": (lines[-1] if lines else "") + out.stderr[-800:]}
    d = json.loads(lines[-1])
    if "error" in d:
        return {"case": case, "clients": clients, "error": d["error"]}
    d["server_cpu_us"] = 1e6 * (cpu1 - cpu0) / max(1, d["ops_total"])
    d["load"] = os.getloadavg()[0]
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--klock", default=os.environ.get("KLOCK_BIN", "target/release/klock"))
    ap.add_argument("--klock-py", default=os.environ.get("OURS_PY", ".venv/bin/python"))
    ap.add_argument("--klock-py-base", default="",
                    help="the interpreter of the klock_friendly_base_mem and klock_raw_httpx_mem cases")
    ap.add_argument("--redis-py", default=os.environ.get("REDIS_PY", ""))
    ap.add_argument("--node", default="node")
    ap.add_argument("--node-client", default="node/client.js")
    ap.add_argument("--node-client-base", default="",
                    help="the node/client.js of another checkout (e.g. main's, copied before a change): "
                         "the node_friendly_base_mem case")
    ap.add_argument("--redis-server", default="redis-server")
    ap.add_argument("--etcd", default="etcd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--cases", default=",".join(c for c in CASES if CASES[c][0] not in ("klock_base", "node_base")))
    ap.add_argument("--single-client-only", default=",".join(sorted(SINGLE_CLIENT_CASES)),
                    help="cases run with 1 client only")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write every sample here")
    args = ap.parse_args()

    if args.worker:
        worker(args.worker, args.url, int(args.clients), args.warmup, args.seconds)
        return

    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c}; known: {', '.join(CASES)}")
    if any(CASES[c][0] == "redis" for c in cases) and not args.redis_py:
        raise SystemExit("--redis-py (or $REDIS_PY): a python with redis-py installed")
    if any(CASES[c][0] == "node_base" for c in cases) and not args.node_client_base:
        raise SystemExit("--node-client-base: the node/client.js to compare with")
    if any(CASES[c][0] == "klock_base" for c in cases) and not args.klock_py_base:
        raise SystemExit("--klock-py-base: the python of the klock to compare with (and httpx)")
    single = set(args.single_client_only.split(","))
    counts = [int(x) for x in args.clients.split(",")]
    workdir = args.workdir or tempfile.mkdtemp(prefix="remote-locks-")
    os.makedirs(workdir, exist_ok=True)
    servers = Servers(args, workdir)
    samples: list[dict] = []
    try:
        servers.start({CASES[c][1] for c in cases})
        runnable = [c for c in cases if CASES[c][1] in servers.urls]
        for c in cases:
            if c not in runnable:
                print(f"skipped {c}: {servers.missing.get(CASES[c][1], 'no server')}", flush=True)
        print(f"servers: {json.dumps(servers.urls)}; load average at start {os.getloadavg()}", flush=True)
        plan = [(c, n) for n in counts for c in runnable if n == 1 or c not in single]
        for r in range(args.rounds):
            k = r % len(plan)
            order = plan[k:] + plan[:k]
            for case, n in order:
                d = run_case(args, servers, case, n)
                d["round"] = r
                samples.append(d)
                if "error" in d:
                    print(f"round {r} {case} x{n}: ERROR {d['error']}", flush=True)
                else:
                    print(
                        f"round {r} {case:<30} x{n:<3} {d['ops_per_s']:>9.0f} ops/s  p50 {d['p50_us']:>8.0f} us"
                        f"  p99 {d['p99_us']:>8.0f} us  client cpu {d['client_cpu_us']:>6.0f} us/op"
                        f"  server cpu {d['server_cpu_us']:>6.0f} us/op  load {d['load']:.2f}",
                        flush=True,
                    )
    finally:
        servers.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)
    report(samples, counts)


def report(samples: list[dict], counts: list[int]) -> None:
    import statistics

    ok = [s for s in samples if "error" not in s]
    rounds = sorted({s["round"] for s in ok})
    by = {(s["case"], s["clients"], s["round"]): s for s in ok}
    cases = list(dict.fromkeys(s["case"] for s in ok))
    print("\n| case | clients | ops/s (median; min-max) | p50 us | p99 us | client CPU us/op | server CPU us/op |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        for c in cases:
            xs = [by[(c, n, r)] for r in rounds if (c, n, r) in by]
            if not xs:
                continue
            med = lambda k: statistics.median(x[k] for x in xs)  # noqa: E731
            ops = [x["ops_per_s"] for x in xs]
            print(f"| {c} | {n} | {med('ops_per_s'):,.0f} ({min(ops):,.0f}-{max(ops):,.0f}) | {med('p50_us'):,.0f} |"
                  f" {med('p99_us'):,.0f} | {med('client_cpu_us'):,.0f} | {med('server_cpu_us'):,.0f} |")
    pairs = [
        ("klock_friendly_mem", "redis_lock_default"),
        ("klock_friendly_base_mem", "redis_lock_default"),
        ("klock_friendly_mem", "klock_friendly_base_mem"),
        ("klock_friendly_mem", "klock_raw_httpclient_mem"),
        ("redis_lock_default", "klock_friendly_mem"),
        ("redis_lock_fsync", "klock_friendly_durable"),
        ("etcd_session", "klock_friendly_durable"),
        ("etcd_lease", "klock_friendly_durable"),
        ("klock_raw_httpclient_mem", "klock_friendly_mem"),
        ("klock_raw_httpclient_durable", "klock_friendly_durable"),
        ("klock_raw_httpclient_mem", "klock_raw_httpx_mem"),
        ("klock_friendly_mem", "klock_friendly_durable"),
        ("fsync_floor", "klock_raw_httpclient_durable"),
        ("fsync_floor", "redis_lock_fsync"),
        ("fsync_floor", "etcd_session"),
        ("redis_lock_default", "klock_raw_httpclient_mem"),
        ("redis_lock_fsync", "klock_raw_httpclient_durable"),
        ("etcd_session", "klock_raw_httpclient_durable"),
        ("node_friendly_mem", "klock_friendly_mem"),
        ("node_friendly_base_mem", "klock_friendly_mem"),
        ("node_friendly_mem", "node_friendly_base_mem"),
        ("klock_raw_httpclient_mem", "node_friendly_mem"),
        ("node_friendly_durable", "klock_friendly_durable"),
        ("node_raw_http_mem", "node_raw_fetch_mem"),
        ("node_raw_fetch_mem", "node_friendly_mem"),
        ("node_raw_http_mem", "node_friendly_mem"),
        ("klock_raw_httpx_mem", "klock_friendly_mem"),
    ]
    print("\nThroughput ratios A/B, computed per round (min-max over rounds; >1: A does more ops/s):")
    print("| A | B | clients | A/B ops/s | B/A p50 latency |")
    print("|---|---|---:|---:|---:|")
    for a, b in pairs:
        for n in counts:
            rs, ls = [], []
            for r in rounds:
                x, y = by.get((a, n, r)), by.get((b, n, r))
                if x and y:
                    rs.append(x["ops_per_s"] / y["ops_per_s"])
                    ls.append(y["p50_us"] / x["p50_us"])
            if rs:
                print(f"| {a} | {b} | {n} | {min(rs):.2f}-{max(rs):.2f} | {min(ls):.2f}-{max(ls):.2f} |")


if __name__ == "__main__":
    main()
