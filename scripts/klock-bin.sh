#!/usr/bin/env bash
# Prints the path of a binary the tests start: `klock` (the default: `klock serve`,
# `klock mcp`, ...) or, with the argument `klock-testkit`, the test kit's (`klock-testkit
# serve`, the resettable manual-clock server the client tests replay scenarios on). Both are
# the ones `cargo nextest run --workspace` builds, with the test targets' features, so after
# the Rust tests' step nothing is compiled again (a plain `cargo build -p klock-cli` would
# unify other features and rebuild the server). A caller that already knows it passes
# KLOCK_BIN (or KLOCK_TESTKIT_BIN) and nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-klock}
case "$name" in
  klock) given=${KLOCK_BIN:-}; var=KLOCK_BIN ;;
  klock-testkit) given=${KLOCK_TESTKIT_BIN:-}; var=KLOCK_TESTKIT_BIN ;;
  *) echo "klock-bin: which binary? klock or klock-testkit, got $name" >&2; exit 2 ;;
esac
if [ -n "$given" ]; then
  [ -x "$given" ] || { echo "klock-bin: $var=$given is not an executable file" >&2; exit 1; }
  echo "$given"
  exit 0
fi
cargo test --quiet --workspace --no-run >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "$target_dir/debug/$name"
