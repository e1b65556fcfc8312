#!/usr/bin/env bash
# Every test of the browser host, from a fresh machine (installs what is missing, idempotently):
#   1. builds klock-wasm for --target web and --target nodejs (bindings/wasm/build.sh installs
#      the wasm32 target and the wasm-bindgen CLI at the crate's pinned version when missing);
#   2. replays the resolved scripts (scripts/resolve-vectors.sh: tests/vectors checked by the
#      Rust kernel) through the nodejs build with the JS replayer's CLI (bindings/js-replay);
#   3. proves the wasm imports nothing but wasm-bindgen's glue (no clock, no randomness);
#   4. type-checks the generated TypeScript declarations (bindings/js-api/kernel.d.ts), runs
#      the binding's own tests (the one JS API's contract shared with the Node addon, use after
#      free, the replay and every mutant failing) and the shared bad-digest cases
#      (tests/bad-digests.json) in Node;
#   5. runs the dashboard's tests: the swarm backs off by the kernel's retryAfterMs, the
#      server refuses unknown arguments and serves no test code (Node); then in headless
#      Chromium (Debian chromium, installed with apt when missing, driven by playwright-core,
#      installed with npm when missing): every resolved script replayed against the web build
#      in the browser, page load without console errors, N steps change the counters, lanes
#      gives zero deaths, clicking a resource shows its holders, the header stays on one line
#      with 1,000 agents, screenshots and fps / ops-per-second numbers under target/dashboard/;
#   6. the live view and the replay against a real `klock serve --dashboard` (the binary
#      scripts/klock-bin.sh names, or $KLOCK_BIN) with real agents (dashboard/test/remote.test.mjs):
#      a lease shows within a second of its grant, the page reconnects after a SIGKILL and a
#      restart, the replayed state hashes equal the server's; screenshots under target/dashboard/.
# The replay frame-rate report (not a test): node dashboard/bench/replay-fps.mjs.
# Every `node --test` run has a bound per test, and every wait in Chromium is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "tools: chromium, playwright-core and typescript"
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [ ! -f dashboard/node_modules/playwright-core/package.json ] || [ ! -x dashboard/node_modules/.bin/tsc ]; then
  # `npm install` rather than `npm ci` (see TOOLCHAIN.md); it keeps the lock file as it is.
  (cd dashboard && npm install --no-audit --no-fund --loglevel=error)
fi

step "build the wasm packages (web, nodejs)"
bash bindings/wasm/build.sh

step "resolved scripts replayed through the nodejs build"
# KLOCK_SCRIPTS: made by the caller (scripts/test.sh) just before; otherwise resolved here.
scripts=${KLOCK_SCRIPTS:-$(bash scripts/resolve-vectors.sh | tail -n1)}
node bindings/js-replay/replay.mjs bindings/wasm/pkg-nodejs/klock_wasm.js "$scripts" | grep -v '^ok '

step "wasm imports: nothing but wasm-bindgen's glue"
node bindings/wasm/check-imports.mjs bindings/wasm/pkg-web bindings/wasm/pkg-nodejs

step "TypeScript declarations of the web build (tsc --strict)"
dashboard/node_modules/.bin/tsc --noEmit --strict --target es2022 --lib esnext,dom --module esnext \
  --moduleResolution bundler bindings/wasm/test/types-check.ts
echo "declarations check passed"

step "binding tests (Node, 60 s per test at most)"
node --test --test-timeout=60000 bindings/wasm/test/

step "the klock binary for the live and replay tests"
KLOCK_BIN=$(bash scripts/klock-bin.sh | tail -n1)
export KLOCK_BIN
echo "$KLOCK_BIN"

step "dashboard: swarm and server (Node), then headless Chromium, live and replay against klock serve (120 s per test at most)"
node --test --test-timeout=120000 dashboard/test/
