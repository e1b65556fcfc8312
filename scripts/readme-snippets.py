#!/usr/bin/env python3
"""Runs every fenced code block of the given READMEs as written, against installed packages.

Contract (scripts/test-install.sh calls it after installing each package from a clean
checkout):

- A block is a fence opened with a language tag. The tag decides how it runs:
  ``python`` with the clean venv's interpreter, in a fresh empty directory;
  ``js`` as an ES module file in the scratch npm project (where ``klock`` is installed);
  ``sh`` with ``bash -euo pipefail``, in the clean checkout's root, with the installed
  ``klock`` and the clean venv first on PATH; every block runs with ``HOME`` in the scratch
  space (the toolchains' own homes kept); ``rust`` as a program of a scratch crate that
  depends on the checkout's ``klock-core``; ``json`` and ``toml`` are parsed. ``text`` (output, layouts,
  grammar) is not code. A fence without a tag, or with any other tag, is an error: every
  block says what it is.
- A block preceded by ``<!-- snippet: skip REASON -->`` on the line just before its fence is
  not run; the reason is required and every skip is printed, so the list stays small and
  named (a long-running server, the test command itself).
- Installs a block makes go where the caller's installs went: ``pip`` is the clean venv's,
  ``cargo install`` follows the caller's ``CARGO_INSTALL_ROOT``, ``npm install`` writes into
  the clean checkout.
- Every block gets a live ``klock serve`` (in memory, on a free loopback port):
  ``KLOCK_SERVER`` holds its URL, and the documented address ``http://127.0.0.1:7300`` in a
  block is replaced by it (the only change made to a block's text), so snippets never depend
  on a fixed port being free on the machine.
- Each block has a time bound; a failure prints the block, its location and its output, and
  the run goes on to report every failing block before exiting 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

DOCUMENTED_URL = "http://127.0.0.1:7300"
SKIP = re.compile(r"^<!-- snippet: skip (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<tag>[^`\s]*)\s*$")
RUNNERS = ("python", "js", "sh", "rust", "json", "toml")
NOT_CODE = ("text",)
TIMEOUT_S = {"python": 60, "js": 60, "sh": 600, "rust": 600, "json": 1, "toml": 1}


@dataclass
class Block:
    path: Path
    line: int
    tag: str
    text: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    """Every fenced block of one Markdown file, with its tag and skip reason."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, tag = opening["indent"], opening["fence"], opening["tag"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: a fence that is never closed")
        skip = SKIP.match(lines[i - 1].strip()) if i > 0 else None
        found.append(
            Block(path, i + 1, tag, "\n".join(body) + "\n", skip["reason"] if skip else None)
        )
        i = j + 1
    return found


class Server:
    """One `klock serve --memory` on a free loopback port for the whole run."""

    def __init__(self, klock: str) -> None:
        self.process = subprocess.Popen(
            [klock, "serve", "--listen", "127.0.0.1:0", "--memory"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        self.url = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.url = found[1].rstrip("/")
                return
        self.stop()
        raise SystemExit("readme-snippets: klock serve did not say where it listens within 30 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Runner:
    def __init__(self, args: argparse.Namespace, server: Server) -> None:
        self.args = args
        self.server = server
        self.work = Path(args.workdir).resolve()
        self.env = dict(os.environ)
        self.env["KLOCK_SERVER"] = server.url
        venv_bin = str(Path(args.python).parent)
        klock_bin = str(Path(args.klock).resolve().parent)
        self.env["PATH"] = os.pathsep.join([venv_bin, klock_bin, self.env["PATH"]])
        self.env["VIRTUAL_ENV"] = str(Path(args.python).parent.parent)
        # A home of their own: a block that installs into ``$HOME/.local`` (the C README)
        # writes into the scratch space, not the user's; the toolchains stay the real ones.
        home = Path(os.path.expanduser("~"))
        self.env.setdefault("CARGO_HOME", str(home / ".cargo"))
        self.env.setdefault("RUSTUP_HOME", str(home / ".rustup"))
        self.env.setdefault("npm_config_cache", str(home / ".npm"))
        self.env["HOME"] = str(self.work / "home")
        (self.work / "home").mkdir(parents=True, exist_ok=True)
        self.count = 0

    def source(self, block: Block) -> str:
        return block.text.replace(DOCUMENTED_URL, self.server.url)

    def run(self, block: Block, command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            cwd=cwd,
            env=self.env,
            text=True,
            capture_output=True,
            timeout=TIMEOUT_S[block.tag],
            check=False,
        )

    def python(self, block: Block) -> subprocess.CompletedProcess[str]:
        cwd = Path(tempfile.mkdtemp(prefix="py-", dir=self.work))
        (cwd / "snippet.py").write_text(self.source(block), encoding="utf-8")
        return self.run(block, [self.args.python, "-W", "error", "snippet.py"], cwd)

    def js(self, block: Block) -> subprocess.CompletedProcess[str]:
        project = Path(self.args.node_project).resolve()
        name = f"snippet-{self.count}.mjs"
        (project / name).write_text(self.source(block), encoding="utf-8")
        return self.run(block, ["node", name], project)

    def sh(self, block: Block) -> subprocess.CompletedProcess[str]:
        return self.run(
            block, ["bash", "-euo", "pipefail", "-c", self.source(block)], Path(self.args.checkout)
        )

    def rust(self, block: Block) -> subprocess.CompletedProcess[str]:
        crate = self.work / "rust"
        (crate / "src").mkdir(parents=True, exist_ok=True)
        core = (Path(self.args.checkout) / "core").resolve()
        (crate / "Cargo.toml").write_text(
            '[package]\nname = "snippet"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
            f'[dependencies]\nklock-core = {{ path = "{core}" }}\n\n[workspace]\n',
            encoding="utf-8",
        )
        # The checkout's lock: the same dependency versions; --offline resolves nothing anew.
        if not (crate / "Cargo.lock").exists():
            shutil.copy(Path(self.args.checkout) / "Cargo.lock", crate / "Cargo.lock")
        (crate / "src" / "main.rs").write_text(self.source(block), encoding="utf-8")
        return self.run(block, ["cargo", "run", "--quiet", "--offline"], crate)

    def json(self, block: Block) -> subprocess.CompletedProcess[str]:
        try:
            json.loads(block.text)
        except json.JSONDecodeError as error:
            return subprocess.CompletedProcess([], 1, "", f"invalid JSON: {error}")
        return subprocess.CompletedProcess([], 0, "", "")

    def toml(self, block: Block) -> subprocess.CompletedProcess[str]:
        try:
            tomllib.loads(block.text)
        except tomllib.TOMLDecodeError as error:
            return subprocess.CompletedProcess([], 1, "", f"invalid TOML: {error}")
        return subprocess.CompletedProcess([], 0, "", "")

    def __call__(self, block: Block) -> subprocess.CompletedProcess[str]:
        self.count += 1
        try:
            result: subprocess.CompletedProcess[str] = getattr(self, block.tag)(block)
            return result
        except subprocess.TimeoutExpired as timeout:
            return subprocess.CompletedProcess([], 1, "", f"no answer within {timeout.timeout} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the clean venv's python")
    parser.add_argument(
        "--node-project", required=True, help="the scratch npm project with klock installed"
    )
    parser.add_argument("--klock", required=True, help="the installed klock binary")
    parser.add_argument("--checkout", required=True, help="the clean checkout (cwd of sh blocks)")
    parser.add_argument("--workdir", required=True, help="scratch space for the blocks")
    parser.add_argument("readmes", nargs="+", type=Path)
    args = parser.parse_args()
    # Absolute, not resolved: a venv's python is a symlink that must stay inside the venv.
    for name in ("python", "node_project", "klock", "checkout", "workdir"):
        setattr(args, name, os.path.abspath(getattr(args, name)))

    blocks = [block for readme in args.readmes for block in blocks_of(readme)]
    wrong = [b for b in blocks if b.tag not in RUNNERS + NOT_CODE]
    for block in wrong:
        print(
            f"{block.where}: fence tag {block.tag!r} is none of {RUNNERS + NOT_CODE}",
            file=sys.stderr,
        )
    if wrong:
        return 1
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    server = Server(args.klock)
    failed: list[Block] = []
    ran = 0
    try:
        runner = Runner(args, server)
        for block in blocks:
            if block.tag in NOT_CODE:
                continue
            if block.skip:
                print(f"skip {block.where} ({block.tag}): {block.skip}")
                continue
            started = time.monotonic()
            result = runner(block)
            ran += 1
            took = time.monotonic() - started
            if result.returncode == 0:
                print(f"ok   {block.where} ({block.tag}, {took:.1f} s)")
                continue
            failed.append(block)
            print(
                f"FAIL {block.where} ({block.tag}, exit {result.returncode}, {took:.1f} s)",
                file=sys.stderr,
            )
            print("---- block ----\n" + block.text + "---- output ----", file=sys.stderr)
            print((result.stdout + result.stderr).strip()[-4000:], file=sys.stderr)
    finally:
        server.stop()
    print(f"readme-snippets: {ran} blocks ran, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
