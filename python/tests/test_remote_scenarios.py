"""tests/remote-scenarios/ through ``klock.connect``: every file, unchanged, against a real
``klock serve --data FILE`` process reached through a ``klock-testkit link`` process (the
format and what each step does: tests/remote-scenarios/README.md). One test per file, so a
scenario the client cannot meet fails by its name.

The same runner drives the C remote client (``klock_remote_*``) through ``c_driver``: with
``KLOCK_SCENARIO_DRIVERS=c`` (scripts/test-c.sh, which builds its agent) every file runs
through libklock instead; ``python,c`` runs both. Unset, it is ``python``.

Real time, bounded: a scenario's sleeps and ``within_ms`` bounds are wall-clock; each
acquisition and exit runs in a thread of its own, as a program's ``with`` block would."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import c_driver
import pytest

import klock
import server as kit
from server import Server, call

SCENARIOS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "remote-scenarios"
FILES = sorted(SCENARIOS.glob("*.json"))
DRIVERS = os.environ.get("KLOCK_SCENARIO_DRIVERS", "python").split(",")
if not DRIVERS or not set(DRIVERS) <= {"python", "c"}:
    raise RuntimeError(f"KLOCK_SCENARIO_DRIVERS: python, c or both, got {DRIVERS}")


class LinkProcess:
    """``klock-testkit link --to PORT``: its port, and one control line at a time."""

    def __init__(self, target: int) -> None:
        self.proc = subprocess.Popen(
            [kit.testkit_bin(), "link", "--to", str(target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "link on " not in line:
            self.proc.kill()
            raise RuntimeError(f"the link did not say its port: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        self.lock = threading.Lock()

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:  # a command sent later (after_ms) may come from a timer thread
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline().strip()
        assert answer == "ok", f"link command {line!r}: {answer!r}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)  # also closes its pipes


class Block:
    """What a block shows the expectations: its state, what raised, how long it took."""

    def __init__(self, lease: Any) -> None:  # klock.Lease, or c_driver.Lease
        self.lease = lease
        self.state = "pending"
        self.error: dict[str, Any] | None = None
        self.took_ms: int | None = None
        self.busy: threading.Thread | None = None

    def view(self) -> dict[str, Any]:
        lost = None
        if self.state == "held":
            try:
                self.lease.check()
            except klock.LeaseLost as e:
                lost = {"name": e.name}
        return {"state": self.state, "error": self.error, "lost": lost, "took_ms": self.took_ms}


def _name(e: BaseException) -> dict[str, Any]:
    return {"name": getattr(e, "name", type(e).__name__)}


class Run:
    def __init__(self, scenario: dict[str, Any], tmp: pathlib.Path, driver: str) -> None:
        self.server = Server("--data", str(tmp / "klock.redb"))
        self.link = LinkProcess(self.server.port)
        budget = scenario.get("client", {}).get("reconnect_timeout_ms", 30_000) / 1000
        linked_url = f"http://127.0.0.1:{self.link.port}"
        self.agent: c_driver.Agent | None = None
        self.linked: Any
        self.direct: Any
        if driver == "c":
            self.agent = c_driver.Agent()
            self.linked = c_driver.Client(self.agent, "linked", linked_url, budget)
            self.direct = c_driver.Client(self.agent, "direct", self.server.url, budget)
        else:
            self.linked = klock.connect(linked_url, reconnect_timeout=budget)
            self.direct = klock.connect(self.server.url, reconnect_timeout=budget)
        self.sessions: dict[str, Any] = {}  # klock.Session, or c_driver.Session
        self.opened_in: dict[str, int] = {}  # how long opening each session took, in ms
        self.blocks: dict[str, Block] = {}
        self.later: list[threading.Timer] = []

    def close(self) -> None:
        for later in self.later:
            later.cancel()
            later.join()
        for k in (self.linked, self.direct):
            try:
                k.close()
            except klock.KlockError:
                pass  # a scenario may end with the link cut: closing is best effort
        if self.agent is not None:
            self.agent.close()
        self.link.close()
        self.server.stop()

    def step(self, step: dict[str, Any]) -> None:
        if "open" in step:
            k = self.direct if step.get("direct") else self.linked
            started = time.monotonic()
            self.sessions[step["open"]] = k.session(step["open"])
            self.opened_in[step["open"]] = round((time.monotonic() - started) * 1000)
        elif "enter" in step:
            ttl, timeout = step.get("ttl_ms"), step.get("timeout_ms")
            lease = self.sessions[step["session"]].lease(
                *step["intents"],
                ttl=None if ttl is None else ttl / 1000,
                timeout=None if timeout is None else timeout / 1000,
            )
            block = self.blocks[step["enter"]] = Block(lease)
            self._background(block, self._enter)
        elif "exit" in step:
            self._background(self.blocks[step["exit"]], self._exit)
        elif "await" in step:
            thread = self.blocks[step["await"]].busy
            if thread is not None:
                thread.join(step["within_ms"] / 1000)
                if thread.is_alive():
                    raise AssertionError(
                        f"block {step['await']} did not settle within {step['within_ms']} ms"
                    )
        elif "link" in step:
            if "after_ms" in step:
                later = threading.Timer(step["after_ms"] / 1000, self.link.command, [step["link"]])
                later.start()
                self.later.append(later)
            else:
                self.link.command(step["link"])
        elif "restart" in step:
            self.server.kill()
            self.server.start()
        elif "sleep" in step:
            time.sleep(step["sleep"] / 1000)
        elif "expect" in step:
            _matches(step["expect"], self.observed(step["expect"]), "")
        elif "eventually" in step:
            until = time.monotonic() + step["within_ms"] / 1000
            while True:
                try:
                    _matches(step["eventually"], self.observed(step["eventually"]), "")
                    break
                except AssertionError as e:
                    if time.monotonic() >= until:
                        raise AssertionError(f"not within {step['within_ms']} ms: {e}") from e
                    time.sleep(0.05)
        else:
            raise AssertionError(f"unknown step {step}")

    @staticmethod
    def _background(block: Block, act: Any) -> None:
        block.busy = threading.Thread(target=act, args=(block,), daemon=True)
        block.busy.start()

    @staticmethod
    def _enter(block: Block) -> None:
        started = time.monotonic()
        try:
            block.lease.__enter__()
            block.state = "held"
        except Exception as e:  # noqa: BLE001 (what it raised is what the scenario checks)
            block.state, block.error = "failed", _name(e)
        block.took_ms = round((time.monotonic() - started) * 1000)

    @staticmethod
    def _exit(block: Block) -> None:
        try:
            block.lease.__exit__(None, None, None)
        except Exception as e:  # noqa: BLE001
            block.error = _name(e)
        block.state = "exited"

    def observed(self, expected: dict[str, Any]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        if "blocks" in expected:
            seen["blocks"] = {
                name: self.blocks[name].view() if name in self.blocks else None
                for name in expected["blocks"]
            }
        if "sessions" in expected:
            seen["sessions"] = {
                name: {"took_ms": self.opened_in.get(name)} for name in expected["sessions"]
            }
        if "holders" in expected:
            seen["holders"] = {}
            for resource in expected["holders"]:
                status, body = call(
                    "GET",
                    f"{self.server.url}/v1/ns/default/resources/state",
                    params={"resource": resource},
                )
                assert status == 200, f"resource state of {resource}: {status} {body}"
                seen["holders"][resource] = [h["agent_id"] for h in json.loads(body)["holders"]]
        if "stats" in expected:
            status, body = call("GET", f"{self.server.url}/v1/ns/default/stats")
            assert status == 200, f"stats: {status} {body}"
            seen["stats"] = json.loads(body)
        return seen


def _matches(expected: Any, seen: Any, at: str) -> None:
    """Every key ``expected`` names has the same value in ``seen``; ``took_ms`` is compared
    with ``{"min", "max"}``."""
    if isinstance(expected, dict) and isinstance(seen, dict):
        for key, value in expected.items():
            here = f"{at}.{key}"
            if key == "took_ms":
                took = seen.get(key)
                assert took is not None, f"{here}: no time taken"
                assert value.get("min", 0) <= took <= value.get("max", took), (
                    f"{here}: {took} ms, expected {value}"
                )
            else:
                _matches(value, seen.get(key), here)
        return
    assert expected == seen, f"{at}: expected {expected}, got {seen}"


@pytest.fixture
def run_of(tmp_path: pathlib.Path) -> Iterator[Any]:
    runs: list[Run] = []

    def start(scenario: dict[str, Any], driver: str) -> Run:
        runs.append(Run(scenario, tmp_path, driver))
        return runs[-1]

    yield start
    for run in runs:
        run.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_remote_scenario(path: pathlib.Path, driver: str, run_of: Any) -> None:
    scenario = json.loads(path.read_text())
    run = run_of(scenario, driver)
    for i, step in enumerate(scenario["steps"]):
        try:
            run.step(step)
        except AssertionError as e:
            raise AssertionError(f"{path.name}: step {i} {json.dumps(step)}: {e}") from e


def test_the_scenarios_are_found() -> None:
    assert len(FILES) >= 6, FILES
