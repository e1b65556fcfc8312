#!/usr/bin/env bash
# Checks tests/vectors against the kernel (the one checker, conformance/) and writes every
# vector's resolved script into target/conformance/scripts/ (docs/VECTORS.md), which each
# host's replayer then replays, and their mutants into target/conformance/mutants/ (one
# recorded value changed in each: every replayer must fail every one). Prints the scripts'
# directory. Fails if any vector fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CARGO_TARGET_DIR:-target}/conformance/scripts"
rm -rf "$dir"
cargo run -q --release -p klock-conformance -- --scripts "$dir" --mutants "${dir%/scripts}/mutants" tests/vectors | { grep -v "^ok " >&2 || true; }
echo "$dir"
