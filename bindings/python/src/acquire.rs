//! `klock._core.Acquisition`: the core's rules for one acquisition of the friendly client
//! ([`klock_core::client::Acquisition`]): its budget, the wait each attempt asks for, and what
//! to do after an attempt that was not granted.
//!
//! Contract: translation only. The budget comes in as the client has it (the first attempt's
//! `now` and the timeout in milliseconds, or the kernel's default wait); the setback's kind
//! and numbers as the client has them (the verdict's or event's kind, `retry_after_ms`, the
//! wait the attempt asked for); the core's answer goes out as `(what, ms)`: `("ask_again",
//! 0)`, `("sleep", ms)`, `("died", 0)`, or `("timeout_no_wait" | "timeout_wait_ended" |
//! "timeout_retry_too_late", 0)`, so the client raises its own errors with its own messages.
//! An unknown kind is a `ValueError` naming it. `AFTER_NO_WAIT_DIE` (a module constant) is
//! the answer to a DIE to an attempt that asked for no wait, which depends on nothing else.

use klock_core::client::{Acquisition, Setback};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One acquisition's budget (see the module contract).
#[pyclass(frozen, module = "klock._core", name = "Acquisition")]
pub struct PyAcquisition(Acquisition);

#[pymethods]
impl PyAcquisition {
    /// `Acquisition(now, timeout_ms)`: the first attempt is at `now`, with `timeout_ms` of
    /// budget (`None`: no client-side limit, each attempt waits with no end).
    #[new]
    fn new(now: u64, timeout_ms: Option<u64>) -> PyAcquisition {
        PyAcquisition(Acquisition::new(now, timeout_ms))
    }

    /// No client-side limit; each attempt waits the kernel's default wait, then asks again.
    #[staticmethod]
    fn kernel_default() -> PyAcquisition {
        PyAcquisition(Acquisition::kernel_default())
    }

    /// The end of the budget (`None`: no client-side limit).
    #[getter]
    fn deadline(&self) -> Option<u64> {
        self.0.deadline()
    }

    /// The wait an attempt at `now` asks the kernel for: what is left of the budget (`0`: no
    /// wait); `2**64-1` without a limit; `None` for the kernel's default.
    fn wait_ms(&self, now: u64) -> Option<u64> {
        self.0.wait_ms(now)
    }

    /// What to do after a setback (`"DIE"`, `"DIED"`, `"WOUNDED"` or `"WAIT_TIMEOUT"`) at
    /// `now`: `(what, ms)`. `asked_wait_ms`: the wait a refused attempt asked for (a DIE's);
    /// `holds_others`: the session holds other leases.
    fn after(
        &self,
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
        let next = self.0.after(setback, holds_others, now);
        Ok((next.name(), next.sleep_ms()))
    }
}
