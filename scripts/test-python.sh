#!/usr/bin/env bash
# Every Python test, from a fresh machine: sets up .venv and builds klock._core
# (scripts/python-env.sh, idempotent), then runs
#   - pytest over python/tests with warnings as errors (collecting nothing is a failure),
#   - the conformance runner `python -m klock.conformance tests/vectors`,
#   - mypy's stubtest (python/klock/_core.pyi against the built module),
#   - mypy --strict over the klock package.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "python env (.venv, maturin develop --release)"
py=$(bash scripts/python-env.sh | tail -n1)

step "pytest -W error python/tests"
set +e
"$py" -m pytest -W error -q python/tests
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

step "python -m klock.conformance tests/vectors"
"$py" -m klock.conformance tests/vectors

step "python -m mypy.stubtest klock._core"
"$py" -m mypy.stubtest klock._core

step "mypy --strict python/klock"
"$py" -m mypy --strict python/klock
