"""The fleet demo end to end, with real processes: a `klock serve` killed and restarted,
Python and Node agent processes, real files (scripts/test-fleet.sh runs this).

Needs KLOCK_BIN (the klock binary), KLOCK_PYTHON (a Python with the klock package, which runs
this file) and node with the klock addon built (scripts/node-env.sh). The last test holds the
two clients' fence helpers to one protocol, as the demo's agents rely on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run.py")


def command(*extra: str) -> list[str]:
    python = os.environ.get("KLOCK_PYTHON", sys.executable)
    return [python, RUN, "--klock", os.environ["KLOCK_BIN"], "--python", python, *extra]


def row(table: str, label: str) -> list[str]:
    """The cells of one row of the final table (columns: Python/Node without, then with)."""
    for line in table.splitlines():
        if line.startswith(label):
            return re.split(r"\s{2,}", line[len(label) :].strip())
    raise AssertionError(f"no row {label!r} in:\n{table}")


@pytest.mark.timeout(240)
def test_nothing_is_lost_through_a_server_crash() -> None:
    done = subprocess.run(
        command("--python-agents", "2", "--node-agents", "2", "--edits", "12", "--files", "3")
        + ["--think-ms", "3", "--restarts", "1", "--seed", "7"],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL to klock serve" in done.stderr
    assert row(done.stdout, "edits made") == ["24", "24", "24", "24"]
    # Without Klock, losses are likely but not certain; with it, there are none.
    assert row(done.stdout, "edits lost")[2:] == ["0", "0"]
    assert row(done.stdout, "finished (no deadlock)") == ["yes"] * 4
    for cell in row(done.stdout, "server restarts survived")[2:]:
        ok, exposed = re.fullmatch(r"(\d+) of (\d+) agents", cell).groups()  # type: ignore[union-attr]
        assert ok == exposed, cell
    assert row(done.stdout, "frozen past the TTL")[2:] == ["1", "1"]
    assert "none lost" in done.stdout


@pytest.mark.timeout(240)
def test_nothing_is_lost_through_a_leader_kill_in_a_cluster() -> None:
    """`--cluster`: three nodes, the leader SIGKILLed partway and restarted; the agents, given
    every node's URL, fail over to a survivor."""
    done = subprocess.run(
        command("--python-agents", "2", "--node-agents", "2", "--edits", "12", "--files", "3")
        + ["--think-ms", "3", "--restarts", "1", "--seed", "7", "--cluster"],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a cluster of three: http://127.0.0.1:" in done.stderr
    assert "SIGKILL to the cluster's leader" in done.stderr
    assert row(done.stdout, "edits made") == ["24", "24", "24", "24"]
    assert row(done.stdout, "edits lost")[2:] == ["0", "0"]
    assert row(done.stdout, "finished (no deadlock)") == ["yes"] * 4
    for cell in row(done.stdout, "failovers survived")[2:]:
        ok, exposed = re.fullmatch(r"(\d+) of (\d+) agents", cell).groups()  # type: ignore[union-attr]
        assert ok == exposed and int(exposed) > 0, cell
    # The agents went on through a survivor while the killed node was down.
    assert sum(int(cell) for cell in row(done.stdout, "edits while the leader was down")[2:]) > 0
    assert "edits made without it" in done.stderr
    assert row(done.stdout, "frozen past the TTL")[2:] == ["1", "1"]
    assert "through 1 leader kill(s)" in done.stdout


@pytest.mark.timeout(120)
def test_ctrl_c_stops_every_process_and_removes_the_folder() -> None:
    proc = subprocess.Popen(
        command("--python-agents", "2", "--node-agents", "2", "--edits", "400", "--think-ms", "20"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()
    root = re.search(r" in (/\S+)", first)
    assert root, first
    folder = root.group(1)
    while "klock serve:" not in proc.stderr.readline():  # the Klock phase has begun
        assert proc.poll() is None, "the demo ended before its Klock phase"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    assert not os.path.exists(folder)
    # No agent or server of this run is left: each had the folder on its command line.
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if folder.encode() in f.read():
                    left.append(pid)
        except OSError:
            pass
    assert not left, f"processes of the run still alive: {left}"


def test_bad_arguments_are_refused_by_name() -> None:
    done = subprocess.run(command("--files", "1"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--files >= 2" in done.stderr
    done = subprocess.run(command("--policy", "fifo"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--policy: invalid choice: 'fifo'" in done.stderr


@pytest.mark.timeout(180)
def test_the_policy_option_runs_the_server_under_it(tmp_path: object) -> None:
    # A wrapper around the real binary records each `klock serve` command line (the first
    # start and the restart after the SIGKILL, on the same data file, which keeps the policy).
    calls = os.path.join(str(tmp_path), "calls")
    wrapper = os.path.join(str(tmp_path), "klock")
    with open(wrapper, "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\necho "$*" >> {calls}\nexec {os.environ["KLOCK_BIN"]} "$@"\n')
    os.chmod(wrapper, 0o755)
    python = os.environ.get("KLOCK_PYTHON", sys.executable)
    done = subprocess.run(
        [python, RUN, "--klock", wrapper, "--python", python, "--policy", "detect"]
        + ["--python-agents", "1", "--node-agents", "1", "--edits", "8", "--files", "2"]
        + ["--think-ms", "3", "--restarts", "1", "--no-freeze", "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "policy detect" in done.stderr
    with open(calls, encoding="utf-8") as f:
        serves = f.read().splitlines()
    assert len(serves) == 2, serves
    assert all(line.endswith("--config policy=detect") for line in serves), serves
    assert row(done.stdout, "edits lost")[2:] == ["0", "0"]
    assert row(done.stdout, "finished (no deadlock)") == ["yes"] * 4


NODE_WRITE = """
const { fencedWrite, StaleFence } = require(process.argv[1]);
const [file, fence, hold] = process.argv.slice(2);
const { flock } = require(process.argv[1].replace(/client\\.js$/, 'index.js'));
if (hold) {
  // Hold the fence file's flock (as a writer mid-write does) until stdin closes.
  const fd = require('node:fs').openSync(file + '.fence', 'a+');
  flock(fd, 'exclusive');
  process.stdout.write('locked\\n');
  process.stdin.on('end', () => process.exit(0)).resume();
} else {
  try {
    fencedWrite(file, 'from node ' + fence, Number(fence));
    console.log('written');
  } catch (e) {
    console.log(e instanceof StaleFence ? 'stale ' + e.stored : 'error ' + e.message);
  }
}
"""


def node_write(path: str, fence: int, hold: bool = False) -> subprocess.Popen[str]:
    client = os.path.join(HERE, "..", "..", "node", "client.js")
    args = ["node", "-e", NODE_WRITE, os.path.abspath(client), path, str(fence)]
    return subprocess.Popen(
        args + (["hold"] if hold else []),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def content(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_python_and_node_writers_share_one_fence_protocol(tmp_path: object) -> None:
    """The two clients' fenced writes guard one file together: each refuses a fence older than
    one the other accepted, and each waits for the other's flock."""
    import klock  # the test's Python (KLOCK_PYTHON) has the package

    path = os.path.join(str(tmp_path), "shared.json")
    klock.fenced_write(path, b"from python 5", 5)
    assert node_write(path, 4).communicate(timeout=30)[0].strip() == "stale 5"
    assert content(path) == "from python 5"
    assert node_write(path, 7).communicate(timeout=30)[0].strip() == "written"
    with pytest.raises(klock.StaleFence) as refused:
        klock.fenced_write(path, b"from python 6", 6)
    assert refused.value.stored == 7
    assert content(path) == "from node 7"

    holder = node_write(path, 0, hold=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    wrote = threading.Event()
    writer = threading.Thread(
        target=lambda: (klock.fenced_write(path, b"from python 8", 8), wrote.set())
    )
    writer.start()
    assert not wrote.wait(0.5), "Python wrote while Node held the fence file's flock"
    holder.communicate(timeout=30)  # closing stdin ends the holder and its flock
    writer.join(30)
    assert wrote.is_set() and content(path) == "from python 8"
