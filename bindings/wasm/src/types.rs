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
