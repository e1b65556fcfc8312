//! `klock._core.Ledger` and `Block`: the core's client ledger and a lease block's values, for
//! the friendly Python client. Translation only.
//!
//! Contract: the core's [`Ledger`] decides which leases a block holds and releases, which
//! blocks a lost lease reaches and when heartbeats fall due; this module exposes it and the
//! values of a block (its session, intents, TTL, timeout and, once it ended, its leases as
//! last reported). Every method takes the client's inputs (a block, leases, `now`, the
//! in-process kernel) and returns the core's outputs as Python values. It reads no clock,
//! takes no client lock, keeps no client counters and calls nothing of the client: the
//! Python client (`klock/client.py`) drives, under its lock, with its clock, and acts on the
//! answers. Two entry points, [`PyLedger::acquire_in`] and [`PyLedger::release_in`], make the
//! in-process kernel's call and the ledger's together (as the Node addon's `releaseIn` does),
//! so that a block's edge costs one native call: what each answers is stated with it.

use crate::args::{borrow_strs, opt_u64_arg, str_arg, str_list, u64_arg};
use crate::errors::OrRaise;
use crate::kernel::PyKernel;
use crate::values::{PyLease, PyVerdict};
use klock_core::{
    AcquireOptions, BlockId, HeldLease, Kernel, Lease, LeaseId, Ledger, Predicate, SessionId,
    Verdict,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use pyo3::PyTraverseError;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// "Never" (SPEC.md §2): no deadline, no heartbeat.
const NEVER: u64 = u64::MAX;

/// The core's ledger of one Klock's lease blocks; each held block's handle is its Python
/// object (what a lost lease or a due heartbeat is routed to).
#[pyclass(frozen, module = "klock._core", name = "Ledger")]
pub struct PyLedger {
    ledger: Mutex<Ledger<Py<PyAny>>>,
    /// The last block id given (ids are the ledger's to give: one per block ever made).
    next_block: AtomicU64,
}

impl PyLedger {
    fn ledger(&self) -> PyResult<MutexGuard<'_, Ledger<Py<PyAny>>>> {
        self.ledger
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the client's ledger panicked earlier"))
    }

    /// Records a grant of `block` (its handle: the block object) and returns its first
    /// heartbeat's time.
    fn grant_locked(
        &self,
        block: &Bound<'_, PyBlock>,
        leases: Vec<Lease>,
        renew: Option<&[u64]>,
        now: u64,
    ) -> PyResult<u64> {
        let b = block.get();
        Ok(self.ledger()?.grant(
            b.id,
            block.clone().into_any().unbind(),
            SessionId(b.session_id),
            leases,
            renew,
            now,
        ))
    }

    /// `block` leaves the ledger; its leases as last reported stay with it.
    fn finish_locked(&self, block: &PyBlock) -> PyResult<()> {
        let finished = self.ledger()?.finish(block.id);
        if let Some((handle, leases)) = finished {
            *block.ended()? = leases;
            drop(handle); // after both locks: dropping the block may run Python code
        }
        Ok(())
    }
}

/// `Some(next_deadline)` when the kernel has no event pending (read under the lock of the
/// call just made), else `None`.
fn quiet(kernel: &Kernel) -> Option<Option<u64>> {
    (kernel.pending_events() == 0).then(|| kernel.next_deadline())
}

#[pymethods]
impl PyLedger {
    /// `Ledger()`: empty.
    #[new]
    fn new() -> PyLedger {
        PyLedger {
            ledger: Mutex::new(Ledger::new()),
            next_block: AtomicU64::new(0),
        }
    }

    // Held blocks refer to their ledger: the garbage collector must see the blocks it holds to
    // collect a Klock dropped with blocks still held.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Ok(ledger) = self.ledger.try_lock() {
            for block in ledger.handles() {
                visit.call(block)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let ledger = match self.ledger.try_lock() {
            Ok(mut ledger) => std::mem::take(&mut *ledger),
            Err(_) => return,
        };
        drop(ledger); // after the lock: dropping a block may run Python code
    }

    /// The kernel granted `block` these `leases` (the kernel's or a backend's lease objects)
    /// at `now`: it is held, and its first heartbeat is scheduled at the returned time
    /// (`2**64-1`: never). `renew`: the due time per lease, from a backend that measures its
    /// own deadlines (`None`: a third of the way through each TTL).
    #[pyo3(signature = (block, leases, renew, now))]
    fn grant(
        &self,
        block: &Bound<'_, PyBlock>,
        leases: &Bound<'_, PyAny>,
        renew: Option<Vec<u64>>,
        now: u64,
    ) -> PyResult<u64> {
        let converted: Vec<Lease> = leases
            .try_iter()?
            .map(|lease| lease_of(&lease?))
            .collect::<PyResult<_>>()?;
        self.grant_locked(block, converted, renew.as_deref(), now)
    }

    /// The in-process kernel's `acquire` for `block` (its session, intents and TTL; `wait_ms`
    /// the wait asked for, `None`: the kernel's default, `0`: no wait) at `now`, and on a
    /// grant the ledger's record of it (as [`PyLedger::grant`]). Answers the verdict when
    /// not granted; when granted, the earliest time the client's timer is wanted for by what
    /// this call changed (the kernel's next deadline and the block's first heartbeat;
    /// `2**64-1`: none), or `None` when the kernel has events for the client to route.
    fn acquire_in(
        &self,
        py: Python<'_>,
        kernel: &Bound<'_, PyKernel>,
        block: &Bound<'_, PyBlock>,
        wait_ms: Option<u64>,
        now: u64,
    ) -> PyResult<Py<PyAny>> {
        let b = block.get();
        let texts = str_list(b.intents.bind(py), "intents")?;
        let strs = borrow_strs(&texts)?;
        let options = AcquireOptions {
            ttl_ms: b.ttl,
            wait: wait_ms != Some(0),
            wait_timeout_ms: wait_ms,
        };
        let (verdict, settled) = {
            let mut k = kernel.get().kernel()?;
            let verdict = k.acquire(SessionId(b.session_id), &strs, options, now);
            (verdict, quiet(&k))
        };
        match verdict.or_raise(py)? {
            Verdict::Granted { leases } => {
                let due = self.grant_locked(block, leases, None, now)?;
                Ok(match settled {
                    Some(deadline) => due
                        .min(deadline.unwrap_or(NEVER))
                        .into_pyobject(py)?
                        .into_any()
                        .unbind(),
                    None => py.None(),
                })
            }
            other => Ok(Bound::new(py, PyVerdict(other))?.into_any().unbind()),
        }
    }

    /// The leases of `block` to release when it ends: those no other held block holds and
    /// that did not end.
    fn releasable(&self, block: &Bound<'_, PyBlock>) -> PyResult<Vec<u64>> {
        let id = block.get().id;
        Ok(self
            .ledger()?
            .releasable(id)
            .into_iter()
            .map(|l| l.0)
            .collect())
    }

    /// The in-process kernel's release of what `block`'s end releases ([`releasable`]; none:
    /// the kernel's `advance(now)`, which settles time all the same) at `now`, made while the
    /// block is still held, so a lease the call finds expired reaches it. Answers:
    /// - an `int` when nothing more is to be done: no event to route, every lease released;
    ///   the block has left the ledger ([`PyLedger::finish`]), and the `int` is the kernel's
    ///   next deadline (`2**64-1`: none) for the client's timer;
    /// - `None`: the kernel has events for the client to route, after which the client
    ///   finishes the block;
    /// - a list of lease ids the kernel found ended already (their events may be pending):
    ///   the client routes the events, marks those lost, then finishes the block.
    ///
    /// A kernel error (an unknown session) is raised with the block still held.
    ///
    /// [`releasable`]: PyLedger::releasable
    fn release_in(
        &self,
        py: Python<'_>,
        kernel: &Bound<'_, PyKernel>,
        block: &Bound<'_, PyBlock>,
        now: u64,
    ) -> PyResult<Py<PyAny>> {
        let b = block.get();
        let ids = self.ledger()?.releasable(b.id);
        let sid = SessionId(b.session_id);
        let mut ended: SmallVec<[u64; 1]> = SmallVec::new();
        let settled = {
            let mut k = kernel.get().kernel()?;
            for id in &ids {
                if !k.release(sid, *id, now).or_raise(py)? {
                    ended.push(id.0);
                }
            }
            if ids.is_empty() {
                k.advance(now);
            }
            quiet(&k)
        };
        if !ended.is_empty() {
            return Ok(PyList::new(py, ended)?.into_any().unbind());
        }
        match settled {
            Some(deadline) => {
                self.finish_locked(b)?;
                Ok(deadline
                    .unwrap_or(NEVER)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind())
            }
            None => Ok(py.None()),
        }
    }

    /// `block` ended: it leaves the ledger (unscheduled, no longer a holder); its leases as
    /// last reported stay readable on it. Nothing, if it was not held.
    fn finish(&self, block: &Bound<'_, PyBlock>) -> PyResult<()> {
        self.finish_locked(block.get())
    }

    /// Whether `block` is held (granted and not finished).
    fn is_held(&self, block: &Bound<'_, PyBlock>) -> PyResult<bool> {
        Ok(self.ledger()?.is_held(block.get().id))
    }

    /// The leases ended in the kernel: `[(block, lease_id)]` for every held block holding one
    /// (each is no longer scheduled; the client marks it lost).
    fn lose(&self, py: Python<'_>, lease_ids: Vec<u64>) -> PyResult<Vec<(Py<PyAny>, u64)>> {
        let mut ledger = self.ledger()?;
        let mut out = Vec::new();
        for id in lease_ids {
            for block in ledger.lose(LeaseId(id)) {
                if let Some(obj) = ledger.handle(block) {
                    out.push((obj.clone_ref(py), id));
                }
            }
        }
        Ok(out)
    }

    /// The leases held by blocks of the session, ascending.
    fn session_leases(&self, session: u64) -> PyResult<Vec<u64>> {
        Ok(self
            .ledger()?
            .session_leases(SessionId(session))
            .into_iter()
            .map(|id| id.0)
            .collect())
    }

    /// Whether a held block of the session holds a lease that did not end.
    fn holds_leases(&self, session: u64) -> PyResult<bool> {
        Ok(self.ledger()?.holds_leases(SessionId(session)))
    }

    /// A lease was renewed to `expires_at` (and `ttl_ms`, if given); every block holding it
    /// follows, renewing it at `renew_at` (`None`: a third of the way through its TTL).
    #[pyo3(signature = (lease_id, expires_at, ttl_ms=None, renew_at=None))]
    fn renewed(
        &self,
        lease_id: u64,
        expires_at: u64,
        ttl_ms: Option<u64>,
        renew_at: Option<u64>,
    ) -> PyResult<()> {
        self.ledger()?
            .renewed(LeaseId(lease_id), expires_at, ttl_ms, renew_at);
        Ok(())
    }

    /// The next block whose heartbeat is due at `now`, taken off the schedule:
    /// `(block, lease_ids)`, or `None`.
    fn pop_due(&self, py: Python<'_>, now: u64) -> PyResult<Option<(Py<PyAny>, Vec<u64>)>> {
        let mut ledger = self.ledger()?;
        while let Some((block, _, ids)) = ledger.pop_due(now) {
            if let Some(obj) = ledger.handle(block) {
                return Ok(Some((
                    obj.clone_ref(py),
                    ids.into_iter().map(|i| i.0).collect(),
                )));
            }
        }
        Ok(None)
    }

    /// Schedules the held block's next heartbeat at `at`.
    fn schedule(&self, block: &Bound<'_, PyBlock>, at: u64) -> PyResult<()> {
        let id = block.get().id;
        self.ledger()?.schedule(id, at);
        Ok(())
    }

    /// When the block's next heartbeat is due, from its leases (`2**64-1`: never).
    fn renew_due(&self, block: &Bound<'_, PyBlock>) -> PyResult<u64> {
        let id = block.get().id;
        Ok(self.ledger()?.renew_due(id))
    }

    /// Every held block with a heartbeat scheduled.
    fn scheduled_blocks(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let ledger = self.ledger()?;
        Ok(ledger
            .scheduled_blocks()
            .into_iter()
            .filter_map(|b| ledger.handle(b).map(|o| o.clone_ref(py)))
            .collect())
    }

    /// The earliest scheduled heartbeat.
    fn next_heartbeat(&self) -> PyResult<Option<u64>> {
        Ok(self.ledger()?.next_heartbeat())
    }
}

/// The states a block's `_state` may hold (the client's; stored here, with no rule over them).
const STATES: [&str; 5] = ["new", "acquiring", "held", "done", "failed"];

/// The native base of `klock.Lease`: a block's values (its session, intents, TTL and
/// timeout, its id in the ledger) and, once it ended, its leases as last reported; and the
/// storage of the client's `_state`, `_ticket` and `_lost` for it (the Python client sets and
/// reads them: no rule here reads them).
#[pyclass(frozen, subclass, module = "klock._core", name = "Block")]
pub struct PyBlock {
    #[pyo3(get)]
    session: Py<PyAny>,
    intents: Py<PyTuple>,
    #[pyo3(get)]
    ttl_ms: Py<PyAny>,
    /// `None`, `math.inf` or seconds, as the client checked it.
    #[pyo3(get)]
    timeout: Py<PyAny>,
    ledger: Py<PyLedger>,
    session_id: u64,
    id: BlockId,
    ttl: Option<u64>,
    /// Its leases once it ended (while held, the ledger has them).
    ended_with: Mutex<SmallVec<[HeldLease; 1]>>,
    /// The client's `_state`: an index in [`STATES`] (an atomic: a frozen class's fields
    /// cost no borrow check).
    state: AtomicU8,
    /// The client's `_ticket` and `_lost`.
    ticket: Mutex<Option<Py<PyAny>>>,
    lost: Mutex<Option<Py<PyAny>>>,
}

impl PyBlock {
    fn slot<'a>(slot: &'a Mutex<Option<Py<PyAny>>>) -> PyResult<MutexGuard<'a, Option<Py<PyAny>>>> {
        slot.lock()
            .map_err(|_| PyRuntimeError::new_err("the block panicked earlier"))
    }

    /// Stores `value` in `slot`; the old value is dropped after the slot's lock (dropping may
    /// run Python code).
    fn put(slot: &Mutex<Option<Py<PyAny>>>, value: Option<Py<PyAny>>) -> PyResult<()> {
        let old = std::mem::replace(&mut *PyBlock::slot(slot)?, value);
        drop(old);
        Ok(())
    }

    fn ended(&self) -> PyResult<MutexGuard<'_, SmallVec<[HeldLease; 1]>>> {
        self.ended_with
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the block panicked earlier"))
    }

    /// The leases of the block as last reported.
    fn held_leases(&self) -> PyResult<SmallVec<[HeldLease; 1]>> {
        {
            let ledger = self.ledger.get().ledger()?;
            if ledger.is_held(self.id) {
                return Ok(ledger.leases(self.id).iter().cloned().collect());
            }
        }
        Ok(self.ended()?.clone())
    }
}

/// A core lease from a backend's lease object (klock.backend's `LeaseLike`).
fn lease_of(obj: &Bound<'_, PyAny>) -> PyResult<Lease> {
    let py = obj.py();
    if let Ok(native) = obj.cast::<PyLease>() {
        return Ok(native.get().0.clone());
    }
    let num = |name: &Bound<'_, PyString>| -> PyResult<u64> {
        u64_arg(&obj.getattr(name)?, &format!("lease.{name}"))
    };
    let text = |name: &Bound<'_, PyString>| -> PyResult<String> {
        Ok(str_arg(&obj.getattr(name)?, &format!("lease.{name}"))?.to_owned())
    };
    Ok(Lease {
        lease_id: LeaseId(num(intern!(py, "lease_id"))?),
        session_id: SessionId(num(intern!(py, "session_id"))?),
        agent_id: text(intern!(py, "agent_id"))?,
        resource: text(intern!(py, "resource"))?,
        predicate: Predicate::parse(&text(intern!(py, "predicate"))?).or_raise(py)?,
        fence: num(intern!(py, "fence"))?,
        acquired_at: num(intern!(py, "acquired_at"))?,
        expires_at: num(intern!(py, "expires_at"))?,
        ttl_ms: num(intern!(py, "ttl_ms"))?,
    })
}

#[pymethods]
impl PyBlock {
    /// `Block(session, ledger, session_id, intents, ttl_ms, timeout)`: a block of `session`
    /// (a `klock.Session` whose id is `session_id`) in `ledger`, for `intents` (a tuple of
    /// str, checked here), with `ttl_ms` (`None`: the kernel's default) and `timeout` (kept
    /// as given: the client checks it).
    #[new]
    fn new(
        session: &Bound<'_, PyAny>,
        ledger: &Bound<'_, PyLedger>,
        session_id: u64,
        intents: &Bound<'_, PyTuple>,
        ttl_ms: &Bound<'_, PyAny>,
        timeout: &Bound<'_, PyAny>,
    ) -> PyResult<PyBlock> {
        for (i, intent) in intents.iter().enumerate() {
            if !intent.is_instance_of::<PyString>() {
                let name = intent.get_type().name()?.to_string();
                let hint =
                    if intent.is_instance_of::<PyList>() || intent.is_instance_of::<PyTuple>() {
                        " (pass intents as separate arguments: lease(*intents))"
                    } else {
                        ""
                    };
                return Err(PyTypeError::new_err(format!(
                    "intent {i} must be a str like 'MUTATES FILE:/src/a.ts', got {name}{hint}"
                )));
            }
        }
        let ttl = if ttl_ms.is_none() {
            None
        } else {
            opt_u64_arg(Some(ttl_ms), "ttl_ms")?
        };
        let id = BlockId(ledger.get().next_block.fetch_add(1, Ordering::Relaxed) + 1);
        Ok(PyBlock {
            session: session.clone().unbind(),
            intents: intents.clone().unbind(),
            ttl_ms: ttl_ms.clone().unbind(),
            timeout: timeout.clone().unbind(),
            ledger: ledger.clone().unbind(),
            session_id,
            id,
            ttl,
            ended_with: Mutex::new(SmallVec::new()),
            state: AtomicU8::new(0),
            ticket: Mutex::new(None),
            lost: Mutex::new(None),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)?;
        visit.call(&self.intents)?;
        visit.call(&self.ttl_ms)?;
        visit.call(&self.timeout)?;
        visit.call(&self.ledger)?;
        for slot in [&self.ticket, &self.lost] {
            if let Ok(value) = slot.try_lock() {
                visit.call(&*value)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        for slot in [&self.ticket, &self.lost] {
            let _ = PyBlock::put(slot, None);
        }
    }

    /// The client's state of the block: `"new"`, `"acquiring"`, `"held"`, `"done"` or
    /// `"failed"`.
    #[getter(_state)]
    fn get_state<'py>(&self, py: Python<'py>) -> &Bound<'py, PyString> {
        match self.state.load(Ordering::Relaxed) {
            0 => intern!(py, "new"),
            1 => intern!(py, "acquiring"),
            2 => intern!(py, "held"),
            3 => intern!(py, "done"),
            _ => intern!(py, "failed"),
        }
    }
    #[setter(_state)]
    fn put_state(&self, name: &str) -> PyResult<()> {
        let index = STATES
            .iter()
            .position(|s| *s == name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown block state {name:?}")))?;
        self.state.store(index as u8, Ordering::Relaxed);
        Ok(())
    }

    /// The client's WAIT ticket for the block, else `None`.
    #[getter(_ticket)]
    fn get_ticket(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(PyBlock::slot(&self.ticket)?
            .as_ref()
            .map(|t| t.clone_ref(py)))
    }
    #[setter(_ticket)]
    fn put_ticket(&self, ticket: Option<Py<PyAny>>) -> PyResult<()> {
        PyBlock::put(&self.ticket, ticket)
    }

    /// The client's record of a lost lease of the block, else `None`.
    #[getter(_lost)]
    fn get_lost(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(PyBlock::slot(&self.lost)?.as_ref().map(|l| l.clone_ref(py)))
    }
    #[setter(_lost)]
    fn put_lost(&self, lost: Option<Py<PyAny>>) -> PyResult<()> {
        PyBlock::put(&self.lost, lost)
    }

    /// The intents, as given (a list of str).
    #[getter]
    fn intents<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.intents.bind(py).iter())
    }

    /// The block's leases as last reported (`klock._core.Lease` each).
    fn _leases(&self) -> PyResult<Vec<PyLease>> {
        Ok(self
            .held_leases()?
            .into_iter()
            .map(|h| PyLease(h.lease))
            .collect())
    }

    /// The ids of the block's leases.
    fn _lease_ids(&self) -> PyResult<Vec<u64>> {
        Ok(self
            .held_leases()?
            .iter()
            .map(|h| h.lease.lease_id.0)
            .collect())
    }
}
