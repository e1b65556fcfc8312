"""The shared client scenarios (tests/client-scenarios/*.json; format in its README.md) on
the Python client: one test per file and backend, each lease block an asyncio task, on a
ManualClock so that time moves only when a step says so. node/test/client-scenarios.test.mjs
runs the same files on the Node client.

Two backends (klock.backend): ``inprocess`` (the Rust kernel in this process) and ``remote``
(klock.connect to the test kit's ``klock-testkit serve``, what ``klock serve --memory --clock
manual`` serves, reset to the scenario's configuration; every request carries the clock's time, so the run is as deterministic as
in-process). Remotely, the expectation's session priorities are read from each session's
digest (the server has no snapshot route)."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import pytest
from support import REPO

import klock
from server import call

SCENARIOS = sorted((REPO / "tests" / "client-scenarios").glob("*.json"))
CLIENT_ERRORS = {"LeaseLost", "Died", "Timeout", "Closed"}


# Scenarios that cannot run on the remote backend, with the reason (each shows as a skip in the
# summary with it; none is counted as a pass).
REMOTE_CANNOT = {
    "idle-session-closed": (
        "the expectations read each session's priority, and the server's only per-session read "
        "of it (GET .../digest) counts as a call of the session, which restarts its idle clock: "
        "observing would change the outcome (the in-process runner reads a snapshot instead)"
    ),
}


def test_there_are_scenarios() -> None:
    assert len(SCENARIOS) >= 10


async def settle() -> None:
    """Lets every task that can run, run (the clock does not move meanwhile)."""
    for _ in range(50):
        await asyncio.sleep(0)


class Block:
    def __init__(self, lease: klock.Lease) -> None:
        self.lease = lease
        self.state = "pending"
        self.at: int | None = None
        self.error: dict[str, Any] | None = None


class Run:
    def __init__(self, config: dict[str, Any], server_url: str | None) -> None:
        self.clock = klock.ManualClock()
        self.remote = server_url is not None
        if server_url is None:
            self.klock = klock.Klock(clock=self.clock, **config)
        else:
            full = klock._core.Kernel(**config).config  # every field, SPEC defaults filled in
            status, text = call(
                "POST", f"{server_url}/v1/reset", json_body=full, headers={"Klock-Now": "0"}
            )
            assert status == 200, text
            self.klock = klock.connect(server_url, clock=self.clock)
            # Reads for the expectations go through a client of their own (that stays open
            # after close_klock); it holds no session, so it never arms a timer.
            self.observer = klock.connect(server_url, clock=self.clock)
        self.sessions: dict[str, klock.Session] = {}
        self.names: dict[int, str] = {}
        self.blocks: dict[str, Block] = {}
        self.tasks: list[asyncio.Future[None]] = []

    def error(self, e: BaseException) -> dict[str, Any]:
        assert isinstance(e, klock.KlockError), repr(e)
        view = {"class": type(e).__name__ if type(e).__name__ in CLIENT_ERRORS else "KlockError"}
        view.update(name=e.name, code=e.code, message=e.message)
        if isinstance(e, klock.Died):
            view["retry_after_ms"] = e.retry_after_ms
        if isinstance(e, (klock.Died, klock.Timeout)):
            view["held_by"] = [self.names[s] for s in e.held_by]
        return view

    async def enter(self, block: Block) -> None:
        try:
            await block.lease.__aenter__()
            block.state = "held"
        except klock.KlockError as e:
            block.state, block.error = "failed", self.error(e)
        block.at = self.clock.now()

    async def step(self, step: dict[str, Any]) -> None:
        (action,) = [key for key in step if key in ACTIONS]
        k, clock = self.klock, self.clock
        if action == "open":
            session = k.session(step["open"])
            self.sessions[step["open"]], self.names[session.session_id] = session, step["open"]
        elif action == "enter":
            timeout = step.get("timeout_ms")
            timeout_s = (
                float("inf") if timeout == "inf" else None if timeout is None else timeout / 1000
            )
            lease = self.sessions[step["session"]].lease(
                *step["intents"],
                ttl=None if step.get("ttl_ms") is None else step["ttl_ms"] / 1000,
                timeout=timeout_s,
            )
            block = self.blocks[step["enter"]] = Block(lease)
            self.tasks.append(asyncio.ensure_future(self.enter(block)))
        elif action in ("exit", "heartbeat"):
            block = self.blocks[step[action]]
            try:
                await block.lease.__aexit__(
                    None, None, None
                ) if action == "exit" else block.lease.heartbeat()
            except klock.KlockError as e:
                block.error = self.error(e)
            if action == "exit":
                block.state, block.at = "exited", clock.now()
        elif action in ("advance", "jump"):
            target = clock.now() + step[action]
            while action == "advance" and (due := clock.next_timer()) is not None and due <= target:
                clock.advance(max(0, due - clock.now()))
                await settle()
            clock.jump(target - clock.now())
        elif action == "close":
            self.sessions[step["close"]].close()
        elif action == "close_klock":
            k.close()
        elif action == "kernel_close":
            k.kernel.close_session(self.sessions[step["kernel_close"]].session_id, k.now())
        else:
            self.check(step["expect"])
        await settle()

    def observed(self, expected: dict[str, Any]) -> dict[str, Any]:
        """What the expectation names, read without settling anything (at the kernel's time)."""
        k, kernel = self.klock, (self.observer if self.remote else self.klock).kernel
        out: dict[str, Any] = {"now": self.clock.now(), "counters": vars(k.counters), "blocks": {}}
        for name, block in self.blocks.items():
            lease, lost = block.lease, None
            try:
                lease.check()
            except klock.LeaseLost as e:
                lost = self.error(e)
            view = {
                "state": block.state,
                "at": block.at,
                "error": block.error,
                "lost": lost,
                "lease_ids": lease.lease_ids,
            }
            if lease.leases:
                view.update(expires_at=lease.expires_at, ttl_ms=lease.leases[0].ttl_ms)
            out["blocks"][name] = view
        out["resources"] = {}
        for resource in expected.get("resources", {}):
            state = kernel.resource_state(resource, "default", kernel.now())
            out["resources"][resource] = {
                "holders": [self.names[h["session_id"]] for h in state["holders"]],
                "expires_at": [h["expires_at"] for h in state["holders"]],
                "waiting": [self.names[w["session_id"]] for w in state["waiting"]],
            }
        if self.remote:
            priorities = {}
            for s in self.sessions.values():
                try:
                    digest = k.kernel.digest(s.session_id, kernel.now())
                except (klock.UnknownId, klock.Closed):
                    continue  # closed: no priority
                priorities[s.session_id] = digest["identity"]["priority_timestamp"]
        else:
            priorities = {
                s["session_id"]: s["priority"] for s in kernel.snapshot(kernel.now())["sessions"]
            }
        out["sessions"] = {
            n: {"closed": s.closed, "priority": priorities.get(s.session_id)}
            for n, s in self.sessions.items()
        }
        stats = kernel.stats()
        out["kernel"] = {
            key: stats[key] for key in ("active_sessions", "active_leases", "waiting_tickets")
        }
        return out

    def check(self, expected: dict[str, Any]) -> None:
        unknown = set(expected) - {"now", "blocks", "counters", "resources", "sessions", "kernel"}
        assert not unknown, f"unknown expectation {unknown}"
        matches(expected, self.observed(expected), "")


def matches(expected: Any, actual: Any, where: str) -> None:
    """Every key the expectation names matches exactly; ``message_starts`` is a prefix."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            if key == "message_starts":
                message = str(actual.get("message"))
                assert message.startswith(value), (
                    f"{where}.message: expected {value!r}..., got {message!r}"
                )
                continue
            assert key in actual, f"{where}.{key}: not observed (got {sorted(actual)})"
            matches(value, actual[key], f"{where}.{key}")
    else:
        assert expected == actual, f"{where}: expected {expected!r}, got {actual!r}"


ACTIONS = {
    "open",
    "enter",
    "exit",
    "heartbeat",
    "advance",
    "jump",
    "close",
    "close_klock",
    "kernel_close",
    "expect",
}
STEP_KEYS = ACTIONS | {"session", "intents", "ttl_ms", "timeout_ms"}


async def play(scenario: dict[str, Any], server_url: str | None) -> None:
    run = Run(scenario.get("config", {}), server_url)
    try:
        for i, step in enumerate(scenario["steps"]):
            assert len([key for key in step if key in ACTIONS]) == 1 and set(step) <= STEP_KEYS, (
                f"step {i}: malformed {step}"
            )
            try:
                await run.step(step)
            except AssertionError as e:
                raise AssertionError(f"step {i} {json.dumps(step)}: {e}") from None
    finally:
        run.klock.close()
        await asyncio.gather(*run.tasks)
        if run.remote:
            run.observer.close()


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: pathlib.Path) -> None:
    scenario = json.loads(path.read_text())
    assert set(scenario) <= {"name", "about", "config", "steps"}, f"unknown keys {set(scenario)}"
    asyncio.run(asyncio.wait_for(play(scenario, None), 20))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_remote(path: pathlib.Path, manual_server: Any) -> None:
    if path.stem in REMOTE_CANNOT:
        pytest.skip(f"cannot run remotely: {REMOTE_CANNOT[path.stem]}")
    scenario = json.loads(path.read_text())
    asyncio.run(asyncio.wait_for(play(scenario, manual_server.url), 60))
