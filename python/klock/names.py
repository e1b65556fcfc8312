"""Resource names for files: :func:`file` turns a file-system path into ``FILE:/path``.

Contract (docs/SPEC.md §3; docs/DECISIONS.md, "Issue 25: resource names and client options"):
a file's resource is ``FILE:`` followed by its path relative to a root every agent agrees on
(the repository's top), normalised, with a leading ``/`` and ``/`` between segments, so
``<root>/src/auth.ts`` is ``FILE:/src/auth.ts`` whoever asks and from wherever. In order:

* the root is ``root=``, else ``$KLOCK_ROOT`` (which ``klock exec --root DIR`` sets for its
  command); it must be an existing directory. Without one it is a ``ValueError``: a default
  (the current directory) would give two agents started in different directories two names;
* a relative ``path`` means what it means to the file system: relative to the current
  directory (``open(path)`` opens the same file);
* symbolic links are resolved, in the path and in the root, for the parts that exist (a file
  about to be created is named through its existing parent), so two agents reaching one file
  through different links get one name;
* a path that resolves outside the root (``..`` past it, an absolute path elsewhere, a link
  leading out) is a ``ValueError`` naming both: such a file has no name under this root;
* nothing is folded: the name keeps the path's case and Unicode form as written on disk (the
  kernel compares bytes); a path holding a character the kernel refuses in resources
  (Unicode Cc, Cf, Zl, Zp) or bytes that are not UTF-8 is a ``ValueError``.
"""

from __future__ import annotations

import os
import unicodedata

__all__ = ["file"]

# The general categories the kernel refuses in a resource (docs/SPEC.md §3).
_UNPRINTABLE = frozenset(("Cc", "Cf", "Zl", "Zp"))


def _root(root: str | os.PathLike[str] | None) -> str:
    if root is None:
        root = os.environ.get("KLOCK_ROOT") or None
        if root is None:
            raise ValueError(
                "klock.file needs the root the agents share: pass root=DIR or set KLOCK_ROOT"
            )
    if isinstance(root, bytes) or not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a str or os.PathLike path, got {type(root).__name__}")
    real = os.path.realpath(root)
    if not os.path.isdir(real):
        raise ValueError(f"root {os.fspath(root)!r} is not an existing directory")
    return real


def file(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> str:
    """The resource name of the file at ``path``: ``FILE:/`` + its path under ``root``.

    ``klock.file("src/auth.ts", root="/repo")`` run in ``/repo`` is ``"FILE:/src/auth.ts"``;
    so is ``klock.file("/repo/src/auth.ts", root="/repo")`` from anywhere. Use it in an
    intent: ``s.lease(f"MUTATES {klock.file(path, root=repo)}")``. Raises ``ValueError``
    when there is no root, the path is outside it, or it holds a character a resource cannot
    hold; ``TypeError`` for a path that is not ``str`` or ``os.PathLike[str]``."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike path, got {type(path).__name__}")
    base = _root(root)
    text = os.fspath(path)
    if not text:
        raise ValueError("path is empty")
    full = os.path.realpath(text)
    rel = os.path.relpath(full, base)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        raise ValueError(
            f"{text!r} resolves to {full!r}, outside the root {base!r}: "
            "it has no resource name under this root"
        )
    segments = [] if rel == os.curdir else rel.split(os.sep)
    name = "FILE:/" + "/".join(segments)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{text!r}: the path is not valid UTF-8, which a resource must be"
        ) from None
    for c in name:
        if unicodedata.category(c) in _UNPRINTABLE:
            raise ValueError(
                f"{text!r} holds the unprintable character U+{ord(c):04X}, which a resource "
                "cannot hold (docs/SPEC.md §3)"
            )
    return name
