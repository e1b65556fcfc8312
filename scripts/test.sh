#!/usr/bin/env bash
# Every test of the project, from a fresh machine: installs what is missing (idempotently),
# then runs formatting and lint checks, the Rust tests (unit, conformance vectors, differential
# property tests, exhaustive model checking), the conformance runner CLI and the no_std build.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "toolchain components and targets"
installed_components=$(rustup component list --installed 2>/dev/null || true)
for component in rustfmt clippy; do
  grep -q "^${component}" <<<"$installed_components" || rustup component add "$component"
done
installed_targets=$(rustup target list --installed)
grep -qx thumbv7em-none-eabihf <<<"$installed_targets" || rustup target add thumbv7em-none-eabihf

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "no_std build of klock-core (thumbv7em-none-eabihf)"
cargo build -p klock-core --target thumbv7em-none-eabihf

step "cargo test (unit, conformance, differential, model checking)"
cargo test --workspace

step "Python host (klock._core, the klock package, its runner and stubs)"
bash scripts/test-python.sh

step "Node host (klock-node addon, the klock npm package, its runner and types)"
bash scripts/test-node.sh

step "C host (libklock, include/klock.h, the C runner under valgrind)"
bash scripts/test-c.sh

step "browser host (klock-wasm, its runner, the dashboard in headless Chromium)"
bash scripts/test-wasm.sh

step "conformance runner CLI over tests/vectors"
cargo run -q --release -p klock-conformance -- tests/vectors
