#!/usr/bin/env bash
# The kernel's fuzz targets (core/fuzz: `operations`, every kernel call under every policy,
# `detect` among them, with the invariants after each; `resource_parser`), run with cargo-fuzz
# on the nightly toolchain, each bounded and seeded: libFuzzer's -seed=1 and a fixed number of
# runs (KLOCK_FUZZ_RUNS, default 40000), with a time bound as a backstop on a slow machine
# (KLOCK_FUZZ_SECONDS per target, default 180). Inputs may be long from the first run
# (-len_control=0): a wait-for cycle needs a dozen calls, which libFuzzer's slowly growing
# length limit reaches only after far more runs (with it, 100000 runs of `operations` formed no
# cycle; without it, the first came after about 29000). Installs what is missing,
# idempotently: the nightly toolchain (rustup) and cargo-fuzz (cargo install --locked).
#
# Nothing is written into the source tree: the corpus starts empty in a temporary folder, which
# is removed at the end, and the build goes to the target directory (target/fuzz). A crash
# fails the run; its input is kept in target/fuzz/artifacts/<target>/ and the message says how
# to replay it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

runs=${KLOCK_FUZZ_RUNS:-40000}
seconds=${KLOCK_FUZZ_SECONDS:-180}
target_dir="${CARGO_TARGET_DIR:-$root/target}/fuzz"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for target in operations resource_parser; do
  echo "==> cargo +nightly fuzz run $target: -seed=1 -runs=$runs -max_total_time=$seconds -len_control=0"
  corpus="$work/$target"
  kept="$target_dir/artifacts/$target"
  mkdir -p "$corpus" "$kept"
  if ! (cd core && cargo +nightly fuzz run --target-dir "$target_dir" "$target" "$corpus" -- \
    -seed=1 -runs="$runs" -max_total_time="$seconds" -len_control=0 -artifact_prefix="$kept/" \
    -print_final_stats=1); then
    echo "test-fuzz: $target failed; its input is in $kept (replay: cd core && cargo +nightly fuzz run --target-dir $target_dir $target <file>)" >&2
    exit 1
  fi
done
echo "test-fuzz: both targets ran $runs inputs (or $seconds s) without a failure"
