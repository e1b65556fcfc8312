//! Kernel errors as Python exceptions.
//!
//! Contract: every `klock_core::Error` becomes an instance of one exception class per code
//! family, all subclasses of `KlockError`, carrying `.code` (the stable number), `.name` (the
//! stable upper-case name) and `.message` (what to fix). Wrong Python types and out-of-range
//! numbers never reach the kernel: they are `TypeError`, `ValueError` or `OverflowError`
//! raised by the argument conversion (see `args`).

use klock_core::{Error, ErrorCode};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(
    klock._core,
    KlockError,
    PyException,
    "Base class of every Klock error: `.code` (int), `.name` (str) and `.message` (str)."
);
pyo3::create_exception!(
    klock._core,
    InvalidInput,
    KlockError,
    "Bad input rejected by the kernel (codes 1xx: INVALID_RESOURCE, INVALID_PREDICATE, ...)."
);
pyo3::create_exception!(
    klock._core,
    UnknownId,
    KlockError,
    "An identifier the kernel does not know (codes 2xx: UNKNOWN_SESSION, UNKNOWN_LEASE, UNKNOWN_TICKET)."
);
pyo3::create_exception!(
    klock._core,
    StateError,
    KlockError,
    "The call conflicts with the current state (codes 3xx: NOT_OWNER, LEASE_EXPIRED, HOLD_AND_WAIT, ...)."
);
pyo3::create_exception!(
    klock._core,
    QuotaExceeded,
    KlockError,
    "A limit was reached (codes 4xx: QUOTA_EXCEEDED)."
);

/// The exception for a kernel error, with `.code`, `.name` and `.message` set.
pub fn to_py(py: Python<'_>, error: Error) -> PyErr {
    let text = format!("{}: {}", error.code.name(), error.message);
    let err = match error.code.code() / 100 {
        1 => PyErr::new::<InvalidInput, _>(text),
        2 => PyErr::new::<UnknownId, _>(text),
        3 => PyErr::new::<StateError, _>(text),
        4 => PyErr::new::<QuotaExceeded, _>(text),
        _ => PyErr::new::<KlockError, _>(text),
    };
    if let Err(e) = annotate(py, &err, error.code, &error.message) {
        return e;
    }
    err
}

fn annotate(py: Python<'_>, err: &PyErr, code: ErrorCode, message: &str) -> PyResult<()> {
    let value = err.value(py);
    value.setattr("code", code.code())?;
    value.setattr("name", code.name())?;
    value.setattr("message", message)?;
    Ok(())
}

/// Converts a kernel result, raising the mapped exception on error.
pub trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
