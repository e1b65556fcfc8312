#!/usr/bin/env bash
# Sets up the Python side on a fresh machine, idempotently, and fast when nothing changed:
# - a virtualenv with pip at .venv/ in the repository root (created only if missing);
# - maturin, pytest, pytest-timeout (every test has a time limit), pytest-xdist and mypy in it
#   (installed only if missing; the klock package itself needs nothing beyond the standard
#   library);
# - the klock package in development mode (python/klock, editable) with the extension
#   klock._core built by `maturin develop --release` from bindings/python (rebuilt only when
#   a Rust source, a Cargo manifest or the lock file is newer than the built module).
# Prints the path of the venv's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv"
py="$venv/bin/python"

if [ ! -x "$py" ]; then
  echo "python-env: creating $venv" >&2
  if ! python3 -m venv "$venv"; then
    rm -rf "$venv"
    echo "python-env: could not create $venv with $(command -v python3) ($(python3 --version 2>&1));" \
      "free disk: $(df -h . | tail -n1 | awk '{print $4}')" >&2
    exit 1
  fi
fi
"$py" -m pip --version >/dev/null 2>&1 || "$py" -m ensurepip --upgrade >/dev/null

missing=()
[ -x "$venv/bin/maturin" ] || missing+=("maturin>=1.9,<2.0")
"$py" -c "import pytest" >/dev/null 2>&1 || missing+=("pytest>=8")
"$py" -c "import pytest_timeout" >/dev/null 2>&1 || missing+=("pytest-timeout>=2.3")
"$py" -c "import xdist" >/dev/null 2>&1 || missing+=("pytest-xdist>=3.6")
"$py" -c "import mypy" >/dev/null 2>&1 || missing+=("mypy>=1.10")
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-env: installing ${missing[*]}" >&2
  "$py" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi

# Is the installed extension current? It must import from outside the source tree, and no
# input of the build may be newer than the built module.
built=$(ls python/klock/_core*.so 2>/dev/null | head -n1 || true)
stale=yes
if [ -n "$built" ] && (cd / && "$py" -c "import klock._core" >/dev/null 2>&1); then
  newer=$(find core/src core/Cargo.toml bindings/python Cargo.toml Cargo.lock python/pyproject.toml \
    -newer "$built" -type f -print -quit 2>/dev/null || true)
  [ -n "$newer" ] || stale=no
fi
if [ "$stale" = yes ]; then
  echo "python-env: building klock._core (maturin develop --release)" >&2
  (cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" maturin develop --release --quiet >&2)
  touch python/klock/_core*.so
fi
echo "$py"
