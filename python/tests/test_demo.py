"""The demo: edits are lost without Klock and none with it; the CLI prints the table."""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from support import REPO

from klock import demo


def test_demo_loses_edits_without_klock_and_none_with_it() -> None:
    stream = io.StringIO()
    without, with_klock = demo.run_demo(agents=8, edits=12, files=3, think_ms=2.0, stream=stream)
    assert without.attempted == with_klock.attempted == 8 * 12
    assert without.lost > 0
    assert with_klock.lost == 0 and with_klock.finished and not with_klock.errors
    assert with_klock.fenced_out == 0
    assert "with Klock" in stream.getvalue()
    table = demo.format_table((without, with_klock))
    for row in ("edits attempted", "edits lost", "waits", "deaths", "retries", "throughput"):
        assert row in table


def test_demo_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "klock", "demo", "--agents", "6", "--edits", "8", "--files", "3"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "edits lost" in done.stdout and "none lost, no deadlock" in done.stdout
    assert "with Klock" in done.stderr  # progress goes to stderr


def test_module_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "klock"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "usage" in done.stderr


def test_demo_under_wound_wait_relies_on_fences() -> None:
    stream = io.StringIO()
    _, with_klock = demo.run_demo(
        agents=8, edits=12, files=3, think_ms=2.0, policy="wound_wait", stream=stream
    )
    assert with_klock.lost == 0 and with_klock.finished and not with_klock.errors
    assert with_klock.deaths == 0  # wound_wait: younger sessions wait, older ones revoke


# ---- Ctrl-C ends the demo cleanly in either phase ---------------------------------------------

# Seeded and long enough that each phase is still running when the signal arrives.
LONG = ["--agents", "8", "--edits", "60", "--files", "2", "--think-ms", "20", "--seed", "3"]


def _interrupt(cmd: list[str], marker: str, delay: float) -> tuple[int, str, str, str]:
    """Starts the demo, waits for ``marker`` on stderr, sends SIGINT ``delay`` s later; returns
    (exit status, stdout, stderr, the temporary folder the demo announced)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        end = time.monotonic() + 120
        while not any(marker in line for line in seen):
            line = lines.get(timeout=max(0.1, end - time.monotonic()))
            assert line is not None, "the demo ended before " + repr(marker) + ": " + "".join(seen)
            seen.append(line)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        reader.join(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        if line is not None:
            seen.append(line)
    err = "".join(seen)
    found = re.search(r" in (\S+klock-demo-\S+)\n", err)
    assert found, err
    return proc.returncode, out, err, found.group(1)


# scripts/demo.sh is now the multi-process demo (examples/fleet, with its own end-to-end test);
# the in-process demo these tests hold is `python -m klock demo`.
@pytest.mark.parametrize(
    "cmd, marker, delay",
    [
        ([sys.executable, "-m", "klock", "demo", *LONG], "without Klock: running", 0.2),
        ([sys.executable, "-m", "klock", "demo", *LONG], "with Klock: running", 0.4),
    ],
    ids=["phase1", "phase2"],
)
def test_ctrl_c_ends_the_demo_cleanly(cmd: list[str], marker: str, delay: float) -> None:
    status, out, err, root = _interrupt(cmd, marker, delay)
    assert status == 130, (status, out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    assert "Directory not empty" not in err and "is closed" not in err, err
    assert not os.path.exists(root), f"{root} was left behind"
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last.startswith("klock demo: interrupted") and len(err.splitlines()[-1]) < 200, err
