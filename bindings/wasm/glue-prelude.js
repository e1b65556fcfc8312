// ---- put at the top of the glue by bindings/wasm/build.sh (source: bindings/wasm/glue-prelude.js,
// after bindings/js-api/klock-error.js, the KlockError class the Rust side throws) -------------
// The module-level values of the one JavaScript API (bindings/js-api/kernel.d.ts) that are the
// core's lists and limits. They are filled by the wasm module's start function (`start` in
// src/lib.rs calls __klock_define) when the module is instantiated: while the glue loads with
// --target nodejs, in init() / initSync() with --target web (like every export, use them after
// init). The export lines are build.sh's, one per target.
/* exported ERROR_CODES, PREDICATES, EVENT_KINDS, MAX_MANIFEST_INTENTS, MAX_NAME_BYTES, MAX_RESOURCE_BYTES, __klock_define
   -- used by build.sh's export lines and the wasm module's start function */
const ERROR_CODES = {};
const PREDICATES = [];
const EVENT_KINDS = [];
let MAX_MANIFEST_INTENTS;
let MAX_NAME_BYTES;
let MAX_RESOURCE_BYTES;
function __klock_define(lists) {
  for (const [name, code] of lists.ERROR_CODES) ERROR_CODES[name] = code;
  Object.freeze(ERROR_CODES);
  Object.freeze(Object.assign(PREDICATES, lists.PREDICATES));
  Object.freeze(Object.assign(EVENT_KINDS, lists.EVENT_KINDS));
  ({ MAX_MANIFEST_INTENTS, MAX_NAME_BYTES, MAX_RESOURCE_BYTES } = lists);
}
