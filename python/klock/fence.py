"""The protected side of a fence: :func:`fenced_write` refuses a write whose fence is older than
one the file has already accepted.

A lease alone is not mutual exclusion: a holder paused past its expiry (GC, swap, a stopped
VM) can wake up and write after another agent was granted the resource. Every grant carries a
fence that strictly increases; the resource must remember the largest it has accepted and
refuse smaller ones. For a file, the protocol (the same in the Node client's ``fencedWrite``,
so agents in both languages protect one file together):

* ``<path>.fence`` beside the file holds the largest fence accepted for it (ASCII decimal;
  missing or empty: none yet).
* Under an exclusive ``flock(2)`` on ``<path>.fence`` (created with mode 0644 if missing):
  read the stored fence; if ``fence < stored``, unlock and raise :class:`StaleFence` (naming
  the path, the fence given and the one stored). Otherwise write the new fence into
  ``<path>.fence`` (truncate, write, fsync) *first*, then write the data to a temporary file in
  the same directory, fsync it and rename it over ``<path>`` (atomic: readers see the old
  content or the new, never a torn file), fsync the directory, then unlock. Equal fences are
  accepted (one holder may write twice).
* ``flock`` is released by the OS when a process dies, so a killed writer never blocks the
  others; a writer killed after storing the fence but before the rename leaves the old content
  whole, and a smaller fence is still refused.
"""

from __future__ import annotations

import fcntl
import os
import tempfile

from .errors import KlockError

__all__ = ["fenced_write", "StaleFence", "stored_fence"]


class StaleFence(KlockError):
    """A write carried a fence smaller than one the file has accepted (its lease was lost:
    someone newer holds or held the resource). ``.code`` 0, ``.name`` "STALE_FENCE"."""

    code: int
    name: str
    message: str
    path: str
    fence: int
    stored: int

    def __init__(self, path: str, fence: int, stored: int) -> None:
        message = (
            f"{path}: fence {fence} is older than the fence {stored} this file has accepted "
            "(the lease was lost; another holder wrote since)"
        )
        super().__init__(f"STALE_FENCE: {message}")
        self.code = 0
        self.name = "STALE_FENCE"
        self.message = message
        self.path = path
        self.fence = fence
        self.stored = stored


def _read_fence(fd: int, fence_path: str) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 64):
        chunks.append(chunk)
    text = b"".join(chunks).strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"{fence_path} holds {text[:40]!r}, not a fence (ASCII decimal)")
    return int(text)


def stored_fence(path: str | os.PathLike[str]) -> int | None:
    """The largest fence ``path`` has accepted (``None``: none yet), read under the lock."""
    fence_path = os.fspath(path) + ".fence"
    try:
        fd = os.open(fence_path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return _read_fence(fd, fence_path)
    finally:
        os.close(fd)  # closing releases the lock


def fenced_write(path: str | os.PathLike[str], data: bytes | str, fence: int) -> None:
    """Writes ``data`` (``str`` as UTF-8) to ``path`` atomically, unless ``path`` has accepted
    a larger fence: then :class:`StaleFence` and the file is unchanged. See the module
    contract for the protocol (shared with the Node client)."""
    if isinstance(fence, bool) or not isinstance(fence, int) or fence < 0:
        raise TypeError(f"fence must be an int >= 0 (lease.fence), got {fence!r}")
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes or str, got {type(data).__name__}")
    target = os.fspath(path)
    fence_path = target + ".fence"
    directory = os.path.dirname(os.path.abspath(target))
    fd = os.open(fence_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        stored = _read_fence(fd, fence_path)
        if stored is not None and fence < stored:
            raise StaleFence(target, fence, stored)
        # The fence first: once it is durable, no older holder can write, even if this one
        # dies before its data lands.
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, str(fence).encode("ascii"))
        os.fsync(fd)
        tmp_fd, tmp = tempfile.mkstemp(
            prefix=os.path.basename(target) + ".", suffix=".tmp", dir=directory
        )
        try:
            with os.fdopen(tmp_fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        os.close(fd)  # closing releases the flock
