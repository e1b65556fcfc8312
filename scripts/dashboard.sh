#!/usr/bin/env bash
# Builds the wasm package and serves the dashboard: `bash scripts/dashboard.sh [--port N]`.
# Prints the URL to open (default http://127.0.0.1:8080/; `--port 0` picks a free port).
set -euo pipefail
cd "$(dirname "$0")/.."
bash bindings/wasm/build.sh >&2
exec node dashboard/serve.mjs "$@"
