//! The `Ledger` class: the core's ledger of a friendly client's nested lease blocks
//! ([`klock_core::client::Ledger`]), for node/client.js.
//!
//! Contract: translation only. Which blocks hold which leases, which leases a block's end
//! releases, where a lost lease is routed and when each block's next heartbeat is due are the
//! core's answers; this module converts arguments (bad ones throw the binding's usual
//! `TypeError`/`RangeError` naming them, before the ledger changes) and answers.
//! - A block is named by the host: a number (its `BlockId`), unique among its held blocks.
//!   Granting a held id again, or asking about (or finishing) a block that is not held, is a
//!   `TypeError` `ERR_INVALID_ARG_VALUE`: a host's bug, never a silent no-op.
//! - The host keeps one `Map` from block id to its block object beside the ledger. A napi
//!   reference per block (the core's other shape: the ledger holds the host's object) would
//!   cost a `napi_create_reference` at every grant, a `napi_get_reference_value` for every
//!   routed loss or due heartbeat, and a `napi_delete_reference` at every finish, which needs
//!   the env (so it cannot run in `Drop`: a ledger collected with held blocks would leak
//!   them); a JS `Map.set`/`delete` per block costs less and leaves nothing to free by hand
//!   (docs/DECISIONS.md, "Issue 27: Node on the core's ledger"). The ledger's handle of a
//!   block is instead the figures the host's lease objects were granted with.
//! - The host keeps the kernel's lease objects it shows (`lease.leases`); the ledger takes
//!   only the figures its rules use (`leaseId`, `expiresAt`, `ttlMs`, as one flat array) and
//!   writes the current `expiresAt` and `ttlMs` back into them on request (`show`; `finish`,
//!   only when they changed since the grant), so every block of a shared lease shows the
//!   figures of its last renewal. The other fields of the core's `Lease` are left empty: the
//!   ledger's rules never read them.
//! - What a friendly block costs is three calls more than the kernel's pair, each made once
//!   per block: `grant`, `releaseIn` (in process: the ledger's `releasable` and the kernel's
//!   releases in one call; remotely the host sends `releasable`'s leases itself) and `finish`.
//!   `grant`, `finish` and `schedule` answer the ledger's earliest scheduled heartbeat, so the
//!   host re-arms its timer without a `nextHeartbeat()` call per block. These calls, and
//!   `holdsLeases` and `nextHeartbeat`, enter through plain Node-API callbacks installed on the
//!   prototype (as the kernel's `acquire` and `release` do, see `crate::fast`): napi-rs's own
//!   method wrapper costs a borrow-table round per call. They convert every argument first
//!   (which may run user code), then borrow the ledger (and, for `releaseIn`, the kernel,
//!   which runs no JS), and write into the host's objects only after the borrow ends.
//! - Times are the host's integer milliseconds; "never" (the core's `u64::MAX`) goes out as
//!   `null`, and an `expiresAt` equal to the kernel's own never-figure (2^64 − 1, as the
//!   kernel writes it) comes in as never.

use crate::fast::{self, args, boundary};
use crate::input::{self, number_arg, Label, Place};
use crate::kernel::{Kernel, ReleaseCall};
use crate::output::num;
use crate::{shared, throw};
use klock_core::client::{self, BlockId, HeldLease};
use klock_core::{Lease, LeaseId, Predicate, SessionId};
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use std::ptr;

/// The ledger of one friendly client's lease blocks (klock_core::client::Ledger).
#[napi]
pub struct Ledger {
    /// Each block's handle: the figures (`expiresAt`, `ttlMs`) the host's lease objects of it
    /// were granted with, so that `finish` writes them only when they changed.
    inner: client::Ledger<Vec<(u64, u64)>>,
}

/// A block whose heartbeat is due, taken off the schedule: renew `leaseIds` (the ones that
/// did not end) in `session`, report the answers, then schedule it again.
#[napi(object, object_from_js = false)]
pub struct DueBlock {
    pub block: f64,
    pub session: f64,
    pub lease_ids: Vec<f64>,
}

/// The core's "never" as JS: `null`.
fn time(at: u64) -> Option<f64> {
    (at != u64::MAX).then(|| num(at))
}

/// A time that may be the kernel's never-figure (`u64::MAX` written as a JS number).
fn time_or_never(env: &Env, value: Unknown<'_>, what: Label<'_>, place: Place) -> Result<u64> {
    if value.get_type()? == ValueType::Number {
        let x: f64 = unsafe { value.cast()? };
        if x == u64::MAX as f64 {
            return Ok(u64::MAX);
        }
    }
    input::number(env, value, what, place)
}

/// The `kernel` argument: the addon's own `Kernel` (its type tag checked, as for a receiver).
fn kernel_arg(env: &Env, value: Unknown<'_>) -> Result<*mut Kernel> {
    let raw = value.value();
    let mut wrapped = ptr::null_mut();
    let unwrapped = unsafe { sys::napi_unwrap(raw.env, raw.value, &mut wrapped) };
    if unwrapped != sys::Status::napi_ok
        || unsafe {
            validate_type_tag(
                raw.env,
                raw.value,
                &<Kernel as TypeTag>::type_tag(),
                "Kernel",
            )
        }
        .is_err()
    {
        return Err(throw::type_error(
            env,
            shared::INVALID_ARG_TYPE,
            "`kernel` must be a Kernel (the addon's in-process kernel)".to_owned(),
        ));
    }
    Ok(wrapped.cast())
}

fn block_arg(env: &Env, value: Unknown<'_>) -> Result<BlockId> {
    number_arg(env, value, "block").map(BlockId)
}

fn invalid(env: &Env, message: String) -> Error {
    throw::type_error(env, shared::INVALID_ARG_VALUE, message)
}

/// A granted lease as the ledger keeps it, from its three figures (the fields its rules never
/// read are left empty: see the module contract).
fn lease(session: SessionId, lease_id: u64, expires_at: u64, ttl_ms: u64) -> Lease {
    Lease {
        lease_id: LeaseId(lease_id),
        session_id: session,
        agent_id: String::new(),
        resource: String::new(),
        predicate: Predicate::Mutates,
        fence: 0,
        acquired_at: 0,
        expires_at,
        ttl_ms,
    }
}

/// `figures`: `[leaseId, expiresAt, ttlMs]` of each granted lease, one after the other.
fn granted(env: &Env, value: Unknown<'_>, session: SessionId) -> Result<Vec<Lease>> {
    let mut flat = Vec::with_capacity(3);
    input::list(
        env,
        value,
        Label::Name("figures"),
        Place::Argument,
        |v, at| {
            // Every third figure is an expiry, which may be the kernel's "never".
            let x = if flat.len() % 3 == 1 {
                time_or_never(env, v, at, Place::Field)?
            } else {
                input::number(env, v, at, Place::Field)?
            };
            flat.push(x);
            Ok(())
        },
    )?;
    if flat.len() % 3 != 0 {
        return Err(invalid(
            env,
            format!(
                "`figures` must hold [leaseId, expiresAt, ttlMs] per lease; it has {} numbers",
                flat.len()
            ),
        ));
    }
    Ok(flat
        .chunks_exact(3)
        .map(|f| lease(session, f[0], f[1], f[2]))
        .collect())
}

/// The converted arguments of `grant`.
pub(crate) struct GrantCall {
    block: BlockId,
    session: SessionId,
    leases: Vec<Lease>,
    renew: Option<Vec<u64>>,
    now: u64,
}

/// Converts `grant`'s arguments (before the ledger is borrowed: reading an array may run user
/// code).
pub(crate) fn grant_args(
    env: &Env,
    block: Unknown<'_>,
    session: Unknown<'_>,
    figures: Unknown<'_>,
    renew_at: Unknown<'_>,
    now: Unknown<'_>,
) -> Result<GrantCall> {
    let block = block_arg(env, block)?;
    let session = SessionId(number_arg(env, session, "session")?);
    let leases = granted(env, figures, session)?;
    let renew = if renew_at.get_type()? == ValueType::Undefined {
        None
    } else {
        let renew = input::numbers(env, renew_at, "renewAt")?;
        if renew.len() != leases.len() {
            return Err(invalid(
                env,
                format!(
                    "`renewAt` has {} times for {} leases",
                    renew.len(),
                    leases.len()
                ),
            ));
        }
        Some(renew)
    };
    let now = number_arg(env, now, "now")?;
    Ok(GrantCall {
        block,
        session,
        leases,
        renew,
        now,
    })
}

/// The host's lease objects of a block (`shown`), converted before the ledger is borrowed.
fn shown_objects<'env>(env: &Env, shown: Unknown<'env>) -> Result<Vec<Object<'env>>> {
    input::list(
        env,
        shown,
        Label::Name("shown"),
        Place::Argument,
        |v, at| input::object(env, v, at, Place::Field),
    )
}

/// Writes a block's figures into the host's objects of it (after the ledger's borrow ended:
/// a setter may run user code).
fn write_figures(objects: Vec<Object<'_>>, leases: &[HeldLease]) -> Result<()> {
    for (mut object, held) in objects.into_iter().zip(leases) {
        object.set_named_property("expiresAt", num(held.lease.expires_at))?;
        object.set_named_property("ttlMs", num(held.lease.ttl_ms))?;
    }
    Ok(())
}

impl Ledger {
    pub(crate) fn run_holds_leases(&self, session: SessionId) -> bool {
        self.inner.holds_leases(session)
    }

    /// `id`, which must be held.
    fn check_held(&self, env: &Env, id: BlockId) -> Result<()> {
        if !self.inner.is_held(id) {
            return Err(invalid(env, format!("block {} is not held", id.0)));
        }
        Ok(())
    }

    /// `objects` must be as many as `block`'s leases.
    fn check_shown(&self, env: &Env, id: BlockId, objects: &[Object<'_>]) -> Result<()> {
        let held = self.inner.leases(id).len();
        if objects.len() != held {
            return Err(invalid(
                env,
                format!(
                    "`shown` has {} leases; block {} holds {held}",
                    objects.len(),
                    id.0
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn run_grant(&mut self, env: &Env, call: GrantCall) -> Result<Option<f64>> {
        if self.inner.is_held(call.block) {
            return Err(invalid(
                env,
                format!("block {} is held already", call.block.0),
            ));
        }
        let shown = call
            .leases
            .iter()
            .map(|l| (l.expires_at, l.ttl_ms))
            .collect();
        self.inner.grant(
            call.block,
            shown,
            call.session,
            call.leases,
            call.renew.as_deref(),
            call.now,
        );
        Ok(self.next_heartbeat())
    }

    pub(crate) fn run_releasable(&self, env: &Env, id: BlockId) -> Result<Vec<f64>> {
        self.check_held(env, id)?;
        Ok(self.inner.releasable(id).iter().map(|l| num(l.0)).collect())
    }

    /// Finishes the held `id` (`objects`, the host's objects of it, checked first); the
    /// figures come back to be written into them only if they changed since the grant (a
    /// heartbeat, a re-acquire by a nested block): most blocks write nothing.
    pub(crate) fn run_finish<'env>(
        &mut self,
        env: &Env,
        id: BlockId,
        objects: Option<Vec<Object<'env>>>,
    ) -> Result<Finished<'env>> {
        self.check_held(env, id)?;
        if let Some(objects) = &objects {
            self.check_shown(env, id, objects)?;
        }
        let (granted, leases) = self
            .inner
            .finish(id)
            .ok_or_else(|| Error::from_reason("a held block vanished"))?;
        let unchanged = granted.len() == leases.len()
            && granted
                .iter()
                .zip(&leases)
                .all(|(&g, h)| g == (h.lease.expires_at, h.lease.ttl_ms));
        Ok(Finished {
            objects: if unchanged {
                Vec::new()
            } else {
                objects.unwrap_or_default()
            },
            leases: leases.into_vec(),
            next_heartbeat: self.next_heartbeat(),
        })
    }
}

#[napi]
impl Ledger {
    /// An empty ledger.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Ledger {
        Ledger {
            inner: client::Ledger::new(),
        }
    }

    /// The kernel granted `block` of `session` these leases at `now`: `figures` holds
    /// `[leaseId, expiresAt, ttlMs]` of each, in the grant's order (numbers, not the kernel's
    /// lease objects: reading three named properties per lease from native code costs more
    /// than the JS that lists them); leases an outer block holds are renewed for it too. `renewAt`: the host's due
    /// time per lease (a remote client's, from its local deadlines), or `undefined` for the
    /// core's (a third of the way through each TTL); the block is scheduled for its first
    /// heartbeat then (no earlier than `now`). Returns the ledger's earliest scheduled
    /// heartbeat afterwards (`null`: none), as `nextHeartbeat()` would: the host arms its timer
    /// without another call.
    #[napi(
        ts_args_type = "block: number, session: number, figures: number[], renewAt: number[] | undefined, now: number",
        ts_return_type = "number | null"
    )]
    pub fn grant(
        &mut self,
        env: Env,
        block: Unknown<'_>,
        session: Unknown<'_>,
        figures: Unknown<'_>,
        renew_at: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<Option<f64>> {
        // (Replaced on the prototype by a fast callback, which calls the same two functions.)
        let call = grant_args(&env, block, session, figures, renew_at, now)?;
        self.run_grant(&env, call)
    }

    /// The leases of the held `block` that no other held block holds and that did not end:
    /// the ones to release in the kernel when it ends (before `finish`).
    #[napi(ts_args_type = "block: number")]
    pub fn releasable(&self, env: Env, block: Unknown<'_>) -> Result<Vec<f64>> {
        let id = block_arg(&env, block)?;
        self.run_releasable(&env, id)
    }

    /// In process: releases in `kernel` what the held `block`'s end releases (what
    /// `releasable` names) in `session` at `now` — or, when that is nothing, settles time
    /// there (`advance(now)`), so that a lease the release is the first to see expired is
    /// still reported — in one call instead of one per lease. Returns how many it released;
    /// throws what the kernel throws (`KlockError`), the leases before it released.
    #[napi(ts_args_type = "kernel: Kernel, block: number, session: number, now: number")]
    pub fn release_in(
        &mut self,
        env: Env,
        kernel: Unknown<'_>,
        block: Unknown<'_>,
        session: Unknown<'_>,
        now: Unknown<'_>,
    ) -> Result<u32> {
        // SAFETY: `self` is live; napi-rs's borrow table refuses a re-entrant call meanwhile.
        unsafe { release_in(&env, self, kernel, block, session, now) }
    }

    /// The held `block` ended: it leaves the ledger (unscheduled, no longer a holder); its
    /// last figures are written into `shown` (the host's lease objects of it, when given).
    /// Returns the ledger's earliest scheduled heartbeat afterwards (`null`: none).
    #[napi(
        ts_args_type = "block: number, shown?: object[] | undefined",
        ts_return_type = "number | null"
    )]
    pub fn finish(
        &mut self,
        env: Env,
        block: Unknown<'_>,
        shown: Unknown<'_>,
    ) -> Result<Option<f64>> {
        // SAFETY: `self` is live; napi-rs's borrow table refuses a re-entrant call meanwhile.
        unsafe { finish_through(&env, self, block, shown) }
    }

    /// Writes the held `block`'s current `expiresAt` and `ttlMs` into `shown`, the host's
    /// lease objects of it (in its lease order).
    #[napi(ts_args_type = "block: number, shown: object[]")]
    pub fn show(&self, env: Env, block: Unknown<'_>, shown: Unknown<'_>) -> Result<()> {
        let id = block_arg(&env, block)?;
        let objects = shown_objects(&env, shown)?;
        self.check_held(&env, id)?;
        self.check_shown(&env, id, &objects)?;
        write_figures(objects, self.inner.leases(id))
    }

    /// The lease ended in the kernel: it is forgotten; returns the held blocks that held it
    /// (each keeps its other leases and is no longer scheduled). A lease no block holds
    /// answers `[]`.
    #[napi(ts_args_type = "lease: number")]
    pub fn lose(&mut self, env: Env, lease: Unknown<'_>) -> Result<Vec<f64>> {
        let lease = LeaseId(number_arg(&env, lease, "lease")?);
        Ok(self.inner.lose(lease).iter().map(|b| num(b.0)).collect())
    }

    /// A lease was renewed: every held block holding it sees `expiresAt` (and `ttlMs`, when
    /// given) and renews it at `renewAt` (`undefined`: the core's third of the TTL). A lease no
    /// block holds is ignored (it ended meanwhile).
    #[napi(
        ts_args_type = "lease: number, expiresAt: number, ttlMs: number | undefined, renewAt: number | undefined"
    )]
    pub fn renewed(
        &mut self,
        env: Env,
        lease: Unknown<'_>,
        expires_at: Unknown<'_>,
        ttl_ms: Unknown<'_>,
        renew_at: Unknown<'_>,
    ) -> Result<()> {
        let lease = LeaseId(number_arg(&env, lease, "lease")?);
        let expires_at =
            time_or_never(&env, expires_at, Label::Name("expiresAt"), Place::Argument)?;
        let ttl_ms = input::optional_number_arg(&env, ttl_ms, "ttlMs")?;
        let renew = input::optional_number_arg(&env, renew_at, "renewAt")?;
        self.inner.renewed(lease, expires_at, ttl_ms, renew);
        Ok(())
    }

    /// Whether a held block of `session` holds a lease that did not end.
    #[napi(ts_args_type = "session: number")]
    pub fn holds_leases(&self, env: Env, session: Unknown<'_>) -> Result<bool> {
        let session = SessionId(number_arg(&env, session, "session")?);
        Ok(self.run_holds_leases(session))
    }

    /// The leases held by blocks of `session` (that did not end), ascending.
    #[napi(ts_args_type = "session: number")]
    pub fn session_leases(&self, env: Env, session: Unknown<'_>) -> Result<Vec<f64>> {
        let session = SessionId(number_arg(&env, session, "session")?);
        Ok(self
            .inner
            .session_leases(session)
            .iter()
            .map(|l| num(l.0))
            .collect())
    }

    /// When the held `block` needs its next heartbeat: the earliest renewal of its leases
    /// that did not end (`null`: none).
    #[napi(ts_args_type = "block: number", ts_return_type = "number | null")]
    pub fn renew_due(&self, env: Env, block: Unknown<'_>) -> Result<Option<f64>> {
        let id = block_arg(&env, block)?;
        self.check_held(&env, id)?;
        Ok(time(self.inner.renew_due(id)))
    }

    /// Schedules the held `block`'s heartbeat at `at` (moving one already scheduled).
    /// Returns the ledger's earliest scheduled heartbeat afterwards (`null`: none).
    #[napi(
        ts_args_type = "block: number, at: number",
        ts_return_type = "number | null"
    )]
    pub fn schedule(
        &mut self,
        env: Env,
        block: Unknown<'_>,
        at: Unknown<'_>,
    ) -> Result<Option<f64>> {
        let id = block_arg(&env, block)?;
        self.check_held(&env, id)?;
        let at = number_arg(&env, at, "at")?;
        self.inner.schedule(id, at);
        Ok(self.next_heartbeat())
    }

    /// Takes the held `block` off the heartbeat schedule.
    #[napi(ts_args_type = "block: number")]
    pub fn unschedule(&mut self, env: Env, block: Unknown<'_>) -> Result<()> {
        let id = block_arg(&env, block)?;
        self.check_held(&env, id)?;
        self.inner.unschedule(id);
        Ok(())
    }

    /// The earliest scheduled heartbeat (`null`: none).
    #[napi]
    pub fn next_heartbeat(&self) -> Option<f64> {
        self.inner.next_heartbeat().map(num)
    }

    /// The next block whose heartbeat is due at `now`, taken off the schedule (`null`: none
    /// due); a block renewed meanwhile is moved to its new time instead.
    #[napi(ts_args_type = "now: number")]
    pub fn pop_due(&mut self, env: Env, now: Unknown<'_>) -> Result<Option<DueBlock>> {
        let now = number_arg(&env, now, "now")?;
        Ok(self
            .inner
            .pop_due(now)
            .map(|(block, session, leases)| DueBlock {
                block: num(block.0),
                session: num(session.0),
                lease_ids: leases.iter().map(|l| num(l.0)).collect(),
            }))
    }
}

/// When a lease expiring at `expiresAt` with `ttlMs` should be renewed: a third of the way
/// through its TTL (the core's rule; `null`: never). A remote client applies it to its local
/// deadlines and passes the result as `renewAt`.
#[napi(
    ts_args_type = "expiresAt: number, ttlMs: number",
    ts_return_type = "number | null"
)]
pub fn renew_at(env: Env, expires_at: Unknown<'_>, ttl_ms: Unknown<'_>) -> Result<Option<f64>> {
    let expires_at = time_or_never(&env, expires_at, Label::Name("expiresAt"), Place::Argument)?;
    let ttl_ms = number_arg(&env, ttl_ms, "ttlMs")?;
    Ok(time(client::renew_at(expires_at, ttl_ms)))
}

/// `releaseIn` through `ledger`: releases in `kernel` what the held block's end releases (the
/// ledger's `releasable`), or, when that is nothing, settles time with `advance(now)`, so that
/// an expiry the release is the first to see is still reported; returns how many it released.
///
/// # Safety
/// `ledger` points to a live Ledger and no reference to it is held by the caller.
unsafe fn release_in(
    env: &Env,
    ledger: *mut Ledger,
    kernel: Unknown<'_>,
    block: Unknown<'_>,
    session: Unknown<'_>,
    now: Unknown<'_>,
) -> Result<u32> {
    let kernel = kernel_arg(env, kernel)?;
    let id = block_arg(env, block)?;
    let session = SessionId(number_arg(env, session, "session")?);
    let now = number_arg(env, now, "now")?;
    // SAFETY: the caller's promise; the borrow ends with the statement.
    let ledger = unsafe { &*ledger };
    ledger.check_held(env, id)?;
    let ids = ledger.inner.releasable(id);
    // SAFETY: `kernel_arg` checked its type tag; the kernel runs no JS while borrowed.
    let kernel = unsafe { &mut *kernel };
    if ids.is_empty() {
        kernel.run_advance(env, now)?;
    }
    for &lease in &ids {
        kernel.run_release(env, ReleaseCall::new(session, lease, now))?;
    }
    Ok(ids.len() as u32)
}

/// `finish`'s arguments: the block, and the host's objects to write into (`undefined`: none).
fn finish_args<'env>(
    env: &Env,
    block: Unknown<'_>,
    shown: Unknown<'env>,
) -> Result<(BlockId, Option<Vec<Object<'env>>>)> {
    let id = block_arg(env, block)?;
    if shown.get_type()? == ValueType::Undefined {
        return Ok((id, None));
    }
    Ok((id, Some(shown_objects(env, shown)?)))
}

/// `finish` through `ledger` (a raw pointer: no borrow lives while `shown`, which may run user
/// code, is converted).
///
/// # Safety
/// `ledger` points to a live Ledger and no reference to it is held by the caller.
unsafe fn finish_through(
    env: &Env,
    ledger: *mut Ledger,
    block: Unknown<'_>,
    shown: Unknown<'_>,
) -> Result<Option<f64>> {
    let (id, objects) = finish_args(env, block, shown)?;
    // SAFETY: the caller's promise; each borrow ends with its statement.
    let finished = unsafe { &mut *ledger }.run_finish(env, id, objects)?;
    finish_then_write(finished)
}

/// A finished block: the host's objects to write its last figures into, and the ledger's
/// next heartbeat.
pub(crate) struct Finished<'env> {
    objects: Vec<Object<'env>>,
    leases: Vec<HeldLease>,
    next_heartbeat: Option<f64>,
}

/// What `finish` answers, its figures written (the ledger no longer borrowed).
fn finish_then_write(finished: Finished<'_>) -> Result<Option<f64>> {
    write_figures(finished.objects, &finished.leases)?;
    Ok(finished.next_heartbeat)
}

// The fast callbacks (see the module contract and crate::fast).

/// `this` as a Ledger.
unsafe fn ledger<const N: usize>(
    env: &Env,
    cb: &mut CallbackInfo<N>,
    method: &str,
) -> Result<*mut Ledger> {
    unsafe { fast::receiver_of::<Ledger, N>(env, cb, "Ledger", method) }
}

unsafe fn grant_fast(env: sys::napi_env, info: sys::napi_callback_info) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<5>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [block, session, figures, renew_at, now] = args(env, &cb);
    let call = grant_args(&e, block, session, figures, renew_at, now)?;
    // SAFETY: unwrap_raw checks the receiver's type tag; the borrow ends with this call.
    let ledger: &mut Ledger = unsafe { &mut *ledger(&e, &mut cb, "grant")? };
    let due = ledger.run_grant(&e, call)?;
    unsafe { ToNapiValue::to_napi_value(env, due) }
}

unsafe fn releasable_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<1>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [block] = args(env, &cb);
    let id = block_arg(&e, block)?;
    // SAFETY: as in `grant_fast`; a shared borrow, ended before the answer is converted.
    let ids = unsafe { &*ledger(&e, &mut cb, "releasable")? }.run_releasable(&e, id)?;
    unsafe { ToNapiValue::to_napi_value(env, ids) }
}

unsafe fn finish_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<2>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [block, shown] = args(env, &cb);
    // SAFETY: as in `grant_fast`; no borrow lives while `shown` is converted or written.
    let next = unsafe { finish_through(&e, ledger(&e, &mut cb, "finish")?, block, shown)? };
    unsafe { ToNapiValue::to_napi_value(env, next) }
}

unsafe fn release_in_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<4>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [kernel, block, session, now] = args(env, &cb);
    // SAFETY: as in `grant_fast`; no borrow of the ledger lives while the kernel is called.
    let released = unsafe {
        release_in(
            &e,
            ledger(&e, &mut cb, "releaseIn")?,
            kernel,
            block,
            session,
            now,
        )?
    };
    unsafe { u32::to_napi_value(env, released) }
}

unsafe fn holds_leases_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<1>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    let [session] = args(env, &cb);
    let session = SessionId(number_arg(&e, session, "session")?);
    // SAFETY: as in `releasable_fast`.
    let holds = unsafe { &*ledger(&e, &mut cb, "holdsLeases")? }.run_holds_leases(session);
    unsafe { bool::to_napi_value(env, holds) }
}

unsafe fn next_heartbeat_fast(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<sys::napi_value> {
    let mut cb = CallbackInfo::<0>::new(env, info, None, false)?;
    let e = Env::from_raw(env);
    // SAFETY: as in `releasable_fast`.
    let next = unsafe { &*ledger(&e, &mut cb, "nextHeartbeat")? }.next_heartbeat();
    unsafe { ToNapiValue::to_napi_value(env, next) }
}

macro_rules! callback {
    ($name:ident, $body:ident) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            unsafe { boundary(env, info, $body) }
        }
    };
}

callback!(grant_callback, grant_fast);
callback!(releasable_callback, releasable_fast);
callback!(release_in_callback, release_in_fast);
callback!(finish_callback, finish_fast);
callback!(holds_leases_callback, holds_leases_fast);
callback!(next_heartbeat_callback, next_heartbeat_fast);

/// Replaces `grant`, `releasable`, `releaseIn`, `finish`, `holdsLeases` and `nextHeartbeat` on
/// `Ledger.prototype` by the fast callbacks.
pub(crate) fn install(env: &Env, prototype: &Object<'_>) -> Result<()> {
    fast::install_methods(
        env,
        prototype,
        &[
            (c"grant", Some(grant_callback)),
            (c"releasable", Some(releasable_callback)),
            (c"releaseIn", Some(release_in_callback)),
            (c"finish", Some(finish_callback)),
            (c"holdsLeases", Some(holds_leases_callback)),
            (c"nextHeartbeat", Some(next_heartbeat_callback)),
        ],
        "Ledger",
    )
}
