//! The kernel's outputs as Python values.
//!
//! Contract: answers that a host acts on at high rates (sessions, leases, verdicts, events)
//! are small immutable classes wrapping the kernel's owned value, converted field by field
//! only when read; observability answers (digest, resource_state, stats, snapshot, config)
//! are plain `dict`s of `int`, `str`, `bool`, `None` and lists, ready for `json.dumps`, made
//! from the kernel's serde shape ([`plain`]) so that they hold exactly its fields.
//! Names are the kernel's stable upper-case names (`"GRANTED"`, `"MUTATES"`, ...).

use klock_core::{Blocker, Event, Lease, SessionInfo, Verdict};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};
use serde_json::Value;

/// A session as opened or resumed.
#[pyclass(frozen, eq, module = "klock._core", name = "SessionInfo")]
#[derive(PartialEq)]
pub struct PySessionInfo(pub SessionInfo);

#[pymethods]
impl PySessionInfo {
    #[getter]
    fn session_id(&self) -> u64 {
        self.0.session_id.0
    }
    #[getter]
    fn agent_id(&self) -> &str {
        &self.0.agent_id
    }
    #[getter]
    fn namespace(&self) -> &str {
        &self.0.namespace
    }
    /// Smaller = older = higher priority; only the order is meaningful.
    #[getter]
    fn priority(&self) -> u64 {
        self.0.priority
    }
    #[getter]
    fn epoch(&self) -> u64 {
        self.0.epoch
    }
    fn __repr__(&self) -> String {
        let s = &self.0;
        format!(
            "SessionInfo(session_id={}, agent_id={:?}, namespace={:?}, priority={}, epoch={})",
            s.session_id, s.agent_id, s.namespace, s.priority, s.epoch
        )
    }
}

/// A granted lease.
#[pyclass(frozen, eq, module = "klock._core", name = "Lease")]
#[derive(PartialEq)]
pub struct PyLease(pub Lease);

#[pymethods]
impl PyLease {
    #[getter]
    fn lease_id(&self) -> u64 {
        self.0.lease_id.0
    }
    #[getter]
    fn session_id(&self) -> u64 {
        self.0.session_id.0
    }
    #[getter]
    fn agent_id(&self) -> &str {
        &self.0.agent_id
    }
    #[getter]
    fn resource(&self) -> &str {
        &self.0.resource
    }
    #[getter]
    fn predicate(&self) -> &'static str {
        self.0.predicate.name()
    }
    #[getter]
    fn fence(&self) -> u64 {
        self.0.fence
    }
    #[getter]
    fn acquired_at(&self) -> u64 {
        self.0.acquired_at
    }
    #[getter]
    fn expires_at(&self) -> u64 {
        self.0.expires_at
    }
    #[getter]
    fn ttl_ms(&self) -> u64 {
        self.0.ttl_ms
    }
    fn __repr__(&self) -> String {
        let l = &self.0;
        format!(
            "Lease(lease_id={}, session_id={}, agent_id={:?}, resource={:?}, predicate={:?}, fence={}, acquired_at={}, expires_at={}, ttl_ms={})",
            l.lease_id,
            l.session_id,
            l.agent_id,
            l.resource,
            l.predicate.name(),
            l.fence,
            l.acquired_at,
            l.expires_at,
            l.ttl_ms
        )
    }
}

/// A session that blocks a request, with its conflicting intents.
#[pyclass(frozen, module = "klock._core", name = "Blocker")]
pub struct PyBlocker(pub Blocker);

#[pymethods]
impl PyBlocker {
    #[getter]
    fn session_id(&self) -> u64 {
        self.0.session_id.0
    }
    #[getter]
    fn agent_id(&self) -> &str {
        &self.0.agent_id
    }
    /// `(predicate, resource)` pairs, held or queued ahead.
    #[getter]
    fn intents(&self) -> Vec<(&'static str, &str)> {
        self.0
            .intents
            .iter()
            .map(|i| (i.predicate.name(), i.resource.as_str()))
            .collect()
    }
    fn __repr__(&self) -> String {
        let intents: Vec<String> = self
            .0
            .intents
            .iter()
            .map(|i| format!("{} {}", i.predicate.name(), i.resource))
            .collect();
        format!(
            "Blocker(session_id={}, agent_id={:?}, intents={:?})",
            self.0.session_id, self.0.agent_id, intents
        )
    }
}

fn leases_list<'py>(py: Python<'py>, leases: &[Lease]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, leases.iter().map(|l| PyLease(l.clone())))
}

fn blockers_list<'py>(py: Python<'py>, held_by: &[Blocker]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, held_by.iter().map(|b| PyBlocker(b.clone())))
}

/// The immediate answer to an acquire: GRANTED, WAIT or DIE.
#[pyclass(frozen, module = "klock._core", name = "Verdict")]
pub struct PyVerdict(pub Verdict);

#[pymethods]
impl PyVerdict {
    /// `"GRANTED"`, `"WAIT"` or `"DIE"`.
    #[getter]
    fn verdict(&self) -> &'static str {
        match self.0 {
            Verdict::Granted { .. } => "GRANTED",
            Verdict::Wait { .. } => "WAIT",
            Verdict::Die { .. } => "DIE",
        }
    }
    /// The granted leases (empty unless GRANTED).
    #[getter]
    fn leases<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match &self.0 {
            Verdict::Granted { leases } => leases_list(py, leases),
            _ => Ok(PyList::empty(py)),
        }
    }
    /// The WAIT ticket (None unless WAIT).
    #[getter]
    fn ticket(&self) -> Option<u64> {
        match self.0 {
            Verdict::Wait { ticket, .. } => Some(ticket.0),
            _ => None,
        }
    }
    /// How long to sleep before retrying (None unless DIE).
    #[getter]
    fn retry_after_ms(&self) -> Option<u64> {
        match self.0 {
            Verdict::Die { retry_after_ms, .. } => Some(retry_after_ms),
            _ => None,
        }
    }
    /// DIE under `detect`: the members of the wait-for cycle this request was the victim of,
    /// as session ids, this session first (SPEC.md §6.1); empty otherwise.
    #[getter]
    fn cycle(&self) -> Vec<u64> {
        match &self.0 {
            Verdict::Die { cycle, .. } => cycle.iter().map(|s| s.0).collect(),
            _ => Vec::new(),
        }
    }
    /// The blocking sessions (empty when GRANTED).
    #[getter]
    fn held_by<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        match &self.0 {
            Verdict::Wait { held_by, .. } | Verdict::Die { held_by, .. } => {
                blockers_list(py, held_by)
            }
            Verdict::Granted { .. } => Ok(PyList::empty(py)),
        }
    }
    fn __repr__(&self) -> String {
        match &self.0 {
            Verdict::Granted { leases } => {
                let ids: Vec<u64> = leases.iter().map(|l| l.lease_id.0).collect();
                format!("Verdict(GRANTED, leases={ids:?})")
            }
            Verdict::Wait { ticket, held_by } => {
                let by: Vec<u64> = held_by.iter().map(|b| b.session_id.0).collect();
                format!("Verdict(WAIT, ticket={ticket}, held_by={by:?})")
            }
            Verdict::Die {
                retry_after_ms,
                held_by,
                cycle,
            } => {
                let by: Vec<u64> = held_by.iter().map(|b| b.session_id.0).collect();
                let members: Vec<u64> = cycle.iter().map(|s| s.0).collect();
                format!(
                    "Verdict(DIE, retry_after_ms={retry_after_ms}, held_by={by:?}, cycle={members:?})"
                )
            }
        }
    }
}

/// Something that happened other than as a direct answer (SPEC.md §9). Fields that do not
/// apply to the event kind are `None`.
#[pyclass(frozen, module = "klock._core", name = "Event")]
pub struct PyEvent(pub Event);

#[pymethods]
impl PyEvent {
    /// `GRANTED`, `ACQUIRED`, `RELEASED`, `WAIT_TIMEOUT`, `DIED`, `LEASE_EXPIRED`, `WOUNDED` or
    /// `SESSION_CLOSED`.
    #[getter]
    fn event(&self) -> &'static str {
        self.0.name()
    }
    /// The session the event concerns.
    #[getter]
    fn session(&self) -> u64 {
        self.0.session().0
    }
    /// GRANTED, WAIT_TIMEOUT, DIED: the ticket.
    #[getter]
    fn ticket(&self) -> Option<u64> {
        match self.0 {
            Event::Granted { ticket, .. }
            | Event::WaitTimeout { ticket, .. }
            | Event::Died { ticket, .. } => Some(ticket.0),
            _ => None,
        }
    }
    /// GRANTED and ACQUIRED: the leases (`Lease`), one per distinct intent of the request;
    /// RELEASED: the ids of the leases released, ascending.
    #[getter]
    fn leases<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        match &self.0 {
            Event::Granted { leases, .. } | Event::Acquired { leases, .. } => {
                leases_list(py, leases).map(Some)
            }
            Event::Released { leases, .. } => PyList::new(py, leases.iter().map(|l| l.0)).map(Some),
            _ => Ok(None),
        }
    }
    /// DIED and WOUNDED: how long to sleep before retrying (both count as a DIE, SPEC.md §8).
    #[getter]
    fn retry_after_ms(&self) -> Option<u64> {
        match self.0 {
            Event::Died { retry_after_ms, .. } | Event::Wounded { retry_after_ms, .. } => {
                Some(retry_after_ms)
            }
            _ => None,
        }
    }
    /// DIED: the members of the wait-for cycle this ticket was the victim of under `detect`,
    /// this session first (SPEC.md §6.1); empty when it died for another reason.
    #[getter]
    fn cycle(&self) -> Option<Vec<u64>> {
        match &self.0 {
            Event::Died { cycle, .. } => Some(cycle.iter().map(|s| s.0).collect()),
            _ => None,
        }
    }
    /// LEASE_EXPIRED: the lease.
    #[getter]
    fn lease(&self) -> Option<u64> {
        match self.0 {
            Event::LeaseExpired { lease, .. } => Some(lease.0),
            _ => None,
        }
    }
    /// WOUNDED: the older session that wounded this one.
    #[getter]
    fn by(&self) -> Option<u64> {
        match self.0 {
            Event::Wounded { by, .. } => Some(by.0),
            _ => None,
        }
    }
    /// WOUNDED: the leases the session lost.
    #[getter]
    fn lost_leases(&self) -> Option<Vec<u64>> {
        match &self.0 {
            Event::Wounded { lost_leases, .. } => Some(lost_leases.iter().map(|l| l.0).collect()),
            _ => None,
        }
    }
    /// WOUNDED: the waiting tickets the session lost.
    #[getter]
    fn lost_tickets(&self) -> Option<Vec<u64>> {
        match &self.0 {
            Event::Wounded { lost_tickets, .. } => Some(lost_tickets.iter().map(|t| t.0).collect()),
            _ => None,
        }
    }
    /// SESSION_CLOSED: why (`"IDLE"`).
    #[getter]
    fn reason(&self) -> Option<&'static str> {
        match self.0 {
            Event::SessionClosed { reason, .. } => Some(reason.name()),
            _ => None,
        }
    }
    fn __repr__(&self) -> String {
        let detail = match &self.0 {
            Event::Granted { ticket, leases, .. } => {
                let ids: Vec<u64> = leases.iter().map(|l| l.lease_id.0).collect();
                format!("ticket={ticket}, leases={ids:?}")
            }
            Event::Acquired { leases, .. } => {
                let ids: Vec<u64> = leases.iter().map(|l| l.lease_id.0).collect();
                format!("leases={ids:?}")
            }
            Event::Released { leases, .. } => {
                let ids: Vec<u64> = leases.iter().map(|l| l.0).collect();
                format!("leases={ids:?}")
            }
            Event::WaitTimeout { ticket, .. } => format!("ticket={ticket}"),
            Event::Died {
                ticket,
                retry_after_ms,
                cycle,
                ..
            } => {
                let members: Vec<u64> = cycle.iter().map(|s| s.0).collect();
                format!("ticket={ticket}, retry_after_ms={retry_after_ms}, cycle={members:?}")
            }
            Event::LeaseExpired { lease, .. } => format!("lease={lease}"),
            Event::Wounded {
                by,
                lost_leases,
                lost_tickets,
                retry_after_ms,
                ..
            } => {
                let leases: Vec<u64> = lost_leases.iter().map(|l| l.0).collect();
                let tickets: Vec<u64> = lost_tickets.iter().map(|t| t.0).collect();
                format!(
                    "by={by}, lost_leases={leases:?}, lost_tickets={tickets:?}, retry_after_ms={retry_after_ms}"
                )
            }
            Event::SessionClosed { reason, .. } => format!("reason={:?}", reason.name()),
        };
        format!(
            "Event({}, session={}, {detail})",
            self.0.name(),
            self.0.session()
        )
    }
}

// ---- plain data ----------------------------------------------------------------------------

/// `value` as plain Python data (`dict`, `list`, `int`, `str`, `bool`, `None`) in the kernel's
/// own serde shape: the canonical JSON that conformance scripts record and the server speaks.
/// Every field comes from the core's type, so these answers cannot drift from it.
pub fn plain<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(value)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot convert the kernel's answer: {e}")))?;
    json_to_py(py, &json)
}

fn json_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        // The kernel's numbers are all u64 (ids, times, counts); anything else is shown as
        // serde_json holds it rather than refused.
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            (None, None) => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, json_to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}
