"""klock.fenced_write: the protected side's fence check for a file (protocol in
python/klock/fence.py, shared with the Node client's fencedWrite)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

import pytest

import klock
from klock.fence import stored_fence


def test_a_smaller_fence_is_refused_and_the_file_is_unchanged(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "data.txt"
    klock.fenced_write(path, "from fence 7", 7)
    assert path.read_text() == "from fence 7"
    assert (tmp_path / "data.txt.fence").read_text() == "7"
    with pytest.raises(klock.StaleFence) as info:
        klock.fenced_write(path, "late writer", 6)
    e = info.value
    assert (e.name, e.code, e.fence, e.stored, e.path) == ("STALE_FENCE", 0, 6, 7, str(path))
    assert str(path) in e.message and "fence 6" in e.message and "fence 7" in e.message
    assert isinstance(e, klock.KlockError)
    assert path.read_text() == "from fence 7"
    assert stored_fence(path) == 7


def test_equal_and_greater_fences_are_accepted(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "data.bin")
    assert stored_fence(path) is None
    klock.fenced_write(path, b"one", 3)
    klock.fenced_write(path, b"two", 3)  # one holder may write twice
    assert pathlib.Path(path).read_bytes() == b"two"
    klock.fenced_write(path, b"three", 10)
    assert pathlib.Path(path).read_bytes() == b"three"
    assert stored_fence(path) == 10
    assert oct(os.stat(path + ".fence").st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(tmp_path)) == ["data.bin", "data.bin.fence"]  # no temporaries left


def test_bad_arguments_are_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TypeError, match="fence must be an int"):
        klock.fenced_write(tmp_path / "x", "data", -1)
    with pytest.raises(TypeError, match="fence must be an int"):
        klock.fenced_write(tmp_path / "x", "data", True)
    with pytest.raises(TypeError, match="data must be bytes or str"):
        klock.fenced_write(tmp_path / "x", 42, 1)  # type: ignore[arg-type]
    (tmp_path / "y.fence").write_text("not a number")
    with pytest.raises(ValueError, match="not a fence"):
        klock.fenced_write(tmp_path / "y", "data", 1)


def test_a_crash_between_the_steps_never_leaves_a_torn_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer dies after storing its fence but before its rename: the file keeps its old
    content whole, no temporary is left, and an older fence is refused from then on."""
    path = tmp_path / "data.txt"
    klock.fenced_write(path, "old content", 1)

    def crash(src: str, dst: str) -> None:
        raise KeyboardInterrupt("killed between the fence and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        klock.fenced_write(path, "new content that never lands", 5)
    monkeypatch.undo()
    assert path.read_text() == "old content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt", "data.txt.fence"]
    with pytest.raises(klock.StaleFence):
        klock.fenced_write(path, "older", 4)
    klock.fenced_write(path, "newer", 6)
    assert path.read_text() == "newer"


def test_a_killed_writer_holding_the_lock_never_blocks_the_others(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "data.txt"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(path) + '.fence'!r}, os.O_RDWR | os.O_CREAT, 0o644)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        holder.kill()
        holder.wait(10)
        start = time.monotonic()
        klock.fenced_write(path, "after the crash", 1)
        assert time.monotonic() - start < 5
        assert path.read_text() == "after the crash"
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_the_lease_fence_protects_a_file_through_the_client(tmp_path: pathlib.Path) -> None:
    """The README's pattern: the writer passes its lease's fence; a holder that lost its lease
    (expired while paused) and writes after a newer holder is refused."""
    path = tmp_path / "shared.txt"
    clock = klock.ManualClock()
    with klock.Klock(clock=clock) as k:
        a, b = k.session("a"), k.session("b")
        first = a.lease("MUTATES FILE:/shared.txt", ttl=0.3)
        first.__enter__()
        clock.jump(1_000)  # a is paused past its TTL
        with b.lease("MUTATES FILE:/shared.txt") as second:
            klock.fenced_write(path, "b's edit", second.fence)
        with pytest.raises(klock.StaleFence):
            klock.fenced_write(path, "a's late edit", first.fence)
        with pytest.raises(klock.LeaseLost):
            first.__exit__(None, None, None)
    assert path.read_text() == "b's edit"
