#!/usr/bin/env bash
# The main job's fleet demo end to end (examples/fleet/test_fleet.py): real Python and Node
# agent processes against a real `klock serve` that is killed and restarted, and Ctrl-C
# cleanup. Sets up .venv (scripts/python-env.sh), the Node package and addon
# (scripts/node-env.sh) and finds the klock binary (scripts/klock-bin.sh), idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/python-env.sh | tail -n1)
bash scripts/node-env.sh
KLOCK_BIN=$(bash scripts/klock-bin.sh | tail -n1)
KLOCK_PYTHON=$py KLOCK_BIN=$KLOCK_BIN "$py" -m pytest -c python/pyproject.toml -q -p no:cacheprovider examples/fleet
