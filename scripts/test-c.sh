#!/usr/bin/env bash
# Tests of the C API (bindings/c, include/klock.h), idempotent on a fresh machine:
#  1. installs gcc, valgrind and libcjson-dev when missing;
#  2. builds libklock (cargo build --release -p klock-c) and fails if the committed
#     include/klock.h differs from what the pinned cbindgen generates from the sources;
#  3. compiles the C conformance runner (to exactly target/klock-c/conformance), the bad-input
#     tests, the shared bad-digest cases' runner and the quickstart example with
#     gcc -std=c11 -Wall -Wextra -Werror, each linked statically (libklock.a) and dynamically
#     (libklock.so, rpath);
#  4. runs every program under valgrind (errors and definite/indirect leaks fail): the runner
#     over tests/vectors in both linkings, the bad-input tests, every case of
#     tests/bad-digests.json (the same file the other hosts run), the quickstart;
#  5. checks the runner fails loudly on a broken vector and on zero vectors, and that a failure
#     prints a WOUNDED event with its retry_after_ms.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
checks=0
pass() { checks=$((checks + 1)); }

step "system packages (gcc, valgrind, libcjson-dev)"
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
dpkg -s libcjson-dev >/dev/null 2>&1 || missing+=(libcjson-dev)
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y "${missing[@]}"
fi
echo "present: gcc $(gcc -dumpversion), $(valgrind --version), libcjson-dev $(dpkg-query -W -f='${Version}' libcjson-dev)"

step "build libklock and check include/klock.h is not stale"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The header as checked out; the build regenerates include/klock.h from the sources.
if [ -f include/klock.h ]; then cp include/klock.h "$scratch/klock.h.committed"; else : >"$scratch/klock.h.committed"; fi
cargo build --release -p klock-c
if ! diff -u "$scratch/klock.h.committed" include/klock.h >"$scratch/header.diff"; then
  head -n 60 "$scratch/header.diff"
  echo "FAIL: include/klock.h was stale; the build has regenerated it from bindings/c: commit it" >&2
  exit 1
fi
echo "include/klock.h matches the sources"
pass

target_dir="${CARGO_TARGET_DIR:-target}"
lib_dir="$(cd "$target_dir/release" && pwd)"
out=target/klock-c
mkdir -p "$out"

step "compile (gcc -std=c11 -Wall -Wextra -Werror), static and dynamic"
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g -Iinclude)
static_libs=("$lib_dir/libklock.a" -lpthread -ldl -lm)
dynamic_libs=(-L"$lib_dir" -lklock -Wl,-rpath,"$lib_dir" -lpthread)
build() { # name source extra-libs...
  local name=$1 source=$2
  shift 2
  gcc "${cflags[@]}" "$source" "${static_libs[@]}" "$@" -o "$out/$name"
  gcc "${cflags[@]}" "$source" "${dynamic_libs[@]}" "$@" -o "$out/$name-dynamic"
  echo "built $out/$name and $out/$name-dynamic"
}
build conformance tests/c/conformance.c -lcjson
build bad_input tests/c/bad_input.c
build bad_digests tests/c/bad_digests.c -lcjson
build quickstart examples/c/quickstart.c
# The dynamic builds really load libklock.so.
# (Captured first: under pipefail, `ldd | grep -q` fails when grep stops reading early.)
dependencies=$(ldd "$out/conformance-dynamic")
grep -q "libklock.so" <<<"$dependencies" || { echo "FAIL: conformance-dynamic does not load libklock.so" >&2; exit 1; }
pass

vg=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=1)

for variant in conformance conformance-dynamic; do
  step "vectors through the C runner ($variant) under valgrind"
  "${vg[@]}" "$out/$variant" tests/vectors
  pass
done

for variant in bad_input bad_input-dynamic; do
  step "bad input at the C boundary ($variant) under valgrind"
  # Two deliberate panics print Rust's panic message on stderr: keep it for failures only.
  if ! RUST_BACKTRACE=0 "${vg[@]}" "$out/$variant" 2>"$scratch/bad_input.stderr"; then
    cat "$scratch/bad_input.stderr" >&2
    exit 1
  fi
  pass
done

for variant in bad_digests bad_digests-dynamic; do
  step "tests/bad-digests.json through the C API ($variant) under valgrind"
  "${vg[@]}" "$out/$variant" tests/bad-digests.json
  pass
done

for variant in quickstart quickstart-dynamic; do
  step "examples/c/quickstart.c ($variant) under valgrind"
  "${vg[@]}" "$out/$variant"
  pass
done

step "the runner fails loudly"
mkdir -p "$scratch/empty" "$scratch/broken"
if "$out/conformance" "$scratch/empty" >"$scratch/empty.out" 2>&1; then
  echo "FAIL: a run over zero vectors passed" >&2
  exit 1
fi
grep -qx "0 passed, 0 failed" "$scratch/empty.out"
sed 's/"now": 0, "do": "open"/"now": 0, "typo": 1, "do": "open"/' tests/vectors/01-readers-writers-upgrade.json \
  >"$scratch/broken/unknown-key.json"
if "$out/conformance" "$scratch/broken" >"$scratch/broken.out" 2>&1; then
  echo "FAIL: a vector with an unknown key passed" >&2
  exit 1
fi
grep -q "unknown key \`typo\`" "$scratch/broken.out"
echo "zero vectors and an unknown key both fail"
pass

step "a failure describes WOUNDED events with their retry_after_ms, as the Rust runner does"
mkdir -p "$scratch/wounded"
sed 's/"lost_leases": \["LB"\], "lost_tickets": \[\], "retry_after_ms": \[100, 199\]/"lost_leases": ["LB"], "lost_tickets": [], "retry_after_ms": [0, 1]/' \
  tests/vectors/212-wounded-carries-retry-after-and-counts-as-die.json >"$scratch/wounded/212-narrow.json"
if "$out/conformance" "$scratch/wounded" >"$scratch/wounded.out" 2>&1; then
  echo "FAIL: a WOUNDED event outside its retry_after_ms range passed" >&2
  exit 1
fi
grep -qF "retry_after_ms: expected in [0, 1], got " "$scratch/wounded.out"
grep -qE "WOUNDED\{session=B\(#2\) by=A\(#1\) lost_leases=\[LB\(#1\)\] lost_tickets=\[\] retry_after_ms=[0-9]+\}" "$scratch/wounded.out"
echo "the WOUNDED event's retry_after_ms is checked and printed"
pass

printf '\ntest-c: %d passed, 0 failed\n' "$checks"
