//! `klock._core.after_setback`: the core's decision after an attempt to acquire that was not
//! granted ([`klock_core::client::Acquisition`]), for the friendly client's acquisition loop.
//!
//! Contract: translation only. The setback's kind and numbers come in as the client has
//! them (the verdict's or event's kind, `retry_after_ms`, the wait the attempt asked for);
//! the core's answer goes out as `(what, ms)`: `("ask_again", 0)`, `("sleep", ms)`,
//! `("died", 0)`, or `("timeout_no_wait" | "timeout_wait_ended" | "timeout_retry_too_late",
//! 0)`, so the client raises its own errors with its own messages. An unknown kind is a
//! `ValueError` naming it.

use klock_core::client::{Acquisition, Setback};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// What to do after a setback at `now` for an acquisition whose budget ends at `deadline`
/// (`None`: no client-side limit); see the module contract.
#[pyfunction]
pub fn after_setback(
    deadline: Option<u64>,
    setback: &str,
    retry_after_ms: u64,
    asked_wait_ms: Option<u64>,
    holds_others: bool,
    now: u64,
) -> PyResult<(&'static str, u64)> {
    let Some(setback) = Setback::of_kind(setback, retry_after_ms, asked_wait_ms) else {
        return Err(PyValueError::new_err(format!(
            "setback must be one of {:?}, not {setback:?}",
            Setback::KINDS
        )));
    };
    let next = Acquisition::until(deadline).after(setback, holds_others, now);
    Ok((next.name(), next.sleep_ms()))
}
