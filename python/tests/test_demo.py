"""The demo: edits are lost without Klock and none with it; the CLI prints the table."""

from __future__ import annotations

import io
import subprocess
import sys

from klock import demo
from support import REPO


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
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "edits lost" in done.stdout and "none lost, no deadlock" in done.stdout
    assert "with Klock" in done.stderr  # progress goes to stderr


def test_module_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "klock"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr


def test_demo_under_wound_wait_relies_on_fences() -> None:
    stream = io.StringIO()
    _, with_klock = demo.run_demo(agents=8, edits=12, files=3, think_ms=2.0, policy="wound_wait", stream=stream)
    assert with_klock.lost == 0 and with_klock.finished and not with_klock.errors
    assert with_klock.deaths == 0  # wound_wait: younger sessions wait, older ones revoke
