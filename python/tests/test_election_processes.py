"""Elections across processes through a real ``klock serve``: five campaigner processes and two
observer processes. The leader is SIGKILLed, then the next one is SIGSTOPped past its TTL (and
resumed), then the next one resigns. Checked against a fenced register (a file that refuses a
term smaller than one it accepted, and logs every write):

* at no instant do two campaigners both act as leader with a valid lease: each act is logged
  with the monotonic times around the ``is_leader()`` check that allowed it (CLOCK_MONOTONIC is
  one clock for every process of the machine), and every act of a term ends before the first
  act of a later term begins;
* terms strictly increase, one campaigner per term, and the register accepted them in order;
* a successor is elected within the TTL plus the retry delay (plus scheduling slack);
* the observers see every term, in order;
* under ``detect`` each successor is the first campaigner the server had queued (campaign
  order).

Run as a script, this file is a campaigner (``campaigner URL NAME AGENT REGISTER TTL``) or an
observer (``observer URL NAME``), printing one JSON line per event.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TTL_S = 2.0
BACKOFF_BASE_MS = 50
BACKOFF_CAP_MS = 400
# The longest retry delay the kernel can ask for with this configuration (SPEC.md §8).
RETRY_S = (BACKOFF_CAP_MS + BACKOFF_BASE_MS) / 1000
# Process scheduling, HTTP round trips and the event stream on a busy two-core machine.
SLACK_S = 3.0


# ---- the processes --------------------------------------------------------------------------


def register_write(path: str, term: int, agent: str) -> bool:
    """The fenced register: under an exclusive flock, refuses a term smaller than the largest
    it accepted (kept in ``.max``, replaced atomically); logs every write (accepted or refused)
    in order."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            largest = int(Path(path + ".max").read_text())
        except FileNotFoundError:
            largest = -1
        accepted = term >= largest
        if accepted:  # atomically: a writer may be SIGKILLed at any instant
            Path(path + ".max.tmp").write_text(str(term))
            os.replace(path + ".max.tmp", path + ".max")
        with open(path, "a") as log:
            log.write(f"{'A' if accepted else 'R'} {term} {agent} {time.monotonic()}\n")
        return accepted


def _printer(agent: str) -> Callable[..., None]:
    lock = threading.Lock()

    def log(**fields: Any) -> None:
        fields.setdefault("t", time.monotonic())
        fields["agent"] = agent
        with lock:
            print(json.dumps(fields), flush=True)

    return log


def campaigner(url: str, name: str, agent: str, register: str, ttl: float) -> None:
    import klock

    log = _printer(agent)
    k = klock.connect(url)
    e = klock.Election(
        k, name, agent_id=agent, ttl=ttl, on_lost=lambda err: log(ev="lost", name=err.name)
    )
    resign = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: resign.set())
    while True:
        log(ev="campaigning")
        term = e.campaign()
        log(ev="lead", term=term)
        while True:
            if resign.is_set():
                resign.clear()
                e.resign()
                log(ev="resigned", term=term)
                break
            t0 = time.monotonic()
            leading = e.is_leader()
            t1 = time.monotonic()
            if not leading:
                log(ev="not_leader", term=term)
                e.resign()
                break
            accepted = register_write(register, term, agent)
            log(ev="act", term=term, t0=t0, t1=t1, accepted=accepted)
            time.sleep(0.02)


def observer(url: str, name: str) -> None:
    import klock

    log = _printer("observer")
    k = klock.connect(url)
    for leader in klock.Election(k, name, agent_id="observer", poll=0.05).observe():
        log(ev="change", term=None if leader is None else leader.term)


# ---- the test -----------------------------------------------------------------------------


class Proc:
    """A child process whose JSON lines are collected (with a condition to wait on)."""

    def __init__(self, args: list[str], events: list[dict[str, Any]], cond: threading.Condition):
        self.popen = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self.popen.pid
        self._events, self._cond = events, cond
        self.stderr = ""
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_err, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        with self.popen.stdout:
            for line in self.popen.stdout:
                event = json.loads(line)
                event["pid"] = self.pid
                with self._cond:
                    self._events.append(event)
                    self._cond.notify_all()

    def _read_err(self) -> None:
        assert self.popen.stderr is not None
        with self.popen.stderr:
            self.stderr = self.popen.stderr.read()

    def freeze(self) -> None:
        """The test kit's freeze (server.py): SIGSTOP, then wait until every thread stopped."""
        from server import Server

        Server.freeze(types.SimpleNamespace(proc=self.popen))  # type: ignore[arg-type]

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
            self.popen.kill()
        self.popen.wait(10)
        for reader in self._readers:  # to the end of what it wrote; the pipes closed
            reader.join(10)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("policy", ["detect", "wait_die"])
def test_five_campaigner_processes(policy: str, tmp_path: Path) -> None:
    import klock
    from server import Server

    server = Server(
        "--memory",
        "--config",
        f"policy={policy}",
        "--config",
        f"backoff_base_ms={BACKOFF_BASE_MS}",
        "--config",
        f"backoff_cap_ms={BACKOFF_CAP_MS}",
    )
    register = str(tmp_path / "register")
    events: list[dict[str, Any]] = []
    cond = threading.Condition()
    procs: list[Proc] = []
    k = klock.connect(server.url)

    def wait_for(
        pred: Callable[[dict[str, Any]], bool], timeout: float, start: int = 0
    ) -> dict[str, Any]:
        end = time.monotonic() + timeout
        with cond:
            while True:
                for event in events[start:]:
                    if pred(event):
                        return event
                left = end - time.monotonic()
                if left <= 0:
                    dead = [p.stderr[-3000:] for p in procs if p.popen.poll() is not None]
                    raise AssertionError(
                        f"no such event within {timeout} s; events but acts: {story()}; "
                        f"the processes that ended wrote: {dead}"
                    )
                cond.wait(left)

    def story() -> list[dict[str, Any]]:
        return [e for e in events if e["ev"] not in ("act", "change")]

    def next_lead(after: float, timeout: float) -> dict[str, Any]:
        return wait_for(lambda e: e["ev"] == "lead" and e["t"] > after, timeout)

    try:
        observers = [Proc(["observer", server.url, "e2e"], events, cond) for _ in range(2)]
        procs += observers
        campaigners: dict[str, Proc] = {}
        for i in range(5):
            agent = f"p{i}"
            campaigners[agent] = Proc(
                ["campaigner", server.url, "e2e", agent, register, str(TTL_S)], events, cond
            )
            procs.append(campaigners[agent])
            wait_for(lambda e, a=agent: e["ev"] == "campaigning" and e["agent"] == a, 30)
            if policy == "detect":  # queued in this order (the first one leads)
                end = time.monotonic() + 10
                while len(k.resource_state("LEADER:/e2e")["waiting"]) != i:
                    assert time.monotonic() < end, "the campaign did not queue"
                    time.sleep(0.01)
            else:
                time.sleep(0.2)
        wait_for(lambda e: e["ev"] == "lead", 10)

        def disrupt(what: str, act: Callable[[Proc], None]) -> tuple[str, dict[str, Any], float]:
            """Does ``act`` to the leader the server reports, and waits for the successor:
            (the leader, the successor's lead event, when ``act`` began). Under ``detect``
            the successor is the first campaigner the server had queued."""
            time.sleep(0.3)  # the leader acts a little
            state = k.resource_state("LEADER:/e2e")
            leader = state["holders"][0]["agent_id"]
            queue = [w["agent_id"] for w in state["waiting"]]
            at = time.monotonic()
            act(campaigners[leader])
            successor = next_lead(at, 30)
            if policy == "detect":  # successors in the order of their campaigns
                assert successor["agent"] == queue[0], (what, queue, story())
            return leader, successor, at

        # 1. The leader is SIGKILLed: a successor within the TTL plus the retry delay.
        _, second, at = disrupt("kill", lambda p: p.popen.kill())
        assert second["t"] - at <= TTL_S + RETRY_S + SLACK_S, second

        # 2. The next leader is SIGSTOPped past its TTL, then resumed: it learns it lost.
        stopped, third, at = disrupt("stop", Proc.freeze)
        assert third["t"] - at <= TTL_S + RETRY_S + SLACK_S, third
        time.sleep(0.3)
        resumed_at = time.monotonic()
        campaigners[stopped].popen.send_signal(signal.SIGCONT)
        told = wait_for(
            lambda e: e["agent"] == stopped and e["ev"] == "lost" and e["t"] > resumed_at, 10
        )
        assert told["name"] == "LEASE_EXPIRED"

        # 3. The next leader resigns: its successor at once (a retry delay at most).
        resigner, fourth, at = disrupt("resign", lambda p: p.popen.send_signal(signal.SIGUSR1))
        assert fourth["t"] - at <= RETRY_S + SLACK_S, fourth
        wait_for(lambda e: e["ev"] == "resigned" and e["agent"] == resigner, 10)
        time.sleep(0.5)
    finally:
        for proc in procs:
            proc.kill()
        k.close()
        server.stop()

    for proc in procs:  # every campaigner and observer ran without an error of its own
        assert "Traceback" not in proc.stderr, proc.stderr

    leads = [e for e in events if e["ev"] == "lead"]
    terms = [e["term"] for e in leads]
    # Terms strictly increase, one campaigner each.
    assert terms == sorted(set(terms)), leads

    # Never two leaders at once: every act of a term ends before the first act of a later one.
    acts: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        if e["ev"] == "act":
            acts.setdefault(e["term"], []).append(e)
    acted = sorted(acts)
    assert set(acted) <= set(terms), story()
    for earlier, later in zip(acted, acted[1:], strict=False):
        assert max(a["t1"] for a in acts[earlier]) < min(a["t0"] for a in acts[later]), (
            earlier,
            later,
        )
        assert {a["agent"] for a in acts[earlier]} == {leads[terms.index(earlier)]["agent"]}
    # The register accepted terms in order; what it refused came from an ex-leader (a write
    # checked before a pause and sent after it), never from a term that was still valid.
    accepted_terms = []
    for line in Path(register).read_text().splitlines():
        verdict, term, agent, _ = line.split()
        if verdict == "A":
            accepted_terms.append(int(term))
        else:
            assert int(term) < max(accepted_terms), line
    assert accepted_terms == sorted(accepted_terms) and set(accepted_terms) == set(acted)
    # The paused leader did not act with its old term after its successor began.
    assert all(a["t0"] < min(x["t0"] for x in acts[third["term"]]) for a in acts[second["term"]])

    # Every observer saw every term, in order.
    for proc in observers:
        seen = [e["term"] for e in events if e["pid"] == proc.pid and e["term"] is not None]
        assert seen == sorted(set(seen)), seen
        assert set(terms) <= set(seen), (terms, seen)


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    if role == "campaigner":
        url, name, agent, register, ttl = rest
        campaigner(url, name, agent, register, float(ttl))
    else:
        observer(*rest)
