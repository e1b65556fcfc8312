//! `klock._core`: the Klock kernel (`klock-core`) for Python, 1:1 and translation only.
//!
//! Contract: every SPEC.md operation of the kernel is a method of [`kernel::PyKernel`] taking
//! the same arguments (`now` last) and giving the same answer as Python values; the drive
//! contract is the kernel's (`poll_event`/`drain_events`, `next_deadline`, `advance`). No
//! lease, queue or time rule lives here: arguments are converted ([`args`]), the kernel
//! decides, answers are converted ([`values`]) and errors mapped ([`errors`]). The friendly
//! client (`klock` package) is written in Python on top of this module.

mod args;
mod errors;
mod kernel;
mod values;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Splits `"PREDICATE TYPE:/path"` and validates it: `(canonical predicate, canonical resource)`.
#[pyfunction]
fn parse_intent(py: Python<'_>, intent: &Bound<'_, PyAny>) -> PyResult<(&'static str, String)> {
    use errors::OrRaise;
    let text = args::str_arg(intent, "intent")?;
    let (predicate, resource) = klock_core::parse_intent(text).or_raise(py)?;
    Ok((predicate.name(), resource.into_string()))
}

/// The backoff of SPEC §8, `min(cap_ms, base_ms · 2^attempts) + draw mod base_ms`, for the
/// pauses a client sizes itself (after WOUNDED, which carries no hint): one formula, the
/// kernel's.
#[pyfunction]
fn retry_after_ms(
    base_ms: &Bound<'_, PyAny>,
    cap_ms: &Bound<'_, PyAny>,
    attempts: &Bound<'_, PyAny>,
    draw: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let attempts = args::u64_arg(attempts, "attempts")?;
    Ok(klock_core::retry_after_ms(
        args::u64_arg(base_ms, "base_ms")?,
        args::u64_arg(cap_ms, "cap_ms")?,
        u32::try_from(attempts).unwrap_or(u32::MAX),
        args::u64_arg(draw, "draw")?,
    ))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<values::PySessionInfo>()?;
    m.add_class::<values::PyLease>()?;
    m.add_class::<values::PyBlocker>()?;
    m.add_class::<values::PyVerdict>()?;
    m.add_class::<values::PyEvent>()?;
    m.add("KlockError", py.get_type::<errors::KlockError>())?;
    m.add("InvalidInput", py.get_type::<errors::InvalidInput>())?;
    m.add("UnknownId", py.get_type::<errors::UnknownId>())?;
    m.add("StateError", py.get_type::<errors::StateError>())?;
    m.add("QuotaExceeded", py.get_type::<errors::QuotaExceeded>())?;
    m.add_function(wrap_pyfunction!(parse_intent, m)?)?;
    m.add_function(wrap_pyfunction!(retry_after_ms, m)?)?;
    let codes = PyDict::new(py);
    for code in klock_core::ErrorCode::ALL {
        codes.set_item(code.name(), code.code())?;
    }
    m.add("ERROR_CODES", codes)?;
    m.add("MAX_MANIFEST_INTENTS", klock_core::MAX_MANIFEST_INTENTS)?;
    m.add("MAX_RESOURCE_BYTES", klock_core::MAX_RESOURCE_BYTES)?;
    m.add("MAX_NAME_BYTES", klock_core::MAX_NAME_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
