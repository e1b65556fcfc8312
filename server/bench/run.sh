#!/usr/bin/env bash
# The control plane's benchmark report: builds the release `klock` and the bench program,
# installs redis-server for the comparison if it is missing (the same binary serves the
# in-memory and the appendfsync-always rows), and writes server/bench/REPORT.md.
# A benchmark, not a test: it is not part of scripts/test.sh.
#   bash server/bench/run.sh                 every row, the cluster rows (issue 24) included
#   bash server/bench/run.sh --cluster-only  the cluster rows alone (with the single-node
#                                            durable rows they are divided by); the rest of
#                                            REPORT.md is kept
# KLOCK_BENCH_BIN=PATH measures that release `klock` instead of building one.
# `target/release/examples/http_bench ab A B [C...] [--rounds N]` compares binaries (A/B);
# `... cluster-ab A B [--rounds N]` compares their three-node cluster throughput rows.
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster_only=()
case "${1:-}" in
  "") ;;
  --cluster-only) cluster_only=(--cluster-only) ;;
  *) echo "usage: bash server/bench/run.sh [--cluster-only]" >&2; exit 2 ;;
esac
if [ ${#cluster_only[@]} = 0 ] && ! command -v redis-server >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  # A fresh machine may have no package lists yet: update them only if the install fails.
  $sudo apt-get install -y redis-server >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y redis-server >&2; }
fi
if [ -n "${KLOCK_BENCH_BIN:-}" ]; then
  klock=$KLOCK_BENCH_BIN
  cargo build --release -p klock-server --example http_bench >&2
else
  klock=target/release/klock
  cargo build --release -p klock-cli --bin klock -p klock-server --example http_bench >&2
fi
target/release/examples/http_bench "$klock" server/bench/REPORT.md "${cluster_only[@]}"
