"""``klock.file``: a file-system path as a resource name (docs/SPEC.md §3): relative,
absolute, ``..``, symlinked and case-different paths, and the characters the kernel refuses."""

from __future__ import annotations

import os
import pathlib

import pytest

import klock


@pytest.fixture
def repo(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.delenv("KLOCK_ROOT", raising=False)
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "auth.ts").write_text("")
    return root


def test_relative_paths_are_relative_to_the_current_directory(
    repo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    assert klock.file("src/auth.ts", root=repo) == "FILE:/src/auth.ts"
    assert klock.file("./src//auth.ts", root=repo) == "FILE:/src/auth.ts"
    monkeypatch.chdir(repo / "src")
    assert klock.file("auth.ts", root=repo) == "FILE:/src/auth.ts"
    assert klock.file(".", root=repo) == "FILE:/src"
    assert klock.file("..", root=repo) == "FILE:/"


def test_absolute_paths_inside_the_root_and_not_outside(repo: pathlib.Path) -> None:
    assert klock.file(repo / "src" / "auth.ts", root=repo) == "FILE:/src/auth.ts"
    assert klock.file(str(repo / "src" / "auth.ts"), root=str(repo)) == "FILE:/src/auth.ts"
    # A file not created yet is named like any other.
    assert klock.file(repo / "src" / "new" / "x.ts", root=repo) == "FILE:/src/new/x.ts"
    with pytest.raises(ValueError, match="outside the root"):
        klock.file("/etc/passwd", root=repo)
    with pytest.raises(ValueError, match="outside the root"):
        klock.file(repo.parent, root=repo)


def test_dot_dot_is_resolved_and_escaping_the_root_is_an_error(repo: pathlib.Path) -> None:
    assert klock.file(repo / "src" / ".." / "src" / "auth.ts", root=repo) == "FILE:/src/auth.ts"
    assert klock.file(repo / "src" / "new" / ".." / "y.ts", root=repo) == "FILE:/src/y.ts"
    with pytest.raises(ValueError, match="outside the root"):
        klock.file(repo / ".." / "repo-sibling" / "x", root=repo)
    with pytest.raises(ValueError, match="outside the root"):
        klock.file(repo / "src" / ".." / ".." / "x", root=repo)


def test_symlinks_are_resolved_so_two_agents_get_one_name(
    repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "shortcut").symlink_to(repo / "src")
    assert klock.file(tmp_path / "shortcut" / "auth.ts", root=repo) == "FILE:/src/auth.ts"
    (repo / "alias.ts").symlink_to(repo / "src" / "auth.ts")
    assert klock.file(repo / "alias.ts", root=repo) == "FILE:/src/auth.ts"
    # The root given through a link names the same files.
    (tmp_path / "repo-link").symlink_to(repo)
    assert klock.file(repo / "src" / "auth.ts", root=tmp_path / "repo-link") == "FILE:/src/auth.ts"
    assert klock.file(tmp_path / "repo-link" / "src" / "auth.ts", root=repo) == "FILE:/src/auth.ts"
    # A link inside the root that leads out names a file outside it.
    (repo / "out").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="outside the root"):
        klock.file(repo / "out" / "x", root=repo)


def test_case_and_unicode_form_are_kept_as_written(repo: pathlib.Path) -> None:
    assert klock.file(repo / "src" / "Auth.ts", root=repo) == "FILE:/src/Auth.ts"
    assert klock.file(repo / "caf\u00e9", root=repo) != klock.file(repo / "cafe\u0301", root=repo)
    # And the kernel keeps them apart: two names, no conflict.
    with klock.Klock() as k, k.session("a") as a, k.session("b") as b:
        with a.lease(f"MUTATES {klock.file(repo / 'src' / 'Auth.ts', root=repo)}"):
            with b.lease(f"MUTATES {klock.file(repo / 'src' / 'auth.ts', root=repo)}", timeout=0):
                pass


def test_unprintable_characters_and_bad_input_are_named_errors(
    repo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="U\\+200B"):
        klock.file(repo / "a\u200bb", root=repo)
    with pytest.raises(ValueError, match="U\\+202E"):
        klock.file(repo / "evil\u202ets", root=repo)
    with pytest.raises(ValueError, match="UTF-8"):
        klock.file(os.fsdecode(bytes(repo / "x") + b"\xff"), root=repo)
    with pytest.raises(ValueError, match="KLOCK_ROOT"):
        klock.file("src/auth.ts")
    with pytest.raises(ValueError, match="not an existing directory"):
        klock.file("x", root=repo / "src" / "auth.ts")
    with pytest.raises(ValueError, match="empty"):
        klock.file("", root=repo)
    with pytest.raises(TypeError):
        klock.file(b"src/auth.ts", root=repo)  # type: ignore[arg-type]
    # The kernel refuses what the helper refuses (docs/SPEC.md §3, vector 225).
    with klock.Klock() as k, k.session("a") as a:
        with pytest.raises(klock.InvalidInput, match="U\\+200B"):
            with a.lease("MUTATES FILE:/a\u200bb"):
                pass


def test_the_root_comes_from_klock_root(
    repo: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KLOCK_ROOT", str(repo))
    assert klock.file(repo / "src" / "auth.ts") == "FILE:/src/auth.ts"
