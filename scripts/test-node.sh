#!/usr/bin/env bash
# Every test of the Node host (bindings/node + node/), from a fresh machine or a warm one:
#   1. `npm install` in node/ only when needed (scripts/node-env.sh --install-only);
#   2. format and lint checks of the klock-node crate (skipped under scripts/test.sh, which
#      has checked every crate of the workspace: KLOCK_WORKSPACE_CHECKED=1);
#   3. builds the addon with the napi CLI into a temporary directory, fails if the committed
#      node/index.js or node/index.d.ts differ from what it generated (stale), and copies the
#      built .node file next to them;
#   4. the resolved scripts (scripts/resolve-vectors.sh: tests/vectors checked by the Rust
#      kernel) replayed through the addon by the JS replayer's CLI (bindings/js-replay);
#   5. `node --test` with a bound per test (the replay and its mutants, the one JS API's
#      contract, friendly client on both backends (in process, and connect() to real
#      `klock serve` processes the tests start: KLOCK_BIN, from scripts/klock-bin.sh unless the
#      caller set it; the scenarios' manual clock on `klock-testkit serve`: KLOCK_TESTKIT_BIN,
#      likewise), the fence helper, stress, types: the usage file and node/index.d.ts held
#      to bindings/js-api/kernel.d.ts by tsc).
# Nothing is downloaded at run time beyond the npm install of step 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n==> %s\n' "$*"; }

step "npm install in node/ (only when needed: scripts/node-env.sh)"
bash scripts/node-env.sh --install-only

step "cargo fmt --check and clippy (klock-node)"
if [ "${KLOCK_WORKSPACE_CHECKED:-}" = 1 ]; then
  echo "done for the whole workspace by scripts/test.sh"
else
  cargo fmt -p klock-node -- --check
  cargo clippy -p klock-node --all-targets -- -D warnings
fi

step "napi build (release) and staleness of the committed index.js / index.d.ts"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd node && npx napi build --platform --release --manifest-path ../bindings/node/Cargo.toml --output-dir "$out")
stale=0
for generated in index.js index.d.ts; do
  if ! diff -u "node/$generated" "$out/$generated"; then
    echo "node/$generated is stale: run \`npm run build\` in node/ and commit it" >&2
    stale=1
  fi
done
[ "$stale" -eq 0 ] || exit 1
cp "$out"/*.node node/

step "resolved scripts replayed through the addon"
# KLOCK_SCRIPTS: made by the caller (scripts/test.sh) just before; otherwise resolved here.
scripts=${KLOCK_SCRIPTS:-$(bash scripts/resolve-vectors.sh | tail -n1)}
node bindings/js-replay/replay.mjs node/index.js "$scripts" | grep -v '^ok '

step "the klock and klock-testkit binaries the remote tests start"
KLOCK_BIN=${KLOCK_BIN:-$(bash scripts/klock-bin.sh | tail -n1)}
KLOCK_TESTKIT_BIN=${KLOCK_TESTKIT_BIN:-$(bash scripts/klock-bin.sh klock-testkit | tail -n1)}
export KLOCK_BIN KLOCK_TESTKIT_BIN
echo "$KLOCK_BIN"
echo "$KLOCK_TESTKIT_BIN"

step "node --test (two files at a time, 60 s per test at most)"
# Node 20 runs one test file at a time on two cores; the files wait on servers and timers
# much of the time, so two at once take about 25 s instead of 36.
node --test --test-concurrency=2 --test-timeout=60000 node/test/*.test.mjs

echo
echo "test-node.sh: all Node checks passed ($root)"
