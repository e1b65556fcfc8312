#!/usr/bin/env bash
# Sets up the Node side for programs that use the klock npm package from this tree (the
# fleet demo), idempotently, and fast when nothing changed:
#   - `npm install` in node/ only when node_modules is missing or package.json /
#     package-lock.json changed since the last install (never `npm ci`: see TOOLCHAIN.md);
#   - the addon (node/klock.*.node) built by the napi CLI (release) only when it is missing
#     or a Rust source, a Cargo manifest or the lock file is newer than it.
# scripts/test-node.sh uses the first part and always rebuilds the addon itself, to check
# the committed index.js / index.d.ts against what the build generates.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in node npm cargo; do
  command -v "$tool" >/dev/null || { echo "node-env: $tool is not installed" >&2; exit 1; }
done

stamp=node/node_modules/.klock-install-stamp
wanted=$(cat node/package.json node/package-lock.json 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ ! -d node/node_modules ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "node-env: npm install in node/" >&2
  (cd node && npm install --no-audit --no-fund >&2)
  echo "$wanted" >"$stamp"
fi

[ "${1:-}" = "--install-only" ] && exit 0

built=$(ls node/klock.*.node 2>/dev/null | head -n1 || true)
stale=yes
if [ -n "$built" ]; then
  newer=$(find core/src core/Cargo.toml bindings/node bindings/js-api Cargo.toml Cargo.lock \
    -newer "$built" -type f -print -quit 2>/dev/null || true)
  [ -n "$newer" ] || stale=no
fi
if [ "$stale" = yes ]; then
  echo "node-env: building the addon (napi build --release)" >&2
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  (cd node && npx napi build --platform --release --manifest-path ../bindings/node/Cargo.toml \
    --output-dir "$out" >&2)
  cp "$out"/*.node node/
fi
