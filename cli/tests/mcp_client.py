"""`klock mcp` driven by the official Python MCP client, against a real `klock serve`.

Usage: python cli/tests/mcp_client.py PATH/TO/klock (scripts/test-agents.sh runs it with the
pinned `mcp` package). Each scenario starts its own `klock serve --memory` on a free loopback
port and real `klock mcp` sidecars, bounds every wait with a timeout, and stops every process
it started. Exit status 0 when every scenario passed.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

KLOCK = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "klock"
TOOLS = {
    "klock_acquire",
    "klock_await",
    "klock_release",
    "klock_status",
    "klock_reconcile",
    "klock_who",
}


@contextmanager
def server(*config):
    """A `klock serve --memory` on a free loopback port, with these `--config NAME=VALUE`;
    yields its URL."""
    with server_process(*config) as (url, _):
        yield url


@contextmanager
def server_process(*config):
    """`server`, yielding its URL and its process (a scenario may SIGSTOP it: it is thawed
    before it is killed)."""
    flags = [arg for setting in config for arg in ("--config", setting)]
    proc = subprocess.Popen(
        [KLOCK, "serve", "--memory", "--listen", "127.0.0.1:0", *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "listening on http://" in line, line
        yield line.strip().rsplit(" ", 1)[-1], proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)


class Sidecar:
    """One `klock mcp` process and an MCP client session to it; `pid` is the sidecar's."""

    def __init__(self, url, agent, pid_dir):
        self.agent = agent
        self.pid_file = os.path.join(pid_dir, f"{agent}.pid")
        self.logs = []
        # Through sh, to learn the pid for the kill scenario; exec keeps the pipes direct.
        script = f'echo $$ > "{self.pid_file}"; exec "$0" "$@"'
        args = ["-c", script, KLOCK, "mcp", "--server", url, "--ns", "repo", "--agent", agent]
        self.params = StdioServerParameters(command="/bin/sh", args=args)

    async def start(self, stack):
        read, write = await stack.enter_async_context(stdio_client(self.params))

        async def on_log(params):
            self.logs.append(params.data)

        self.session = await stack.enter_async_context(
            ClientSession(read, write, logging_callback=on_log)
        )
        await self.session.initialize()
        return self

    @property
    def pid(self):
        with open(self.pid_file) as f:
            return int(f.read())

    async def call(self, tool, **arguments):
        with anyio.fail_after(60):
            result = await self.session.call_tool(tool, arguments)
        text = "".join(block.text for block in result.content)
        return result.is_error, text


async def sidecar(stack, url, agent, pid_dir):
    return await Sidecar(url, agent, pid_dir).start(stack)


@asynccontextmanager
async def doomed_sidecar(url, agent, pid_dir):
    """A sidecar the scenario kills or stops: its client is closed in this task whatever
    happens (else a failed check leaves it open and breaks the next scenarios), and the
    broken pipe it may report then is no failure."""
    stack = AsyncExitStack()
    await stack.__aenter__()
    try:
        yield await sidecar(stack, url, agent, pid_dir)
    finally:
        try:
            await stack.aclose()
        except Exception:
            pass


def status(url, resource):
    """`klock status --resource` through the CLI."""
    out = subprocess.run(
        [KLOCK, "status", "--server", url, "--ns", "repo", "--resource", resource],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def exited(pid):
    """Whether the process has ended (gone, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def eventually(check, limit, what):
    """Polls `check()` every 50 ms until true, failing after `limit` seconds."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {limit}s"
        await anyio.sleep(0.05)


async def tools_and_schemas(url, tmp):
    async with AsyncExitStack() as stack:
        a = await sidecar(stack, url, "schema-agent", tmp)
        listed = {t.name: t for t in (await a.session.list_tools()).tools}
        assert set(listed) == TOOLS, listed.keys()
        for tool in listed.values():
            assert len(tool.description) > 80, tool.name
        acquire = listed["klock_acquire"].input_schema
        assert acquire["required"] == ["intents"], acquire
        assert acquire["properties"]["intents"]["type"] == "array"
        assert acquire["properties"]["intents"]["items"] == {"type": "string"}
        assert set(acquire["properties"]) == {"intents", "ttl_s", "wait_s"}
        assert acquire["additionalProperties"] is False
        assert "45" in acquire["properties"]["wait_s"]["description"]
        assert listed["klock_await"].input_schema["required"] == ["ticket"]
        assert listed["klock_status"].input_schema["required"] == ["resource"]
        assert set(listed["klock_release"].input_schema["properties"]) == {"lease_ids", "all"}
        # Bad input is a tool error naming the fix, never a crash.
        error, text = await a.call("klock_acquire", intent="x")
        assert error and "unknown field `intent`" in text, text
        error, text = await a.call("klock_acquire", intents=["MUTATE FILE:/x"])
        assert error and "INVALID_PREDICATE" in text, text
        error, text = await a.call("klock_release")
        assert error and "lease_ids" in text, text
        error, text = await a.call("klock_await", ticket=999)
        assert error and "not waiting" in text, text


async def contention(url, tmp):
    async with AsyncExitStack() as stack:
        # The first sidecar to start is the older: under wait-die it may wait for the younger.
        old = await sidecar(stack, url, "agent-old", tmp)
        error, text = await old.call("klock_reconcile")
        assert not error and "no lease" in text, text
        young = await sidecar(stack, url, "agent-young", tmp)
        error, text = await young.call("klock_acquire", intents=["MUTATES FILE:/src/app.py"])
        assert not error and text.startswith("GRANTED"), text
        lease = text.split("(lease ")[1].split(",")[0]

        started = time.monotonic()
        error, text = await old.call(
            "klock_acquire", intents=["MUTATES FILE:/src/app.py"], wait_s=1
        )
        assert not error and text.startswith("WAIT"), text
        assert '"agent-young"' in text and "MUTATES FILE:/src/app.py" in text, text
        assert 1 <= time.monotonic() - started < 10
        ticket = int(text.split("ticket ")[1].split(")")[0])

        error, text = await young.call("klock_who")
        assert '"agent-young"' in text and '"agent-old"' in text and "waits to MUTATES" in text, (
            text
        )
        error, text = await young.call("klock_status", resource="FILE:/src")
        assert "covering" in text and '"agent-young"' in text, text

        # The younger one asking for more behind the older one's queued ticket (the directory
        # covers the file) gets DIE, told to release what it holds.
        error, text = await young.call("klock_acquire", intents=["MUTATES FILE:/src"], wait_s=0)
        assert text.startswith("DIE") and '"agent-old"' in text and "all: true" in text, text

        error, text = await young.call("klock_release", lease_ids=[int(lease)])
        assert not error and "RELEASED 1" in text, text
        error, text = await old.call("klock_await", ticket=ticket, wait_s=10)
        assert not error and text.startswith("GRANTED"), text
        assert 'held by agent "agent-old"' in status(url, "FILE:/src/app.py")
        error, text = await old.call("klock_release", all=True)
        assert not error and "hold nothing" in text, text


async def lost_lease_is_reported(url, tmp):
    async with AsyncExitStack() as stack:
        a = await sidecar(stack, url, "agent-paused", tmp)
        error, text = await a.call("klock_acquire", intents=["MUTATES FILE:/x"], ttl_s=1)
        assert text.startswith("GRANTED"), text
        # Frozen past its TTL, the sidecar cannot renew: the lease is lost, and it says so.
        os.kill(a.pid, signal.SIGSTOP)
        await anyio.sleep(1.5)
        os.kill(a.pid, signal.SIGCONT)
        await eventually(lambda: any("LOST" in str(m) for m in a.logs), 10, "a log notification")
        error, text = await a.call("klock_reconcile")
        assert text.startswith("NOTICE") and "LOST MUTATES FILE:/x" in text, text
        error, text = await a.call("klock_reconcile")
        assert not text.startswith("NOTICE"), "told once"


async def killed_and_closed_sidecars_free_their_leases(url, tmp):
    async with AsyncExitStack() as outer:
        watcher = await sidecar(outer, url, "watcher", tmp)

        def held(resource):
            return "held by" in status(url, resource)

        async with doomed_sidecar(url, "agent-killed", tmp) as doomed:
            error, text = await doomed.call("klock_acquire", intents=["MUTATES FILE:/k"], ttl_s=1)
            assert text.startswith("GRANTED"), text
            os.kill(doomed.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert held("FILE:/k")
            await eventually(lambda: not held("FILE:/k"), 5, "the killed sidecar's lease to expire")
            assert time.monotonic() - killed >= 0.5, "freed before its TTL"

        async with AsyncExitStack() as stack:
            clean = await sidecar(stack, url, "agent-clean", tmp)
            error, text = await clean.call("klock_acquire", intents=["MUTATES FILE:/c"], ttl_s=60)
            assert text.startswith("GRANTED"), text
        # stdin closed: the session closes at once, not after its 60 s TTL.
        await eventually(
            lambda: not held("FILE:/c"), 5, "the closed sidecar's lease to be released"
        )
        error, text = await watcher.call("klock_acquire", intents=["MUTATES FILE:/c"], wait_s=0)
        assert text.startswith("GRANTED"), text

        # A host that stops its sidecar with SIGTERM: released at once too, not after the TTL.
        async with doomed_sidecar(url, "agent-terminated", tmp) as stopped:
            error, text = await stopped.call("klock_acquire", intents=["MUTATES FILE:/t"], ttl_s=60)
            assert text.startswith("GRANTED"), text
            os.kill(stopped.pid, signal.SIGTERM)
            await eventually(
                lambda: not held("FILE:/t"), 5, "the terminated sidecar's lease to be released"
            )


async def a_wound_is_reported(url, tmp):
    """Under wound_wait an older agent takes a younger one's lease: the younger is told."""
    async with AsyncExitStack() as stack:
        old = await sidecar(stack, url, "agent-old", tmp)
        error, text = await old.call("klock_reconcile")
        assert not error, text
        young = await sidecar(stack, url, "agent-young", tmp)
        error, text = await young.call("klock_acquire", intents=["MUTATES FILE:/w"])
        assert text.startswith("GRANTED"), text
        error, text = await old.call("klock_acquire", intents=["MUTATES FILE:/w"], wait_s=5)
        assert text.startswith("GRANTED"), text
        await eventually(
            lambda: any("WOUNDED" in str(m) for m in young.logs), 10, "a log notification"
        )
        error, text = await young.call("klock_who")
        assert text.startswith("NOTICE") and "LOST MUTATES FILE:/w" in text, text
        assert "WOUNDED" in text and "older agent" in text, text


async def a_forgotten_session_is_replaced(url, tmp):
    """The server closes a session idle for session_idle_ms: the next call opens another."""
    async with AsyncExitStack() as stack:
        a = await sidecar(stack, url, "agent-idle", tmp)
        error, text = await a.call("klock_acquire", intents=["MUTATES FILE:/i"])
        assert text.startswith("GRANTED"), text
        error, text = await a.call("klock_release", all=True)
        assert "RELEASED 1" in text, text
        await anyio.sleep(1)
        error, text = await a.call("klock_acquire", intents=["MUTATES FILE:/i"])
        assert not error, text
        assert "session ended on the server" in text and "GRANTED" in text, text
        error, text = await a.call("klock_release", all=True)
        assert not error and "RELEASED 1" in text, text


async def a_signal_ends_the_sidecar_with_stdin_open(url, tmp):
    """Issue 22, item 21: SIGTERM released the leases but the sidecar lived on while its host
    kept stdin open. It must release, then exit, promptly."""
    async with doomed_sidecar(url, "agent-signalled", tmp) as doomed:
        error, text = await doomed.call("klock_acquire", intents=["MUTATES FILE:/s"], ttl_s=60)
        assert text.startswith("GRANTED"), text
        pid = doomed.pid
        os.kill(pid, signal.SIGTERM)
        await eventually(lambda: "held by" not in status(url, "FILE:/s"), 5, "the release")
        await eventually(lambda: exited(pid), 5, "the sidecar's exit (stdin still open)")


async def a_second_signal_ends_a_stuck_close(url, tmp):
    """Issue 22, item 21: while the sidecar closes its session on a server that does not
    answer (frozen), a second signal was ignored. It must exit at once."""
    with server_process() as (frozen_url, proc):
        async with doomed_sidecar(frozen_url, "agent-stuck", tmp) as doomed:
            error, text = await doomed.call("klock_acquire", intents=["MUTATES FILE:/f"])
            assert text.startswith("GRANTED"), text
            pid = doomed.pid
            proc.send_signal(signal.SIGSTOP)
            try:
                os.kill(pid, signal.SIGTERM)  # the close now waits for the frozen server
                await anyio.sleep(0.3)
                assert not exited(pid), "the close did not wait for the server at all"
                os.kill(pid, signal.SIGTERM)
                await eventually(lambda: exited(pid), 3, "the exit at the second signal")
            finally:
                proc.send_signal(signal.SIGCONT)


async def a_release_all_withdraws_a_blocking_acquire(url, tmp):
    """Issue 22, item 21: a klock_release {all: true} during a blocking klock_acquire withdrew
    its ticket, and the acquire then answered "queued (ticket N)" for a ticket it no longer
    had. It must say the request was withdrawn."""
    async with AsyncExitStack() as stack:
        old = await sidecar(stack, url, "agent-old", tmp)
        error, text = await old.call("klock_reconcile")
        assert not error, text
        young = await sidecar(stack, url, "agent-young", tmp)
        error, text = await young.call("klock_acquire", intents=["MUTATES FILE:/r"])
        assert text.startswith("GRANTED"), text
        answers = []

        async def blocked_acquire():
            answers.append(await old.call("klock_acquire", intents=["MUTATES FILE:/r"], wait_s=30))

        async with anyio.create_task_group() as group:
            group.start_soon(blocked_acquire)
            await eventually(lambda: "queue:" in status(url, "FILE:/r"), 10, "the queued ticket")
            error, text = await old.call("klock_release", all=True)
            assert not error and "RELEASED 0" in text, text
            with anyio.fail_after(10):
                while not answers:
                    await anyio.sleep(0.05)
        ((error, text),) = answers
        assert not error, text
        assert "WITHDRAWN" in text and "klock_release" in text, text
        assert "queued (ticket" not in text, text
        assert "queue:" not in status(url, "FILE:/r")


SCENARIOS = [
    (tools_and_schemas, ()),
    (contention, ()),
    (lost_lease_is_reported, ()),
    (killed_and_closed_sidecars_free_their_leases, ()),
    (a_wound_is_reported, ("policy=wound_wait",)),
    (a_forgotten_session_is_replaced, ("session_idle_ms=300",)),
    (a_signal_ends_the_sidecar_with_stdin_open, ()),
    (a_second_signal_ends_a_stuck_close, ()),
    (a_release_all_withdraws_a_blocking_acquire, ()),
]


async def main():
    failed = 0
    for scenario, config in SCENARIOS:
        started = time.monotonic()
        with server(*config) as url, tempfile.TemporaryDirectory() as tmp:
            try:
                with anyio.fail_after(90):
                    await scenario(url, tmp)
                print(f"PASS {scenario.__name__} ({time.monotonic() - started:.2f}s)")
            except Exception as e:  # report every scenario, then fail
                failed += 1
                print(f"FAIL {scenario.__name__}: {e!r}")
    print(f"{len(SCENARIOS) - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(1 if anyio.run(main) else 0)
