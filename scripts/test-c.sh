#!/usr/bin/env bash
# Tests of the C API (bindings/c, include/klock.h), idempotent on a fresh machine:
#  1. installs gcc, valgrind and libcjson-dev when missing;
#  2. runs the unit tests of bindings/c (cargo test -p klock-c: the panic boundary, the C lists
#     checked against the core's, and include/klock.h against what the pinned cbindgen makes
#     of the sources), and proves that a stale header fails that check;
#  3. builds libklock (cargo build --release -p klock-c; the build writes nothing outside
#     target/) and compiles the replayer (tests/c/replay.c), the bad-input tests, the shared
#     bad-digest cases' runner and the quickstart example with gcc -std=c11 -Wall -Wextra
#     -Werror, each linked statically (libklock.a) and dynamically (libklock.so, rpath);
#  4. runs every program under valgrind (errors and definite/indirect leaks fail), the static
#     and dynamic builds side by side: the replayer over every resolved script (all must pass)
#     and, statically, over every mutant (all must fail), the bad-input tests, every case of
#     tests/bad-digests.json, the quickstart;
#  5. checks the replayer fails loudly on zero scripts and on broken ones.
# Every program runs under `timeout`. The resolved scripts come from scripts/resolve-vectors.sh,
# rerun here when missing or older than the kernel, the checker or the vectors.
#
# To update include/klock.h after changing the C API: `cargo test -p klock-c header` writes the
# generated header to target/klock-c/klock.h (its failure message names it); review it and copy
# it over include/klock.h. No build or test writes into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
checks=0
pass() { checks=$((checks + 1)); }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
target_dir="${CARGO_TARGET_DIR:-target}"

step "system packages (gcc, valgrind, libcjson-dev)"
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
dpkg -s libcjson-dev >/dev/null 2>&1 || missing+=(libcjson-dev)
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  timeout 600 $sudo apt-get update
  timeout 600 $sudo apt-get install -y "${missing[@]}"
fi
echo "present: gcc $(gcc -dumpversion), $(valgrind --version), libcjson-dev $(dpkg-query -W -f='${Version}' libcjson-dev)"

step "unit tests of bindings/c, include/klock.h against the sources"
timeout 900 cargo test -q -p klock-c
pass
# The check really compares: a header one line off fails it, naming the line.
sed '0,/klock_status klock_kernel_advance(/s//klock_status klock_kernel_advanced(/' include/klock.h >"$scratch/stale.h"
cmp -s include/klock.h "$scratch/stale.h" && fail "could not make a stale header to test the check with"
if KLOCK_HEADER="$scratch/stale.h" timeout 900 cargo test -q -p klock-c header::committed_header_is_current \
  >"$scratch/stale.out" 2>&1; then
  fail "the header check passed a stale header"
fi
grep -q "stale.h is stale: .*line [0-9]*: generated \"klock_status klock_kernel_advance(" "$scratch/stale.out" ||
  { cat "$scratch/stale.out" >&2; fail "the header check failed without naming the stale line"; }
echo "a stale header fails the check"
pass

step "resolved scripts and their mutants"
scripts_dir="$target_dir/conformance/scripts"
mutants_dir="$target_dir/conformance/mutants"
if [ ! -d "$scripts_dir" ] || [ ! -d "$mutants_dir" ] ||
  [ -n "$(find core/src conformance/src tests/vectors -newer "$scripts_dir" -print -quit)" ]; then
  timeout 900 bash scripts/resolve-vectors.sh >/dev/null
fi
script_count=$(find "$scripts_dir" -name '*.json' | wc -l)
mutant_count=$(find "$mutants_dir" -name '*.json' | wc -l)
((script_count > 0 && mutant_count > 0)) || fail "no resolved scripts or no mutants in $target_dir/conformance"
echo "$script_count scripts in $scripts_dir, $mutant_count mutants in $mutants_dir"

step "build libklock and compile (gcc -std=c11 -Wall -Wextra -Werror), static and dynamic"
timeout 900 cargo build -q --release -p klock-c
lib_dir="$(cd "$target_dir/release" && pwd)"
out=target/klock-c
mkdir -p "$out"
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g -Iinclude)
static_libs=("$lib_dir/libklock.a" -lpthread -ldl -lm)
dynamic_libs=(-L"$lib_dir" -lklock -Wl,-rpath,"$lib_dir" -lpthread)
build() { # name source extra-libs...
  local name=$1 source=$2
  shift 2
  timeout 300 gcc "${cflags[@]}" "$source" "${static_libs[@]}" "$@" -o "$out/$name"
  timeout 300 gcc "${cflags[@]}" "$source" "${dynamic_libs[@]}" "$@" -o "$out/$name-dynamic"
  echo "built $out/$name and $out/$name-dynamic"
}
build replay tests/c/replay.c -lcjson
build bad_input tests/c/bad_input.c
build bad_digests tests/c/bad_digests.c -lcjson
build quickstart examples/c/quickstart.c
# The dynamic builds really load libklock.so.
# (Captured first: under pipefail, `ldd | grep -q` fails when grep stops reading early.)
dependencies=$(ldd "$out/replay-dynamic")
grep -q "libklock.so" <<<"$dependencies" || fail "replay-dynamic does not load libklock.so"
pass

# valgrind's own failures exit 99, a timeout 124: neither can pass for a program's status.
vg=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99)
# `spawn name program args...` runs the program bounded under valgrind in the background, its
# output kept in $scratch/name.out; `expect_status name N` waits for it and fails unless it
# exited N.
spawn() {
  local name=$1
  shift
  (set +e; timeout 600 "${vg[@]}" "$@" >"$scratch/$name.out" 2>&1; echo $? >"$scratch/$name.rc") &
}
expect_status() {
  wait
  local got
  got=$(cat "$scratch/$1.rc")
  [ "$got" = "$2" ] || { cat "$scratch/$1.out" >&2; fail "$1 exited $got, not $2 (99: valgrind found an error, 124: timeout)"; }
}

step "the replayer under valgrind: every script passes (static and dynamic), every mutant fails (static)"
spawn replay "$out/replay" "$scripts_dir" "$mutants_dir"
spawn replay-dynamic "$out/replay-dynamic" "$scripts_dir"
expect_status replay 1
expect_status replay-dynamic 0
for name in replay replay-dynamic; do
  ok_scripts=$(grep -c "^ok $scripts_dir/" "$scratch/$name.out" || true)
  [ "$ok_scripts" = "$script_count" ] ||
    { grep -v "^ok " "$scratch/$name.out" >&2; fail "$name: $ok_scripts of $script_count scripts passed"; }
done
failed_mutants=$(grep -c "^FAIL $mutants_dir/" "$scratch/replay.out" || true)
passed_mutants=$(grep -c "^ok $mutants_dir/" "$scratch/replay.out" || true)
[ "$failed_mutants" = "$mutant_count" ] && [ "$passed_mutants" = 0 ] ||
  { grep "^ok $mutants_dir/" "$scratch/replay.out" >&2; fail "$passed_mutants mutants passed, $failed_mutants of $mutant_count failed"; }
grep -q "bad script" "$scratch/replay.out" && { grep "bad script" "$scratch/replay.out" >&2; fail "a mutant failed as a broken script"; }
grep -qx "$script_count passed, $mutant_count failed" "$scratch/replay.out" || fail "the replayer's totals are wrong"
grep -qx "$script_count passed, 0 failed" "$scratch/replay-dynamic.out" || fail "the dynamic replayer's totals are wrong"
echo "$script_count scripts ok in both linkings; $mutant_count of $mutant_count mutants FAIL, 0 ok"
pass

step "bad input at the C boundary, tests/bad-digests.json, examples/c/quickstart.c (static and dynamic) under valgrind"
for program in bad_input bad_digests quickstart; do
  args=()
  [ "$program" = bad_digests ] && args=(tests/bad-digests.json)
  spawn "$program" "$out/$program" "${args[@]}"
  spawn "$program-dynamic" "$out/$program-dynamic" "${args[@]}"
  expect_status "$program" 0
  expect_status "$program-dynamic" 0
  tail -n 1 "$scratch/$program.out"
  pass
done

step "the replayer fails loudly on zero scripts and on broken ones"
mkdir -p "$scratch/empty" "$scratch/broken"
if timeout 60 "$out/replay" "$scratch/empty" >"$scratch/empty.out" 2>&1; then fail "a run over zero scripts passed"; fi
grep -qx "0 passed, 0 failed" "$scratch/empty.out" || fail "a run over zero scripts did not say so"
first="$scripts_dir/01-readers-writers-upgrade.json"
printf '{"format": "klock-script/1", "name": "cut short"' >"$scratch/broken/1-not-json.json"
sed 's|"format": *"klock-script/1"|"format":"klock-script/9"|' "$first" >"$scratch/broken/2-format.json"
sed '0,/"op": *"open"/s//"op":"opne"/' "$first" >"$scratch/broken/3-op.json"
sed '0,/"snapshot":/s//"snapshots":/' "$first" >"$scratch/broken/4-key.json"
for edited in "$scratch"/broken/[234]-*.json; do cmp -s "$first" "$edited" && fail "could not break $edited"; done
if timeout 60 "$out/replay" "$scratch/broken" "$scratch/absent.json" >"$scratch/broken.out" 2>&1; then
  fail "broken scripts passed"
fi
for reason in ": step 0: bad script: not JSON" ": step 0: bad script: unknown format \`klock-script/9\`" \
  ": step 1: bad script: unknown op \`opne\`" ": step 1: bad script: missing key \`snapshot\`" \
  ": step 0: bad script: cannot read the file"; do
  grep -qF "$reason" "$scratch/broken.out" || { cat "$scratch/broken.out" >&2; fail "no FAIL line says '$reason'"; }
done
grep -qx "0 passed, 5 failed" "$scratch/broken.out" || fail "broken scripts were not all counted as failures"
echo "zero scripts, text that is not JSON, an unknown format, an unknown op, a missing key and a missing file all fail"
pass

printf '\ntest-c: %d passed, 0 failed\n' "$checks"
