#!/usr/bin/env bash
# Writes bench/REPORT.md (about a minute): ops/s, scaling ratios, memory per lease and the
# contended workload per policy, with the machine noted. Extra flags are passed on
# (--quick for a smoke run, --out PATH to write elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release -p klock-core --example bench_report -- "$@"
