//! `klock._core.Ledger`, `SessionHandle` and `Block`: the friendly client's bookkeeping and
//! the edges of its lease block, without Python frames on the common path.
//!
//! Contract: the core's [`Ledger`] decides which leases a block holds and releases, which
//! blocks a lost lease reaches and when heartbeats fall due; this module translates it for
//! Python and runs a block's three edges (the acquire attempt, recording a grant, the
//! release, and `__enter__`/`__exit__`/`__aexit__` made of them) in native code, because in
//! Python their frames alone cost more than the kernel calls (issue 15). It holds no rule of its own: every decision is the kernel's or the
//! ledger's, and everything else a block does (waiting, backing off, asyncio, event routing,
//! the timer) is the Python client's (`klock/client.py`), which calls these edges so that each
//! exists once. Each edge runs under the client's lock (`Klock._lock`, re-entrant) exactly as
//! the Python code around it does, and calls back into the client only where the client
//! owns the state (waiters, counters, the timer, sessions found closed).

use crate::args::{borrow_strs, opt_u64_arg, str_arg, str_list, u64_arg};
use crate::errors::{OrRaise, UnknownId};
use crate::kernel::PyKernel;
use crate::values::{PyLease, PyVerdict};
use klock_core::client::Acquisition;
use klock_core::{
    AcquireOptions, BlockId, HeldLease, Kernel, Lease, LeaseId, Ledger, Predicate, SessionId,
    Verdict,
};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyList, PyString, PyTuple};
use pyo3::PyTraverseError;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The largest wait: "never" under saturating deadlines (SPEC.md §2).
const U64_MAX: u64 = u64::MAX;

/// Where a block's kernel calls go: the Klock's `kernel`, called directly when it is the
/// in-process kernel, else a backend object (klock.backend, e.g. a remote server) through
/// Python. Looked up at each call: whoever replaces `Klock.kernel` (a test recording the
/// calls) is obeyed.
enum Backend<'py> {
    Native(Bound<'py, PyKernel>),
    Python(Bound<'py, PyAny>),
}

impl<'py> Backend<'py> {
    fn of(klock: &Bound<'py, PyAny>) -> PyResult<Backend<'py>> {
        let kernel = klock.getattr(intern!(klock.py(), "kernel"))?;
        Ok(match kernel.cast_into::<PyKernel>() {
            Ok(native) => Backend::Native(native),
            Err(e) => Backend::Python(e.into_inner()),
        })
    }
}

struct LedgerState {
    /// Each held block's handle is its Python object (routing a lost lease or a due heartbeat).
    ledger: Ledger<Py<PyAny>>,
    /// When the client's one timer is armed for (`None`: not armed).
    armed_at: Option<u64>,
}

/// The bookkeeping of one Klock's lease blocks (klock_core::Ledger), with the client's lock
/// and clock its blocks use.
#[pyclass(frozen, module = "klock._core", name = "Ledger")]
pub struct PyLedger {
    state: Mutex<LedgerState>,
    /// The last block id given (ids are the ledger's to give: one per block ever made).
    next_block: AtomicU64,
    /// Blocks granted (`ClientCounters.grants`).
    grants: AtomicU64,
    /// Whether the Klock was closed (`Klock._closed`).
    closed: AtomicBool,
    /// The client's lock's bound `acquire` and `release` (looked up once).
    lock_acquire: Py<PyAny>,
    lock_release: Py<PyAny>,
    /// Whether the backend's calls may block (klock.backend's `offload_async`): an `async
    /// with` then makes them in worker threads.
    offload_async: bool,
    /// A SystemClock's start on the monotonic clock (`time.monotonic_ns()`), read here as
    /// `Instant` (both are CLOCK_MONOTONIC): `(anchor, monotonic_ns at anchor - t0)`.
    system: Option<(Instant, i128)>,
}

impl PyLedger {
    fn state(&self) -> PyResult<MutexGuard<'_, LedgerState>> {
        self.state
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the client's ledger panicked earlier"))
    }
}

/// `Some(next_deadline)` when the kernel has no event pending (read under the lock of the
/// call just made), else `None`: see [`PyBlock::settle`].
fn quiet(kernel: &Kernel) -> Option<Option<u64>> {
    (kernel.pending_events() == 0).then(|| kernel.next_deadline())
}

fn block_id(block: &Bound<'_, PyAny>) -> PyResult<BlockId> {
    Ok(block.cast::<PyBlock>()?.get().id)
}

#[pymethods]
impl PyLedger {
    /// `Ledger(lock, system_t0, offload_async)`: `lock` is the client's (re-entrant) lock,
    /// `system_t0` the `time.monotonic_ns()` a SystemClock counts from (`None`: the client's
    /// `now()` is asked), `offload_async` whether its backend's calls may block.
    #[new]
    fn new(
        py: Python<'_>,
        lock: &Bound<'_, PyAny>,
        system_t0: Option<i128>,
        offload_async: bool,
    ) -> PyResult<PyLedger> {
        let system = match system_t0 {
            None => None,
            Some(t0) => {
                // The Python reading is taken between two of ours: anchored at their middle.
                let monotonic_ns = py
                    .import(intern!(py, "time"))?
                    .getattr(intern!(py, "monotonic_ns"))?;
                let before = Instant::now();
                let ns: i128 = monotonic_ns.call0()?.extract()?;
                let anchor = before + before.elapsed() / 2;
                Some((anchor, ns - t0))
            }
        };
        Ok(PyLedger {
            next_block: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            state: Mutex::new(LedgerState {
                ledger: Ledger::new(),
                armed_at: None,
            }),
            lock_acquire: lock.getattr(intern!(py, "acquire"))?.unbind(),
            lock_release: lock.getattr(intern!(py, "release"))?.unbind(),
            offload_async,
            system,
        })
    }

    // Held blocks refer back to their Klock, which holds this ledger: the garbage collector
    // must see these references to collect a Klock dropped with blocks still held.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.lock_acquire)?;
        visit.call(&self.lock_release)?;
        if let Ok(st) = self.state.try_lock() {
            for block in st.ledger.handles() {
                visit.call(block)?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let ledger = match self.state.try_lock() {
            Ok(mut st) => std::mem::take(&mut st.ledger),
            Err(_) => return,
        };
        drop(ledger); // after the lock: dropping a block may run Python code
    }

    /// Whether the Klock was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
    #[setter]
    fn set_closed(&self, closed: bool) {
        self.closed.store(closed, Ordering::Relaxed);
    }

    /// How many blocks were granted.
    #[getter]
    fn grants(&self) -> u64 {
        self.grants.load(Ordering::Relaxed)
    }

    /// When the client's timer is armed for (`None`: not armed); the client sets it.
    #[getter]
    fn armed_at(&self) -> PyResult<Option<u64>> {
        Ok(self.state()?.armed_at)
    }
    #[setter]
    fn set_armed_at(&self, at: Option<u64>) -> PyResult<()> {
        self.state()?.armed_at = at;
        Ok(())
    }

    /// The leases ended in the kernel: `[(block, lease_id)]` for every held block holding one
    /// (each is no longer scheduled; the client marks it lost).
    fn lose<'py>(&self, py: Python<'py>, lease_ids: Vec<u64>) -> PyResult<Vec<(Py<PyAny>, u64)>> {
        let mut st = self.state()?;
        let mut out = Vec::new();
        for id in lease_ids {
            for block in st.ledger.lose(LeaseId(id)) {
                if let Some(obj) = st.ledger.handle(block) {
                    out.push((obj.clone_ref(py), id));
                }
            }
        }
        Ok(out)
    }

    /// The leases held by blocks of the session, ascending.
    fn session_leases(&self, session: u64) -> PyResult<Vec<u64>> {
        let st = self.state()?;
        Ok(st
            .ledger
            .session_leases(SessionId(session))
            .into_iter()
            .map(|id| id.0)
            .collect())
    }

    /// Whether a held block of the session holds a lease that did not end.
    fn holds_leases(&self, session: u64) -> PyResult<bool> {
        Ok(self.state()?.ledger.holds_leases(SessionId(session)))
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
        self.state()?
            .ledger
            .renewed(LeaseId(lease_id), expires_at, ttl_ms, renew_at);
        Ok(())
    }

    /// The next block whose heartbeat is due at `now`, taken off the schedule:
    /// `(block, lease_ids)`, or `None`.
    fn pop_due(&self, py: Python<'_>, now: u64) -> PyResult<Option<(Py<PyAny>, Vec<u64>)>> {
        let mut st = self.state()?;
        while let Some((block, _, ids)) = st.ledger.pop_due(now) {
            if let Some(obj) = st.ledger.handle(block) {
                return Ok(Some((
                    obj.clone_ref(py),
                    ids.into_iter().map(|i| i.0).collect(),
                )));
            }
        }
        Ok(None)
    }

    /// Schedules the held block's next heartbeat at `at`.
    fn schedule(&self, block: &Bound<'_, PyAny>, at: u64) -> PyResult<()> {
        let id = block_id(block)?;
        self.state()?.ledger.schedule(id, at);
        Ok(())
    }

    /// When the block's next heartbeat is due, from its leases (`2**64-1`: never).
    fn renew_due(&self, block: &Bound<'_, PyAny>) -> PyResult<u64> {
        let id = block_id(block)?;
        Ok(self.state()?.ledger.renew_due(id))
    }

    /// Every held block with a heartbeat scheduled.
    fn scheduled_blocks(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let st = self.state()?;
        Ok(st
            .ledger
            .scheduled_blocks()
            .into_iter()
            .filter_map(|b| st.ledger.handle(b).map(|o| o.clone_ref(py)))
            .collect())
    }

    /// The earliest scheduled heartbeat.
    fn next_heartbeat(&self) -> PyResult<Option<u64>> {
        Ok(self.state()?.ledger.next_heartbeat())
    }
}

/// What the native block edges need of a `klock.Session`, read without attribute lookups:
/// its Klock and ledger, its id, and whether it was closed.
///
/// Frozen, its flags atomics: a mutable class's borrow check on every edge costs more.
#[pyclass(frozen, module = "klock._core", name = "SessionHandle")]
pub struct PySessionHandle {
    klock: Py<PyAny>,
    ledger: Py<PyLedger>,
    session_id: u64,
    /// Closed in the kernel (`Session._closed`).
    closed: AtomicBool,
    /// Closed by its user, or by the Klock's close (`Session._closed_by_user`).
    closed_by_user: AtomicBool,
}

#[pymethods]
impl PySessionHandle {
    /// `SessionHandle(klock, ledger, session_id)`: open.
    #[new]
    fn new(klock: Py<PyAny>, ledger: Py<PyLedger>, session_id: u64) -> PySessionHandle {
        PySessionHandle {
            klock,
            ledger,
            session_id,
            closed: AtomicBool::new(false),
            closed_by_user: AtomicBool::new(false),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.klock)?;
        visit.call(&self.ledger)?;
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
    #[setter]
    fn set_closed(&self, closed: bool) {
        self.closed.store(closed, Ordering::Relaxed);
    }
    #[getter]
    fn closed_by_user(&self) -> bool {
        self.closed_by_user.load(Ordering::Relaxed)
    }
    #[setter]
    fn set_closed_by_user(&self, closed: bool) {
        self.closed_by_user.store(closed, Ordering::Relaxed);
    }
}

/// What limits a block's acquisition (its `timeout`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Budget {
    /// `None`: no client-side limit; each wait is the kernel's `default_wait_timeout_ms`.
    KernelWaits,
    /// `math.inf`: one wait the kernel never times out.
    Forever,
    /// Seconds: a deadline on the client's clock (`Lease._deadline`).
    Finite,
}

/// The states of a block (`Block._state`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum State {
    New,
    Acquiring,
    Held,
    Done,
    Failed,
}

impl State {
    const ALL: [(State, &'static str); 5] = [
        (State::New, "new"),
        (State::Acquiring, "acquiring"),
        (State::Held, "held"),
        (State::Done, "done"),
        (State::Failed, "failed"),
    ];
    fn name(self) -> &'static str {
        State::ALL[self as usize].1
    }
}

/// What a block keeps besides its state (touched off the common path).
struct BlockState {
    /// `(name, message, lease_ids)` once a lease of the block was lost (`Block._lost`).
    lost: Option<Py<PyAny>>,
    /// The WAIT ticket the block waits on (`Block._ticket`).
    ticket: Option<Py<PyAny>>,
    /// Its leases once it ended (while held, the ledger has them).
    ended_with: SmallVec<[HeldLease; 1]>,
}

/// The native base of `klock.Lease`: a block's identity, its state and its edges.
#[pyclass(frozen, subclass, module = "klock._core", name = "Block")]
pub struct PyBlock {
    #[pyo3(get)]
    session: Py<PyAny>,
    intents: Py<PyTuple>,
    #[pyo3(get)]
    ttl_ms: Py<PyAny>,
    /// `None`, `math.inf` or seconds (float).
    #[pyo3(get)]
    timeout: Py<PyAny>,
    klock: Py<PyAny>,
    ledger: Py<PyLedger>,
    handle: Py<PySessionHandle>,
    session_id: u64,
    id: BlockId,
    ttl: Option<u64>,
    budget: Budget,
    /// A [`State`] (an atomic: read and written on every edge, always under the GIL).
    state: AtomicU8,
    /// Whether `_lost` is set (read by every exit).
    lost: AtomicBool,
    rest: Mutex<BlockState>,
}

static CHECK_TIMEOUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static UNREACHABLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl PyBlock {
    fn st(&self) -> PyResult<MutexGuard<'_, BlockState>> {
        self.rest
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the block panicked earlier"))
    }

    fn state(&self) -> State {
        State::ALL[usize::from(self.state.load(Ordering::Relaxed))].0
    }

    fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    fn now(&self, py: Python<'_>, ledger: &PyLedger) -> PyResult<u64> {
        match ledger.system {
            Some((anchor, offset)) => {
                let ns = offset + anchor.elapsed().as_nanos() as i128;
                Ok((ns.max(0) / 1_000_000) as u64)
            }
            None => self
                .klock
                .bind(py)
                .call_method0(intern!(py, "now"))?
                .extract(),
        }
    }

    /// Records a grant: the ledger holds the block, schedules its heartbeat and the timer is
    /// armed if it would fire later than that.
    fn record_grant(
        slf: &Bound<'_, PyBlock>,
        leases: Vec<Lease>,
        renew: Option<Vec<u64>>,
        now: u64,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let ledger = this.ledger.get();
        let arm = {
            let mut st = ledger.state()?;
            let due = st.ledger.grant(
                this.id,
                slf.clone().into_any().unbind(),
                SessionId(this.session_id),
                leases,
                renew.as_deref(),
                now,
            );
            due != U64_MAX && st.armed_at.is_none_or(|at| due < at)
        };
        this.set_state(State::Held);
        ledger.grants.fetch_add(1, Ordering::Relaxed);
        if arm {
            this.klock
                .bind(py)
                .call_method0(intern!(py, "_arm_locked"))?;
        }
        Ok(())
    }

    /// After a kernel call: the client routes events and re-arms its timer when it must
    /// (`Klock._settled_locked`). `quiet` is what the in-process kernel said under the call's
    /// own lock ([`quiet`]): no event pending, so only a kernel deadline earlier than the timer
    /// needs the timer re-armed (`_arm_locked` does nothing on a closed Klock or inside the
    /// timer).
    fn settle(&self, py: Python<'_>, quiet: Option<Option<u64>>) -> PyResult<()> {
        let klock = self.klock.bind(py);
        match quiet {
            Some(wake) => {
                let armed = self.ledger.get().state()?.armed_at;
                if wake.is_some_and(|wake| armed.is_none_or(|at| wake < at)) {
                    klock.call_method0(intern!(py, "_arm_locked"))?;
                }
            }
            None => {
                klock.call_method0(intern!(py, "_settled_locked"))?;
            }
        }
        Ok(())
    }

    /// Runs `f` under the client's lock, with the Klock's backend.
    fn locked<'py, T>(
        &self,
        py: Python<'py>,
        f: impl FnOnce(&Backend<'py>) -> PyResult<T>,
    ) -> PyResult<T> {
        let ledger = self.ledger.get();
        ledger.lock_acquire.call0(py)?;
        let out = Backend::of(self.klock.bind(py)).and_then(|backend| f(&backend));
        let released = ledger.lock_release.call0(py);
        let out = out?;
        released?;
        Ok(out)
    }

    /// The leases of the block as last reported.
    fn held_leases(&self) -> PyResult<SmallVec<[HeldLease; 1]>> {
        let st = self.st()?;
        if self.state() == State::Held {
            drop(st);
            let ledger = self.ledger.get().state()?;
            Ok(ledger.ledger.leases(self.id).iter().cloned().collect())
        } else {
            Ok(st.ended_with.clone())
        }
    }

    fn attempt_locked(
        slf: &Bound<'_, PyBlock>,
        backend: &Backend<'_>,
        settled: &mut Option<Option<u64>>,
        loop_: &Bound<'_, PyAny>,
        deadline: Option<u64>,
        retry: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        let klock = this.klock.bind(py);
        if this.ledger.get().closed.load(Ordering::Relaxed)
            || this.handle.get().closed_by_user.load(Ordering::Relaxed)
        {
            this.session
                .bind(py)
                .call_method0(intern!(py, "_check_open"))?;
        }
        let ledger = this.ledger.get();
        let now = this.now(py, ledger)?;
        let acquisition = match (deadline, this.budget) {
            // The kernel's default_wait_timeout_ms; asked again after it.
            (None, Budget::KernelWaits) => Acquisition::kernel_default(),
            _ => Acquisition::until(deadline),
        };
        let wait_ms = acquisition.wait_ms(now);
        if retry {
            let counters = klock.getattr(intern!(py, "counters"))?;
            let n: u64 = counters.getattr(intern!(py, "retries"))?.extract()?;
            counters.setattr(intern!(py, "retries"), n + 1)?;
        }
        let verdict: Bound<'_, PyAny> = match backend {
            Backend::Native(kernel) => {
                let texts = str_list(this.intents.bind(py), "intents")?;
                let strs = borrow_strs(&texts)?;
                let options = AcquireOptions {
                    ttl_ms: this.ttl,
                    wait: wait_ms != Some(0),
                    wait_timeout_ms: wait_ms,
                };
                let verdict = {
                    let mut k = kernel.get().kernel()?;
                    let verdict = k.acquire(SessionId(this.session_id), &strs, options, now);
                    *settled = quiet(&k);
                    verdict.or_raise(py)?
                };
                match verdict {
                    Verdict::Granted { leases } => {
                        PyBlock::record_grant(slf, leases, None, now)?;
                        return Ok(None);
                    }
                    other => Bound::new(py, PyVerdict(other))?.into_any(),
                }
            }
            Backend::Python(backend) => {
                let intents = PyList::new(py, this.intents.bind(py).iter())?;
                let args = (this.session_id, intents, now);
                let verdict = if wait_ms.is_none() && this.ttl.is_none() {
                    backend.call_method1(intern!(py, "acquire"), args)?
                } else {
                    let kwargs = pyo3::types::PyDict::new(py);
                    kwargs.set_item("ttl_ms", this.ttl)?;
                    kwargs.set_item("wait", wait_ms != Some(0))?;
                    kwargs.set_item("wait_timeout_ms", wait_ms)?;
                    backend.call_method(intern!(py, "acquire"), args, Some(&kwargs))?
                };
                if verdict.getattr(intern!(py, "verdict"))?.eq("GRANTED")? {
                    slf.call_method1(
                        intern!(py, "_granted_locked"),
                        (verdict.getattr(intern!(py, "leases"))?, now),
                    )?;
                    return Ok(None);
                }
                verdict
            }
        };
        let rest = slf.call_method1(
            intern!(py, "_not_granted_locked"),
            (verdict, loop_, wait_ms),
        )?;
        Ok(Some(rest.unbind()))
    }

    /// The release, under the client's lock: `Err` for an error the block's exit raises.
    fn release_locked(slf: &Bound<'_, PyBlock>, backend: &Backend<'_>) -> PyResult<Option<PyErr>> {
        let py = slf.py();
        let this = slf.get();
        if this.state() != State::Held {
            return Ok(None);
        }
        let ledger = this.ledger.get();
        let session = this.session.bind(py);
        let mut unreachable = None;
        let mut settled = None;
        if !this.handle.get().closed.load(Ordering::Relaxed) {
            // Kernel calls made while the block still holds its leases in the ledger: the
            // first settles time, so a lease that expired unseen (a long callback, a paused
            // process) reaches this block as LEASE_EXPIRED, and its exit raises LeaseLost
            // instead of reporting a lost lease as fine. Only the leases no other block of
            // the session holds are released.
            let now = this.now(py, ledger)?;
            let ids = ledger.state()?.ledger.releasable(this.id);
            let mut ended: SmallVec<[u64; 1]> = SmallVec::new();
            let sid = SessionId(this.session_id);
            let outcome: PyResult<()> = (|| {
                match backend {
                    Backend::Native(kernel) => {
                        let mut k = kernel.get().kernel()?;
                        for id in &ids {
                            if !k.release(sid, *id, now).or_raise(py)? {
                                ended.push(id.0);
                            }
                        }
                        if ids.is_empty() {
                            k.advance(now);
                        }
                        settled = quiet(&k);
                    }
                    Backend::Python(backend) => {
                        for id in &ids {
                            let ok = backend
                                .call_method1(intern!(py, "release"), (sid.0, id.0, now))?
                                .is_truthy()?;
                            if !ok {
                                ended.push(id.0);
                            }
                        }
                        if ids.is_empty() {
                            backend.call_method1(intern!(py, "advance"), (now,))?;
                        }
                    }
                }
                Ok(())
            })();
            let settled = this.settle(py, settled);
            match outcome {
                Ok(()) => {}
                Err(e) if e.is_instance_of::<UnknownId>(py) => {
                    this.klock
                        .bind(py)
                        .call_method1(intern!(py, "_session_gone_locked"), (session,))?;
                }
                Err(e) if e.is_instance(py, unreachable_class(py)?.bind(py)) => {
                    // A remote backend's server is gone: the block ends here all the same
                    // (its leases end on the server at their TTL), and its exit says why.
                    unreachable = Some(e);
                }
                Err(e) => return Err(e),
            }
            settled?;
            // A lease the release found ended already: lost (the client says why).
            for id in ended {
                slf.call_method1(intern!(py, "_ended_before_release_locked"), (id,))?;
            }
        }
        // The block's handle (this block) is dropped after the ledger's lock.
        let finished = ledger.state()?.ledger.finish(this.id);
        if let Some((_, leases)) = finished {
            this.st()?.ended_with = leases;
        }
        this.set_state(State::Done);
        Ok(unreachable)
    }
}

impl PyBlock {
    /// Hands an entry whose first attempt was not granted to the client's `method(first,
    /// deadline)` (waits, backoffs), which aborts the block if it fails; so does this, should
    /// the call fail before the method's own handler runs (an interrupt).
    fn contended(
        slf: &Bound<'_, PyBlock>,
        method: &Bound<'_, PyString>,
        first: Py<PyAny>,
        deadline: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        slf.call_method1(method, (first, deadline))
            .map(Bound::unbind)
            .inspect_err(|_| {
                // Idempotent; the first error is the one to raise.
                let _ = slf.call_method0(intern!(py, "_abort"));
            })
    }

    /// The entry's first attempt (`loop_`: `True` for the running event loop of an `async
    /// with`, `None` for a thread): `(None, _)` when granted, else what it came to and the
    /// deadline of the block's timeout. A failed attempt aborts the block.
    #[allow(clippy::type_complexity)]
    fn enter_first(
        slf: &Bound<'_, PyBlock>,
        loop_: &Bound<'_, PyAny>,
    ) -> PyResult<(Option<Py<PyAny>>, Option<u64>)> {
        let py = slf.py();
        let this = slf.get();
        if this.state() != State::New {
            slf.call_method0(intern!(py, "_begin"))?; // raises
        }
        // (A Klock or session closed meanwhile: the attempt raises Closed, under the lock.)
        this.set_state(State::Acquiring);
        let deadline = match this.budget {
            Budget::Finite => slf.call_method0(intern!(py, "_deadline"))?.extract()?,
            _ => None,
        };
        match PyBlock::_attempt(slf, loop_, deadline, false) {
            Ok(first) => Ok((first, deadline)),
            Err(e) => {
                slf.call_method0(intern!(py, "_abort"))?;
                Err(e)
            }
        }
    }
}

static READY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// An awaitable ready at once with `value` (an `async with` entered or left without
/// waiting): the client's `_ready(value)` coroutine, which the interpreter runs on its fast
/// path (a native awaitable would return its value through a StopIteration, which costs
/// more).
fn ready(value: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = value.py();
    let ready = READY.get_or_try_init(py, || {
        Ok::<_, PyErr>(
            py.import(intern!(py, "klock.client"))?
                .getattr(intern!(py, "_ready"))?
                .unbind(),
        )
    })?;
    ready.call1(py, (value,))
}

fn unreachable_class(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    UNREACHABLE.get_or_try_init(py, || {
        Ok(py
            .import(intern!(py, "klock.errors"))?
            .getattr(intern!(py, "Unreachable"))?
            .unbind())
    })
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
    /// `Block(session, handle, intents, ttl_ms, timeout)`: a block of `session` (a
    /// `klock.Session`, whose `SessionHandle` is `handle`) for `intents` (a tuple of str);
    /// checked here, acquired on entry.
    #[new]
    fn new(
        py: Python<'_>,
        session: &Bound<'_, PyAny>,
        handle: &Bound<'_, PySessionHandle>,
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
        let (timeout, budget) = if timeout.is_none() {
            (timeout.clone(), Budget::KernelWaits)
        } else {
            let check = CHECK_TIMEOUT.get_or_try_init(py, || {
                Ok::<_, PyErr>(
                    py.import(intern!(py, "klock.client"))?
                        .getattr(intern!(py, "_check_timeout"))?
                        .unbind(),
                )
            })?;
            let timeout = check.bind(py).call1((timeout,))?;
            let forever = timeout.extract::<f64>()?.is_infinite();
            (
                timeout,
                if forever {
                    Budget::Forever
                } else {
                    Budget::Finite
                },
            )
        };
        let ttl = if ttl_ms.is_none() {
            None
        } else {
            opt_u64_arg(Some(ttl_ms), "ttl_ms")?
        };
        let h = handle.get();
        let id = BlockId(h.ledger.get().next_block.fetch_add(1, Ordering::Relaxed) + 1);
        Ok(PyBlock {
            session: session.clone().unbind(),
            intents: intents.clone().unbind(),
            ttl_ms: ttl_ms.clone().unbind(),
            timeout: timeout.unbind(),
            klock: h.klock.clone_ref(py),
            ledger: h.ledger.clone_ref(py),
            handle: handle.clone().unbind(),
            session_id: h.session_id,
            id,
            ttl,
            budget,
            state: AtomicU8::new(State::New as u8),
            lost: AtomicBool::new(false),
            rest: Mutex::new(BlockState {
                lost: None,
                ticket: None,
                ended_with: SmallVec::new(),
            }),
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.session)?;
        visit.call(&self.intents)?;
        visit.call(&self.ttl_ms)?;
        visit.call(&self.timeout)?;
        visit.call(&self.klock)?;
        visit.call(&self.ledger)?;
        visit.call(&self.handle)?;
        if let Ok(rest) = self.rest.try_lock() {
            visit.call(&rest.lost)?;
            visit.call(&rest.ticket)?;
        }
        Ok(())
    }

    /// The intents, as given (a list of str).
    #[getter]
    fn intents<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.intents.bind(py).iter())
    }

    /// `"new"`, `"acquiring"`, `"held"`, `"done"` or `"failed"`.
    #[getter(_state)]
    fn get_state(&self) -> PyResult<&'static str> {
        Ok(self.state().name())
    }
    #[setter(_state)]
    fn put_state(&self, name: &str) -> PyResult<()> {
        let state = State::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown block state {name:?}")))?
            .0;
        self.set_state(state);
        Ok(())
    }

    /// `(name, message, lease_ids)` once a lease of the block was lost, else `None`.
    #[getter(_lost)]
    fn get_lost(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.st()?.lost.as_ref().map(|l| l.clone_ref(py)))
    }
    #[setter(_lost)]
    fn put_lost(&self, lost: Option<Py<PyAny>>) -> PyResult<()> {
        self.lost.store(lost.is_some(), Ordering::Relaxed);
        let old = std::mem::replace(&mut self.st()?.lost, lost);
        drop(old); // after the block's lock is released: dropping may run Python code
        Ok(())
    }

    /// The WAIT ticket the block waits on, else `None`.
    #[getter(_ticket)]
    fn get_ticket(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.st()?.ticket.as_ref().map(|t| t.clone_ref(py)))
    }
    #[setter(_ticket)]
    fn put_ticket(&self, ticket: Option<Py<PyAny>>) -> PyResult<()> {
        let old = std::mem::replace(&mut self.st()?.ticket, ticket);
        drop(old);
        Ok(())
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

    /// The kernel granted the block `leases` (a backend's lease objects) at `now`, under the
    /// client's lock: recorded in the ledger, its first heartbeat scheduled.
    fn _granted_locked(
        slf: &Bound<'_, PyBlock>,
        leases: &Bound<'_, PyAny>,
        now: u64,
    ) -> PyResult<()> {
        let py = slf.py();
        let objs: Vec<Bound<'_, PyAny>> = leases.try_iter()?.collect::<PyResult<_>>()?;
        let converted: Vec<Lease> = objs.iter().map(lease_of).collect::<PyResult<_>>()?;
        // A backend that measures its own deadlines (a remote server) says when to renew.
        let due_of = slf
            .get()
            .klock
            .bind(py)
            .getattr(intern!(py, "_heartbeat_due_of"))?;
        let renew = if due_of.is_none() {
            None
        } else {
            Some(
                converted
                    .iter()
                    .map(|l| due_of.call1((l.lease_id.0,))?.extract())
                    .collect::<PyResult<Vec<u64>>>()?,
            )
        };
        PyBlock::record_grant(slf, converted, renew, now)
    }

    /// One acquire attempt under the client's lock: `None` once granted (recorded), else what
    /// `_not_granted_locked(verdict, loop, wait_ms)` made of the verdict. `loop` is the event
    /// loop of an `async with` (`True`: the running one), `None` for a thread; `deadline` the
    /// end of the timeout budget on the client's clock (`None`: no client-side limit).
    #[pyo3(signature = (loop_, deadline, retry))]
    fn _attempt(
        slf: &Bound<'_, PyBlock>,
        loop_: &Bound<'_, PyAny>,
        deadline: Option<u64>,
        retry: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        let py = slf.py();
        let this = slf.get();
        this.locked(py, |backend| {
            let mut quiet = None;
            let out = PyBlock::attempt_locked(slf, backend, &mut quiet, loop_, deadline, retry);
            let settled = this.settle(py, quiet);
            let out = out?;
            settled?;
            Ok(out)
        })
    }

    /// Releases what this block holds (leases shared with an outer block stay held), once.
    fn _release(slf: &Bound<'_, PyBlock>) -> PyResult<()> {
        let py = slf.py();
        match slf
            .get()
            .locked(py, |backend| PyBlock::release_locked(slf, backend))?
        {
            Some(unreachable) => Err(unreachable),
            None => Ok(()),
        }
    }

    fn __enter__(slf: &Bound<'_, PyBlock>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match PyBlock::enter_first(slf, &py.None().into_bound(py))? {
            (None, _) => Ok(slf.clone().into_any().unbind()),
            (Some(first), deadline) => {
                PyBlock::contended(slf, intern!(py, "_enter_contended"), first, deadline)
            }
        }
    }

    /// The first attempt of `Lease.__aenter__`, made in its coroutine: `None` when granted,
    /// `(what it came to, the timeout's deadline)` when not, and `False`, with nothing done,
    /// when the backend's calls may block (they must then run in worker threads). The
    /// running event loop is looked up only if the block must wait (the lookup costs a
    /// system call). A failed attempt aborts the block.
    fn _aenter_first(slf: &Bound<'_, PyBlock>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if slf.get().ledger.get().offload_async {
            return Ok(PyBool::new(py, false).to_owned().into_any().unbind());
        }
        Ok(
            match PyBlock::enter_first(slf, PyBool::new(py, true).as_any())? {
                (None, _) => py.None(),
                (Some(first), deadline) => (first, deadline).into_pyobject(py)?.into_any().unbind(),
            },
        )
    }

    /// `async with`'s exit: the release made at once (with a backend whose calls do not
    /// block), so it happens even if the coroutine returned is never run.
    #[pyo3(signature = (exc_type, exc, tb))]
    fn __aexit__(
        slf: &Bound<'_, PyBlock>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        tb: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if slf.get().ledger.get().offload_async {
            return Ok(slf
                .call_method1(intern!(py, "_aexit_offloading"), (exc,))?
                .unbind());
        }
        PyBlock::__exit__(slf, exc_type, exc, tb)?;
        ready(&py.None().into_bound(py))
    }

    #[pyo3(signature = (exc_type, exc, tb))]
    fn __exit__(
        slf: &Bound<'_, PyBlock>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        tb: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let _ = (exc_type, tb);
        let py = slf.py();
        PyBlock::_release(slf)?;
        if slf.get().lost.load(Ordering::Relaxed) {
            slf.call_method1(intern!(py, "_exit_lost"), (exc,))?;
        }
        Ok(())
    }
}
