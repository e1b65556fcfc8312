//! Error mapping: kernel errors become `KlockError`s, bad arguments `TypeError`s and
//! `RangeError`s with a Node-style `code`.
//!
//! Contract: every function here throws a JS exception on the environment and returns the
//! `napi::Error` (status `PendingException`) that the caller must return at once, so napi-rs
//! propagates the exception as it is. `KlockError` is one class per JS environment (main
//! thread or worker, see [`crate::shapes`]); `err instanceof KlockError` holds for every
//! kernel error of that environment.

use crate::shapes;
use crate::shared::OUT_OF_RANGE;
use napi::bindgen_prelude::*;
use napi::sys;

fn pending(message: impl Into<String>) -> Error {
    Error::new(Status::PendingException, message.into())
}

/// Throws `new KlockError(message, code, name)` for a kernel error.
pub fn kernel_error(env: &Env, e: &klock_core::Error) -> Error {
    let thrown = unsafe { shapes::klock_error(env.raw(), e) }.and_then(|error| {
        if unsafe { sys::napi_throw(env.raw(), error) } == sys::Status::napi_ok {
            Ok(())
        } else {
            Err(pending(""))
        }
    });
    match thrown {
        Ok(()) => pending(e.to_string()),
        // The class is unavailable (the environment is tearing down): napi-rs throws a
        // plain Error carrying the same text.
        Err(_) => Error::new(Status::GenericFailure, e.to_string()),
    }
}

/// Throws a `TypeError` with `code`.
pub fn type_error(env: &Env, code: &str, message: String) -> Error {
    match env.throw_type_error(&message, Some(code)) {
        Ok(()) => pending(message),
        Err(e) => e,
    }
}

/// Throws a `RangeError` with `code` `ERR_OUT_OF_RANGE`.
pub fn range_error(env: &Env, message: String) -> Error {
    match env.throw_range_error(&message, Some(OUT_OF_RANGE)) {
        Ok(()) => pending(message),
        Err(e) => e,
    }
}
