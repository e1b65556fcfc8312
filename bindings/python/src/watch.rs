//! `klock._core.Follow`: where a remote client's watch of one namespace resumes, and when it
//! may have missed events ([`klock_core::client::watch::Follow`]), for the event reader of
//! `klock.remote`.
//!
//! Contract: translation only. `Follow(entry, log)` reads from log entry `entry` on (an open's
//! or resume's `Klock-Index`) of log `log` (the answer's `log`, if any), `Follow()` from the
//! oldest kept event; `after` is the id to ask after (`None`: ask without `after=`) and `log`
//! the log it is of (`None`: not known; else the query's `log=`); `opened(entry, log)` notes
//! a session of the stream opened by entry `entry` of log `log` (on another log the stream
//! moves to it); `failed()` notes a poll that gave up; `answered(node, next, gap, log)` takes
//! a poll's answer (`node`: its position in the client's list of URLs; `log` its `log`, if
//! any) and says whether events may have been missed (`True`: renew every held lease of the
//! namespace now). A `next` that is not an event id is a `ValueError` naming
//! it, and moves nothing.
//!
//! `ends(event)` is the core's [`watch::ends`]: which of its session's leases an event ends,
//! for a kernel `Event` or any object with the server's field names (`event`, `lease`,
//! `lost_leases`: the remote client's events); `None` for an event that ends none, else
//! `(lease_ids, name)` with `lease_ids` `None` when every lease of the session ends (it was
//! closed) and `name` the kernel's. Fields of the wrong type are a `TypeError` naming them.
//! `LOST_AT_LOCAL_DEADLINE` is the core's name of a lease lost at its local deadline.

use crate::args;
use crate::values::PyEvent;
use klock_core::client::watch::{self, Ended, Ending, Follow, Resync};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A client's cursor on one namespace's watch (the core's [`Follow`]).
#[pyclass(module = "klock._core", name = "Follow")]
pub struct PyFollow(Follow);

#[pymethods]
impl PyFollow {
    #[new]
    #[pyo3(signature = (entry=None, log=None))]
    fn new(entry: Option<u64>, log: Option<&str>) -> Self {
        PyFollow(entry.map_or_else(Follow::new, |entry| Follow::from_entry(entry, log)))
    }

    /// The event id to ask after, or `None`: from the oldest kept event.
    #[getter]
    fn after(&self) -> Option<String> {
        self.0.after().map(|after| after.to_string())
    }

    /// The log the cursor is of (the query's `log=`), or `None`: not known yet.
    #[getter]
    fn log(&self) -> Option<&str> {
        self.0.log()
    }

    /// A session of the stream was opened (or resumed) by log entry `entry` of log `log`.
    #[pyo3(signature = (entry, log=None))]
    fn opened(&mut self, entry: u64, log: Option<&str>) {
        self.0.opened(entry, log);
    }

    /// How long the next poll asks the server to wait for an event: `long`, or 0 right after a
    /// failed poll (its answer is the resync's).
    fn wait_ms(&self, long: u64) -> u64 {
        self.0.wait_ms(long)
    }

    /// A poll failed: the next answer may follow missed events.
    fn failed(&mut self) {
        self.0.failed();
    }

    /// A poll answered by node `node` with `next`, `gap` and `log`: whether to resync the
    /// held leases (the events are routed first).
    #[pyo3(signature = (node, next, gap, log=None))]
    fn answered(
        &mut self,
        node: usize,
        next: &str,
        gap: bool,
        log: Option<&str>,
    ) -> PyResult<bool> {
        match self.0.answered(node, next, gap, log) {
            Ok(resync) => Ok(resync == Resync::Held),
            Err(bad) => Err(PyValueError::new_err(format!("{bad}, not {next:?}"))),
        }
    }
}

/// What an event ends, as `ends` answers it (module contract).
type PyEnded = Option<(Option<Vec<u64>>, &'static str)>;

/// Which of its session's leases `event` ends, and the kernel's name for why (module
/// contract).
#[pyfunction]
pub fn ends(event: &Bound<'_, PyAny>) -> PyResult<PyEnded> {
    if let Ok(kernel) = event.cast::<PyEvent>() {
        return Ok(watch::ends(&kernel.get().0).map(|(ended, name)| {
            let ids = match ended {
                Ended::Leases(ids) => Some(ids.iter().map(|id| id.0).collect()),
                Ended::All => None,
            };
            (ids, name)
        }));
    }
    let kind = event.getattr("event")?;
    let Some(ending) = watch::ending(args::str_arg(&kind, "event.event")?) else {
        return Ok(None);
    };
    let ids = match ending {
        // A field the event leaves out (`None`) names no lease.
        Ending::Lease => {
            let lease = event.getattr("lease")?;
            Some(match args::opt_u64_arg(Some(&lease), "event.lease")? {
                Some(id) => vec![id],
                None => Vec::new(),
            })
        }
        Ending::LostLeases => {
            let lost = event.getattr("lost_leases")?;
            Some(if lost.is_none() {
                Vec::new()
            } else {
                args::u64_list(&lost, "event.lost_leases")?
            })
        }
        Ending::Session => None,
    };
    Ok(Some((ids, ending.name())))
}
