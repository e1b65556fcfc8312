#!/usr/bin/env bash
# Every Python test, from a fresh machine: sets up .venv and builds klock._core
# (scripts/python-env.sh, idempotent), resolves the conformance vectors into scripts and
# mutants (scripts/resolve-vectors.sh, the Rust checker; a caller that has just done so
# passes the scripts' directory as KLOCK_SCRIPTS instead), then runs
#   - the replayer over every script (each must reproduce exactly) and every mutant (each
#     must fail: a replayer that passes one ignores a recorded value),
#   - pytest over python/tests with warnings as errors and a time limit per test (collecting
#     nothing is a failure), in two worker processes (pytest-xdist: the tests spend about a
#     third of their time waiting on real time and on servers, so two workers on two cores
#     take about 50 s instead of 80); it reuses the scripts made here, and the client tests run on both
#     backends: in-process and remote, against `klock serve` processes they start from the
#     binary scripts/klock-bin.sh names (passed as KLOCK_BIN), and the test kit's resettable
#     manual-clock server (`klock-testkit serve`, passed as KLOCK_TESTKIT_BIN),
#   - mypy's stubtest (python/klock/_core.pyi against the built module),
#   - mypy --strict over the klock package.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "python env (.venv, maturin develop --release)"
py=$(bash scripts/python-env.sh | tail -n1)

if [ -n "${KLOCK_SCRIPTS:-}" ]; then
  step "resolved scripts made by the caller: $KLOCK_SCRIPTS"
  scripts=$KLOCK_SCRIPTS
else
  step "resolve the vectors (scripts/resolve-vectors.sh)"
  scripts=$(bash scripts/resolve-vectors.sh | tail -n1)
fi
scripts=$(cd "$scripts" && pwd)
mutants="$(dirname "$scripts")/mutants"

step "replay every script: python python/tests/replay.py $scripts"
"$py" python/tests/replay.py "$scripts" | grep -v '^ok '

step "replay every mutant (every one must fail): python python/tests/replay.py $mutants"
set +e
report=$("$py" python/tests/replay.py "$mutants")
status=$?
set -e
echo "$report" | tail -n1
if [ "$status" -eq 0 ] || grep -q '^ok ' <<<"$report" || ! grep -q '^0 passed, [1-9][0-9]* failed$' <<<"$report"; then
  echo "the replayer passed a mutant (or found none): it ignores a recorded value" >&2
  grep '^ok ' <<<"$report" >&2 || true
  exit 1
fi

step "the klock and klock-testkit binaries for the remote tests (scripts/klock-bin.sh)"
KLOCK=$(bash scripts/klock-bin.sh | tail -n1)
TESTKIT=$(bash scripts/klock-bin.sh klock-testkit | tail -n1)
echo "$KLOCK"
echo "$TESTKIT"

step "pytest -W error -n 2 python/tests"
set +e
KLOCK_SCRIPTS="$scripts" KLOCK_BIN="$KLOCK" KLOCK_TESTKIT_BIN="$TESTKIT" "$py" -m pytest -W error -q -rs -n 2 python/tests
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

step "python -m mypy.stubtest klock._core"
"$py" -m mypy.stubtest klock._core

step "mypy --strict python/klock"
"$py" -m mypy --strict python/klock
