//! The package's TypeScript declarations: the one JavaScript API, bindings/js-api/kernel.d.ts,
//! verbatim (the Node addon is held to the same file by a tsc check), and what only the wasm
//! package has: `free()`, because wasm memory is not collected with the JS object.
//!
//! Contract: wasm-bindgen copies these sections into the generated `.d.ts` (re-indented,
//! nothing else changed); every item the package exports is declared with `skip_typescript`,
//! so nothing else is generated.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const API: &'static str = include_str!("../../js-api/kernel.d.ts");

#[wasm_bindgen(typescript_custom_section)]
const WASM_ONLY: &'static str = r#"
/** What only the wasm package's Kernel has (merged into the class above). */
export interface Kernel {
  /**
   * Frees the kernel's wasm memory now (the garbage collector does it eventually). Every
   * later call throws an `Error` with `code` `'ERR_INVALID_STATE'`; `free()` again is a no-op.
   */
  free(): void
  [Symbol.dispose](): void
}
"#;

#[wasm_bindgen(typescript_custom_section)]
const REPLAYER: &'static str = r#"
/**
 * Only in the wasm package: a `klock serve` history export (the JSON text of
 * `GET /v1/ns/{ns}/history`) replayed by this kernel, step by step, exactly as the server
 * applied it (src/replay.rs). Answers are JSON text in the core's snake_case shapes.
 */
export declare class Replayer {
  /** The kernel at the export's start; throws an `Error` naming what is wrong with the text. */
  constructor(exportText: string)
  /** Steps in the export. */
  readonly length: number
  /** Steps applied so far. */
  readonly position: number
  /** Each step's log index. */
  indexes(): Float64Array
  /** Each step's server time in ms. */
  times(): Float64Array
  /** Applies steps up to (not including) `to`; with `record`, the JSON of what each did. */
  run(to: number, record: boolean): string
  /** The state hash, 16 hex digits, as `GET /v1/state/hash` reports it. */
  stateHash(): string
  /** The kernel's time (the last applied step's). */
  now(): number
  /** The JSON text of the kernel's snapshot at its time. */
  snapshot(): string
  /** A replayer at the same position (steps shared). */
  clone(): Replayer
  free(): void
}
"#;
