#!/usr/bin/env bash
# Builds klock-wasm for wasm32-unknown-unknown and runs the wasm-bindgen CLI twice:
#   bindings/wasm/pkg-web     (--target web: an ES module for browsers; the dashboard loads it)
#   bindings/wasm/pkg-nodejs  (--target nodejs: CommonJS for Node; the tests load it)
# and completes both glue files into the one JavaScript API (bindings/js-api/kernel.d.ts):
# at the top, the KlockError class (bindings/js-api/klock-error.js, shared with the Node addon)
# and the module-level lists the start function fills (glue-prelude.js); at the end, the
# freed-kernel guard (freed-guard.js) and the export of those values, in the target's syntax.
# Installs what is missing, idempotently: the rustup target, and the wasm-bindgen CLI at exactly
# the version the crate pins (no wasm-pack: it downloads from the internet; no wasm-opt:
# Debian's binaryen produces broken modules for current wasm-bindgen).
set -euo pipefail
cd "$(dirname "$0")/../.."

WASM_DIR=bindings/wasm
# The version pinned in Cargo.toml (`wasm-bindgen = "=X"`): the CLI must match it exactly.
pinned=$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' "$WASM_DIR/Cargo.toml")
if [ -z "$pinned" ]; then
  echo "cannot read the pinned wasm-bindgen version from $WASM_DIR/Cargo.toml" >&2
  exit 1
fi

installed_targets=$(rustup target list --installed)
grep -qx wasm32-unknown-unknown <<<"$installed_targets" || rustup target add wasm32-unknown-unknown

if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$pinned" ]; then
  echo "installing wasm-bindgen-cli $pinned (a few minutes, once)" >&2
  # Not --locked: a dependency locked by the CLI is missing from the registry. Not into our
  # target dir: the CLI's build would fill it.
  env -u CARGO_TARGET_DIR cargo install wasm-bindgen-cli --version "$pinned" --no-default-features
fi

target_dir=${CARGO_TARGET_DIR:-target}
cargo build -q -p klock-wasm --release --target wasm32-unknown-unknown
wasm="$target_dir/wasm32-unknown-unknown/release/klock_wasm.wasm"

for target in web nodejs; do
  out="$WASM_DIR/pkg-$target"
  rm -rf "$out.tmp"
  wasm-bindgen "$wasm" --out-dir "$out.tmp" --target "$target"
  # A clear error for calls on a freed kernel (freed-guard.js says why). It relies on the glue
  # keeping the freed pointer in `__wbg_ptr` (zeroed by free) and defining `class Kernel`:
  # checked here, so a wasm-bindgen that changes them fails the build instead of the guard.
  glue="$out.tmp/klock_wasm.js"
  # The guard relies on the glue keeping the freed pointer in `__wbg_ptr` (zeroed by free) and
  # defining `class Kernel`; the Rust side's imports of KlockError and __klock_define must be
  # bare names that the prelude's module-scope declarations answer. Checked here, so a
  # wasm-bindgen that changes them fails the build instead of the API.
  for anchor in 'class Kernel {' 'this.__wbg_ptr = 0;' 'const ptr = this.__destroy_into_raw();' 'wasm.kernel_now(this.__wbg_ptr)' 'new KlockError(' '__klock_define('; do
    if ! grep -qF "$anchor" "$glue"; then
      echo "wasm-bindgen's glue ($glue) no longer contains '$anchor': update bindings/wasm/build.sh and its JS files" >&2
      exit 1
    fi
  done
  exported=KlockError,ERROR_CODES,PREDICATES,EVENT_KINDS,MAX_MANIFEST_INTENTS,MAX_NAME_BYTES,MAX_RESOURCE_BYTES
  {
    # wasm-bindgen's `@ts-self-types` comment stays the first line.
    head -n 1 "$glue"
    cat bindings/js-api/klock-error.js "$WASM_DIR/glue-prelude.js"
    tail -n +2 "$glue"
    cat "$WASM_DIR/freed-guard.js"
    if [ "$target" = web ]; then
      echo "export { ${exported//,/, } };"
    else
      echo "Object.assign(exports, { ${exported//,/, } });"
    fi
  } >"$glue.new"
  mv "$glue.new" "$glue"
  rm -rf "$out"
  mv "$out.tmp" "$out"
done
echo "built $WASM_DIR/pkg-web and $WASM_DIR/pkg-nodejs ($(wc -c <"$WASM_DIR/pkg-web/klock_wasm_bg.wasm") bytes of wasm)"
