#!/usr/bin/env python3
"""Checks the declared minimum Rust versions (`rust-version`) of the workspace's crates.

Every workspace crate must declare one, and no crate it builds with (normal and build
dependencies, all the way down) may need a newer Rust than it declares. Use of standard-library
items newer than the declaration is caught separately by clippy's `incompatible_msrv` lint in
the clippy step. (Language features newer than the declaration would need that older toolchain
to detect; this machine cannot fetch one.) Exit status 1 lists every violation.
"""

import json
import subprocess
import sys


def version(text):
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    problems = []
    for member in meta["workspace_members"]:
        crate = packages[member]
        declared = crate.get("rust_version")
        if not declared:
            problems.append(f"{crate['name']}: declares no rust-version")
            continue
        seen, stack = set(), [member]
        while stack:
            for dep in nodes[stack.pop()]["deps"]:
                kinds = {k["kind"] for k in dep["dep_kinds"]}
                if dep["pkg"] in seen or not kinds & {None, "build"}:
                    continue
                seen.add(dep["pkg"])
                stack.append(dep["pkg"])
                needed = packages[dep["pkg"]].get("rust_version")
                if needed and version(needed) > version(declared):
                    name = packages[dep["pkg"]]["name"]
                    problems.append(
                        f"{crate['name']} declares rust-version {declared}, "
                        f"but its dependency {name} needs {needed}"
                    )
        print(f"{crate['name']}: rust-version {declared}, {len(seen)} dependencies checked")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
