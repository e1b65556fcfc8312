//! The `Kernel` class: one `klock_core::Kernel`, owned by its JS object.
//!
//! Contract: one method per kernel operation, same names in camelCase, same argument order
//! (`now` last), same answers converted by [`crate::output`]. Arguments are converted by
//! [`crate::input`] before the kernel is called, so an argument error changes nothing at
//! all; a kernel error is thrown as `KlockError` after the kernel has settled time, exactly as
//! the core does. The drive contract is the core's: after every call drain `pollEvent()` (or
//! `drainEvents()`), arm one timer for `nextDeadline()`, call `advance(now)` when it fires.

use crate::input::{self, number_arg};
use crate::output::{
    self, EventJs, HeartbeatResult, ReconcileResult, ResourceState, SessionInfo, Snapshot,
    StateDigest, Stats, VerdictJs,
};
use crate::{fast, shared, throw};
use klock_core::{AcquireOptions, LeaseId, LeaseSelection, SessionId, TicketId};
use napi::bindgen_prelude::*;
use napi::ValueType;
use napi_derive::napi;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The coordination kernel (SPEC.md). It never reads a clock: every call that can change
/// state takes `now` (integer milliseconds, any epoch the host chooses, never going back).
#[napi]
pub struct Kernel {
    inner: klock_core::Kernel,
    /// Set when a kernel call panicked (a bug): the state may be half-updated, so every
    /// later call throws instead of trusting it.
    poisoned: Cell<bool>,
}

fn session(env: &Env, value: Unknown<'_>) -> Result<SessionId> {
    number_arg(env, value, "session").map(SessionId)
}

/// The converted arguments of `acquire` (the manifest is converted into a reused buffer).
pub(crate) struct AcquireCall {
    session: SessionId,
    options: AcquireOptions,
    now: u64,
}

/// Converts `acquire`'s arguments, the manifest into `manifest`.
pub(crate) fn acquire_args(
    env: &Env,
    session_id: Unknown<'_>,
    intents: Unknown<'_>,
    options: Unknown<'_>,
    now: Unknown<'_>,
    manifest: &mut Vec<String>,
) -> Result<AcquireCall> {
    let session = session(env, session_id)?;
    input::strings_into(env, intents, "intents", manifest)?;
    let options = input::acquire_options(env, options)?;
    let now = number_arg(env, now, "now")?;
    Ok(AcquireCall {
        session,
        options,
        now,
    })
}

/// The converted arguments of `release`.
pub(crate) struct ReleaseCall {
    session: SessionId,
    lease: LeaseId,
    now: u64,
}

impl ReleaseCall {
    /// The release of `lease` by `session` at `now`, from converted figures.
    pub(crate) fn new(session: SessionId, lease: LeaseId, now: u64) -> ReleaseCall {
        ReleaseCall {
            session,
            lease,
            now,
        }
    }
}

/// Converts `release`'s arguments.
pub(crate) fn release_args(
    env: &Env,
    session_id: Unknown<'_>,
    lease: Unknown<'_>,
    now: Unknown<'_>,
) -> Result<ReleaseCall> {
    Ok(ReleaseCall {
        session: session(env, session_id)?,
        lease: LeaseId(number_arg(env, lease, "lease")?),
        now: number_arg(env, now, "now")?,
    })
}

fn panicked() -> Error {
    Error::from_reason(
        "klock: the kernel panicked (a bug: please report it); this Kernel can no longer be used",
    )
}

impl Kernel {
    fn fail(env: &Env, e: klock_core::Error) -> Error {
        throw::kernel_error(env, &e)
    }

    /// Runs one kernel operation: a kernel error is thrown as `KlockError`; a panic is caught
    /// (it must never unwind into Node) and poisons this Kernel.
    fn call<R>(
        &mut self,
        env: &Env,
        op: impl FnOnce(&mut klock_core::Kernel) -> std::result::Result<R, klock_core::Error>,
    ) -> Result<R> {
        if self.poisoned.get() {
            return Err(panicked());
        }
        match catch_unwind(AssertUnwindSafe(|| op(&mut self.inner))) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Kernel::fail(env, e)),
            Err(_) => {
                self.poisoned.set(true);
                Err(panicked())
            }
        }
    }

    /// Like [`Kernel::call`], for the queries that only read.
    fn read<R>(&self, _env: &Env, op: impl FnOnce(&klock_core::Kernel) -> R) -> Result<R> {
        if self.poisoned.get() {
            return Err(panicked());
        }
        catch_unwind(AssertUnwindSafe(|| op(&self.inner))).map_err(|_| {
            self.poisoned.set(true);
            panicked()
        })
    }

    pub(crate) fn run_acquire(
        &mut self,
        env: &Env,
        call: AcquireCall,
        manifest: &[String],
    ) -> Result<VerdictJs> {
        self.call(env, |k| {
            k.acquire(call.session, manifest, call.options, call.now)
        })
        .map(VerdictJs)
    }

    pub(crate) fn run_advance(&mut self, env: &Env, now: u64) -> Result<()> {
        self.call(env, |k| {
            k.advance(now);
            Ok(())
        })
    }

    pub(crate) fn run_release(&mut self, env: &Env, call: ReleaseCall) -> Result<bool> {
        self.call(env, |k| k.release(call.session, call.lease, call.now))
    }
}

#[napi]
impl Kernel {
    /// A kernel with `config` (missing keys take SPEC.md's defaults: policy `wait_die`,
    /// seed 0, TTL 60 000 ms capped at 300 000, wait timeout 30 000, backoff 100..10 000,
    /// grace 15 000, idle close 300 000, 1 024 leases per session, no lifetime cap).
    ///
    /// Throws `KlockError` `INVALID_CONFIG` (unknown key or policy, zero TTLs).
    #[napi(constructor, ts_args_type = "config?: Config | undefined | null")]
    pub fn new(env: Env, config: Unknown<'_>) -> Result<Kernel> {
        let c = input::config(&env, config)?;
        let inner = klock_core::Kernel::new(c).map_err(|e| Kernel::fail(&env, e))?;
        Ok(Kernel {
            inner,
            poisoned: Cell::new(false),
        })
    }

    /// An independent kernel in the same state (explorers and test runners branch from it).
    #[napi(js_name = "clone")]
    pub fn fork(&self, env: Env) -> Result<Kernel> {
        let inner = self.read(&env, |k| k.clone())?;
        Ok(Kernel {
            inner,
            poisoned: Cell::new(false),
        })
    }

    /// The configuration the kernel runs with.
    #[napi(getter, ts_return_type = "ConfigView")]
    pub fn config<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        let config = self.read(env, |k| k.config().clone())?;
        output::config_view(env, &config)
    }

    /// The largest `now` the kernel has seen.
    #[napi]
    pub fn now(&self, env: Env) -> Result<f64> {
        self.read(&env, |k| output::num(k.now()))
    }

    /// Opens a session; the kernel assigns its id and priority.
    ///
    /// Throws `KlockError` `INVALID_AGENT_ID` / `INVALID_NAMESPACE` (1..=256 bytes of
    /// printable UTF-8).
    #[napi(ts_args_type = "agentId: string, namespace: string, now: number")]
    pub fn open_session(
        &mut self,
        env: Env,
        agent_id: Unknown<'_>,
        namespace: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<SessionInfo> {
        let agent_id = input::string(&env, agent_id, "agentId")?;
        let namespace = input::string(&env, namespace, "namespace")?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.open_session(&agent_id, &namespace, now))
            .map(SessionInfo::from)
    }

    /// Closes a session: releases every lease and cancels every wait (the grants this
    /// unblocks are emitted as events). Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, now: number")]
    pub fn close_session(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<()> {
        let s = session(&env, session_id)?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.close_session(s, now))
    }

    /// Marks the session as restarting: its leases are kept at least `graceMs` past a missed
    /// heartbeat. Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, now: number")]
    pub fn suspend_session(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<()> {
        let s = session(&env, session_id)?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.suspend_session(s, now))
    }

    /// The session's recovery digest (KLIS-8 shape). Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, now: number")]
    pub fn digest(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<StateDigest> {
        let s = session(&env, session_id)?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.digest(s, now)).map(StateDigest::from)
    }

    /// Re-attaches a restarted agent to its session: same priority, epoch + 1, every lease
    /// renewed. Throws `UNKNOWN_SESSION`, `INVALID_DIGEST`.
    #[napi(ts_args_type = "digest: StateDigest, now: number")]
    pub fn resume_session(
        &mut self,
        env: Env,
        digest: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<SessionInfo> {
        let digest = input::digest(&env, digest)?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.resume_session(&digest, now))
            .map(SessionInfo::from)
    }

    /// Asks for every intent (`"PREDICATE TYPE:/path"`) at once: GRANTED, WAIT (a ticket
    /// resolved later by an event) or DIE (retry after `retryAfterMs`).
    ///
    /// Throws `UNKNOWN_SESSION`, `INVALID_MANIFEST`, `INVALID_PREDICATE`, `INVALID_RESOURCE`,
    /// `INVALID_TTL`, `HOLD_AND_WAIT`, `QUOTA_EXCEEDED` (in that precedence).
    #[napi(
        ts_args_type = "session: number, intents: string[], options: AcquireOptions | undefined | null, now: number",
        ts_return_type = "Verdict"
    )]
    pub fn acquire(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        intents: Unknown<'_>,
        options: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<VerdictJs> {
        // (Replaced on the prototype by crate::fast, which calls the same two functions.)
        fast::with_manifest(|manifest| {
            let call = acquire_args(&env, session_id, intents, options, now, manifest)?;
            self.run_acquire(&env, call, manifest)
        })
    }

    /// Renews leases for their TTL from `now`, each answered separately (`'all'`: every
    /// active lease of the session, in grant order). Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, leases: number[] | 'all', now: number")]
    pub fn heartbeat(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        leases: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<Vec<HeartbeatResult>> {
        let s = session(&env, session_id)?;
        let ids: Option<Vec<LeaseId>> = if leases.get_type()? == ValueType::String {
            let text = input::string(&env, leases, "leases")?;
            if text != "all" {
                return Err(throw::type_error(
                    &env,
                    shared::INVALID_ARG_VALUE,
                    shared::not_all(&text),
                ));
            }
            None
        } else {
            Some(
                input::numbers(&env, leases, "leases")?
                    .into_iter()
                    .map(LeaseId)
                    .collect(),
            )
        };
        let now = number_arg(&env, now, "now")?;
        let which = match &ids {
            None => LeaseSelection::All,
            Some(ids) => LeaseSelection::Ids(ids),
        };
        self.call(&env, |k| k.heartbeat(s, which, now))
            .map(|r| r.into_iter().map(HeartbeatResult::from).collect())
    }

    /// Releases one lease: `true` if this call released it, `false` if it had already ended
    /// (idempotent). Throws `UNKNOWN_SESSION`, `NOT_OWNER`, `UNKNOWN_LEASE`.
    #[napi(ts_args_type = "session: number, lease: number, now: number")]
    pub fn release(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        lease: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<bool> {
        // (Replaced on the prototype by crate::fast, which calls the same two functions.)
        let call = release_args(&env, session_id, lease, now)?;
        self.run_release(&env, call)
    }

    /// Releases every active lease of the session (waits are kept); returns how many.
    /// Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, now: number")]
    pub fn release_all(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<u32> {
        let s = session(&env, session_id)?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.release_all(s, now)).map(|n| n as u32)
    }

    /// The kernel's truth about each lease, from the point of view of `session`.
    /// Throws `UNKNOWN_SESSION`.
    #[napi(ts_args_type = "session: number, leases: number[], now: number")]
    pub fn reconcile(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        leases: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<Vec<ReconcileResult>> {
        let s = session(&env, session_id)?;
        let ids: Vec<LeaseId> = input::numbers(&env, leases, "leases")?
            .into_iter()
            .map(LeaseId)
            .collect();
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.reconcile(s, &ids, now))
            .map(|r| r.into_iter().map(ReconcileResult::from).collect())
    }

    /// Withdraws a waiting ticket of the session. Throws `UNKNOWN_SESSION`, `NOT_OWNER`,
    /// `UNKNOWN_TICKET`.
    #[napi(ts_args_type = "session: number, ticket: number, now: number")]
    pub fn cancel_wait(
        &mut self,
        env: Env,
        session_id: Unknown<'_>,
        ticket: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<()> {
        let s = session(&env, session_id)?;
        let ticket = number_arg(&env, ticket, "ticket")?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.cancel_wait(s, TicketId(ticket), now))
    }

    /// Settles everything due at or before `now`. Calling early is harmless.
    #[napi(ts_args_type = "now: number")]
    pub fn advance(&mut self, env: Env, now: Unknown<'_>) -> Result<()> {
        let now = number_arg(&env, now, "now")?;
        self.run_advance(&env, now)
    }

    /// The earliest pending deadline (possibly already past: then call `advance` at once),
    /// or `null`.
    #[napi]
    pub fn next_deadline(&self, env: Env) -> Result<Option<f64>> {
        self.read(&env, |k| k.next_deadline().map(output::num))
    }

    /// `nextDeadline()` when no event waits to be polled, else `undefined`: after a call, one
    /// query tells the host whether to drain events and, if not, when its timer must fire.
    #[napi(ts_return_type = "number | null | undefined")]
    pub fn next_deadline_if_quiet(&self, env: Env) -> Result<Either3<f64, Null, Undefined>> {
        self.read(&env, |k| {
            if k.pending_events() > 0 {
                return Either3::C(());
            }
            match k.next_deadline() {
                Some(at) => Either3::A(output::num(at)),
                None => Either3::B(Null),
            }
        })
    }

    /// Whether ACQUIRED and RELEASED are emitted (default `true`, SPEC.md §9): a host that
    /// reads them nowhere may turn them off, which keeps an uncontended acquire and release
    /// free of their cost (the friendly Klock does while no election observes).
    #[napi]
    pub fn set_holder_events(&mut self, env: Env, on: bool) -> Result<()> {
        self.call(&env, |k| {
            k.set_holder_events(on);
            Ok(())
        })
    }

    /// The next queued event, oldest first; `null` when drained.
    #[napi(ts_return_type = "Event | null")]
    pub fn poll_event(&mut self, env: Env) -> Result<Option<EventJs>> {
        self.call(&env, |k| Ok(k.poll_event().map(EventJs)))
    }

    /// Every queued event, oldest first (`pollEvent` until it returns `null`).
    #[napi(ts_return_type = "Array<Event>")]
    pub fn drain_events(&mut self, env: Env) -> Result<Vec<EventJs>> {
        self.call(&env, |k| {
            Ok(std::iter::from_fn(|| k.poll_event()).map(EventJs).collect())
        })
    }

    /// How many events wait to be polled.
    #[napi]
    pub fn pending_events(&self, env: Env) -> Result<u32> {
        self.read(&env, |k| k.pending_events() as u32)
    }

    /// Holders and queue of one resource node, and the holders covering it from its
    /// ancestors and descendants. Throws `INVALID_RESOURCE`, `INVALID_NAMESPACE`.
    #[napi(ts_args_type = "resource: string, namespace: string, now: number")]
    pub fn resource_state(
        &mut self,
        env: Env,
        resource: Unknown<'_>,
        namespace: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<ResourceState> {
        let resource = input::string(&env, resource, "resource")?;
        let namespace = input::string(&env, namespace, "namespace")?;
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| k.resource_state(&resource, &namespace, now))
            .map(ResourceState::from)
    }

    /// Outcome counters, live totals, top contended resources and ghost agents (as of the
    /// last call; takes no `now`).
    #[napi]
    pub fn stats(&self, env: Env) -> Result<Stats> {
        self.read(&env, |k| k.stats().into())
    }

    /// The whole state after settling `now`, for dashboards.
    #[napi(ts_args_type = "now: number")]
    pub fn snapshot(&mut self, env: Env, now: Unknown<'_>) -> Result<Snapshot> {
        let now = number_arg(&env, now, "now")?;
        self.call(&env, |k| Ok(k.snapshot(now))).map(Snapshot::from)
    }
}
