"""The fleet demo (`bash scripts/demo.sh`): separate Python and Node agent processes editing
real files through one `klock serve`, first without Klock, then with it, with the server
killed (SIGKILL) and restarted from its data file partway through the Klock run.

What it shows: without coordination, concurrent read-modify-write edits overwrite each other
and edits are lost. With Klock, every edit holds `MUTATES FILE:/<name>`, nested two-file edits
cannot deadlock (Wait-Die: an older agent waits, a younger one dies, backs off and retries),
every write carries the lease's fence (a holder whose lease ended is refused), and the agents
ride out a crash of the control plane: the server comes back from its file with every lease
and session it had answered, in a suspension grace, and the clients reconnect, reconcile and
heartbeat. Nothing is lost. One Python and one Node agent are also frozen (SIGSTOP) while
they hold a lease, for longer than its TTL, as a long GC pause would: their leases expire,
others take the files, and the frozen agents' late writes are refused by the fence.

`--cluster` runs the Klock phase against three `klock serve --node-id` processes made one
Raft cluster instead of one server: the agents are given every node's URL, and the crash is a
SIGKILL of the leader, which stays down until the agents have made a tenth of their edits
without it (at most `--downtime-s`, then restarts on its data file and rejoins as a follower):
the agents fail over to a survivor without losing a lease or an edit. The table counts the
edits made while it was down.

`--policy` chooses the server's policy (SPEC.md §6, §6.1): `wait_die` (the default, as above),
`wound_wait`, `lanes`, or `detect` (everyone waits; only a real cycle of waiters is broken, by
killing its youngest unit of work), to compare the deaths each costs the agents
(bench/fleet.py runs it under `detect` and `wait_die` for bench/REPORT.md).

Progress is a bar on a terminal and plain lines otherwise; the final table has a column per
language and phase. Exit status: 0 when the Klock run lost nothing, every agent finished and
every planned restart happened; 1 otherwise; 130 on Ctrl-C. Agents, the server and the
temporary folder are removed on every exit.

The agents are agent.py and agent.mjs beside this file; the paths of the programs come from
the command line (scripts/demo.sh passes them).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import IO, Any

HERE = os.path.dirname(os.path.abspath(__file__))
LISTENING = re.compile(r"listening on (http://\S+)")


class Failed(Exception):
    """The demo could not run (a program missing, the server not starting): says why."""


def _signal(proc: subprocess.Popen[Any], sig: int) -> None:
    """Signals the process itself (not its group), if it is still there."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _kill_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class Server:
    """One `klock serve` on a data file, its kernel under `policy`; SIGKILL and restart it on
    the same file and port (the file keeps the policy, and refuses another)."""

    def __init__(self, binary: str, data: str, log: IO[str], policy: str) -> None:
        self.binary, self.data, self.log, self.policy = binary, data, log, policy
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self.restarts = 0
        #: more flags (a cluster node's)
        self.extra: list[str] = []

    def start(self) -> None:
        listen = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                *(self.binary, "serve", "--data", self.data, "--listen", listen),
                *("--config", f"policy={self.policy}"),
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        out = self.proc.stdout

        def drain() -> None:  # keeps the pipe from filling; the first line names the address
            for line in out:
                lines.put(line)

        threading.Thread(target=drain, daemon=True).start()
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            line = ""
        found = LISTENING.search(line)
        if not found:
            self.log.flush()
            with open(self.log.name, encoding="utf-8") as f:
                said = f.read().strip()[-500:]
            raise Failed(f"klock serve did not start on {listen} ({self.binary}): {said or line!r}")
        self.url = found.group(1)
        self.port = int(self.url.rsplit(":", 1)[1])

    def crash_and_restart(self, downtime_s: float) -> None:
        """SIGKILL (no shutdown of any kind), a moment of downtime, then a start from the file."""
        assert self.proc is not None
        _kill_group(self.proc, signal.SIGKILL)
        self.proc.wait()
        time.sleep(downtime_s)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                _kill_group(self.proc, signal.SIGKILL)
                self.proc.wait()


# The demo cluster's secret (klock serve asks for at least 16 characters).
_CLUSTER_SECRET = "the-fleet-demo-cluster-secret"


class Cluster:
    """Three `klock serve --node-id N --cluster-peers ...` on free loopback ports, each on a
    data file of its own, made one cluster by `klock cluster init`; the same interface as
    :class:`Server` (``url``: every node's, separated by commas). A crash is a SIGKILL of the
    leader, restarted on its file and port after the downtime (it rejoins as a follower)."""

    def __init__(self, binary: str, folder: str, log: IO[str], policy: str) -> None:
        self.binary, self.folder, self.log, self.policy = binary, folder, log, policy
        self.secret = os.path.join(folder, "cluster.secret")
        with open(self.secret, "w", encoding="utf-8") as f:
            f.write(_CLUSTER_SECRET)
        self.nodes: list[Server] = []
        for i in range(3):
            node = Server(binary, os.path.join(folder, f"node{i + 1}.redb"), log, policy)
            node.port = _free_port()
            self.nodes.append(node)
        self.urls = [f"http://127.0.0.1:{n.port}" for n in self.nodes]
        self.url = ",".join(self.urls)
        self.data = folder
        self.restarts = 0
        self.killed: Server | None = None
        peers = ",".join(f"{i + 1}={url}" for i, url in enumerate(self.urls))
        for i, node in enumerate(self.nodes):
            node.extra = ["--node-id", str(i + 1), "--cluster-peers", peers]
            node.extra += ["--cluster-secret-file", self.secret]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        init = [self.binary, "cluster", "init", "--node", self.urls[0]]
        done = subprocess.run(
            [*init, "--cluster-secret-file", self.secret], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise Failed(f"klock cluster init failed: {done.stderr.strip()[-500:]}")
        self.leader()

    def leader(self, timeout_s: float = 20) -> int:
        """The index of the node every live node names as leader, once there is one."""
        deadline = time.monotonic() + timeout_s
        while True:
            named = [self._leader_of(n) for n in self.nodes if n.proc is not None]
            if named and named[0] is not None and all(x == named[0] for x in named):
                return named[0] - 1
            if time.monotonic() > deadline:
                raise Failed(f"the cluster agreed on no leader within {timeout_s:.0f} s: {named}")
            time.sleep(0.05)

    def _leader_of(self, node: Server) -> int | None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{node.port}/raft/status",
            headers={"klock-cluster-secret": _CLUSTER_SECRET},
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                leader = json.load(answer).get("leader")
        except (OSError, ValueError):
            return None
        return leader if isinstance(leader, int) else None

    def kill_leader(self) -> None:
        """SIGKILL of the leader (no shutdown of any kind); :meth:`restart` brings it back."""
        self.killed = self.nodes[self.leader()]
        assert self.killed.proc is not None
        _kill_group(self.killed.proc, signal.SIGKILL)
        self.killed.proc.wait()
        self.killed.proc = None

    def restart(self) -> None:
        """The killed node starts again from its file (it rejoins as a follower)."""
        assert self.killed is not None
        self.killed.start()
        self.killed = None
        self.restarts += 1

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _free_port() -> int:
    """A loopback port nothing listens on now, for a node that binds it just after.

    It is drawn from below the kernel's ephemeral range: until the node binds it, a port of
    that range can be handed to any socket of the machine (another test's ``bind(0)``, the
    local end of an outgoing connection), and the node could not listen."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            low = int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    floor = 10_000
    for _ in range(1000 if low > floor + 1000 else 0):
        candidate = random.randrange(floor, low)
        try:
            with socket.create_server(("127.0.0.1", candidate)):
                return candidate
        except OSError:
            continue
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


@dataclass
class Agent:
    name: str
    language: str
    proc: subprocess.Popen[str]
    written: list[str] = field(default_factory=list)
    done: dict[str, int] | None = None
    error: str | None = None
    #: server restarts that happened while this agent was running
    restarts_seen: int = 0
    #: times it was stopped (SIGSTOP) past its lease's TTL
    frozen: int = 0
    #: edits it made while the cluster's leader was killed (--cluster)
    down_edits: int = 0


@dataclass
class Column:
    """One language in one phase."""

    title: str
    agents: list[Agent]
    files: list[str]
    #: the agents used Klock (the counters of a run without it are not shown)
    guarded: bool
    elapsed_s: float = 0.0
    finished: bool = True

    def total(self, key: str) -> int:
        return sum((a.done or {}).get(key, 0) for a in self.agents)

    def lost(self) -> int:
        return len(self.lost_edits())

    def lost_edits(self) -> list[str]:
        """The ids of edits an agent reported written that no file holds."""
        present: set[str] = set()
        for path in self.files:
            with open(path, encoding="utf-8") as f:
                present.update(json.load(f)["edits"])
        return [edit for a in self.agents for edit in a.written if edit not in present]

    def survived(self) -> str:
        """Of the agents running when the server was killed, how many finished cleanly."""
        exposed = [a for a in self.agents if a.restarts_seen]
        ok = [a for a in exposed if a.done is not None and a.error is None]
        return f"{len(ok)} of {len(exposed)} agents"


class Progress:
    """A bar with a status on a terminal (stderr); a line per quarter otherwise."""

    def __init__(self, label: str, total: int, stream: IO[str]) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.done = 0
        self.status = ""
        self.tty = stream.isatty()
        self.next_quarter = 1
        self.last = 0.0

    def add(self, n: int) -> None:
        self.done += n
        if self.tty:
            now = time.monotonic()
            if now - self.last >= 0.05 or self.done >= self.total:
                self.last = now
                filled = 30 * min(self.done, self.total) // max(1, self.total)
                bar = "#" * filled + "." * (30 - filled)
                self.stream.write(
                    f"\r  {self.label:<14} [{bar}] {self.done}/{self.total} edits {self.status}\033[K"
                )
                self.stream.flush()
        elif self.done * 4 >= self.next_quarter * self.total:
            self.next_quarter = self.done * 4 // self.total + 1
            self.say(f"{self.done}/{self.total} edits {self.status}".rstrip())

    def say(self, text: str) -> None:
        """A line of its own (on a terminal, over the bar, which the next add redraws)."""
        if self.tty:
            self.stream.write(f"\r  {self.label}: {text}\033[K\n")
        else:
            self.stream.write(f"  {self.label}: {text}\n")
        self.stream.flush()

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _read_agent(agent: Agent, events: queue.Queue[tuple[Agent, dict[str, Any] | None]]) -> None:
    assert agent.proc.stdout is not None
    for line in agent.proc.stdout:
        try:
            events.put((agent, json.loads(line)))
        except json.JSONDecodeError:
            events.put((agent, {"error": f"unreadable output: {line.strip()[:200]}"}))
    events.put((agent, None))  # its output ended


def run_phase(
    title: str,
    mode: str,
    args: argparse.Namespace,
    root: str,
    server: Server | Cluster | None,
    stream: IO[str],
    running: list[Agent],
) -> tuple[Column, Column]:
    folder = os.path.join(root, mode)
    os.makedirs(folder)
    files = [os.path.join(folder, f"file{i}.json") for i in range(args.files)]
    for path in files:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"edits": []}, f)
    events: queue.Queue[tuple[Agent, dict[str, Any] | None]] = queue.Queue()
    programs = {
        "Python": [args.python, os.path.join(HERE, "agent.py")],
        "Node": [args.node, os.path.join(HERE, "agent.mjs")],
    }
    counts = {"Python": args.python_agents, "Node": args.node_agents}
    agents: list[Agent] = []
    for language, n in counts.items():
        for i in range(n):
            name = f"{language.lower()}{i}"
            command = programs[language] + [
                "--name",
                name,
                "--root",
                folder,
                "--files",
                str(args.files),
                "--edits",
                str(args.edits),
                "--seed",
                str(args.seed * 1000 + len(agents)),
                "--think-ms",
                str(args.think_ms),
                "--mode",
                mode,
            ]
            if server is not None:
                command += ["--server", server.url, "--ttl-ms", str(args.ttl_ms)]
            # stderr to a file: a pipe nobody reads until the end could fill and stop it.
            with open(os.path.join(root, f"{mode}-{name}.err"), "w", encoding="utf-8") as err:
                proc = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
                )
            agent = Agent(name, language, proc)
            agents.append(agent)
            running.append(agent)
            threading.Thread(target=_read_agent, args=(agent, events), daemon=True).start()
    total = len(agents) * args.edits
    progress = Progress(title, total, stream)
    # The crash points: evenly spread through the Klock run.
    crash_at = (
        [total * (k + 1) // (args.restarts + 1) for k in range(args.restarts)] if server else []
    )
    # The freezes: one agent per language, at a tenth and at three tenths of the run (apart,
    # so that one frozen agent does not keep the other's file from being taken), each of an
    # agent under way (it has made an edit, so it listens for SIGUSR2).
    freeze_at = (
        {language: total * (1 + 2 * k) // 10 for k, language in enumerate(counts)}
        if server is not None and args.freeze
        else {}
    )
    freeze_s = args.ttl_ms * 1.5 / 1000 + 1
    thaws: list[threading.Timer] = []
    start = time.monotonic()
    deadline = start + args.deadline_s
    # --cluster: when the leader was killed and the edits made by then. It stays down until
    # the agents made a tenth of their edits without it (they failed over), at most
    # --downtime-s: the restart must not be what lets them go on.
    killed: tuple[float, int] | None = None
    open_outputs = len(agents)
    while open_outputs:
        if isinstance(server, Cluster) and killed is not None:
            since, edits_then = killed
            if (
                progress.done - edits_then >= total // 10
                or time.monotonic() >= since + args.downtime_s
            ):
                down = time.monotonic() - since
                server.restart()
                killed = None
                progress.status = f"· leader kills {server.restarts}"
                progress.say(
                    f"the killed node restarts from its data file after {down:.1f} s, "
                    f"{progress.done - edits_then} edits made without it"
                )
        wake = deadline if killed is None else min(deadline, killed[0] + args.downtime_s)
        try:
            agent, event = events.get(timeout=max(0.0, wake - time.monotonic()))
        except queue.Empty:
            if time.monotonic() < deadline:
                continue  # the killed node's time to restart
            progress.say(f"agents still running after {args.deadline_s:.0f} s: stopped")
            break
        if event is None:
            open_outputs -= 1
            continue
        if "progress" in event:
            agent.written.extend(event["progress"])
            progress.add(len(event["progress"]))
            if killed is not None:
                agent.down_edits += len(event["progress"])
        elif "done" in event:
            agent.done = event["done"]
        elif "error" in event:
            agent.error = event["error"]
        elif "frozen" in event:
            os.kill(agent.proc.pid, signal.SIGSTOP)
            agent.frozen += 1
            progress.say(
                f"SIGSTOP to {agent.name} for {freeze_s:.1f} s while it holds a lease on "
                f"{os.path.basename(event['frozen'])} (TTL {args.ttl_ms} ms)"
            )
            thaw = threading.Timer(freeze_s, _signal, (agent.proc, signal.SIGCONT))
            thaw.start()
            thaws.append(thaw)
        for language, at in list(freeze_at.items()):
            under_way = [
                a for a in agents if a.language == language and a.written and a.done is None
            ]
            if progress.done >= at and under_way:
                del freeze_at[language]
                # The one with the most edits ahead of it, sure to make another edit.
                _signal(min(under_way, key=lambda a: len(a.written)).proc, signal.SIGUSR2)
        if server is not None and crash_at and progress.done >= crash_at[0]:
            crash_at.pop(0)
            if isinstance(server, Cluster):
                progress.say("SIGKILL to the cluster's leader")
                server.kill_leader()
                killed = (time.monotonic(), progress.done)
                progress.status = "· leader down"
            else:
                progress.say("SIGKILL to klock serve; restarting it from its data file")
                server.crash_and_restart(args.downtime_s)
            for a in agents:
                if a.proc.poll() is None and a.done is None:
                    a.restarts_seen += 1
            if not isinstance(server, Cluster):
                progress.status = f"· server restarts {server.restarts}"
    if isinstance(server, Cluster) and killed is not None:
        server.restart()  # the run ended first: the planned restart still happens
    progress.end()
    elapsed = time.monotonic() - start
    for thaw in thaws:
        thaw.cancel()
    for agent in agents:
        if agent.proc.poll() is None:
            _kill_group(agent.proc, signal.SIGKILL)
        agent.proc.wait()
        running.remove(agent)
        if agent.done is None and agent.error is None:
            with open(os.path.join(root, f"{mode}-{agent.name}.err"), encoding="utf-8") as err:
                stderr = err.read().strip().splitlines()
            # The line that names the error, rather than the stack around it.
            named = [line for line in stderr if "Error" in line or "error" in line]
            why = (named or stderr or ["no output"])[0].strip()[:300]
            agent.error = f"exited {agent.proc.returncode} without finishing: {why}"
    columns = []
    for language in counts:
        mine = [a for a in agents if a.language == language]
        finished = all(a.done is not None for a in mine)
        columns.append(
            Column(f"{language}, {title}", mine, files, server is not None, elapsed, finished)
        )
    return columns[0], columns[1]


def table(columns: list[Column], cluster: bool = False) -> str:
    crashes = "failovers survived" if cluster else "server restarts survived"
    rows: list[tuple[str, Any]] = [
        ("agent processes", lambda c: str(len(c.agents))),
        ("edits made", lambda c: str(sum(len(a.written) for a in c.agents))),
        ("edits lost", lambda c: str(c.lost())),
        ("waits", lambda c: str(c.total("waits")) if c.guarded else "-"),
        ("deaths (DIE)", lambda c: str(c.total("deaths")) if c.guarded else "-"),
        ("retries (incl. rollbacks)", lambda c: str(c.total("retries")) if c.guarded else "-"),
        (
            "frozen past the TTL",
            lambda c: str(sum(a.frozen for a in c.agents)) if c.guarded else "-",
        ),
        (
            "late writes refused by the fence",
            lambda c: str(c.total("fences_refused")) if c.guarded else "-",
        ),
        (crashes, lambda c: c.survived() if c.guarded else "-"),
        (
            "edits while the leader was down",
            lambda c: str(sum(a.down_edits for a in c.agents)) if c.guarded and cluster else "-",
        ),
        ("finished (no deadlock)", lambda c: "yes" if c.finished else "NO"),
        ("elapsed", lambda c: f"{c.elapsed_s:.1f} s"),
    ]
    label_w = max(len(label) for label, _ in rows)
    col_w = max(14, *(len(c.title) for c in columns))
    lines = [" " * label_w + "  " + "  ".join(c.title.rjust(col_w) for c in columns)]
    for label, cell in rows:
        lines.append(label.ljust(label_w) + "  " + "  ".join(cell(c).rjust(col_w) for c in columns))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--klock", required=True, help="the klock binary (klock serve)")
    p.add_argument("--python", default=sys.executable, help="a Python with the klock package")
    p.add_argument("--node", default="node", help="the node program")
    p.add_argument("--python-agents", type=int, default=4)
    p.add_argument("--node-agents", type=int, default=4)
    p.add_argument("--edits", type=int, default=30, help="edits per agent (default 30)")
    p.add_argument("--files", type=int, default=4, help="shared files (default 4)")
    p.add_argument("--think-ms", type=float, default=5.0, help="between read and write")
    p.add_argument("--restarts", type=int, default=1, help="server SIGKILLs in the Klock run")
    p.add_argument(
        "--downtime-s",
        type=float,
        default=None,
        help="between a kill and the restart (default 0.5; with --cluster at most 10: the "
        "leader comes back once the agents made a tenth of their edits without it)",
    )
    p.add_argument(
        "--ttl-ms",
        type=int,
        default=None,
        help="the agents' lease TTL (default 2000; with --cluster 5000: a lease must outlive "
        "an election and a 503's Retry-After)",
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="the Klock run against a three-node cluster; the crash kills its leader",
    )
    p.add_argument(
        "--no-freeze",
        dest="freeze",
        action="store_false",
        help="do not stop an agent of each language past its lease's TTL",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--policy",
        choices=["wait_die", "wound_wait", "lanes", "detect"],
        default="wait_die",
        help="the server's policy in the Klock run (default wait_die)",
    )
    p.add_argument("--deadline-s", type=float, default=240.0, help="per phase")
    args = p.parse_args(argv)
    if args.ttl_ms is None:
        args.ttl_ms = 5000 if args.cluster else 2000
    if args.downtime_s is None:
        args.downtime_s = 10.0 if args.cluster else 0.5
    if min(args.python_agents, args.node_agents) < 1 or args.edits < 1 or args.files < 2:
        p.error("need --python-agents >= 1, --node-agents >= 1, --edits >= 1, --files >= 2")
    if args.restarts < 0 or args.downtime_s < 0 or args.think_ms < 0:
        p.error("--restarts, --downtime-s and --think-ms cannot be negative")
    if args.ttl_ms < 300:
        p.error("--ttl-ms must be at least 300 (heartbeats go every third of it)")
    if not os.access(args.klock, os.X_OK):
        p.error(f"--klock {args.klock} is not an executable file")

    # SIGTERM ends the demo the way Ctrl-C does: children stopped, folder removed.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    root = tempfile.mkdtemp(prefix="klock-fleet-")
    stream = sys.stderr
    running: list[Agent] = []
    server: Server | Cluster | None = None
    log = open(os.path.join(root, "server.log"), "w", encoding="utf-8")
    try:
        stream.write(
            f"klock fleet demo: {args.python_agents} Python + {args.node_agents} Node agent "
            f"processes x {args.edits} edits on {args.files} files in {root}\n"
        )
        plain = run_phase("without Klock", "plain", args, root, None, stream, running)
        os.makedirs(os.path.join(root, "server"))
        if args.cluster:
            server = Cluster(args.klock, os.path.join(root, "server"), log, args.policy)
        else:
            server = Server(
                args.klock, os.path.join(root, "server", "klock.redb"), log, args.policy
            )
        server.start()
        what = "a cluster of three" if args.cluster else "klock serve"
        stream.write(f"  {what}: {server.url} (data in {server.data}, policy {args.policy})\n")
        guarded = run_phase("with Klock", "klock", args, root, server, stream, running)
        columns = [*plain, *guarded]
        print()
        print(table(columns, args.cluster))
        print()
        for c in columns:
            for a in c.agents:
                if a.error:
                    print(f"error ({c.title}): {a.name}: {a.error}")
        problems = [a for c in guarded for a in c.agents if a.error]
        lost = sum(c.lost() for c in guarded)
        ok = (
            lost == 0
            and not problems
            and all(c.finished for c in guarded)
            and server.restarts == args.restarts
        )
        if ok:
            made = sum(len(a.written) for c in guarded for a in c.agents)
            without = sum(c.lost() for c in plain)
            refused = sum(c.total("fences_refused") for c in guarded)
            print(
                f"With Klock: {made} edits by separate Python and Node processes, none lost, no "
                f"deadlock, through {server.restarts} "
                f"{'leader kill(s)' if args.cluster else 'server crash(es)'}; {refused} late write(s) "
                f"of frozen agents refused by the fence. Without it, {without} edits were lost."
            )
        else:
            print(f"FAILED: the Klock run lost {lost} edits, failed or did not finish")
            for c in guarded:
                if c.lost():
                    # Which edits (agent-unit.file): enough to tell a frozen agent's from others'.
                    print(f"lost ({c.title}): {', '.join(c.lost_edits())}")
        return 0 if ok else 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the cleanup
        stream.write("\nklock fleet demo: interrupted; stopping agents and the server\n")
        return 130
    except Failed as e:
        stream.write(f"klock fleet demo: {e}\n")
        return 1
    finally:
        for agent in running:
            _kill_group(agent.proc, signal.SIGKILL)
            agent.proc.wait()
        if server is not None:
            server.stop()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
        stream.write(f"klock fleet demo: removed {root}\n")


if __name__ == "__main__":
    sys.exit(main())
