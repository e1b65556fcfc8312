//! `klock._core.Kernel`: one kernel behind a mutex, every SPEC.md operation 1:1.
//!
//! Contract: translation only. Each method converts its arguments (raising before the kernel
//! is touched when they are wrong), locks the kernel, makes exactly one kernel call (or, for
//! `drain_events`, polls until empty) and converts the answer. The object may be shared by
//! any number of threads; calls are serialised by the mutex. The GIL is released while the
//! kernel works on calls whose cost grows with the state (snapshot, stats, resource_state,
//! closing or releasing a whole session, advancing time, cloning); the constant-time calls
//! keep it, because releasing and re-taking it would cost more than the call itself.

use crate::args::{borrow_strs, opt_u64_arg, str_arg, str_list, u64_arg, u64_list, StrictBool};
use crate::errors::OrRaise;
use crate::values::{plain, PyEvent, PySessionInfo, PyVerdict};
use klock_core::{
    AcquireOptions, Config, DigestIdentity, DigestRecovery, Kernel, LeaseId, LeaseSelection,
    LeaseStatus, Policy, SessionId, StateDigest, TicketId,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::{Mutex, MutexGuard};

/// The coordination kernel (SPEC.md). Thread-safe: calls are serialised.
#[pyclass(frozen, module = "klock._core", name = "Kernel")]
pub struct PyKernel {
    inner: Mutex<Kernel>,
}

impl PyKernel {
    /// The kernel, for the ledger's calls that make a kernel call too (`block.rs`).
    pub(crate) fn kernel(&self) -> PyResult<MutexGuard<'_, Kernel>> {
        self.lock()
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, Kernel>> {
        self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err(
                "the kernel panicked during an earlier call and can no longer be used",
            )
        })
    }

    /// Runs `f` on the kernel without holding the GIL.
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Kernel) -> T + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut kernel = self.lock()?;
            Ok(f(&mut kernel))
        })
    }
}

/// A configuration from `Kernel(policy, **config)`: SPEC.md's defaults, then the policy, then
/// each named numeric field. Field names come from the core (`Config::set_number`), so an
/// unknown one is the core's `INVALID_CONFIG` naming it and listing the known ones, checked
/// before its value; a `None` value keeps the default.
fn config_arg(
    py: Python<'_>,
    policy: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyDict>>,
) -> PyResult<Config> {
    let mut config = Config::default();
    if let Some(policy) = policy.filter(|p| !p.is_none()) {
        config.policy = Policy::parse(str_arg(policy, "policy")?).or_raise(py)?;
    }
    for (name, value) in fields.into_iter().flat_map(|d| d.iter()) {
        let name = str_arg(&name, "a config field name")?;
        if config.number(name).is_none() {
            // Not a field: setting it fails with the core's INVALID_CONFIG, which names it and
            // lists the fields.
            config.set_number(name, 0).or_raise(py)?;
        }
        if let Some(value) = opt_u64_arg(Some(&value), name)? {
            config.set_number(name, value).or_raise(py)?;
        }
    }
    Ok(config)
}

fn dict_item<'py>(dict: &Bound<'py, PyDict>, key: &str, path: &str) -> PyResult<Bound<'py, PyAny>> {
    dict.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("{path} is missing the key {key:?}")))
}

fn strict_dict<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    path: &str,
    keys: &[&str],
) -> PyResult<&'a Bound<'py, PyDict>> {
    let dict = obj
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{path} must be a dict")))?;
    for key in dict.keys() {
        let known = key
            .extract::<&str>()
            .map(|k| keys.contains(&k))
            .unwrap_or(false);
        if !known {
            return Err(PyValueError::new_err(format!(
                "{path} has an unknown key {}",
                key.repr()?
            )));
        }
    }
    Ok(dict)
}

/// A digest as produced by `Kernel.digest`, checked for shape and types (not for content:
/// that is the kernel's job, `INVALID_DIGEST`).
fn digest_arg(obj: &Bound<'_, PyAny>) -> PyResult<StateDigest> {
    let d = strict_dict(obj, "digest", &["version", "identity", "recovery"])?;
    let version = u64_arg(&dict_item(d, "version", "digest")?, "digest['version']")?;
    let version = u32::try_from(version).map_err(|_| {
        pyo3::exceptions::PyOverflowError::new_err(format!(
            "digest['version'] must be at most 2**32-1, got {version}"
        ))
    })?;
    let identity = dict_item(d, "identity", "digest")?;
    let i = strict_dict(
        &identity,
        "digest['identity']",
        &[
            "agent_id",
            "namespace",
            "session_id",
            "priority_timestamp",
            "epoch",
        ],
    )?;
    let field = |key: &str| dict_item(i, key, "digest['identity']");
    let identity = DigestIdentity {
        agent_id: str_arg(&field("agent_id")?, "digest['identity']['agent_id']")?.to_owned(),
        namespace: str_arg(&field("namespace")?, "digest['identity']['namespace']")?.to_owned(),
        session_id: SessionId(u64_arg(
            &field("session_id")?,
            "digest['identity']['session_id']",
        )?),
        priority_timestamp: u64_arg(
            &field("priority_timestamp")?,
            "digest['identity']['priority_timestamp']",
        )?,
        epoch: u64_arg(&field("epoch")?, "digest['identity']['epoch']")?,
    };
    let recovery = dict_item(d, "recovery", "digest")?;
    let r = strict_dict(
        &recovery,
        "digest['recovery']",
        &["last_phase", "pending_intents"],
    )?;
    let pending = str_list(
        &dict_item(r, "pending_intents", "digest['recovery']")?,
        "digest['recovery']['pending_intents']",
    )?;
    let recovery = DigestRecovery {
        last_phase: str_arg(
            &dict_item(r, "last_phase", "digest['recovery']")?,
            "digest['recovery']['last_phase']",
        )?
        .to_owned(),
        pending_intents: borrow_strs(&pending)?
            .into_iter()
            .map(String::from)
            .collect(),
    };
    Ok(StateDigest {
        version,
        identity,
        recovery,
    })
}

#[pymethods]
impl PyKernel {
    /// A kernel with the given policy (`"wait_die"`, `"wound_wait"`, `"lanes"` or
    /// `"detect"`) and numeric settings by name (`Config::NUMERIC_FIELDS`); every setting not
    /// given, or given as `None`, takes SPEC.md's default.
    #[new]
    #[pyo3(signature = (policy = None, **config))]
    fn new(
        py: Python<'_>,
        policy: Option<&Bound<'_, PyAny>>,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyKernel> {
        let kernel = Kernel::new(config_arg(py, policy, config)?).or_raise(py)?;
        Ok(PyKernel {
            inner: Mutex::new(kernel),
        })
    }

    /// The configuration the kernel runs with.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let config = self.lock()?.config().clone();
        plain(py, &config)
    }

    /// An independent kernel in the same state (for exploring "what if" branches).
    fn clone(&self, py: Python<'_>) -> PyResult<PyKernel> {
        let kernel = self.detached(py, |k| k.clone())?;
        Ok(PyKernel {
            inner: Mutex::new(kernel),
        })
    }

    /// The largest `now` the kernel has seen.
    fn now(&self) -> PyResult<u64> {
        Ok(self.lock()?.now())
    }

    fn open_session(
        &self,
        py: Python<'_>,
        agent_id: &Bound<'_, PyAny>,
        namespace: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<PySessionInfo> {
        let agent_id = str_arg(agent_id, "agent_id")?;
        let namespace = str_arg(namespace, "namespace")?;
        let now = u64_arg(now, "now")?;
        let info = self
            .lock()?
            .open_session(agent_id, namespace, now)
            .or_raise(py)?;
        Ok(PySessionInfo(info))
    }

    fn close_session(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let session = SessionId(u64_arg(session, "session")?);
        let now = u64_arg(now, "now")?;
        self.detached(py, |k| k.close_session(session, now))?
            .or_raise(py)
    }

    fn suspend_session(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let session = SessionId(u64_arg(session, "session")?);
        let now = u64_arg(now, "now")?;
        self.detached(py, |k| k.suspend_session(session, now))?
            .or_raise(py)
    }

    /// The session's recovery digest as a dict (KLIS-8 shape).
    fn digest<'py>(
        &self,
        py: Python<'py>,
        session: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = SessionId(u64_arg(session, "session")?);
        let now = u64_arg(now, "now")?;
        let digest = self.lock()?.digest(session, now).or_raise(py)?;
        plain(py, &digest)
    }

    fn resume_session(
        &self,
        py: Python<'_>,
        digest: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<PySessionInfo> {
        let digest = digest_arg(digest)?;
        let now = u64_arg(now, "now")?;
        let info = self
            .detached(py, |k| k.resume_session(&digest, now))?
            .or_raise(py)?;
        Ok(PySessionInfo(info))
    }

    /// Asks for every intent (`"PREDICATE TYPE:/path"`) at once, all-or-nothing.
    #[pyo3(
        signature = (session, intents, now, *, ttl_ms = None, wait = StrictBool(true), wait_timeout_ms = None),
        text_signature = "(self, /, session, intents, now, *, ttl_ms=None, wait=True, wait_timeout_ms=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        intents: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
        ttl_ms: Option<&Bound<'_, PyAny>>,
        wait: StrictBool,
        wait_timeout_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyVerdict> {
        let session = SessionId(u64_arg(session, "session")?);
        let intents = str_list(intents, "intents")?;
        let intents = borrow_strs(&intents)?;
        let now = u64_arg(now, "now")?;
        let options = AcquireOptions {
            ttl_ms: opt_u64_arg(ttl_ms, "ttl_ms")?,
            wait: wait.0,
            wait_timeout_ms: opt_u64_arg(wait_timeout_ms, "wait_timeout_ms")?,
        };
        let verdict = self
            .lock()?
            .acquire(session, &intents, options, now)
            .or_raise(py)?;
        Ok(PyVerdict(verdict))
    }

    /// Renews leases (`None` = every active lease of the session). One
    /// `(lease_id, status, expires_at)` per lease: status `"OK"` with the new expiry, or an
    /// error name (`LEASE_EXPIRED`, `LEASE_RELEASED`, `NOT_OWNER`, `UNKNOWN_LEASE`,
    /// `LIFETIME_EXCEEDED`) with `None`.
    fn heartbeat(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        leases: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(u64, &'static str, Option<u64>)>> {
        let session = SessionId(u64_arg(session, "session")?);
        let ids: Option<Vec<LeaseId>> = if leases.is_none() {
            None
        } else {
            Some(
                u64_list(leases, "leases")?
                    .into_iter()
                    .map(LeaseId)
                    .collect(),
            )
        };
        let now = u64_arg(now, "now")?;
        let which = match &ids {
            None => LeaseSelection::All,
            Some(ids) => LeaseSelection::Ids(ids),
        };
        let results = self.lock()?.heartbeat(session, which, now).or_raise(py)?;
        Ok(results
            .into_iter()
            .map(|(id, outcome)| match outcome {
                Ok(expires_at) => (id.0, "OK", Some(expires_at)),
                Err(code) => (id.0, code.name(), None),
            })
            .collect())
    }

    /// Releases one lease: `True` if this call released it, `False` if it had already ended.
    fn release(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let session = SessionId(u64_arg(session, "session")?);
        let lease = LeaseId(u64_arg(lease, "lease")?);
        let now = u64_arg(now, "now")?;
        self.lock()?.release(session, lease, now).or_raise(py)
    }

    /// Releases every active lease of the session; returns how many.
    fn release_all(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let session = SessionId(u64_arg(session, "session")?);
        let now = u64_arg(now, "now")?;
        self.detached(py, |k| k.release_all(session, now))?
            .or_raise(py)
    }

    /// The kernel's truth about each lease: `(lease_id, status, expires_at, fence)` with
    /// status `ACTIVE` (expiry and fence set), `EXPIRED`, `RELEASED`, `NOT_OWNER` or `UNKNOWN`.
    #[allow(clippy::type_complexity)]
    fn reconcile(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        leases: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(u64, &'static str, Option<u64>, Option<u64>)>> {
        let session = SessionId(u64_arg(session, "session")?);
        let ids: Vec<LeaseId> = u64_list(leases, "leases")?
            .into_iter()
            .map(LeaseId)
            .collect();
        let now = u64_arg(now, "now")?;
        let results = self.lock()?.reconcile(session, &ids, now).or_raise(py)?;
        Ok(results
            .into_iter()
            .map(|(id, status)| match status {
                LeaseStatus::Active { expires_at, fence } => {
                    (id.0, status.name(), Some(expires_at), Some(fence))
                }
                other => (id.0, other.name(), None, None),
            })
            .collect())
    }

    /// Withdraws a waiting ticket of the session.
    fn cancel_wait(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        ticket: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let session = SessionId(u64_arg(session, "session")?);
        let ticket = TicketId(u64_arg(ticket, "ticket")?);
        let now = u64_arg(now, "now")?;
        self.lock()?.cancel_wait(session, ticket, now).or_raise(py)
    }

    /// Settles everything due at or before `now`; events go to the queue.
    fn advance(&self, py: Python<'_>, now: &Bound<'_, PyAny>) -> PyResult<()> {
        let now = u64_arg(now, "now")?;
        self.detached(py, |k| k.advance(now))
    }

    /// The earliest pending deadline (possibly already past), or `None`.
    fn next_deadline(&self) -> PyResult<Option<u64>> {
        Ok(self.lock()?.next_deadline())
    }

    /// The next queued event, oldest first; `None` when drained.
    fn poll_event(&self) -> PyResult<Option<PyEvent>> {
        Ok(self.lock()?.poll_event().map(PyEvent))
    }

    /// Every queued event, oldest first (`poll_event` until `None`, under one lock).
    fn drain_events<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut events = Vec::new();
        {
            let mut kernel = self.lock()?;
            while let Some(event) = kernel.poll_event() {
                events.push(PyEvent(event));
            }
        }
        PyList::new(py, events)
    }

    /// How many events wait to be polled.
    fn pending_events(&self) -> PyResult<usize> {
        Ok(self.lock()?.pending_events())
    }

    /// Whether ACQUIRED and RELEASED are emitted (default ``True``, SPEC.md §9): a host that
    /// reads them nowhere may turn them off, which keeps an uncontended acquire and release
    /// free of their cost (the friendly Klock does while no election observes).
    #[getter]
    fn holder_events(&self) -> PyResult<bool> {
        Ok(self.lock()?.holder_events())
    }
    #[setter]
    fn set_holder_events(&self, on: bool) -> PyResult<()> {
        self.lock()?.set_holder_events(on);
        Ok(())
    }

    /// Holders and queue of one resource node, and the holders covering it.
    fn resource_state<'py>(
        &self,
        py: Python<'py>,
        resource: &Bound<'_, PyAny>,
        namespace: &Bound<'_, PyAny>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let resource = str_arg(resource, "resource")?;
        let namespace = str_arg(namespace, "namespace")?;
        let now = u64_arg(now, "now")?;
        let state = self
            .detached(py, |k| k.resource_state(resource, namespace, now))?
            .or_raise(py)?;
        plain(py, &state)
    }

    /// Counters per outcome, top contended resources and ghost agents.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = self.detached(py, |k| k.stats())?;
        plain(py, &stats)
    }

    /// The whole state after settling `now`, as one JSON-ready dict.
    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        now: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let now = u64_arg(now, "now")?;
        let snapshot = self.detached(py, |k| k.snapshot(now))?;
        plain(py, &snapshot)
    }

    fn __repr__(&self) -> PyResult<String> {
        let k = self.lock()?;
        Ok(format!(
            "Kernel(policy={:?}, now={})",
            k.config().policy.name(),
            k.now()
        ))
    }
}
