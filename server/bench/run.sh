#!/usr/bin/env bash
# The control plane's benchmark report: builds the release `klock` and the bench program,
# installs redis-server for the comparison if it is missing (the same binary serves the
# in-memory and the appendfsync-always rows), and writes server/bench/REPORT.md.
# A benchmark, not a test: it is not part of scripts/test.sh.
# `target/release/examples/http_bench ab A B [C...] [--rounds N]` compares binaries (A/B).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  # A fresh machine may have no package lists yet: update them only if the install fails.
  $sudo apt-get install -y redis-server >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y redis-server >&2; }
fi
cargo build --release -p klock-cli --bin klock -p klock-server --example http_bench >&2
target/release/examples/http_bench target/release/klock server/bench/REPORT.md
