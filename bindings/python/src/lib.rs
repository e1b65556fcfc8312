//! `klock._core`: the Klock kernel (`klock-core`) for Python, 1:1 and translation only.
//!
//! Contract: every SPEC.md operation of the kernel is a method of [`kernel::PyKernel`] taking
//! the same arguments (`now` last) and giving the same answer as Python values; the drive
//! contract is the kernel's (`poll_event`/`drain_events`, `next_deadline`, `advance`). No
//! lease, queue or time rule lives here: arguments are converted ([`args`]), the kernel
//! decides, answers are converted ([`values`]) and errors mapped ([`errors`]). The friendly
//! client (`klock` package) is written in Python on top of this module and of the core's
//! client rules it exposes: the ledger of lease blocks and a block's values ([`block`]), the
//! acquisition's budget and decisions after a setback ([`acquire`]), the remote client's
//! attempts over a cluster's nodes ([`failover`]), where its event stream resumes and which
//! leases an event ends ([`watch`]). None of them reads a clock or calls back into Python.

mod acquire;
mod args;
mod block;
mod errors;
mod failover;
mod kernel;
mod values;
mod watch;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// Splits `"PREDICATE TYPE:/path"` and validates it: `(canonical predicate, canonical resource)`.
#[pyfunction]
fn parse_intent(py: Python<'_>, intent: &Bound<'_, PyAny>) -> PyResult<(&'static str, String)> {
    use errors::OrRaise;
    let text = args::str_arg(intent, "intent")?;
    let (predicate, resource) = klock_core::parse_intent(text).or_raise(py)?;
    Ok((predicate.name(), resource.into_string()))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<block::PyLedger>()?;
    m.add_class::<block::PyBlock>()?;
    m.add_class::<acquire::PyAcquisition>()?;
    m.add_class::<values::PySessionInfo>()?;
    m.add_class::<values::PyLease>()?;
    m.add_class::<values::PyBlocker>()?;
    m.add_class::<values::PyVerdict>()?;
    m.add_class::<values::PyEvent>()?;
    m.add_class::<failover::PyServers>()?;
    m.add_class::<failover::PyAttempts>()?;
    m.add_class::<watch::PyFollow>()?;
    m.add("KlockError", py.get_type::<errors::KlockError>())?;
    m.add("InvalidInput", py.get_type::<errors::InvalidInput>())?;
    m.add("UnknownId", py.get_type::<errors::UnknownId>())?;
    m.add("StateError", py.get_type::<errors::StateError>())?;
    m.add("QuotaExceeded", py.get_type::<errors::QuotaExceeded>())?;
    m.add_function(wrap_pyfunction!(parse_intent, m)?)?;
    m.add(
        "AFTER_NO_WAIT_DIE",
        klock_core::client::Acquisition::AFTER_NO_WAIT_DIE.name(),
    )?;
    m.add_function(wrap_pyfunction!(watch::ends, m)?)?;
    m.add(
        "LOST_AT_LOCAL_DEADLINE",
        klock_core::client::watch::LOST_AT_LOCAL_DEADLINE,
    )?;
    m.add("LEADER_HEADER", klock_core::client::failover::LEADER_HEADER)?;
    // How many heartbeats one remote client has in flight at most (the core's rule).
    m.add(
        "MAX_RENEWALS_IN_FLIGHT",
        klock_core::client::renewals::MAX_RENEWALS_IN_FLIGHT,
    )?;
    // The kernel's catalogs, from its own lists (the stubs' Literal types are tested
    // against these).
    let codes = PyDict::new(py);
    for code in klock_core::ErrorCode::ALL {
        codes.set_item(code.name(), code.code())?;
    }
    m.add("ERROR_CODES", codes)?;
    let predicates = klock_core::Predicate::ALL.map(klock_core::Predicate::name);
    m.add("PREDICATES", PyTuple::new(py, predicates)?)?;
    m.add("EVENT_KINDS", PyTuple::new(py, klock_core::Event::KINDS)?)?;
    let fields: Vec<&str> = klock_core::Config::field_names().collect();
    m.add("CONFIG_FIELDS", PyTuple::new(py, fields)?)?;
    m.add("MAX_MANIFEST_INTENTS", klock_core::MAX_MANIFEST_INTENTS)?;
    m.add("MAX_RESOURCE_BYTES", klock_core::MAX_RESOURCE_BYTES)?;
    m.add("MAX_NAME_BYTES", klock_core::MAX_NAME_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
