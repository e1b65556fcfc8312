#!/usr/bin/env bash
# The main job: agent threads editing real files without and then with Klock.
# Sets up what it needs on a fresh machine (.venv at the repository root, the extension built
# by maturin), then runs `python -m klock demo` with the arguments given (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/python-env.sh | tail -n1)
exec "$py" -m klock demo "$@"
