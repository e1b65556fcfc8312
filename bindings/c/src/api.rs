//! The operations of SPEC.md on an opaque `klock_kernel` handle.
//!
//! Contract: one exported function per kernel operation, named `klock_<noun>_<verb>`; each
//! checks its pointers and strings, locks the handle, makes exactly one kernel call, and
//! converts the answer. The handle wraps the kernel in a `Mutex`, so calls on one handle from
//! several threads are serialised; a panic while locked poisons the mutex, and every later
//! call on that handle answers `KLOCK_PANIC`.

use crate::convert::{array, boxed, clear_out, free_boxed, opt_text, out, slice, string, text};
use crate::names::{policy_number, POLICIES};
use crate::status::{ffi, ffi_void, klock_status, Failure, Outcome};
use crate::types::*;
use klock_core::{
    AcquireOptions, Config, DigestIdentity, DigestRecovery, Kernel, LeaseId, LeaseSelection,
    Policy, SessionId, StateDigest, TicketId,
};
use std::borrow::Cow;
use std::ffi::c_char;
use std::sync::{Mutex, MutexGuard};

/// A kernel: sessions, leases, queues and time. Opaque; create with klock_kernel_new(), free
/// with klock_kernel_free(). Internally locked: usable from several threads at once.
pub struct klock_kernel {
    kernel: Mutex<Kernel>,
}

impl klock_kernel {
    /// The kernel, locked for one call.
    ///
    /// # Errors
    /// `KLOCK_PANIC` when an earlier call panicked while holding the lock.
    pub fn lock(&self) -> Outcome<MutexGuard<'_, Kernel>> {
        self.kernel.lock().map_err(|_| {
            Failure::new(
                klock_status::KLOCK_PANIC,
                "this kernel is poisoned: an earlier call panicked inside it, so its state may be inconsistent; free it",
            )
        })
    }
}

/// The handle behind a pointer.
///
/// # Safety
/// `p` must be NULL or a live handle from klock_kernel_new().
unsafe fn handle<'a>(p: *const klock_kernel) -> Outcome<&'a klock_kernel> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null("kernel"))
}

// ---------------------------------------------------------------------------------------------
// Configuration and the kernel handle
// ---------------------------------------------------------------------------------------------

/// Writes the SPEC.md defaults into `*out_config` (policy wait_die, seed 0, TTL 60 000 ms capped at
/// 300 000 ms, wait timeout 30 000 ms, backoff 100 ms up to 10 000 ms, grace 15 000 ms, idle
/// close after 300 000 ms, 1 024 leases per session, no lifetime cap).
///
/// Errors: KLOCK_NULL_POINTER. Ownership: `*out_config` is the caller's. Thread-safety: any
/// thread.
///
/// # Safety
/// `out_config` must be NULL or point to a writable klock_config.
#[no_mangle]
pub unsafe extern "C" fn klock_config_default(out_config: *mut klock_config) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        *unsafe { out(out_config, "out_config") }? = klock_config::from(&Config::default());
        Ok(())
    })
}

/// Writes the default acquire options into `*out_options`: the kernel's default TTL, `wait = true`,
/// the kernel's default wait timeout. Passing NULL options to klock_session_acquire() means
/// the same.
///
/// Errors: KLOCK_NULL_POINTER. Ownership: `*out_options` is the caller's. Thread-safety: any
/// thread.
///
/// # Safety
/// `out_options` must be NULL or point to a writable klock_acquire_options.
#[no_mangle]
pub unsafe extern "C" fn klock_acquire_options_default(
    out_options: *mut klock_acquire_options,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        *unsafe { out(out_options, "out_options") }? = klock_acquire_options::default();
        Ok(())
    })
}

/// The numeric fields of `c` as a core config, with the default policy in place of `c`'s.
fn numbers(c: &klock_config) -> Config {
    Config {
        policy: Policy::default(),
        seed: c.seed,
        default_ttl_ms: c.default_ttl_ms,
        max_ttl_ms: c.max_ttl_ms,
        default_wait_timeout_ms: c.default_wait_timeout_ms,
        backoff_base_ms: c.backoff_base_ms,
        backoff_cap_ms: c.backoff_cap_ms,
        grace_ms: c.grace_ms,
        session_idle_ms: c.session_idle_ms,
        max_leases_per_session: c.max_leases_per_session,
        max_lease_lifetime_ms: c.max_lease_lifetime_ms,
    }
}

fn core_config(c: &klock_config) -> Outcome<Config> {
    let policy = *POLICIES.get(c.policy as usize).ok_or_else(|| {
        Failure::new(
            klock_status::KLOCK_INVALID_CONFIG,
            format!("unknown policy {}: expected KLOCK_POLICY_WAIT_DIE (0), KLOCK_POLICY_WOUND_WAIT (1), KLOCK_POLICY_LANES (2) or KLOCK_POLICY_DETECT (3)", c.policy),
        )
    })?;
    Ok(Config {
        policy,
        ..numbers(c)
    })
}

/// Sets the numeric field called `name` of `*config` (the snake_case name of a klock_config
/// field other than `policy`, e.g. "default_ttl_ms") to `value`: for configurations read from
/// text. The names are the kernel's own list.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_CONFIG (no numeric field is
/// called `name`; the message lists them). On failure `*config` is unchanged. Thread-safety:
/// any thread.
///
/// # Safety
/// `config` must be NULL or point to a writable klock_config; `name` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn klock_config_set_number(
    config: *mut klock_config,
    name: *const c_char,
    value: u64,
) -> klock_status {
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(config, "config") }?;
        let name = unsafe { text(name, "name") }?;
        let mut core = numbers(slot);
        core.set_number(&name, value)?;
        *slot = klock_config {
            policy: slot.policy,
            ..klock_config::from(&core)
        };
        Ok(())
    })
}

/// Sets `config->policy` from its configuration name ("wait_die", "wound_wait", "lanes" or
/// "detect").
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_CONFIG (another name). On
/// failure `*config` is unchanged. Thread-safety: any thread.
///
/// # Safety
/// `config` must be NULL or point to a writable klock_config; `name` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn klock_config_set_policy(
    config: *mut klock_config,
    name: *const c_char,
) -> klock_status {
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(config, "config") }?;
        let name = unsafe { text(name, "name") }?;
        slot.policy = policy_number(Policy::parse(&name)?);
        Ok(())
    })
}

/// Creates a kernel with `config` (copied) and stores its handle in `*out_kernel`.
///
/// Errors: KLOCK_NULL_POINTER (`config` or `out_kernel`), KLOCK_INVALID_CONFIG (an unknown
/// policy, a zero `default_ttl_ms` or `max_ttl_ms`). On failure `*out_kernel` is NULL.
///
/// Ownership: the handle is the caller's; free it with klock_kernel_free(). Thread-safety:
/// any thread.
///
/// # Safety
/// `config` must be NULL or point to a klock_config; `out_kernel` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_new(
    config: *const klock_config,
    out_kernel: *mut *mut klock_kernel,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_kernel) };
    ffi(|| {
        // SAFETY: the caller's contract.
        let slot = unsafe { out(out_kernel, "out_kernel") }?;
        // SAFETY: the caller's contract.
        let config = unsafe { config.as_ref() }.ok_or_else(|| Failure::null("config"))?;
        let kernel = Kernel::new(core_config(config)?)?;
        *slot = boxed(klock_kernel {
            kernel: Mutex::new(kernel),
        });
        Ok(())
    })
}

/// Frees a kernel and everything it holds. NULL is a no-op.
///
/// Thread-safety: must not race with any other call on the same handle; afterwards the handle
/// must not be used (freeing twice is undefined behaviour, as with free()).
///
/// # Safety
/// `kernel` must be NULL or a live handle from klock_kernel_new().
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_free(kernel: *mut klock_kernel) {
    // SAFETY: forwarded contract.
    ffi_void((), || unsafe { free_boxed(kernel) })
}

/// Creates an independent kernel in the same state as `kernel` (same configuration, sessions,
/// leases, queues, clock, counters, jitter state and queued events), e.g. to explore "what if"
/// from a state without touching it.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_kernel` is NULL on failure.
/// Ownership: the new handle is the caller's; free it with klock_kernel_free(). Thread-safety:
/// any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_kernel` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_clone(
    kernel: *const klock_kernel,
    out_kernel: *mut *mut klock_kernel,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_kernel) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_kernel, "out_kernel") }?;
        let copy = k.lock()?.clone();
        *slot = boxed(klock_kernel {
            kernel: Mutex::new(copy),
        });
        Ok(())
    })
}

/// Copies the kernel's configuration into `*out_config`.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_config` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_config(
    kernel: *const klock_kernel,
    out_config: *mut klock_config,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        // SAFETY: the caller's contract.
        let slot = unsafe { out(out_config, "out_config") }?;
        *slot = klock_config::from(k.lock()?.config());
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// The drive contract
// ---------------------------------------------------------------------------------------------

/// The earliest pending deadline (a lease expiry, a wait timeout, an idle close): arm one timer
/// for it and call klock_kernel_advance() when it fires. A pure query (no `now`); the deadline
/// may already be past if no call has settled it yet, in which case call advance at once.
///
/// `*out_has_deadline` is false when nothing is pending (then `*out_deadline` is 0).
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; the out-pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_next_deadline(
    kernel: *const klock_kernel,
    out_has_deadline: *mut bool,
    out_deadline: *mut u64,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        // SAFETY: the caller's contract.
        let has = unsafe { out(out_has_deadline, "out_has_deadline") }?;
        // SAFETY: the caller's contract.
        let at = unsafe { out(out_deadline, "out_deadline") }?;
        let next = k.lock()?.next_deadline();
        *has = next.is_some();
        *at = next.unwrap_or(0);
        Ok(())
    })
}

/// Settles everything due at or before `now` (expiries, wait timeouts, the grants they
/// unblock, idle closes) and queues the resulting events. Calling early is harmless.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_advance(kernel: *mut klock_kernel, now: u64) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        unsafe { handle(kernel) }?.lock()?.advance(now);
        Ok(())
    })
}

/// Takes the oldest queued event: `*out_event` is the event, or NULL when there is none.
/// Drain after every call until it gives NULL.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_event` is NULL on failure.
/// Ownership: the event is the caller's; free it with klock_event_free(). Thread-safety: any
/// thread (each event is handed to exactly one caller).
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_event` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_poll_event(
    kernel: *mut klock_kernel,
    out_event: *mut *mut klock_event,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_event) };
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        // SAFETY: the caller's contract.
        let slot = unsafe { out(out_event, "out_event") }?;
        if let Some(event) = k.lock()?.poll_event() {
            *slot = boxed(klock_event::from(event));
        }
        Ok(())
    })
}

/// How many events wait to be polled.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_pending_events(
    kernel: *const klock_kernel,
    out_count: *mut usize,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        // SAFETY: the caller's contract.
        *unsafe { out(out_count, "out_count") }? = k.lock()?.pending_events();
        Ok(())
    })
}

/// The largest `now` the kernel has seen (time never goes back inside the kernel).
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_now` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_now(
    kernel: *const klock_kernel,
    out_now: *mut u64,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        // SAFETY: the caller's contract.
        *unsafe { out(out_now, "out_now") }? = k.lock()?.now();
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------------

/// Opens a session for `agent_id` in `namespace_name` (NULL = "default"). The kernel assigns
/// the id and the priority (older = smaller = higher priority; kept for life).
///
/// Errors: KLOCK_NULL_POINTER (`kernel`, `agent_id`, `out_session`), KLOCK_INVALID_UTF8,
/// KLOCK_INVALID_AGENT_ID / KLOCK_INVALID_NAMESPACE (not 1..=256 bytes of printable UTF-8),
/// KLOCK_PANIC (poisoned). Ownership: `*out_session` is the caller's. Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; strings NULL or NUL-terminated; `out_session` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_session_open(
    kernel: *mut klock_kernel,
    agent_id: *const c_char,
    namespace_name: *const c_char,
    now: u64,
    out_session: *mut klock_session_info,
) -> klock_status {
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_session, "out_session") }?;
        let agent = unsafe { text(agent_id, "agent_id") }?;
        let namespace = unsafe { opt_text(namespace_name, "namespace_name") }?;
        let namespace = namespace.as_deref().unwrap_or("default");
        let info = k.lock()?.open_session(&agent, namespace, now)?;
        *slot = klock_session_info::from(&info);
        Ok(())
    })
}

/// Closes a session: releases every lease and cancels every wait (the grants this unblocks
/// are queued as events; no SESSION_CLOSED event is emitted for an explicit close). Closing
/// again answers KLOCK_UNKNOWN_SESSION.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned). Thread-safety:
/// any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn klock_session_close(
    kernel: *mut klock_kernel,
    session_id: u64,
    now: u64,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        unsafe { handle(kernel) }?
            .lock()?
            .close_session(SessionId(session_id), now)?;
        Ok(())
    })
}

/// Marks a session as restarting: its leases are kept past a missed heartbeat for the
/// configured `grace_ms` (within their lifetime cap) until it resumes or heartbeats.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned). Thread-safety:
/// any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn klock_session_suspend(
    kernel: *mut klock_kernel,
    session_id: u64,
    now: u64,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        unsafe { handle(kernel) }?
            .lock()?
            .suspend_session(SessionId(session_id), now)?;
        Ok(())
    })
}

/// The session's recovery digest, to be saved by the agent and handed to
/// klock_session_resume() after a restart.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_digest` is
/// NULL on failure. Ownership: the digest is the caller's; free it with klock_digest_free().
/// Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_digest` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_session_digest(
    kernel: *mut klock_kernel,
    session_id: u64,
    now: u64,
    out_digest: *mut *mut klock_digest,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_digest) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_digest, "out_digest") }?;
        let digest = k.lock()?.digest(SessionId(session_id), now)?;
        *slot = boxed(klock_digest::from(digest));
        Ok(())
    })
}

/// Reads a digest (library-made or caller-built) into the kernel's type.
///
/// # Safety
/// The digest's string pointers must be NULL or NUL-terminated; `pending_intents` NULL or
/// `pending_intents_len` valid pointers.
unsafe fn read_digest(d: &klock_digest) -> Outcome<StateDigest> {
    // SAFETY (all blocks): the caller's contract.
    let agent_id = unsafe { text(d.agent_id, "digest.agent_id") }?;
    let namespace = unsafe { text(d.namespace_name, "digest.namespace_name") }?;
    let last_phase = unsafe { opt_text(d.last_phase, "digest.last_phase") }?.unwrap_or_default();
    let pending = unsafe {
        slice(
            d.pending_intents,
            d.pending_intents_len,
            "digest.pending_intents",
        )
    }?;
    let pending_intents = pending
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            unsafe { text(p, &format!("digest.pending_intents[{i}]")) }.map(Cow::into_owned)
        })
        .collect::<Outcome<Vec<String>>>()?;
    Ok(StateDigest {
        version: d.version,
        identity: DigestIdentity {
            agent_id: agent_id.into(),
            namespace: namespace.into(),
            session_id: SessionId(d.session_id),
            priority_timestamp: d.priority_timestamp,
            epoch: d.epoch,
        },
        recovery: DigestRecovery {
            last_phase: last_phase.into(),
            pending_intents,
        },
    })
}

/// Re-attaches a restarted agent to its session: same priority, epoch + 1, suspension ended,
/// every lease renewed as a heartbeat would. `digest` is read only (it may be one the caller
/// built itself, e.g. from klock_digest_from_json() or its own storage).
///
/// Errors: KLOCK_NULL_POINTER (`kernel`, `digest`, its `agent_id` or `namespace_name`,
/// `out_session`), KLOCK_INVALID_UTF8, KLOCK_UNKNOWN_SESSION (closed or unknown session),
/// KLOCK_INVALID_DIGEST (version, agent, namespace or priority differ from the kernel's record,
/// or the epoch is newer), KLOCK_PANIC (poisoned). Ownership: `*out_session` is the caller's.
/// Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `digest` NULL or a valid klock_digest;
/// `out_session` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_session_resume(
    kernel: *mut klock_kernel,
    digest: *const klock_digest,
    now: u64,
    out_session: *mut klock_session_info,
) -> klock_status {
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_session, "out_session") }?;
        let d = unsafe { digest.as_ref() }.ok_or_else(|| Failure::null("digest"))?;
        let digest = unsafe { read_digest(d) }?;
        let info = k.lock()?.resume_session(&digest, now)?;
        *slot = klock_session_info::from(&info);
        Ok(())
    })
}

/// Serialises a digest as JSON text (the KLIS-8 shape: version, identity, recovery), for
/// storage.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8; `*out_json` is NULL on failure.
/// Ownership: `digest` stays the caller's; the text is the caller's, free it with
/// klock_string_free(). Thread-safety: any thread.
///
/// # Safety
/// `digest` must be NULL or a valid klock_digest; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_digest_to_json(
    digest: *const klock_digest,
    out_json: *mut *mut c_char,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_json) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_json, "out_json") }?;
        let d = unsafe { digest.as_ref() }.ok_or_else(|| Failure::null("digest"))?;
        let digest = unsafe { read_digest(d) }?;
        let json = serde_json::to_string(&digest)
            .map_err(|e| Failure::new(klock_status::KLOCK_INVALID_ARGUMENT, e.to_string()))?;
        *slot = string(&json);
        Ok(())
    })
}

/// Parses a digest from JSON text made by klock_digest_to_json(), strictly: exactly the keys
/// that function writes, integers without fraction or exponent, no trailing text.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_INVALID_UTF8, KLOCK_INVALID_ARGUMENT (not a digest's
/// JSON: syntax, a missing or unknown key, a wrong type, a number out of range; the message
/// says where), KLOCK_INVALID_DIGEST (an agent_id or namespace holding NUL, which no session
/// has and a C string cannot hold: never cut short); `*out_digest` is NULL on failure.
/// Ownership: the digest is the caller's; free it with klock_digest_free(). Thread-safety: any
/// thread.
///
/// # Safety
/// `json` must be NULL or NUL-terminated; `out_digest` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_digest_from_json(
    json: *const c_char,
    out_digest: *mut *mut klock_digest,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_digest) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_digest, "out_digest") }?;
        let json = unsafe { text(json, "json") }?;
        let digest = crate::digest_json::parse(&json)?;
        *slot = boxed(klock_digest::from(digest));
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Acquire, leases, tickets
// ---------------------------------------------------------------------------------------------

/// Asks for every intent at once (all-or-nothing). Each intent is "PREDICATE TYPE:/path"
/// (predicate case-insensitive), e.g. "MUTATES FILE:/src/a.ts". `options` NULL = defaults.
///
/// The verdict is GRANTED (leases), WAIT (a ticket a later event resolves; drain events and
/// drive klock_kernel_advance()) or DIE (retry after `retry_after_ms`, keeping the session).
///
/// Errors, in this order: KLOCK_NULL_POINTER (`kernel`, `out_verdict`, `intents` with a
/// non-zero length, an intent), KLOCK_INVALID_UTF8, then the kernel's KLOCK_UNKNOWN_SESSION,
/// KLOCK_INVALID_MANIFEST (0 or more than 256 intents), KLOCK_INVALID_PREDICATE,
/// KLOCK_INVALID_RESOURCE, KLOCK_INVALID_TTL, KLOCK_HOLD_AND_WAIT, KLOCK_QUOTA_EXCEEDED, and
/// KLOCK_PANIC (poisoned). A failed acquire changes nothing; `*out_verdict` is NULL.
///
/// Ownership: `intents` and `options` stay the caller's; the verdict is the caller's, free it
/// with klock_verdict_free(). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `intents` NULL or `intents_len` pointers, each NULL
/// or NUL-terminated; `options` NULL or valid; `out_verdict` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_session_acquire(
    kernel: *mut klock_kernel,
    session_id: u64,
    intents: *const *const c_char,
    intents_len: usize,
    options: *const klock_acquire_options,
    now: u64,
    out_verdict: *mut *mut klock_verdict,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_verdict) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_verdict, "out_verdict") }?;
        let pointers = unsafe { slice(intents, intents_len, "intents") }?;
        let manifest = pointers
            .iter()
            .enumerate()
            .map(|(i, &p)| unsafe { text(p, &format!("intents[{i}]")) })
            .collect::<Outcome<Vec<Cow<str>>>>()?;
        let o = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let options = AcquireOptions {
            ttl_ms: o.has_ttl_ms.then_some(o.ttl_ms),
            wait: o.wait,
            wait_timeout_ms: o.has_wait_timeout_ms.then_some(o.wait_timeout_ms),
        };
        let verdict = k
            .lock()?
            .acquire(SessionId(session_id), &manifest, options, now)?;
        *slot = boxed(klock_verdict::from(verdict));
        Ok(())
    })
}

fn to_lease_ids(ids: &[u64]) -> Vec<LeaseId> {
    ids.iter().map(|&id| LeaseId(id)).collect()
}

fn heartbeat(
    k: &klock_kernel,
    session_id: u64,
    which: LeaseSelection<'_>,
    now: u64,
) -> Outcome<*mut klock_heartbeat_results> {
    let results = k.lock()?.heartbeat(SessionId(session_id), which, now)?;
    let (items, len) = array(
        results
            .into_iter()
            .map(|(lease, outcome)| match outcome {
                Ok(expires_at) => klock_heartbeat_result {
                    lease_id: lease.0,
                    status: klock_status::KLOCK_OK,
                    expires_at,
                },
                Err(code) => klock_heartbeat_result {
                    lease_id: lease.0,
                    status: code.into(),
                    expires_at: 0,
                },
            })
            .collect(),
    );
    Ok(boxed(klock_heartbeat_results {
        items: items.cast_const(),
        len,
    }))
}

/// Renews the given leases of the session for their TTL from `now`, each answered separately
/// (KLOCK_OK with the new expiry, or KLOCK_LEASE_EXPIRED, KLOCK_LEASE_RELEASED,
/// KLOCK_NOT_OWNER, KLOCK_UNKNOWN_LEASE, KLOCK_LIFETIME_EXCEEDED). An ended lease is never
/// resurrected.
///
/// Errors (of the call): KLOCK_NULL_POINTER (`kernel`, `out_results`, `lease_ids` with a
/// non-zero length), KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_results` is NULL on
/// failure. Ownership: `lease_ids` stays the caller's; the results are the caller's, free them
/// with klock_heartbeat_results_free(). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `lease_ids` NULL or `lease_ids_len` values;
/// `out_results` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_lease_heartbeat(
    kernel: *mut klock_kernel,
    session_id: u64,
    lease_ids: *const u64,
    lease_ids_len: usize,
    now: u64,
    out_results: *mut *mut klock_heartbeat_results,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_results) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_results, "out_results") }?;
        let ids = to_lease_ids(unsafe { slice(lease_ids, lease_ids_len, "lease_ids") }?);
        *slot = heartbeat(k, session_id, LeaseSelection::Ids(&ids), now)?;
        Ok(())
    })
}

/// Renews every active lease of the session (results in grant order); otherwise as
/// klock_lease_heartbeat().
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_results` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_lease_heartbeat_all(
    kernel: *mut klock_kernel,
    session_id: u64,
    now: u64,
    out_results: *mut *mut klock_heartbeat_results,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_results) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_results, "out_results") }?;
        *slot = heartbeat(k, session_id, LeaseSelection::All, now)?;
        Ok(())
    })
}

/// Releases one lease of the session. Idempotent: `*out_released` (may be NULL) is true if this
/// call released it, false if it had already ended (released, expired, wounded). Waiters this
/// unblocks are granted and queued as events.
///
/// Errors: KLOCK_NULL_POINTER (`kernel`), KLOCK_UNKNOWN_SESSION, KLOCK_NOT_OWNER (another
/// session's lease, checked first), KLOCK_UNKNOWN_LEASE, KLOCK_PANIC (poisoned).
/// Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_released` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_lease_release(
    kernel: *mut klock_kernel,
    session_id: u64,
    lease_id: u64,
    now: u64,
    out_released: *mut bool,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let released = k
            .lock()?
            .release(SessionId(session_id), LeaseId(lease_id), now)?;
        // SAFETY: the caller's contract.
        if let Some(slot) = unsafe { out_released.as_mut() } {
            *slot = released;
        }
        Ok(())
    })
}

/// Releases every active lease of the session (its waits are kept); `*out_count` (may be
/// NULL) receives how many.
///
/// Errors: KLOCK_NULL_POINTER (`kernel`), KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned).
/// Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_session_release_all(
    kernel: *mut klock_kernel,
    session_id: u64,
    now: u64,
    out_count: *mut usize,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let count = k.lock()?.release_all(SessionId(session_id), now)?;
        // SAFETY: the caller's contract.
        if let Some(slot) = unsafe { out_count.as_mut() } {
            *slot = count;
        }
        Ok(())
    })
}

/// The kernel's truth about each lease, from the session's point of view: ACTIVE (with
/// `expires_at` and `fence`), EXPIRED, RELEASED, NOT_OWNER or UNKNOWN, in the order asked.
///
/// Errors: KLOCK_NULL_POINTER (`kernel`, `out_results`, `lease_ids` with a non-zero length),
/// KLOCK_UNKNOWN_SESSION, KLOCK_PANIC (poisoned); `*out_results` is NULL on failure.
/// Ownership: the results are the caller's; free them with klock_reconcile_results_free().
/// Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `lease_ids` NULL or `lease_ids_len` values;
/// `out_results` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_lease_reconcile(
    kernel: *mut klock_kernel,
    session_id: u64,
    lease_ids: *const u64,
    lease_ids_len: usize,
    now: u64,
    out_results: *mut *mut klock_reconcile_results,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_results) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_results, "out_results") }?;
        let ids = to_lease_ids(unsafe { slice(lease_ids, lease_ids_len, "lease_ids") }?);
        let statuses = k.lock()?.reconcile(SessionId(session_id), &ids, now)?;
        let (items, len) = array(
            statuses
                .into_iter()
                .map(|(id, status)| klock_lease_check::new(id.0, status))
                .collect(),
        );
        *slot = boxed(klock_reconcile_results {
            items: items.cast_const(),
            len,
        });
        Ok(())
    })
}

/// Withdraws a waiting ticket of the session (cancel_wait).
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_UNKNOWN_SESSION, KLOCK_NOT_OWNER (another session's
/// ticket, checked first), KLOCK_UNKNOWN_TICKET (not waiting any more, or never issued),
/// KLOCK_PANIC (poisoned). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn klock_ticket_cancel(
    kernel: *mut klock_kernel,
    session_id: u64,
    ticket: u64,
    now: u64,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        unsafe { handle(kernel) }?.lock()?.cancel_wait(
            SessionId(session_id),
            TicketId(ticket),
            now,
        )?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Observability
// ---------------------------------------------------------------------------------------------

/// Holders and queue of one resource node in `namespace_name` (NULL = "default"), and the
/// holders covering it from its ancestors and descendants.
///
/// Errors: KLOCK_NULL_POINTER (`kernel`, `resource`, `out_state`), KLOCK_INVALID_UTF8,
/// KLOCK_INVALID_RESOURCE, KLOCK_INVALID_NAMESPACE, KLOCK_PANIC (poisoned); `*out_state` is
/// NULL on failure. Ownership: the state is the caller's; free it with
/// klock_resource_state_free(). Thread-safety: any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; strings NULL or NUL-terminated; `out_state` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn klock_resource_get_state(
    kernel: *mut klock_kernel,
    resource: *const c_char,
    namespace_name: *const c_char,
    now: u64,
    out_state: *mut *mut klock_resource_state,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_state) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_state, "out_state") }?;
        let resource = unsafe { text(resource, "resource") }?;
        let namespace = unsafe { opt_text(namespace_name, "namespace_name") }?;
        let namespace = namespace.as_deref().unwrap_or("default");
        let state = k.lock()?.resource_state(&resource, namespace, now)?;
        *slot = boxed(klock_resource_state::from(state));
        Ok(())
    })
}

/// Outcome counters, live totals, top contended resources and ghost agents, as of the last
/// call (a pure query: no `now`).
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_stats` is NULL on failure.
/// Ownership: the stats are the caller's; free them with klock_stats_free(). Thread-safety:
/// any thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_stats` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_stats(
    kernel: *const klock_kernel,
    out_stats: *mut *mut klock_stats,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_stats) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_stats, "out_stats") }?;
        let stats = k.lock()?.stats();
        *slot = boxed(klock_stats::from(stats));
        Ok(())
    })
}

/// The whole state after settling `now` (sessions, leases, tickets, stats, next deadline), as
/// one JSON object for dashboards. Settling may queue events: drain them afterwards.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_PANIC (poisoned); `*out_json` is NULL on failure.
/// Ownership: the text is the caller's; free it with klock_string_free(). Thread-safety: any
/// thread.
///
/// # Safety
/// `kernel` must be NULL or a live handle; `out_json` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_kernel_snapshot_json(
    kernel: *mut klock_kernel,
    now: u64,
    out_json: *mut *mut c_char,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_json) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let k = unsafe { handle(kernel) }?;
        let slot = unsafe { out(out_json, "out_json") }?;
        let snapshot = k.lock()?.snapshot(now);
        let json = serde_json::to_string(&snapshot)
            .map_err(|e| Failure::new(klock_status::KLOCK_PANIC, e.to_string()))?;
        *slot = string(&json);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::Config;

    fn defaults() -> klock_config {
        klock_config::from(&Config::default())
    }

    #[test]
    fn every_config_name_of_the_core_sets_its_own_field() {
        let mut c = defaults();
        for (value, name) in (1..).zip(Config::NUMERIC_FIELDS) {
            let name = std::ffi::CString::new(*name).unwrap();
            // SAFETY: valid pointers to locals.
            assert_eq!(
                unsafe { klock_config_set_number(&mut c, name.as_ptr(), value) },
                klock_status::KLOCK_OK
            );
        }
        let core = core_config(&c).unwrap();
        for (value, name) in (1..).zip(Config::NUMERIC_FIELDS) {
            assert_eq!(core.number(name), Some(value), "{name}");
        }
        assert_eq!(core.policy, Config::default().policy);
    }

    #[test]
    fn an_unknown_config_name_is_an_error_and_changes_nothing() {
        let mut c = defaults();
        for name in [c"policy", c"max_lease_lifetime", c"DEFAULT_TTL_MS", c""] {
            // SAFETY: valid pointers to locals.
            let status = unsafe { klock_config_set_number(&mut c, name.as_ptr(), 7) };
            assert_eq!(status, klock_status::KLOCK_INVALID_CONFIG, "{name:?}");
            assert_eq!(core_config(&c).unwrap(), Config::default());
        }
        // SAFETY: valid pointers to locals.
        let status = unsafe { klock_config_set_policy(&mut c, c"wait-die".as_ptr()) };
        assert_eq!(status, klock_status::KLOCK_INVALID_CONFIG);
        assert_eq!(core_config(&c).unwrap(), Config::default());
    }

    #[test]
    fn every_policy_is_set_by_its_name() {
        let mut c = defaults();
        for policy in POLICIES {
            let name = std::ffi::CString::new(policy.name()).unwrap();
            // SAFETY: valid pointers to locals.
            assert_eq!(
                unsafe { klock_config_set_policy(&mut c, name.as_ptr()) },
                klock_status::KLOCK_OK
            );
            assert_eq!(core_config(&c).unwrap().policy, policy);
        }
        c.policy = POLICIES.len() as u32;
        assert_eq!(
            core_config(&c).unwrap_err().status,
            klock_status::KLOCK_INVALID_CONFIG
        );
    }
}
