#!/usr/bin/env bash
# Every test of the browser host, from a fresh machine (installs what is missing, idempotently):
#   1. builds klock-wasm for --target web and --target nodejs (bindings/wasm/build.sh installs
#      the wasm32 target and the wasm-bindgen CLI at the crate's pinned version when missing);
#   2. runs every conformance vector through the nodejs build;
#   3. proves the wasm imports nothing but wasm-bindgen's glue (no clock, no randomness);
#   4. type-checks the generated TypeScript declarations, runs the binding's own tests (use
#      after free included), the shared bad-digest cases (tests/bad-digests.json) and the
#      runner-strictness parity test against the Rust runner (Node);
#   5. runs the dashboard's tests: the swarm backs off by the kernel's retry_after_ms, the
#      server refuses unknown arguments (Node); then in headless Chromium (Debian chromium,
#      installed with apt when missing, driven by playwright-core, installed with npm when
#      missing): every vector against the web build in the browser, page load without console
#      errors, N steps change the counters, lanes gives zero deaths, clicking a resource shows
#      its holders, the header stays on one line with 1,000 agents, screenshots and fps /
#      ops-per-second numbers under target/dashboard/.
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

step "conformance vectors through the nodejs build"
node bindings/wasm/conformance.mjs tests/vectors

step "wasm imports: nothing but wasm-bindgen's glue"
node bindings/wasm/check-imports.mjs bindings/wasm/pkg-web bindings/wasm/pkg-nodejs

step "TypeScript declarations of the web build (tsc --strict)"
dashboard/node_modules/.bin/tsc --noEmit --strict --target es2022 --lib esnext,dom --module esnext \
  --moduleResolution bundler bindings/wasm/test/types-check.ts
echo "declarations check passed"

step "binding tests and runner parity (Node)"
node --test bindings/wasm/test/

step "dashboard: swarm and server (Node), then headless Chromium"
node --test dashboard/test/
