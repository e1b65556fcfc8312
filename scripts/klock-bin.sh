#!/usr/bin/env bash
# Prints the path of the `klock` binary the tests start (`klock serve`, `klock mcp`, ...):
# the one `cargo nextest run --workspace` builds, with the test targets' features, so after
# the Rust tests' step nothing is compiled again (a plain `cargo build -p klock-server` would
# unify other features and rebuild the server). A caller that already knows it passes
# KLOCK_BIN and nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${KLOCK_BIN:-}" ]; then
  [ -x "$KLOCK_BIN" ] || { echo "klock-bin: KLOCK_BIN=$KLOCK_BIN is not an executable file" >&2; exit 1; }
  echo "$KLOCK_BIN"
  exit 0
fi
cargo test --quiet --workspace --no-run >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "$target_dir/debug/klock"
