//! The kernel's outputs as Python values.
//!
//! Contract: answers that a host acts on at high rates (sessions, leases, verdicts, events)
//! are small immutable classes wrapping the kernel's owned value, converted field by field
//! only when read; observability answers (digest, resource_state, stats, snapshot, config)
//! are plain `dict`s of `int`, `str`, `bool`, `None` and lists, ready for `json.dumps`.
//! Names are the kernel's stable upper-case names (`"GRANTED"`, `"MUTATES"`, ...).

use klock_core::{
    Blocker, Config, Event, Holder, Lease, ResourceState, SessionInfo, Snapshot, StateDigest,
    Stats, Verdict, Waiter,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

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
            } => {
                let by: Vec<u64> = held_by.iter().map(|b| b.session_id.0).collect();
                format!("Verdict(DIE, retry_after_ms={retry_after_ms}, held_by={by:?})")
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
    /// `GRANTED`, `WAIT_TIMEOUT`, `DIED`, `LEASE_EXPIRED`, `WOUNDED` or `SESSION_CLOSED`.
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
    /// GRANTED: the leases, one per distinct intent of the ticket.
    #[getter]
    fn leases<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        match &self.0 {
            Event::Granted { leases, .. } => leases_list(py, leases).map(Some),
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
            Event::WaitTimeout { ticket, .. } => format!("ticket={ticket}"),
            Event::Died {
                ticket,
                retry_after_ms,
                ..
            } => format!("ticket={ticket}, retry_after_ms={retry_after_ms}"),
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

// ---- dicts -------------------------------------------------------------------------------

pub fn lease_dict<'py>(py: Python<'py>, l: &Lease) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("lease_id", l.lease_id.0)?;
    d.set_item("session_id", l.session_id.0)?;
    d.set_item("agent_id", &l.agent_id)?;
    d.set_item("resource", &l.resource)?;
    d.set_item("predicate", l.predicate.name())?;
    d.set_item("fence", l.fence)?;
    d.set_item("acquired_at", l.acquired_at)?;
    d.set_item("expires_at", l.expires_at)?;
    d.set_item("ttl_ms", l.ttl_ms)?;
    Ok(d)
}

pub fn config_dict<'py>(py: Python<'py>, c: &Config) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("policy", c.policy.name())?;
    d.set_item("seed", c.seed)?;
    d.set_item("default_ttl_ms", c.default_ttl_ms)?;
    d.set_item("max_ttl_ms", c.max_ttl_ms)?;
    d.set_item("default_wait_timeout_ms", c.default_wait_timeout_ms)?;
    d.set_item("backoff_base_ms", c.backoff_base_ms)?;
    d.set_item("backoff_cap_ms", c.backoff_cap_ms)?;
    d.set_item("grace_ms", c.grace_ms)?;
    d.set_item("session_idle_ms", c.session_idle_ms)?;
    d.set_item("max_leases_per_session", c.max_leases_per_session)?;
    d.set_item("max_lease_lifetime_ms", c.max_lease_lifetime_ms)?;
    Ok(d)
}

pub fn digest_dict<'py>(py: Python<'py>, digest: &StateDigest) -> PyResult<Bound<'py, PyDict>> {
    let identity = PyDict::new(py);
    let i = &digest.identity;
    identity.set_item("agent_id", &i.agent_id)?;
    identity.set_item("namespace", &i.namespace)?;
    identity.set_item("session_id", i.session_id.0)?;
    identity.set_item("priority_timestamp", i.priority_timestamp)?;
    identity.set_item("epoch", i.epoch)?;
    let recovery = PyDict::new(py);
    recovery.set_item("last_phase", &digest.recovery.last_phase)?;
    recovery.set_item(
        "pending_intents",
        PyList::new(py, &digest.recovery.pending_intents)?,
    )?;
    let d = PyDict::new(py);
    d.set_item("version", digest.version)?;
    d.set_item("identity", identity)?;
    d.set_item("recovery", recovery)?;
    Ok(d)
}

fn holder_dict<'py>(py: Python<'py>, h: &Holder) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("session_id", h.session_id.0)?;
    d.set_item("agent_id", &h.agent_id)?;
    d.set_item("lease_id", h.lease_id.0)?;
    d.set_item("resource", &h.resource)?;
    d.set_item("predicate", h.predicate.name())?;
    d.set_item("fence", h.fence)?;
    d.set_item("expires_at", h.expires_at)?;
    Ok(d)
}

fn waiter_dict<'py>(py: Python<'py>, w: &Waiter) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("session_id", w.session_id.0)?;
    d.set_item("agent_id", &w.agent_id)?;
    d.set_item("ticket", w.ticket.0)?;
    d.set_item("predicate", w.predicate.name())?;
    d.set_item("position", w.position)?;
    d.set_item("deadline", w.deadline)?;
    Ok(d)
}

pub fn resource_state_dict<'py>(
    py: Python<'py>,
    s: &ResourceState,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("resource", &s.resource)?;
    d.set_item("namespace", &s.namespace)?;
    d.set_item("holders", collect(py, &s.holders, holder_dict)?)?;
    d.set_item("waiting", collect(py, &s.waiting, waiter_dict)?)?;
    d.set_item("covering", collect(py, &s.covering, holder_dict)?)?;
    Ok(d)
}

fn collect<'py, T>(
    py: Python<'py>,
    items: &[T],
    f: impl Fn(Python<'py>, &T) -> PyResult<Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for item in items {
        list.append(f(py, item)?)?;
    }
    Ok(list)
}

pub fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let c = &s.counters;
    let counters = PyDict::new(py);
    for (name, value) in [
        ("sessions_opened", c.sessions_opened),
        ("granted", c.granted),
        ("waited", c.waited),
        ("died", c.died),
        ("timed_out", c.timed_out),
        ("expired", c.expired),
        ("wounded", c.wounded),
        ("released", c.released),
        ("cancelled", c.cancelled),
        ("idle_closed", c.idle_closed),
        ("defensive_repairs", c.defensive_repairs),
    ] {
        counters.set_item(name, value)?;
    }
    let top = PyList::empty(py);
    for t in &s.top_contended {
        let d = PyDict::new(py);
        d.set_item("namespace", &t.namespace)?;
        d.set_item("resource", &t.resource)?;
        d.set_item("blocked", t.blocked)?;
        top.append(d)?;
    }
    let ghosts = PyList::empty(py);
    for g in &s.ghost_agents {
        let d = PyDict::new(py);
        d.set_item("agent_id", &g.agent_id)?;
        d.set_item("expired_leases", g.expired_leases)?;
        d.set_item("wait_timeouts", g.wait_timeouts)?;
        ghosts.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("counters", counters)?;
    d.set_item("active_sessions", s.active_sessions)?;
    d.set_item("active_leases", s.active_leases)?;
    d.set_item("waiting_tickets", s.waiting_tickets)?;
    d.set_item("top_contended", top)?;
    d.set_item("ghost_agents", ghosts)?;
    Ok(d)
}

pub fn snapshot_dict<'py>(py: Python<'py>, s: &Snapshot) -> PyResult<Bound<'py, PyDict>> {
    let sessions = PyList::empty(py);
    for v in &s.sessions {
        let d = PyDict::new(py);
        d.set_item("session_id", v.session_id.0)?;
        d.set_item("agent_id", &v.agent_id)?;
        d.set_item("namespace", &v.namespace)?;
        d.set_item("priority", v.priority)?;
        d.set_item("epoch", v.epoch)?;
        d.set_item("suspended", v.suspended)?;
        d.set_item("leases", v.leases)?;
        d.set_item(
            "tickets",
            v.tickets.iter().map(|t| t.0).collect::<Vec<u64>>(),
        )?;
        d.set_item("die_count", v.die_count)?;
        d.set_item("last_active", v.last_active)?;
        sessions.append(d)?;
    }
    let tickets = PyList::empty(py);
    for t in &s.tickets {
        let d = PyDict::new(py);
        d.set_item("ticket", t.ticket.0)?;
        d.set_item("session_id", t.session_id.0)?;
        d.set_item("agent_id", &t.agent_id)?;
        let intents: Vec<(&str, &str)> = t
            .intents
            .iter()
            .map(|i| (i.predicate.name(), i.resource.as_str()))
            .collect();
        d.set_item("intents", intents)?;
        d.set_item("deadline", t.deadline)?;
        tickets.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("now", s.now)?;
    d.set_item("policy", s.policy.name())?;
    d.set_item("next_deadline", s.next_deadline)?;
    d.set_item("sessions", sessions)?;
    d.set_item("leases", collect(py, &s.leases, lease_dict)?)?;
    d.set_item("tickets", tickets)?;
    d.set_item("stats", stats_dict(py, &s.stats)?)?;
    Ok(d)
}
