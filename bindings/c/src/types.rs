//! The C structs: configuration and options passed in, results handed out, and the `_free`
//! function of every result the library allocates.
//!
//! Contract: every struct mirrors a `klock-core` type field for field (conversions destructure
//! the core types, so a field added to the core fails to compile here until it is mapped).
//! Results are built here from owned core values and own all their memory: strings and arrays
//! are released by the `Drop` impls below, reached only through the `klock_*_free` functions.

use crate::convert::{array, free_array, free_boxed, free_string, string};
use crate::status::ffi_void;
use klock_core::{
    Blocker, CloseReason, Contention, Counters, DigestIdentity, DigestRecovery, Event, GhostAgent,
    Holder, Intent, Lease, LeaseStatus, Predicate, ResourceState, SessionId, SessionInfo,
    StateDigest, Stats, Verdict, Waiter,
};
use std::ffi::c_char;
use std::ptr;

// ---------------------------------------------------------------------------------------------
// Enumerations
// ---------------------------------------------------------------------------------------------

/// A deadlock-prevention policy (SPEC.md §6), one of the KLOCK_POLICY_* values.
pub type klock_policy = u32;
/// Older requesters wait, younger ones die (the default).
pub const KLOCK_POLICY_WAIT_DIE: klock_policy = 0;
/// Older requesters revoke ("wound") younger blockers; younger requesters wait.
pub const KLOCK_POLICY_WOUND_WAIT: klock_policy = 1;
/// One all-or-nothing FIFO lane per request; a session holds or waits, never both.
pub const KLOCK_POLICY_LANES: klock_policy = 2;
/// Everyone waits; only a cycle of waiters is broken, by its youngest unit of work (SPEC.md
/// §6.1).
pub const KLOCK_POLICY_DETECT: klock_policy = 3;

/// What an agent intends to do to a resource (SPEC.md §4).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_predicate {
    KLOCK_PREDICATE_PROVIDES = 0,
    KLOCK_PREDICATE_CONSUMES = 1,
    KLOCK_PREDICATE_MUTATES = 2,
    KLOCK_PREDICATE_DELETES = 3,
    KLOCK_PREDICATE_DEPENDS_ON = 4,
    KLOCK_PREDICATE_RENAMES = 5,
}

impl From<Predicate> for klock_predicate {
    fn from(p: Predicate) -> klock_predicate {
        // In the core's order, checked at compile time (crate::names).
        crate::names::PREDICATES[p as usize]
    }
}

/// The immediate answer to an acquire (SPEC.md §6).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_verdict_kind {
    /// Every intent is a lease now.
    KLOCK_VERDICT_GRANTED = 1,
    /// Queued as `ticket`; a GRANTED, WAIT_TIMEOUT, DIED or WOUNDED event resolves it later.
    KLOCK_VERDICT_WAIT = 2,
    /// Nothing held or queued; retry after `retry_after_ms`.
    KLOCK_VERDICT_DIE = 3,
}

/// The kind of an event (SPEC.md §9).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_event_kind {
    /// A waiting ticket was granted: `ticket`, `session`, `leases`.
    KLOCK_EVENT_GRANTED = 1,
    /// A waiting ticket timed out: `ticket`, `session`.
    KLOCK_EVENT_WAIT_TIMEOUT = 2,
    /// A waiting ticket was withdrawn (counts as a DIE): `ticket`, `session`, `retry_after_ms`,
    /// and under `detect` the wait-for cycle it was the victim of, `cycle`.
    KLOCK_EVENT_DIED = 3,
    /// A lease expired: `lease`, `session`.
    KLOCK_EVENT_LEASE_EXPIRED = 4,
    /// An older session revoked this one's leases and tickets: `session`, `by`,
    /// `lost_leases`, `lost_tickets`, `retry_after_ms` (counts as a DIE: back off that long).
    KLOCK_EVENT_WOUNDED = 5,
    /// The kernel closed a session on its own: `session`, `close_reason`.
    KLOCK_EVENT_SESSION_CLOSED = 6,
    /// An acquire was granted at once (its verdict was GRANTED): `session`, `leases` (the
    /// verdict's).
    KLOCK_EVENT_ACQUIRED = 7,
    /// Leases ended by a release, release_all or explicit close: `session`, `released`
    /// (lease ids, ascending).
    KLOCK_EVENT_RELEASED = 8,
}

/// Why the kernel closed a session on its own.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_close_reason {
    /// Not a SESSION_CLOSED event.
    KLOCK_CLOSE_REASON_NONE = 0,
    /// No lease, no ticket and no call for `session_idle_ms`.
    KLOCK_CLOSE_REASON_IDLE = 1,
}

/// The kernel's truth about one lease (reconcile, SPEC.md §7).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_lease_status {
    /// Held by the asking session; `expires_at` and `fence` are set.
    KLOCK_LEASE_STATUS_ACTIVE = 1,
    KLOCK_LEASE_STATUS_EXPIRED = 2,
    KLOCK_LEASE_STATUS_RELEASED = 3,
    /// Another session's lease in the same namespace.
    KLOCK_LEASE_STATUS_NOT_OWNER = 4,
    /// Never issued, or another namespace's, or forgotten when its session closed.
    KLOCK_LEASE_STATUS_UNKNOWN = 5,
}

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// Kernel configuration (SPEC.md defaults from klock_config_default()). Owned by the caller;
/// klock_kernel_new() copies it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_config {
    /// One of KLOCK_POLICY_*.
    pub policy: klock_policy,
    /// Seed of the jitter generator (splitmix64).
    pub seed: u64,
    pub default_ttl_ms: u64,
    pub max_ttl_ms: u64,
    pub default_wait_timeout_ms: u64,
    pub backoff_base_ms: u64,
    pub backoff_cap_ms: u64,
    pub grace_ms: u64,
    /// 0 = sessions are never closed for idleness.
    pub session_idle_ms: u64,
    pub max_leases_per_session: u64,
    /// 0 = unlimited.
    pub max_lease_lifetime_ms: u64,
}

impl From<&klock_core::Config> for klock_config {
    fn from(c: &klock_core::Config) -> klock_config {
        let klock_core::Config {
            policy,
            seed,
            default_ttl_ms,
            max_ttl_ms,
            default_wait_timeout_ms,
            backoff_base_ms,
            backoff_cap_ms,
            grace_ms,
            session_idle_ms,
            max_leases_per_session,
            max_lease_lifetime_ms,
        } = *c;
        klock_config {
            policy: crate::names::policy_number(policy),
            seed,
            default_ttl_ms,
            max_ttl_ms,
            default_wait_timeout_ms,
            backoff_base_ms,
            backoff_cap_ms,
            grace_ms,
            session_idle_ms,
            max_leases_per_session,
            max_lease_lifetime_ms,
        }
    }
}

/// Options of one acquire (SPEC.md §6). Start from klock_acquire_options_default(); owned by
/// the caller and only read during the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_acquire_options {
    /// Whether `ttl_ms` is given; false = the kernel's `default_ttl_ms`.
    pub has_ttl_ms: bool,
    /// Lease TTL; 0 is KLOCK_INVALID_TTL, above `max_ttl_ms` it is clamped.
    pub ttl_ms: u64,
    /// Whether a blocked request may wait (false = try-lock: blocked means DIE).
    pub wait: bool,
    /// Whether `wait_timeout_ms` is given; false = the kernel's `default_wait_timeout_ms`.
    pub has_wait_timeout_ms: bool,
    /// How long a WAIT may last before WAIT_TIMEOUT; 0 means `wait = false`.
    pub wait_timeout_ms: u64,
}

impl Default for klock_acquire_options {
    fn default() -> klock_acquire_options {
        klock_acquire_options {
            has_ttl_ms: false,
            ttl_ms: 0,
            wait: true,
            has_wait_timeout_ms: false,
            wait_timeout_ms: 0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Bytes of a name held in a struct the caller owns: the kernel's longest agent id or
/// namespace (256 bytes) and a NUL.
pub const KLOCK_NAME_CAPACITY: usize = 257;

const _: () = assert!(KLOCK_NAME_CAPACITY == klock_core::MAX_NAME_BYTES + 1);

/// A kernel name as a NUL-terminated array. The kernel accepts no name longer than
/// MAX_NAME_BYTES and none holding a control character, so one that does not fit is a bug:
/// it panics (KLOCK_PANIC), never cut short.
fn name_array(name: &str) -> [c_char; KLOCK_NAME_CAPACITY] {
    assert!(
        name.len() < KLOCK_NAME_CAPACITY && !name.contains('\0'),
        "a kernel name of {} bytes does not fit a C name array",
        name.len()
    );
    let mut out = [0; KLOCK_NAME_CAPACITY];
    for (slot, &byte) in out.iter_mut().zip(name.as_bytes()) {
        *slot = byte as c_char;
    }
    out
}

/// A session as opened or resumed. Written into a struct the caller owns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_session_info {
    pub session_id: u64,
    /// The agent id given at open (NUL-terminated).
    pub agent_id: [c_char; KLOCK_NAME_CAPACITY],
    /// The session's namespace (NUL-terminated).
    pub namespace_name: [c_char; KLOCK_NAME_CAPACITY],
    /// The priority of the session's current unit of work: smaller = older = higher priority.
    /// Only the order is meaningful.
    pub priority: u64,
    /// 0 when opened; each resume sets it to the kernel's epoch + 1.
    pub epoch: u64,
}

impl From<&SessionInfo> for klock_session_info {
    fn from(s: &SessionInfo) -> klock_session_info {
        let SessionInfo {
            session_id,
            agent_id,
            namespace,
            priority,
            epoch,
        } = s;
        klock_session_info {
            session_id: session_id.0,
            agent_id: name_array(agent_id),
            namespace_name: name_array(namespace),
            priority: *priority,
            epoch: *epoch,
        }
    }
}

/// A granted lease. Part of a result owned by the library (read-only).
#[repr(C)]
#[derive(Debug)]
pub struct klock_lease {
    pub lease_id: u64,
    pub session_id: u64,
    pub agent_id: *const c_char,
    /// Canonical `TYPE:/path`.
    pub resource: *const c_char,
    pub predicate: klock_predicate,
    /// Strictly increasing across every grant of the kernel: the protected resource must
    /// reject writes carrying a fence smaller than the largest it has seen.
    pub fence: u64,
    pub acquired_at: u64,
    /// Effective expiry (suspension grace included).
    pub expires_at: u64,
    pub ttl_ms: u64,
}

impl From<Lease> for klock_lease {
    fn from(l: Lease) -> klock_lease {
        let Lease {
            lease_id,
            session_id,
            agent_id,
            resource,
            predicate,
            fence,
            acquired_at,
            expires_at,
            ttl_ms,
        } = l;
        klock_lease {
            lease_id: lease_id.0,
            session_id: session_id.0,
            agent_id: string(&agent_id),
            resource: string(&resource),
            predicate: predicate.into(),
            fence,
            acquired_at,
            expires_at,
            ttl_ms,
        }
    }
}

impl Drop for klock_lease {
    fn drop(&mut self) {
        // SAFETY: made by `string` in From<Lease>, freed only here.
        unsafe {
            free_string(self.agent_id.cast_mut());
            free_string(self.resource.cast_mut());
        }
    }
}

fn leases(list: Vec<Lease>) -> (*const klock_lease, usize) {
    let (p, n) = array(list.into_iter().map(klock_lease::from).collect());
    (p.cast_const(), n)
}

/// An intent (predicate and resource) of a blocking session.
#[repr(C)]
#[derive(Debug)]
pub struct klock_intent {
    pub predicate: klock_predicate,
    pub resource: *const c_char,
}

impl Drop for klock_intent {
    fn drop(&mut self) {
        // SAFETY: made by `string`, freed only here.
        unsafe { free_string(self.resource.cast_mut()) }
    }
}

/// A session that blocks a request, and its conflicting intents (held or queued ahead).
#[repr(C)]
#[derive(Debug)]
pub struct klock_blocker {
    pub session_id: u64,
    pub agent_id: *const c_char,
    pub intents: *const klock_intent,
    pub intents_len: usize,
}

impl From<Blocker> for klock_blocker {
    fn from(b: Blocker) -> klock_blocker {
        let Blocker {
            session_id,
            agent_id,
            intents,
        } = b;
        let (p, n) = array(
            intents
                .into_iter()
                .map(
                    |Intent {
                         predicate,
                         resource,
                     }| klock_intent {
                        predicate: predicate.into(),
                        resource: string(&resource),
                    },
                )
                .collect(),
        );
        klock_blocker {
            session_id: session_id.0,
            agent_id: string(&agent_id),
            intents: p.cast_const(),
            intents_len: n,
        }
    }
}

impl Drop for klock_blocker {
    fn drop(&mut self) {
        // SAFETY: made in From<Blocker>, freed only here.
        unsafe {
            free_string(self.agent_id.cast_mut());
            free_array(self.intents.cast_mut(), self.intents_len);
        }
    }
}

/// Session ids as a library-owned array (NULL, 0 when empty).
fn session_ids(ids: Vec<SessionId>) -> (*const u64, usize) {
    let (p, n) = array(ids.into_iter().map(|s| s.0).collect());
    (p.cast_const(), n)
}

/// The answer to klock_session_acquire(). Owned by the library: free with klock_verdict_free().
/// Which fields are set depends on `kind`; the others are 0 / NULL.
#[repr(C)]
#[derive(Debug)]
pub struct klock_verdict {
    pub kind: klock_verdict_kind,
    /// GRANTED: one lease per distinct intent, in order of first appearance.
    pub leases: *const klock_lease,
    pub leases_len: usize,
    /// WAIT: the ticket that a later event resolves.
    pub ticket: u64,
    /// DIE: sleep at least this long before retrying.
    pub retry_after_ms: u64,
    /// WAIT and DIE: the blocking sessions at the time of the verdict.
    pub held_by: *const klock_blocker,
    pub held_by_len: usize,
    /// DIE under the `detect` policy: the session ids of the wait-for cycle this request was
    /// the victim of, this session first (SPEC.md §6.1); empty (NULL, 0) otherwise.
    pub cycle: *const u64,
    pub cycle_len: usize,
}

impl From<Verdict> for klock_verdict {
    fn from(v: Verdict) -> klock_verdict {
        let mut out = klock_verdict {
            kind: klock_verdict_kind::KLOCK_VERDICT_GRANTED,
            leases: ptr::null(),
            leases_len: 0,
            ticket: 0,
            retry_after_ms: 0,
            held_by: ptr::null(),
            held_by_len: 0,
            cycle: ptr::null(),
            cycle_len: 0,
        };
        let blockers = |held: Vec<Blocker>| {
            let (p, n) = array(held.into_iter().map(klock_blocker::from).collect());
            (p.cast_const(), n)
        };
        match v {
            Verdict::Granted { leases: granted } => (out.leases, out.leases_len) = leases(granted),
            Verdict::Wait { ticket, held_by } => {
                out.kind = klock_verdict_kind::KLOCK_VERDICT_WAIT;
                out.ticket = ticket.0;
                (out.held_by, out.held_by_len) = blockers(held_by);
            }
            Verdict::Die {
                retry_after_ms,
                held_by,
                cycle,
            } => {
                out.kind = klock_verdict_kind::KLOCK_VERDICT_DIE;
                out.retry_after_ms = retry_after_ms;
                (out.held_by, out.held_by_len) = blockers(held_by);
                (out.cycle, out.cycle_len) = session_ids(cycle);
            }
        }
        out
    }
}

impl Drop for klock_verdict {
    fn drop(&mut self) {
        // SAFETY: made in From<Verdict>, freed only here.
        unsafe {
            free_array(self.leases.cast_mut(), self.leases_len);
            free_array(self.held_by.cast_mut(), self.held_by_len);
            free_array(self.cycle.cast_mut(), self.cycle_len);
        }
    }
}

/// Something that happened other than as the direct answer of a call. Owned by the library:
/// free with klock_event_free(). Which fields are set depends on `kind` (see
/// klock_event_kind); the others are 0 / NULL.
#[repr(C)]
#[derive(Debug)]
pub struct klock_event {
    pub kind: klock_event_kind,
    /// The session the event concerns (every kind).
    pub session: u64,
    /// GRANTED, WAIT_TIMEOUT, DIED.
    pub ticket: u64,
    /// GRANTED and ACQUIRED: the leases.
    pub leases: *const klock_lease,
    pub leases_len: usize,
    /// DIED and WOUNDED (both count as a DIE): how long to back off before retrying
    /// (SPEC.md §8; never compute it yourself).
    pub retry_after_ms: u64,
    /// LEASE_EXPIRED.
    pub lease: u64,
    /// WOUNDED: the older session that wounded this one.
    pub by: u64,
    /// WOUNDED: lease ids lost.
    pub lost_leases: *const u64,
    pub lost_leases_len: usize,
    /// WOUNDED: ticket ids lost.
    pub lost_tickets: *const u64,
    pub lost_tickets_len: usize,
    /// SESSION_CLOSED.
    pub close_reason: klock_close_reason,
    /// DIED under the `detect` policy: the session ids of the wait-for cycle this ticket was the
    /// victim of, this session first (SPEC.md §6.1); empty (NULL, 0) for any other reason.
    pub cycle: *const u64,
    pub cycle_len: usize,
    /// RELEASED: the ids of the leases released, ascending (after the older fields, so their
    /// offsets never move).
    pub released: *const u64,
    pub released_len: usize,
}

impl From<Event> for klock_event {
    fn from(e: Event) -> klock_event {
        let mut out = klock_event {
            kind: klock_event_kind::KLOCK_EVENT_GRANTED,
            session: e.session().0,
            ticket: 0,
            leases: ptr::null(),
            leases_len: 0,
            retry_after_ms: 0,
            lease: 0,
            by: 0,
            lost_leases: ptr::null(),
            lost_leases_len: 0,
            lost_tickets: ptr::null(),
            lost_tickets_len: 0,
            close_reason: klock_close_reason::KLOCK_CLOSE_REASON_NONE,
            cycle: ptr::null(),
            cycle_len: 0,
            released: ptr::null(),
            released_len: 0,
        };
        match e {
            Event::Granted {
                ticket,
                leases: granted,
                ..
            } => {
                out.ticket = ticket.0;
                (out.leases, out.leases_len) = leases(granted);
            }
            Event::Acquired {
                leases: granted, ..
            } => {
                out.kind = klock_event_kind::KLOCK_EVENT_ACQUIRED;
                (out.leases, out.leases_len) = leases(granted);
            }
            Event::Released {
                leases: released, ..
            } => {
                out.kind = klock_event_kind::KLOCK_EVENT_RELEASED;
                let (p, n) = array(released.into_iter().map(|l| l.0).collect());
                (out.released, out.released_len) = (p.cast_const(), n);
            }
            Event::WaitTimeout { ticket, .. } => {
                out.kind = klock_event_kind::KLOCK_EVENT_WAIT_TIMEOUT;
                out.ticket = ticket.0;
            }
            Event::Died {
                ticket,
                retry_after_ms,
                cycle,
                ..
            } => {
                out.kind = klock_event_kind::KLOCK_EVENT_DIED;
                out.ticket = ticket.0;
                out.retry_after_ms = retry_after_ms;
                (out.cycle, out.cycle_len) = session_ids(cycle);
            }
            Event::LeaseExpired { lease, .. } => {
                out.kind = klock_event_kind::KLOCK_EVENT_LEASE_EXPIRED;
                out.lease = lease.0;
            }
            Event::Wounded {
                by,
                lost_leases,
                lost_tickets,
                retry_after_ms,
                ..
            } => {
                out.kind = klock_event_kind::KLOCK_EVENT_WOUNDED;
                out.by = by.0;
                out.retry_after_ms = retry_after_ms;
                let (p, n) = array(lost_leases.into_iter().map(|l| l.0).collect());
                (out.lost_leases, out.lost_leases_len) = (p.cast_const(), n);
                let (p, n) = array(lost_tickets.into_iter().map(|t| t.0).collect());
                (out.lost_tickets, out.lost_tickets_len) = (p.cast_const(), n);
            }
            Event::SessionClosed { reason, .. } => {
                out.kind = klock_event_kind::KLOCK_EVENT_SESSION_CLOSED;
                out.close_reason = match reason {
                    CloseReason::Idle => klock_close_reason::KLOCK_CLOSE_REASON_IDLE,
                };
            }
        }
        out
    }
}

impl Drop for klock_event {
    fn drop(&mut self) {
        // SAFETY: made in From<Event>, freed only here.
        unsafe {
            free_array(self.leases.cast_mut(), self.leases_len);
            free_array(self.lost_leases.cast_mut(), self.lost_leases_len);
            free_array(self.lost_tickets.cast_mut(), self.lost_tickets_len);
            free_array(self.cycle.cast_mut(), self.cycle_len);
            free_array(self.released.cast_mut(), self.released_len);
        }
    }
}

/// The heartbeat outcome for one lease.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_heartbeat_result {
    pub lease_id: u64,
    /// KLOCK_OK (renewed), or KLOCK_LEASE_EXPIRED, KLOCK_LEASE_RELEASED, KLOCK_NOT_OWNER,
    /// KLOCK_UNKNOWN_LEASE, KLOCK_LIFETIME_EXCEEDED.
    pub status: crate::status::klock_status,
    /// KLOCK_OK: the new expiry; otherwise 0.
    pub expires_at: u64,
}

/// The answer to a heartbeat: one result per lease asked about (in the order asked), or per
/// active lease for klock_lease_heartbeat_all() (in grant order). Owned by the library: free
/// with klock_heartbeat_results_free().
#[repr(C)]
#[derive(Debug)]
pub struct klock_heartbeat_results {
    pub items: *const klock_heartbeat_result,
    pub len: usize,
}

impl Drop for klock_heartbeat_results {
    fn drop(&mut self) {
        // SAFETY: made by `array` in the heartbeat functions, freed only here.
        unsafe { free_array(self.items.cast_mut(), self.len) }
    }
}

/// The kernel's truth about one lease.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_lease_check {
    pub lease_id: u64,
    pub status: klock_lease_status,
    /// ACTIVE: the effective expiry; otherwise 0.
    pub expires_at: u64,
    /// ACTIVE: the lease's fence; otherwise 0.
    pub fence: u64,
}

impl klock_lease_check {
    pub fn new(lease_id: u64, status: LeaseStatus) -> klock_lease_check {
        use klock_lease_status::*;
        let (status, expires_at, fence) = match status {
            LeaseStatus::Active { expires_at, fence } => {
                (KLOCK_LEASE_STATUS_ACTIVE, expires_at, fence)
            }
            LeaseStatus::Expired => (KLOCK_LEASE_STATUS_EXPIRED, 0, 0),
            LeaseStatus::Released => (KLOCK_LEASE_STATUS_RELEASED, 0, 0),
            LeaseStatus::NotOwner => (KLOCK_LEASE_STATUS_NOT_OWNER, 0, 0),
            LeaseStatus::Unknown => (KLOCK_LEASE_STATUS_UNKNOWN, 0, 0),
        };
        klock_lease_check {
            lease_id,
            status,
            expires_at,
            fence,
        }
    }
}

/// The answer to a reconcile: one item per lease asked about, in the order asked. Owned by
/// the library: free with klock_reconcile_results_free().
#[repr(C)]
#[derive(Debug)]
pub struct klock_reconcile_results {
    pub items: *const klock_lease_check,
    pub len: usize,
}

impl Drop for klock_reconcile_results {
    fn drop(&mut self) {
        // SAFETY: made by `array` in klock_lease_reconcile, freed only here.
        unsafe { free_array(self.items.cast_mut(), self.len) }
    }
}

/// A holder of a lease on a resource node.
#[repr(C)]
#[derive(Debug)]
pub struct klock_holder {
    pub session_id: u64,
    pub agent_id: *const c_char,
    pub lease_id: u64,
    pub resource: *const c_char,
    pub predicate: klock_predicate,
    pub fence: u64,
    pub expires_at: u64,
}

impl From<Holder> for klock_holder {
    fn from(h: Holder) -> klock_holder {
        let Holder {
            session_id,
            agent_id,
            lease_id,
            resource,
            predicate,
            fence,
            expires_at,
        } = h;
        klock_holder {
            session_id: session_id.0,
            agent_id: string(&agent_id),
            lease_id: lease_id.0,
            resource: string(&resource),
            predicate: predicate.into(),
            fence,
            expires_at,
        }
    }
}

impl Drop for klock_holder {
    fn drop(&mut self) {
        // SAFETY: made in From<Holder>, freed only here.
        unsafe {
            free_string(self.agent_id.cast_mut());
            free_string(self.resource.cast_mut());
        }
    }
}

/// A queued intent on a resource node.
#[repr(C)]
#[derive(Debug)]
pub struct klock_waiter {
    pub session_id: u64,
    pub agent_id: *const c_char,
    pub ticket: u64,
    pub predicate: klock_predicate,
    /// 0-based position in this node's queue.
    pub position: usize,
    /// When the wait times out.
    pub deadline: u64,
}

impl From<Waiter> for klock_waiter {
    fn from(w: Waiter) -> klock_waiter {
        let Waiter {
            session_id,
            agent_id,
            ticket,
            predicate,
            position,
            deadline,
        } = w;
        klock_waiter {
            session_id: session_id.0,
            agent_id: string(&agent_id),
            ticket: ticket.0,
            predicate: predicate.into(),
            position,
            deadline,
        }
    }
}

impl Drop for klock_waiter {
    fn drop(&mut self) {
        // SAFETY: made in From<Waiter>, freed only here.
        unsafe { free_string(self.agent_id.cast_mut()) }
    }
}

/// Who holds and who waits on one resource node (SPEC.md §10). Owned by the library: free
/// with klock_resource_state_free().
#[repr(C)]
#[derive(Debug)]
pub struct klock_resource_state {
    /// The normalised resource.
    pub resource: *const c_char,
    pub namespace_name: *const c_char,
    /// Holders of this exact node, by lease id.
    pub holders: *const klock_holder,
    pub holders_len: usize,
    /// Queued intents on this node, in queue order.
    pub waiting: *const klock_waiter,
    pub waiting_len: usize,
    /// Holders on ancestors and descendants that overlap this node, by lease id.
    pub covering: *const klock_holder,
    pub covering_len: usize,
}

impl From<ResourceState> for klock_resource_state {
    fn from(s: ResourceState) -> klock_resource_state {
        let ResourceState {
            resource,
            namespace,
            holders,
            waiting,
            covering,
        } = s;
        let holders_of = |list: Vec<Holder>| {
            let (p, n) = array(list.into_iter().map(klock_holder::from).collect());
            (p.cast_const(), n)
        };
        let (holders, holders_len) = holders_of(holders);
        let (covering, covering_len) = holders_of(covering);
        let (waiting, waiting_len) = array(waiting.into_iter().map(klock_waiter::from).collect());
        klock_resource_state {
            resource: string(&resource),
            namespace_name: string(&namespace),
            holders,
            holders_len,
            waiting: waiting.cast_const(),
            waiting_len,
            covering,
            covering_len,
        }
    }
}

impl Drop for klock_resource_state {
    fn drop(&mut self) {
        // SAFETY: made in From<ResourceState>, freed only here.
        unsafe {
            free_string(self.resource.cast_mut());
            free_string(self.namespace_name.cast_mut());
            free_array(self.holders.cast_mut(), self.holders_len);
            free_array(self.waiting.cast_mut(), self.waiting_len);
            free_array(self.covering.cast_mut(), self.covering_len);
        }
    }
}

/// A session's recovery digest (KLIS-8 shape, SPEC.md §5).
///
/// Returned by klock_session_digest() and klock_digest_from_json(): owned by the library, free
/// with klock_digest_free(). klock_session_resume() and klock_digest_to_json() also accept a
/// digest the caller filled in itself (e.g. after loading it from storage); such a digest stays
/// the caller's and must never be passed to klock_digest_free().
#[repr(C)]
#[derive(Debug)]
pub struct klock_digest {
    /// Digest format version (currently 1).
    pub version: u32,
    pub agent_id: *const c_char,
    pub namespace_name: *const c_char,
    pub session_id: u64,
    /// The session's priority, as assigned by the kernel.
    pub priority_timestamp: u64,
    pub epoch: u64,
    /// IDLE, WAITING, HOLDING or SUSPENDED. May be NULL in a caller-built digest (read as "").
    pub last_phase: *const c_char,
    /// The intents of the session's waiting tickets, as "PREDICATE TYPE:/path".
    pub pending_intents: *const *const c_char,
    pub pending_intents_len: usize,
}

impl From<StateDigest> for klock_digest {
    fn from(d: StateDigest) -> klock_digest {
        let StateDigest {
            version,
            identity,
            recovery,
        } = d;
        let DigestIdentity {
            agent_id,
            namespace,
            session_id,
            priority_timestamp,
            epoch,
        } = identity;
        let DigestRecovery {
            last_phase,
            pending_intents,
        } = recovery;
        let (p, n) = array(
            pending_intents
                .iter()
                .map(|s| string(s).cast_const())
                .collect(),
        );
        klock_digest {
            version,
            agent_id: string(&agent_id),
            namespace_name: string(&namespace),
            session_id: session_id.0,
            priority_timestamp,
            epoch,
            last_phase: string(&last_phase),
            pending_intents: p.cast_const(),
            pending_intents_len: n,
        }
    }
}

impl Drop for klock_digest {
    fn drop(&mut self) {
        // SAFETY: only digests made by From<StateDigest> are ever dropped (klock_digest_free).
        unsafe {
            free_string(self.agent_id.cast_mut());
            free_string(self.namespace_name.cast_mut());
            free_string(self.last_phase.cast_mut());
            if !self.pending_intents.is_null() {
                for i in 0..self.pending_intents_len {
                    free_string((*self.pending_intents.add(i)).cast_mut());
                }
            }
            free_array(self.pending_intents.cast_mut(), self.pending_intents_len);
        }
    }
}

/// Exact counts of every outcome since the kernel was created.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct klock_counters {
    pub sessions_opened: u64,
    /// GRANTED verdicts plus GRANTED events.
    pub granted: u64,
    /// WAIT verdicts.
    pub waited: u64,
    /// DIE verdicts plus DIED events.
    pub died: u64,
    pub timed_out: u64,
    pub expired: u64,
    /// WOUNDED events.
    pub wounded: u64,
    pub released: u64,
    pub cancelled: u64,
    pub idle_closed: u64,
    /// Waiters withdrawn because the waiting order was about to break (always 0 by design).
    pub defensive_repairs: u64,
}

impl From<Counters> for klock_counters {
    fn from(c: Counters) -> klock_counters {
        let Counters {
            sessions_opened,
            granted,
            waited,
            died,
            timed_out,
            expired,
            wounded,
            released,
            cancelled,
            idle_closed,
            defensive_repairs,
        } = c;
        klock_counters {
            sessions_opened,
            granted,
            waited,
            died,
            timed_out,
            expired,
            wounded,
            released,
            cancelled,
            idle_closed,
            defensive_repairs,
        }
    }
}

/// A resource and how often requests for it were blocked (WAIT or DIE).
#[repr(C)]
#[derive(Debug)]
pub struct klock_contention {
    pub namespace_name: *const c_char,
    pub resource: *const c_char,
    pub blocked: u64,
}

impl Drop for klock_contention {
    fn drop(&mut self) {
        // SAFETY: made in From<Stats>, freed only here.
        unsafe {
            free_string(self.namespace_name.cast_mut());
            free_string(self.resource.cast_mut());
        }
    }
}

/// An agent whose leases expired or whose waits timed out ("ghost agents").
#[repr(C)]
#[derive(Debug)]
pub struct klock_ghost_agent {
    pub agent_id: *const c_char,
    pub expired_leases: u64,
    pub wait_timeouts: u64,
}

impl Drop for klock_ghost_agent {
    fn drop(&mut self) {
        // SAFETY: made in From<Stats>, freed only here.
        unsafe { free_string(self.agent_id.cast_mut()) }
    }
}

/// Observability counters (SPEC.md §10). Owned by the library: free with klock_stats_free().
#[repr(C)]
#[derive(Debug)]
pub struct klock_stats {
    pub counters: klock_counters,
    pub active_sessions: u64,
    pub active_leases: u64,
    pub waiting_tickets: u64,
    /// Most blocked first (bounded table).
    pub top_contended: *const klock_contention,
    pub top_contended_len: usize,
    /// Most expiries + timeouts first (bounded table).
    pub ghost_agents: *const klock_ghost_agent,
    pub ghost_agents_len: usize,
}

impl From<Stats> for klock_stats {
    fn from(s: Stats) -> klock_stats {
        let Stats {
            counters,
            active_sessions,
            active_leases,
            waiting_tickets,
            top_contended,
            ghost_agents,
        } = s;
        let (top, top_len) = array(
            top_contended
                .into_iter()
                .map(
                    |Contention {
                         namespace,
                         resource,
                         blocked,
                     }| klock_contention {
                        namespace_name: string(&namespace),
                        resource: string(&resource),
                        blocked,
                    },
                )
                .collect(),
        );
        let (ghosts, ghosts_len) = array(
            ghost_agents
                .into_iter()
                .map(
                    |GhostAgent {
                         agent_id,
                         expired_leases,
                         wait_timeouts,
                     }| klock_ghost_agent {
                        agent_id: string(&agent_id),
                        expired_leases,
                        wait_timeouts,
                    },
                )
                .collect(),
        );
        klock_stats {
            counters: counters.into(),
            active_sessions,
            active_leases,
            waiting_tickets,
            top_contended: top.cast_const(),
            top_contended_len: top_len,
            ghost_agents: ghosts.cast_const(),
            ghost_agents_len: ghosts_len,
        }
    }
}

impl Drop for klock_stats {
    fn drop(&mut self) {
        // SAFETY: made in From<Stats>, freed only here.
        unsafe {
            free_array(self.top_contended.cast_mut(), self.top_contended_len);
            free_array(self.ghost_agents.cast_mut(), self.ghost_agents_len);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Freeing results
// ---------------------------------------------------------------------------------------------

/// Frees a verdict from klock_session_acquire() and everything it points to.
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_verdict_free(value: *mut klock_verdict) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees an event from klock_kernel_poll_event() and everything it points to.
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_event_free(value: *mut klock_event) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees heartbeat results from klock_lease_heartbeat() or klock_lease_heartbeat_all().
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_heartbeat_results_free(value: *mut klock_heartbeat_results) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees reconcile results from klock_lease_reconcile().
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_reconcile_results_free(value: *mut klock_reconcile_results) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees a resource state from klock_resource_get_state().
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_resource_state_free(value: *mut klock_resource_state) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees a digest from klock_session_digest() or klock_digest_from_json(); never pass a
/// digest the caller built itself.
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_digest_free(value: *mut klock_digest) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees statistics from klock_kernel_stats().
///
/// NULL is a no-op. Thread-safety: any thread, once no other thread reads the result.
///
/// # Safety
/// `value` must be NULL or a result returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_stats_free(value: *mut klock_stats) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_boxed(value) })
}

/// Frees a string returned by this library (klock_kernel_snapshot_json(),
/// klock_digest_to_json()).
///
/// NULL is a no-op. Thread-safety: any thread.
///
/// # Safety
/// The pointer must be NULL or a string returned by this library and not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_string_free(text: *mut c_char) {
    // SAFETY: forwarded contract (see # Safety).
    ffi_void((), || unsafe { free_string(text) })
}
