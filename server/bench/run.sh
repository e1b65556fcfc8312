#!/usr/bin/env bash
# The control plane's benchmark report: builds the release `klock` and the bench program,
# installs redis-server for the comparison if it is missing, and writes server/bench/REPORT.md.
# A benchmark, not a test: it is not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y redis-server >&2; else sudo apt-get install -y redis-server >&2; fi
fi
cargo build --release -p klock-cli --bin klock -p klock-server --example http_bench >&2
target/release/examples/http_bench target/release/klock server/bench/REPORT.md
