#!/usr/bin/env bash
# Every test of the project, from a fresh machine: installs what is missing (idempotently),
# then runs formatting and lint checks, the declared Rust versions, the no_std build, the Rust
# tests (unit, conformance vectors, differential property tests, exhaustive model checking,
# the server), the vectors' resolved scripts replayed on every host, and each host's own
# tests. It ends by failing if the run changed any file of the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's title carries the seconds since the run began, to show where the time goes.
step() { printf '\n==> [%4d s] %s\n' "$SECONDS" "$*"; }

tree_before=$(bash scripts/tree-state.sh)
# A full disk breaks a run in odd places (a venv without pip, a linker error): say how much
# room there is at the start and the end.
df -h . | tail -n1 | awk '{print "disk: " $4 " free of " $2}'

step "toolchain components and targets"
installed_components=$(rustup component list --installed 2>/dev/null || true)
for component in rustfmt clippy; do
  grep -q "^${component}" <<<"$installed_components" || rustup component add "$component"
done
installed_targets=$(rustup target list --installed)
grep -qx thumbv7em-none-eabihf <<<"$installed_targets" || rustup target add thumbv7em-none-eabihf
# cargo-nextest runs every Rust test in its own process under a time bound (.config/nextest.toml).
command -v cargo-nextest >/dev/null 2>&1 || cargo install cargo-nextest --locked

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "Python and JavaScript lint and formatting (ruff, ESLint, Prettier)"
bash scripts/lint.sh

step "declared rust-version of every crate against its dependencies"
python3 scripts/check-rust-version.py

step "no_std build of klock-core (thumbv7em-none-eabihf)"
cargo build -p klock-core --target thumbv7em-none-eabihf

step "fuzzing: core/fuzz targets operations and resource_parser, seeded and bounded (cargo-fuzz, nightly)"
bash scripts/test-fuzz.sh

step "Rust tests: cargo nextest (unit, conformance, differential, model checking, server), doc tests"
cargo nextest run --workspace --no-tests=fail
# Only the kernel has doc examples; a workspace-wide doc run would rebuild every library
# with the feature set of a build without test targets, for nothing.
cargo test -p klock-core --doc
# Every crate is formatted, clippy-clean and tested now: the host scripts below skip their
# own crate's cargo fmt, clippy and tests (they run them when run on their own).
export KLOCK_WORKSPACE_CHECKED=1
# The `klock` and `klock-testkit` those tests built, for every later step that starts a server.
KLOCK_BIN=$(bash scripts/klock-bin.sh | tail -n1)
KLOCK_TESTKIT_BIN=$(bash scripts/klock-bin.sh klock-testkit | tail -n1)
export KLOCK_BIN KLOCK_TESTKIT_BIN

step "resolved scripts of every vector, and their mutants, for the hosts' replayers"
KLOCK_SCRIPTS=$(bash scripts/resolve-vectors.sh | tail -n1)
export KLOCK_SCRIPTS

step "Python host (klock._core, the klock package, its replayer, client scenarios and stubs)"
bash scripts/test-python.sh

step "Node host (klock-node addon, the klock npm package, the JS replayer, client scenarios, types)"
bash scripts/test-node.sh

step "C host (libklock, include/klock.h, the C replayer under valgrind)"
bash scripts/test-c.sh

step "browser host (klock-wasm, the JS replayer in Node and Chromium, the dashboard)"
bash scripts/test-wasm.sh

step "agent tools: klock exec and klock mcp with the official Python MCP client"
bash scripts/test-agents.sh

step "deploy/: the systemd unit (systemd-analyze verify) and the example configs on the real binary"
bash deploy/check.sh

step "the main job: the fleet demo's Python and Node agent processes through a server crash"
bash scripts/test-fleet.sh

step "install paths from a clean checkout, every README snippet as written, the API reference"
bash scripts/test-install.sh

step "the run left the source tree as it found it"
tree_after=$(bash scripts/tree-state.sh)
if [ "$tree_before" != "$tree_after" ]; then
  echo "FAIL: the test run changed the source tree (a build or test wrote into it):" >&2
  diff <(echo "$tree_before") <(echo "$tree_after") >&2 || true
  exit 1
fi
echo "unchanged"
df -h . | tail -n1 | awk '{print "disk: " $4 " free of " $2}'
step "all tests passed"
