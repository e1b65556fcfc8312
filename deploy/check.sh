#!/usr/bin/env bash
# Checks deploy/ with what this machine can run:
# - the systemd unit with `systemd-analyze verify` (installed from apt if missing and apt is
#   usable; the check says so if it cannot run). verify insists that ExecStart's program
#   exists, so it checks a copy whose ExecStart names the built binary: the only change.
# - each example config file, served by the real binary (its data moved to a scratch dir and
#   its listen address to a free loopback port by flags, which win over the file).
# - the container recipe is NOT built here: no container daemon runs on this machine and no
#   image registry is reachable for its base images; the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
KLOCK=${KLOCK_BIN:-$(bash scripts/klock-bin.sh | tail -n1)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

if ! command -v systemd-analyze >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
  && [ "$(id -u)" = 0 ]; then
  apt-get install -y --no-install-recommends systemd >/dev/null 2>&1 || true
fi
if command -v systemd-analyze >/dev/null 2>&1; then
  sed "s|^ExecStart=/usr/local/bin/klock |ExecStart=$(realpath "$KLOCK") |" deploy/klock.service \
    >"$scratch/klock.service"
  grep -q "^ExecStart=$(realpath "$KLOCK") serve --config" "$scratch/klock.service"
  # Any finding fails the check (verify prints findings even when it exits 0).
  findings=$(systemd-analyze verify "$scratch/klock.service" 2>&1) || {
    echo "$findings" >&2
    exit 1
  }
  if [ -n "$findings" ]; then
    echo "$findings" >&2
    exit 1
  fi
  echo "deploy/klock.service: systemd-analyze verify found nothing ($(systemd-analyze --version | head -n1))"
else
  echo "deploy/klock.service: NOT checked (no systemd-analyze, and apt could not install it)"
fi

for config in deploy/klock.toml deploy/container.toml; do
  # The container's tokens and certificate are mounted at run time: stand-ins here.
  args=(--config "$config" --listen 127.0.0.1:0 --data "$scratch/$(basename "$config").redb")
  if [ "$config" = deploy/container.toml ]; then
    printf '{"tokens": [{"name": "ops", "sha256": "%s", "role": "admin", "namespaces": ["*"]}]}' \
      "$(printf stand-in | "$KLOCK" token-hash)" >"$scratch/tokens.json"
    args+=(--tokens "$scratch/tokens.json" --tls-cert "$scratch/none.pem" --tls-key "$scratch/none.pem")
    # Without a certificate it gets as far as loading one: every key of the file was accepted.
    if "$KLOCK" serve "${args[@]}" 2>"$scratch/err" </dev/null; then
      echo "$config: served without a certificate?" >&2
      exit 1
    fi
    grep -q "cannot load the TLS certificate" "$scratch/err" || { cat "$scratch/err" >&2; exit 1; }
    echo "$config: accepted by klock serve (stopped at the missing certificate, as expected)"
    continue
  fi
  "$KLOCK" serve "${args[@]}" >"$scratch/out" 2>"$scratch/err" &
  pid=$!
  for _ in $(seq 100); do
    grep -q "listening on" "$scratch/out" && break
    sleep 0.1
  done
  grep -q "klock serve: listening on http://127.0.0.1:" "$scratch/out" || { cat "$scratch/err" >&2; exit 1; }
  kill -TERM "$pid"
  wait "$pid"
  grep -q "stopped" "$scratch/err" || { cat "$scratch/err" >&2; exit 1; }
  echo "$config: served by klock serve and stopped on SIGTERM"
done

echo "deploy/Dockerfile: NOT built (no container daemon here, and no image registry reachable for its base images)"
