#!/usr/bin/env bash
# The time to the first grant of a fresh remote client (Python and Node), for two checkouts
# side by side (issue 27: the watch placed by a first read, or started at the open's
# Klock-Index): `bash bench/first_grant.sh BEFORE_ROOT AFTER_ROOT`, each a checkout whose
# .venv and node/ are set up (scripts/python-env.sh, the Node addon built). Three rounds,
# alternating; each batch of N (default 20) clients against a fresh `$KLOCK_BIN serve
# --memory` on a free port, seeded with EVENTS (default 400) events, which the first read
# returns whole.
set -euo pipefail
before=$1 after=$2
n=${N:-20} events=${EVENTS:-400}
bin=${KLOCK_BIN:-$(bash "$(dirname "$0")/../scripts/klock-bin.sh" | tail -n1)}
here=$(cd "$(dirname "$0")" && pwd)

# Starts a seeded server; sets $pid and $url.
serve() {
  local line
  coproc SERVER { exec "$bin" serve --memory --listen 127.0.0.1:0 2>/dev/null; }
  pid=$SERVER_PID
  read -r line <&"${SERVER[0]}"
  url=${line##*listening on }
  local hostport=${url#http://}
  "$after/.venv/bin/python" "$here/first_grant.py" seed "${hostport%:*}" "${hostport##*:}" "$events"
}

for round in 1 2 3; do
  for root in "$before" "$after"; do
    serve
    echo "python $root round $round: $(PYTHONPATH=$root/python "$root/.venv/bin/python" "$here/first_grant.py" time "$url" "$n")"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    serve
    echo "node   $root round $round: $(node "$here/first_grant.cjs" "$root/node/client.js" "$url" "$n")"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
done
