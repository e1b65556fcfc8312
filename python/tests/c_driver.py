"""The C remote client (``klock_remote_*``) behind the few calls of ``klock.connect`` that
test_remote_scenarios.py makes, so its runner drives libklock with the same steps and
expectations as the Python client.

Each calls ``tests/c/scenario_agent`` (its path in ``$KLOCK_C_SCENARIO_AGENT``; built by
scripts/test-c.sh), one process per scenario, with one tab-separated command a line (the
protocol is in tests/c/scenario_agent.c). ``lease.__enter__`` and ``__exit__`` block until the
agent's thread for that call reports it returned, as the Python client's calls block; a lease
lost meanwhile is reported by ``check`` as :class:`klock.LeaseLost`, with the reason the C
client names."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from typing import Any

import klock

AGENT_ENV = "KLOCK_C_SCENARIO_AGENT"


class CError(Exception):
    """What a C call failed with: ``name`` is the stable name its message starts with."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Agent:
    """One ``scenario_agent`` process: commands in, answers and call reports out."""

    def __init__(self) -> None:
        path = os.environ.get(AGENT_ENV)
        if not path:
            raise RuntimeError(
                f"${AGENT_ENV} names no scenario agent (scripts/test-c.sh builds it)"
            )
        self.proc = subprocess.Popen(
            [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.lock = threading.Lock()  # one command and its answer at a time
        self.answers: queue.Queue[str | None] = queue.Queue()
        # Call reports by block, under a lock of their own: the reader takes it while a
        # command holds the one above, waiting for the reader.
        self.done: dict[str, queue.Queue[str | None]] = {}
        self.done_lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "done":
                self._reports(fields[1]).put("\t".join(fields[2:]))
            else:
                self.answers.put(line.rstrip("\n"))
        # The agent ended: nothing waiting on it waits forever.
        self.answers.put(None)
        with self.done_lock:
            waiting = list(self.done.values())
        for reports in waiting:
            reports.put(None)

    def _reports(self, block: str) -> queue.Queue[str | None]:
        with self.done_lock:
            return self.done.setdefault(block, queue.Queue())

    def command(self, *fields: str) -> str:
        assert self.proc.stdin is not None
        with self.lock:
            self.proc.stdin.write("\t".join(fields) + "\n")
            self.proc.stdin.flush()
            answer = self.answers.get(timeout=120)
        if answer is None:
            raise RuntimeError(f"the scenario agent ended (status {self.proc.wait()}) at {fields}")
        return answer

    def call(self, block: str, *fields: str) -> None:
        """A command that starts a call of ``block`` in the agent; returns once it returned,
        raising :class:`CError` if it failed."""
        reports = self._reports(block)
        answer = self.command(*fields)
        assert answer == "ok", f"{fields}: {answer!r}"
        report = reports.get()
        if report is None:
            raise RuntimeError(f"the scenario agent ended during {fields}")
        if report != "ok":
            raise CError(report.split("\t")[1])

    def close(self) -> None:
        """``quit`` (every call joined, every handle freed), bounded; killed past the bound."""
        try:
            self.command("quit")
            self.proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, RuntimeError, OSError, queue.Empty):
            self.proc.kill()
            self.proc.wait(timeout=10)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.reader.join(timeout=10)  # the agent ended: its output ends
        self.proc.stdout.close()


class Client:
    """``klock.connect(url, reconnect_timeout=budget)`` of the C client."""

    def __init__(self, agent: Agent, name: str, url: str, reconnect_timeout: float) -> None:
        self.agent, self.name = agent, name
        answer = agent.command("connect", name, url, str(round(reconnect_timeout * 1000)))
        if answer != "ok":
            raise CError(answer.split("\t")[1])

    def session(self, agent_id: str) -> Session:
        answer = self.agent.command("open", agent_id, self.name)
        if answer != "ok":
            raise CError(answer.split("\t")[1])
        return Session(self.agent, agent_id)

    def close(self) -> None:
        """Closed with the agent (:meth:`Agent.close`)."""


class Session:
    def __init__(self, agent: Agent, name: str) -> None:
        self.agent, self.name = agent, name

    def lease(self, *intents: str, ttl: float | None = None, timeout: float | None = None) -> Lease:
        return Lease(self.agent, self, intents, ttl, timeout)


class Lease:
    """One ``klock_remote_acquire`` (``__enter__``) and its ``klock_remote_lease_release``
    (``__exit__``)."""

    count = 0

    def __init__(
        self,
        agent: Agent,
        session: Session,
        intents: tuple[str, ...],
        ttl: float | None,
        timeout: float | None,
    ) -> None:
        Lease.count += 1
        self.agent, self.session, self.intents = agent, session, intents
        self.name = f"b{Lease.count}"
        self.ttl_ms = "-" if ttl is None else str(round(ttl * 1000))
        self.timeout_ms = "-" if timeout is None else str(round(timeout * 1000))

    def __enter__(self) -> Lease:
        self.agent.call(
            self.name,
            "enter",
            self.name,
            self.session.name,
            self.ttl_ms,
            self.timeout_ms,
            *self.intents,
        )
        return self

    def __exit__(self, *_: Any) -> None:
        self.agent.call(self.name, "exit", self.name)

    def check(self) -> None:
        answer = self.agent.command("check", self.name).split("\t")
        if answer[0] == "lost" and answer[1] != "-":
            raise klock.LeaseLost(answer[1], "lost (the C client's report)", [])
        if answer[0] != "lost":
            raise CError(answer[1])
