#!/usr/bin/env bash
# The main job: separate Python and Node agent processes editing real files through one
# `klock serve`, without and then with Klock, the server killed with SIGKILL and restarted
# from its data file partway through (examples/fleet/run.py; arguments go to it, see --help).
# Sets up what it needs on a fresh machine, idempotently: .venv with the klock package
# (scripts/python-env.sh), the Node package and its addon (scripts/node-env.sh), and the
# server (cargo build --release). The in-process, one-process demo is `python -m klock demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/python-env.sh | tail -n1)
bash scripts/node-env.sh
cargo build --quiet --release -p klock-cli --bin klock
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
exec "$py" examples/fleet/run.py --klock "$target_dir/release/klock" --python "$py" --node node "$@"
