#!/usr/bin/env bash
# Tests of the C API (bindings/c, include/klock.h), idempotent on a fresh machine:
#  1. installs gcc, valgrind and libcjson-dev when missing;
#  2. runs the unit tests of bindings/c (cargo test -p klock-c: the panic boundary, the C lists
#     checked against the core's, and include/klock.h against what the pinned cbindgen makes
#     of the sources), and proves that a stale header fails that check;
#  3. builds libklock (cargo build --release -p klock-c; the build writes nothing outside
#     target/), checks it exports exactly the functions klock.h declares, and compiles, all at once, the replayer (tests/c/replay.c), the bad-input tests,
#     the shared bad-digest cases' runner and the quickstart example with gcc -std=c11 -Wall
#     -Wextra -Werror, each linked statically (libklock.a) and dynamically (libklock.so, rpath);
#  4. runs every program at once under valgrind (errors and definite/indirect leaks fail): the
#     replayer over every resolved script in both linkings (all must pass), over every mutant
#     and over broken scripts (all must fail, saying why); the bad-input tests, every case of
#     tests/bad-digests.json and the quickstart in both linkings; and the replayer over zero
#     scripts (it must fail).
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
# KLOCK_SCRIPTS: made by the caller (scripts/test.sh) just before; otherwise resolved here.
scripts_dir=${KLOCK_SCRIPTS:-$(timeout 900 bash scripts/resolve-vectors.sh | tail -n1)}
mutants_dir="$(dirname "$scripts_dir")/mutants"
script_count=$(find "$scripts_dir" -name '*.json' | wc -l)
mutant_count=$(find "$mutants_dir" -name '*.json' | wc -l)
((script_count > 0 && mutant_count > 0)) || fail "no resolved scripts or no mutants in $target_dir/conformance"
echo "$script_count scripts in $scripts_dir, $mutant_count mutants in $mutants_dir"

step "build libklock and compile (gcc -std=c11 -Wall -Wextra -Werror), static and dynamic"
timeout 900 cargo build -q --release -p klock-c
lib_dir="$(cd "$target_dir/release" && pwd)"
out="$target_dir/klock-c"
mkdir -p "$out"
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g -Iinclude)
static_libs=("$lib_dir/libklock.a" -lpthread -ldl -lm)
dynamic_libs=(-L"$lib_dir" -lklock -Wl,-rpath,"$lib_dir" -lpthread)
# Every compile runs at once (the machine has few cores, and each is short).
compiles=()
build() { # name source extra-libs...
  local name=$1 source=$2
  shift 2
  timeout 300 gcc "${cflags[@]}" "$source" "${static_libs[@]}" "$@" -o "$out/$name" &
  compiles+=($!)
  timeout 300 gcc "${cflags[@]}" "$source" "${dynamic_libs[@]}" "$@" -o "$out/$name-dynamic" &
  compiles+=($!)
}
build replay tests/c/replay.c -lcjson
build bad_input tests/c/bad_input.c
build bad_digests tests/c/bad_digests.c -lcjson
build quickstart examples/c/quickstart.c
for pid in "${compiles[@]}"; do wait "$pid" || fail "a compile failed (see above)"; done
echo "built replay, bad_input, bad_digests and quickstart, each static and -dynamic, in $out"
# The library exports exactly the functions klock.h declares: nothing test-only, nothing hidden.
nm -D --defined-only "$lib_dir/libklock.so" | awk '$2 == "T" && $3 ~ /^klock_/ {print $3}' | sort >"$scratch/exported"
grep -E '^[a-z].*klock_[a-z_]+\(' include/klock.h | grep -oE 'klock_[a-z_]+\(' | tr -d '(' | sort >"$scratch/declared"
diff "$scratch/declared" "$scratch/exported" >&2 || fail "libklock.so exports other functions than include/klock.h declares (< declared, > exported)"
echo "libklock.so exports the $(wc -l <"$scratch/exported") functions klock.h declares, and no other"
# The dynamic builds really load libklock.so.
# (Captured first: under pipefail, `ldd | grep -q` fails when grep stops reading early.)
dependencies=$(ldd "$out/replay-dynamic")
grep -q "libklock.so" <<<"$dependencies" || fail "replay-dynamic does not load libklock.so"
pass

step "broken scripts for the replayer"
mkdir -p "$scratch/empty" "$scratch/broken"
first="$scripts_dir/01-readers-writers-upgrade.json"
printf '{"format": "klock-script/1", "name": "cut short"' >"$scratch/broken/1-not-json.json"
sed 's|"format": *"klock-script/1"|"format":"klock-script/9"|' "$first" >"$scratch/broken/2-format.json"
sed '0,/"op": *"open"/s//"op":"opne"/' "$first" >"$scratch/broken/3-op.json"
sed '0,/"snapshot":/s//"snapshots":/' "$first" >"$scratch/broken/4-key.json"
for edited in "$scratch"/broken/[234]-*.json; do cmp -s "$first" "$edited" && fail "could not break $edited"; done
echo "made in $scratch/broken: text that is not JSON, an unknown format, an unknown op, a missing key"

# Every program runs at once under valgrind, bounded (valgrind's own failures exit 99, a
# timeout 124: neither can pass for a program's status); `expect name N` then fails unless
# `name` exited N, its output kept in $scratch/name.out.
vg=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99)
spawn() { # name program args...
  local name=$1
  shift
  (set +e; timeout 600 "${vg[@]}" "$@" >"$scratch/$name.out" 2>&1; echo $? >"$scratch/$name.rc") &
}
expect() {
  local got
  got=$(cat "$scratch/$1.rc")
  [ "$got" = "$2" ] || { cat "$scratch/$1.out" >&2; fail "$1 exited $got, not $2 (99: valgrind found an error, 124: timeout)"; }
}
step "every C program under valgrind, static and dynamic, side by side"
# One process per linking (valgrind's start-up is slow): the static one also replays every
# mutant and the broken scripts, each line saying which file it is about.
spawn replay "$out/replay" "$scripts_dir" "$mutants_dir" "$scratch/broken" "$scratch/absent.json"
spawn replay-dynamic "$out/replay-dynamic" "$scripts_dir"
for program in bad_input bad_digests quickstart; do
  args=()
  [ "$program" = bad_digests ] && args=(tests/bad-digests.json)
  spawn "$program" "$out/$program" "${args[@]}"
  spawn "$program-dynamic" "$out/$program-dynamic" "${args[@]}"
done
wait

step "the replayer: every script passes (static and dynamic), every mutant fails"
expect replay 1
expect replay-dynamic 0
for name in replay replay-dynamic; do
  ok_scripts=$(grep -c "^ok $scripts_dir/" "$scratch/$name.out" || true)
  [ "$ok_scripts" = "$script_count" ] ||
    { grep "^FAIL $scripts_dir/" "$scratch/$name.out" >&2; fail "$name: $ok_scripts of $script_count scripts passed"; }
done
grep -qx "$script_count passed, 0 failed" "$scratch/replay-dynamic.out" || fail "replay-dynamic: wrong totals"
grep "$mutants_dir/" "$scratch/replay.out" >"$scratch/mutants.out" || true
failed_mutants=$(grep -c "^FAIL $mutants_dir/" "$scratch/mutants.out" || true)
passed_mutants=$(grep -c "^ok $mutants_dir/" "$scratch/mutants.out" || true)
[ "$failed_mutants" = "$mutant_count" ] && [ "$passed_mutants" = 0 ] ||
  { grep "^ok $mutants_dir/" "$scratch/mutants.out" >&2; fail "$passed_mutants mutants passed, $failed_mutants of $mutant_count failed"; }
grep -q "bad script" "$scratch/mutants.out" && { grep "bad script" "$scratch/mutants.out" >&2; fail "a mutant failed as a broken script"; }
echo "$script_count scripts ok in both linkings; $mutant_count of $mutant_count mutants FAIL, 0 ok"
pass

step "the replayer fails loudly on zero scripts and on broken ones"
if timeout 60 "$out/replay" "$scratch/empty" >"$scratch/empty.out" 2>&1; then fail "a run over zero scripts passed"; fi
grep -qx "0 passed, 0 failed" "$scratch/empty.out" || fail "a run over zero scripts did not say so"
grep "$scratch/" "$scratch/replay.out" >"$scratch/broken.out" || true
for reason in ": step 0: bad script: not JSON" ": step 0: bad script: unknown format \`klock-script/9\`" \
  ": step 1: bad script: unknown op \`opne\`" ": step 1: bad script: missing key \`snapshot\`" \
  ": step 0: bad script: cannot read the file"; do
  grep -qF "$reason" "$scratch/broken.out" || { cat "$scratch/broken.out" >&2; fail "no FAIL line says '$reason'"; }
done
[ "$(grep -c "^FAIL " "$scratch/broken.out")" = 5 ] || { cat "$scratch/broken.out" >&2; fail "not every broken script failed"; }
grep -qx "$script_count passed, $((mutant_count + 5)) failed" "$scratch/replay.out" || fail "replay: wrong totals"
echo "zero scripts, text that is not JSON, an unknown format, an unknown op, a missing key and a missing file all fail"
pass

step "bad input at the C boundary, tests/bad-digests.json, examples/c/quickstart.c"
for program in bad_input bad_digests quickstart; do
  expect "$program" 0
  expect "$program-dynamic" 0
  tail -n 1 "$scratch/$program.out"
  pass
done

printf '\ntest-c: %d passed, 0 failed\n' "$checks"
