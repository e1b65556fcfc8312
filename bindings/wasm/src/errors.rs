//! Errors thrown into JavaScript.
//!
//! Contract: a kernel error becomes a real `Error` whose `name` is the core's stable name
//! (`"INVALID_RESOURCE"`, ...), whose `code` is the stable number (100, ...) and whose `message`
//! is the kernel's text saying what to fix; `String(err)` reads `NAME: message`. A wrong
//! argument (wrong type, a number that is not a non-negative integer ≤ 2^53 − 1, a lone
//! surrogate) is a `TypeError` (`code` `ERR_INVALID_ARG_TYPE`) or `RangeError` (`code`
//! `ERR_OUT_OF_RANGE`) thrown before the kernel is touched. A call on a freed kernel is an
//! `Error` with `code` `ERR_INVALID_STATE`, thrown by `freed-guard.js` in the JS glue (the
//! generated glue would reach Rust only to fail with "null pointer passed to rust"). Nothing
//! here ever throws a bare string.

use js_sys::{JsString, Reflect};
use klock_core::Error;
use wasm_bindgen::JsValue;

/// The JS `Error` for a kernel error: `name` = the code's name, `code` = its number.
pub fn kernel_error(error: Error) -> JsValue {
    let err = js_sys::Error::new(&error.message);
    err.set_name(error.code.name());
    // Setting a property on a fresh Error object cannot fail.
    let _ = Reflect::set(
        &err,
        &JsString::from("code"),
        &JsValue::from(error.code.code()),
    );
    err.into()
}

/// Sets `code` on a fresh error object (cannot fail on a fresh, extensible object).
fn with_code(err: JsValue, code: &str) -> JsValue {
    let _ = Reflect::set(&err, &JsString::from("code"), &JsValue::from_str(code));
    err
}

/// A `TypeError` with `code` `ERR_INVALID_ARG_TYPE` (an argument of the wrong type or shape),
/// the code Node itself uses, so callers can branch on `code` for every error.
pub fn type_error(message: &str) -> JsValue {
    with_code(
        js_sys::TypeError::new(message).into(),
        "ERR_INVALID_ARG_TYPE",
    )
}

/// A `RangeError` with `code` `ERR_OUT_OF_RANGE` (a number out of the accepted range).
pub fn range_error(message: &str) -> JsValue {
    with_code(js_sys::RangeError::new(message).into(), "ERR_OUT_OF_RANGE")
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
