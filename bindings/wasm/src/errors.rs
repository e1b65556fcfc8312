//! Errors thrown into JavaScript: the same as the Node addon's (bindings/js-api/kernel.d.ts).
//!
//! Contract: a kernel error becomes a `KlockError` (the one class of the JS API, its source
//! shared with the Node addon: bindings/js-api/klock-error.js, which build.sh puts at the top
//! of the generated glue, where this module's import finds it) with the core's stable `code`
//! (a number), `name` (`"UNKNOWN_SESSION"`) and `message`. A wrong argument is a `TypeError`
//! or `RangeError` with Node's `code` (`ERR_INVALID_ARG_TYPE`, `ERR_MISSING_ARGS`,
//! `ERR_INVALID_ARG_VALUE`, `ERR_OUT_OF_RANGE`), thrown before the kernel is touched. A call
//! on a freed kernel is an `Error` with `code` `ERR_INVALID_STATE`, thrown by freed-guard.js
//! in the glue. Nothing here ever throws a bare string.

use js_sys::{JsString, Reflect};
use klock_core::Error;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// The JS API's error class, defined in the glue's module scope by build.sh.
    type KlockError;

    #[wasm_bindgen(constructor)]
    fn new(message: &str, code: u32, name: &str) -> KlockError;
}

/// The `KlockError` for a kernel error.
pub fn kernel_error(error: Error) -> JsValue {
    KlockError::new(&error.message, error.code.code(), error.code.name()).into()
}

/// Sets `code` on a fresh error object (cannot fail on a fresh, extensible object).
fn with_code(err: JsValue, code: &str) -> JsValue {
    let _ = Reflect::set(&err, &JsString::from("code"), &JsValue::from_str(code));
    err
}

/// A `TypeError` with `code` (one of the shared module's `ERR_*` codes).
pub fn type_error(code: &str, message: &str) -> JsValue {
    with_code(js_sys::TypeError::new(message).into(), code)
}

/// A `RangeError` with `code` `ERR_OUT_OF_RANGE`.
pub fn range_error(message: &str) -> JsValue {
    with_code(
        js_sys::RangeError::new(message).into(),
        crate::shared::OUT_OF_RANGE,
    )
}

/// `Result<T, klock_core::Error>` → `Result<T, JsValue>` with [`kernel_error`].
pub trait OrThrow<T> {
    fn or_throw(self) -> Result<T, JsValue>;
}

impl<T> OrThrow<T> for Result<T, Error> {
    fn or_throw(self) -> Result<T, JsValue> {
        self.map_err(kernel_error)
    }
}
