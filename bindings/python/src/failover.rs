//! `klock._core.Servers` and `klock._core.Attempts`: which node of a cluster a remote call
//! asks next, and when it gives up ([`klock_core::client::failover`]), for the remote
//! client's retry loop (`klock.remote`).
//!
//! Contract: translation only. Nodes are positions in the client's list of URLs (the client
//! keeps the URLs); times are the client's monotonic milliseconds. An attempt's outcome
//! comes in as the client saw it (`"answered"`, `"unreachable"`, `"unavailable"`: a 503,
//! `"busy"`: a 429, with the server's `Retry-After` in milliseconds or `None`); the core's
//! answer goes out as `(what, node, ms)`: `("done", node, 0)`, `("retry", node, after_ms)`,
//! `("gave_up_unreachable", node, 0)` or `("gave_up_busy", node, 0)`, so the client sends,
//! waits and raises its own errors with its own messages. An empty list and an unknown
//! outcome are `ValueError`s naming them.

use klock_core::client::failover::{Attempts, GaveUp, Next, Outcome, Servers};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The outcomes an attempt can have, by name.
const OUTCOMES: [&str; 4] = ["answered", "unreachable", "unavailable", "busy"];

/// A client's servers and the node it prefers (the core's [`Servers`]).
#[pyclass(module = "klock._core", name = "Servers")]
pub struct PyServers(Servers);

#[pymethods]
impl PyServers {
    #[new]
    fn new(count: usize) -> PyResult<Self> {
        Servers::new(count)
            .map(PyServers)
            .map_err(|_| PyValueError::new_err("a client needs at least one server URL, got none"))
    }

    /// How many servers.
    #[getter]
    fn count(&self) -> usize {
        self.0.count()
    }

    /// The node a call starts with: the last that answered.
    #[getter]
    fn preferred(&self) -> usize {
        self.0.preferred()
    }

    /// An answer named `leader` (its `Klock-Leader`) as the cluster's leader: the node among
    /// `urls` (the client's, in order) that it names is preferred from now on and returned;
    /// `None` when it names none of them.
    fn led_by(&mut self, leader: &str, urls: Vec<String>) -> Option<usize> {
        self.0.led_by(leader, urls.iter().map(String::as_str))
    }

    /// A call started at `now_ms` with `budget_ms` to get an answer.
    fn call(&self, now_ms: u64, budget_ms: u64) -> PyAttempts {
        PyAttempts(self.0.call(now_ms, budget_ms))
    }

    /// A best-effort call: every node once, without pauses, within `budget_ms`.
    fn call_once(&self, now_ms: u64, budget_ms: u64) -> PyAttempts {
        PyAttempts(self.0.call_once(now_ms, budget_ms))
    }
}

/// One call's attempts (the core's [`Attempts`]).
#[pyclass(module = "klock._core", name = "Attempts")]
pub struct PyAttempts(Attempts);

#[pymethods]
impl PyAttempts {
    /// The node the next attempt goes to.
    #[getter]
    fn node(&self) -> usize {
        self.0.node()
    }

    /// When the budget ends, on the client's clock.
    #[getter]
    fn ends_ms(&self) -> u64 {
        self.0.ends_ms()
    }

    /// How long the attempt sent at `now_ms` may take (the request limit, cut to the budget).
    fn attempt_limit_ms(&self, now_ms: u64, request_limit_ms: u64) -> u64 {
        self.0.attempt_limit_ms(now_ms, request_limit_ms)
    }

    /// What to do after the attempt to `node` ended with `outcome` at `now_ms`.
    #[pyo3(signature = (servers, outcome, retry_after_ms, now_ms))]
    fn after(
        &mut self,
        mut servers: PyRefMut<'_, PyServers>,
        outcome: &str,
        retry_after_ms: Option<u64>,
        now_ms: u64,
    ) -> PyResult<(&'static str, usize, u64)> {
        let outcome = match outcome {
            "answered" => Outcome::Answered,
            "unreachable" => Outcome::Unreachable,
            "unavailable" => Outcome::Unavailable { retry_after_ms },
            "busy" => Outcome::Busy { retry_after_ms },
            other => {
                return Err(PyValueError::new_err(format!(
                    "outcome must be one of {OUTCOMES:?}, not {other:?}"
                )))
            }
        };
        let node = self.0.node();
        Ok(match self.0.after(&mut servers.0, outcome, now_ms) {
            Next::Done => ("done", node, 0),
            Next::Retry { node, after_ms } => ("retry", node, after_ms),
            Next::GiveUp(GaveUp::Unreachable) => ("gave_up_unreachable", node, 0),
            Next::GiveUp(GaveUp::Busy) => ("gave_up_busy", node, 0),
        })
    }
}
