//! `klock._core.Follow`: where a remote client's watch of one namespace resumes, and when it
//! may have missed events ([`klock_core::client::watch::Follow`]), for the event reader of
//! `klock.remote`.
//!
//! Contract: translation only. `Follow(entry)` reads from log entry `entry` on (an open's or
//! resume's `Klock-Index`), `Follow()` from the oldest kept event; `after` is the id to ask
//! after (`None`: ask without `after=`); `failed()` notes a poll the client could not use;
//! `answered(node, next, gap)` takes a poll's answer (`node`: its position in the client's
//! list of URLs) and says whether events may have been missed (`True`: renew every held
//! lease of the namespace now). A `next` that is not an event id is a `ValueError` naming
//! it, and moves nothing.

use klock_core::client::watch::{Follow, Resync};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A client's cursor on one namespace's watch (the core's [`Follow`]).
#[pyclass(module = "klock._core", name = "Follow")]
pub struct PyFollow(Follow);

#[pymethods]
impl PyFollow {
    #[new]
    #[pyo3(signature = (entry=None))]
    fn new(entry: Option<u64>) -> Self {
        PyFollow(entry.map_or_else(Follow::new, Follow::from_entry))
    }

    /// The event id to ask after, or `None`: from the oldest kept event.
    #[getter]
    fn after(&self) -> Option<String> {
        self.0.after().map(|after| after.to_string())
    }

    /// A poll failed: the next answer may follow missed events.
    fn failed(&mut self) {
        self.0.failed();
    }

    /// A poll answered by node `node` with `next` and `gap`: whether to resync the held
    /// leases (the events are routed first).
    fn answered(&mut self, node: usize, next: &str, gap: bool) -> PyResult<bool> {
        match self.0.answered(node, next, gap) {
            Ok(resync) => Ok(resync == Resync::Held),
            Err(bad) => Err(PyValueError::new_err(format!("{bad}, not {next:?}"))),
        }
    }
}
