#!/usr/bin/env bash
# Builds the wasm package and serves the dashboard:
#   bash scripts/dashboard.sh [--port N] [--host H]
# Prints the URL to open (default http://127.0.0.1:8080/; `--port 0` picks a free port). Any
# other argument is refused (exit status 2, with the usage) before anything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
node dashboard/serve.mjs --check "$@"
for arg in "$@"; do
  case $arg in -h | --help) exec node dashboard/serve.mjs --help ;; esac
done
bash bindings/wasm/build.sh >&2
exec node dashboard/serve.mjs "$@"
