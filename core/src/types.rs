//! The kernel's inputs and outputs as plain owned values.
//!
//! Contract: nothing here borrows from the kernel, so every value can cross into C, Python or
//! JavaScript unchanged. Identifiers are opaque numbers, unique and never reused; clients must
//! not assume their values (docs/SPEC.md §1).

use crate::predicate::Predicate;
use alloc::{string::String, vec::Vec};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(transparent))]
        pub struct $name(pub u64);

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id_type!(
    /// A session (one run of one agent).
    SessionId
);
id_type!(
    /// A lease (a granted intent).
    LeaseId
);
id_type!(
    /// A waiting request; its number is its kernel-wide arrival order (the lane index).
    TicketId
);

/// Options of [`acquire`](crate::Kernel::acquire); `None` means the configured default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AcquireOptions {
    /// Lease TTL in milliseconds; `None` = `Config::default_ttl_ms`. 0 is `INVALID_TTL`;
    /// above `Config::max_ttl_ms` it is clamped to it (docs/SPEC.md §6).
    pub ttl_ms: Option<u64>,
    /// Whether a blocked request may wait (`false` = try-lock).
    pub wait: bool,
    /// How long a WAIT may last before WAIT_TIMEOUT, in milliseconds; `None` =
    /// `Config::default_wait_timeout_ms`; 0 means `wait: false` (docs/SPEC.md §6).
    pub wait_timeout_ms: Option<u64>,
}

impl Default for AcquireOptions {
    fn default() -> AcquireOptions {
        AcquireOptions {
            ttl_ms: None,
            wait: true,
            wait_timeout_ms: None,
        }
    }
}

/// A session as opened or resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SessionInfo {
    /// The kernel-assigned id, to pass to every later call on the session.
    pub session_id: SessionId,
    /// The agent id given at open.
    pub agent_id: String,
    /// The namespace (tenant) the session belongs to (docs/SPEC.md §12).
    pub namespace: String,
    /// The priority of the session's current unit of work (docs/SPEC.md §5). Smaller = older
    /// = higher priority. Only the order is meaningful.
    pub priority: u64,
    /// 0 when opened; each resume sets it to the kernel's epoch + 1 (docs/SPEC.md §13.2).
    pub epoch: u64,
}

/// A lease as reported to its holder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Lease {
    /// Unique, never reused; names the lease in heartbeat, release and reconcile.
    pub lease_id: LeaseId,
    /// The owning session.
    pub session_id: SessionId,
    /// The owning session's agent.
    pub agent_id: String,
    /// Canonical `TYPE:/path`.
    pub resource: String,
    /// What the holder intends to do to the resource (docs/SPEC.md §4).
    pub predicate: Predicate,
    /// Strictly increasing across every grant of the kernel: the protected resource must
    /// reject writes carrying a fence smaller than the largest it has seen.
    pub fence: u64,
    /// When it was granted, in the host's milliseconds; a grant made while settling an
    /// overdue instant `t` is dated `t` (docs/SPEC.md §2). A renewal does not change it.
    pub acquired_at: u64,
    /// Effective expiry in milliseconds (suspension grace included): the lease is valid while
    /// `now < expires_at` (docs/SPEC.md §2); `u64::MAX` means never.
    pub expires_at: u64,
    /// The TTL in milliseconds a heartbeat renews it by (clamped to `max_ttl_ms`; a re-acquire
    /// may raise it, docs/SPEC.md §6).
    pub ttl_ms: u64,
}

/// One intent of a blocking session, as reported in `held_by`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Intent {
    /// The conflicting predicate.
    pub predicate: Predicate,
    /// Canonical `TYPE:/path` of the node it is held or queued on.
    pub resource: String,
}

/// A session that blocks a request, and its conflicting intents (held or queued ahead).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Blocker {
    /// The blocking session.
    pub session_id: SessionId,
    /// The blocking session's agent.
    pub agent_id: String,
    /// Its intents that conflict with the request, sorted (docs/SPEC.md §13.4).
    pub intents: Vec<Intent>,
}

/// The immediate answer to an acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "verdict", rename_all = "SCREAMING_SNAKE_CASE")
)]
#[must_use = "a verdict says whether the intents were granted, queued or refused"]
pub enum Verdict {
    /// Every intent is a lease now, one per distinct intent in order of first appearance.
    Granted {
        /// The leases, new or reused (a reused lease keeps its id, docs/SPEC.md §6).
        leases: Vec<Lease>,
    },
    /// Queued; resolved later by a GRANTED, WAIT_TIMEOUT, DIED or WOUNDED event.
    Wait {
        /// Names the request in the event that resolves it and in `cancel_wait`.
        ticket: TicketId,
        /// The blockers at the time of the verdict, by ascending session id; under
        /// `wound_wait`, the older blockers left after the wounds (docs/SPEC.md §13.4).
        held_by: Vec<Blocker>,
    },
    /// Nothing held or queued; retry after `retry_after_ms` (the session keeps its priority).
    Die {
        /// Milliseconds to wait at least before retrying (docs/SPEC.md §8).
        retry_after_ms: u64,
        /// The blockers at the time of the verdict, by ascending session id.
        held_by: Vec<Blocker>,
        /// Under `detect`, when the request was the victim of the wait-for cycle it would have
        /// closed: the cycle's members, this session first, following the edges
        /// (docs/SPEC.md §6.1); empty otherwise.
        #[cfg_attr(
            feature = "serde",
            serde(default, skip_serializing_if = "Vec::is_empty")
        )]
        cycle: Vec<SessionId>,
    },
}

/// Why the kernel closed a session on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "SCREAMING_SNAKE_CASE"))]
pub enum CloseReason {
    /// No lease, no ticket and no call for `session_idle_ms`.
    Idle,
}

impl CloseReason {
    /// The stable upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            CloseReason::Idle => "IDLE",
        }
    }
}

/// Something that happened other than as the direct answer of a call (docs/SPEC.md §9).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "event", rename_all = "SCREAMING_SNAKE_CASE")
)]
pub enum Event {
    /// A waiting ticket was granted, all-or-nothing.
    Granted {
        /// The ticket of the earlier WAIT verdict.
        ticket: TicketId,
        /// The session that waited.
        session: SessionId,
        /// One lease per distinct intent of the request, in order of first appearance; an
        /// intent the session held by then reuses that lease (docs/SPEC.md §6).
        leases: Vec<Lease>,
    },
    /// A ticket waited its `wait_timeout_ms` and was withdrawn; nothing of it is held.
    WaitTimeout {
        /// The withdrawn ticket.
        ticket: TicketId,
        /// The session that waited.
        session: SessionId,
    },
    /// A waiting ticket was withdrawn because a lease it reused ended, by the defensive
    /// repair, or as the victim of a wait-for cycle under `detect`; it counts as a DIE
    /// (docs/SPEC.md §6, §6.1, §8).
    Died {
        /// The withdrawn ticket.
        ticket: TicketId,
        /// The session that waited.
        session: SessionId,
        /// Milliseconds to wait at least before asking again (docs/SPEC.md §8).
        retry_after_ms: u64,
        /// The members of the cycle it was the victim of, this session first, following the
        /// wait-for edges (docs/SPEC.md §6.1); empty for any other reason.
        #[cfg_attr(
            feature = "serde",
            serde(default, skip_serializing_if = "Vec::is_empty")
        )]
        cycle: Vec<SessionId>,
    },
    /// A lease reached its effective expiry; it is never resurrected (docs/SPEC.md §7).
    LeaseExpired {
        /// The expired lease.
        lease: LeaseId,
        /// The session that held it.
        session: SessionId,
    },
    /// Under `wound_wait`, an older requester revoked what this session had (docs/SPEC.md §6).
    Wounded {
        /// The wounded (younger) session.
        session: SessionId,
        /// The older requesting session that wounded it.
        by: SessionId,
        /// Every lease it held, ascending, when it blocked through a lease; empty when it
        /// blocked only through a queued ticket. They count as released.
        lost_leases: Vec<LeaseId>,
        /// Every ticket it was waiting with, in arrival order.
        lost_tickets: Vec<TicketId>,
        /// How long the wounded session should wait before asking again (docs/SPEC.md §8: a
        /// wound counts as a DIE).
        retry_after_ms: u64,
    },
    /// The kernel closed a session on its own; an explicit close emits none (docs/SPEC.md §9).
    SessionClosed {
        /// The closed session: its leases were released and its waits cancelled.
        session: SessionId,
        /// Why the kernel closed it.
        reason: CloseReason,
    },
    /// An acquire was granted at once (its verdict is GRANTED): the same leases as the
    /// verdict's, so that an observer of the event stream sees every lease begin, like
    /// [`Event::Granted`] for a queued request (docs/SPEC.md §9, §13.8).
    Acquired {
        /// The session that asked.
        session: SessionId,
        /// The verdict's leases, one per distinct intent in order of first appearance; an
        /// intent the session held already reuses that lease (docs/SPEC.md §6).
        leases: Vec<Lease>,
    },
    /// Leases ended by their holder: `release` (one lease, when that call ended it),
    /// `release_all` or an explicit `close_session` (every lease the session held), so that an
    /// observer sees every lease end (docs/SPEC.md §9, §13.8). Expiries and wounds have their
    /// own events; an idempotent release of an ended lease emits nothing.
    Released {
        /// The session that held them.
        session: SessionId,
        /// The ended leases, ascending (never empty).
        leases: Vec<LeaseId>,
    },
}

impl Event {
    /// Every event kind's stable name, in declaration order (what [`Event::name`] returns).
    pub const KINDS: [&'static str; 8] = [
        "GRANTED",
        "WAIT_TIMEOUT",
        "DIED",
        "LEASE_EXPIRED",
        "WOUNDED",
        "SESSION_CLOSED",
        "ACQUIRED",
        "RELEASED",
    ];

    /// The stable upper-case name of the event kind, e.g. `"GRANTED"`.
    pub const fn name(&self) -> &'static str {
        match self {
            Event::Granted { .. } => "GRANTED",
            Event::Acquired { .. } => "ACQUIRED",
            Event::Released { .. } => "RELEASED",
            Event::WaitTimeout { .. } => "WAIT_TIMEOUT",
            Event::Died { .. } => "DIED",
            Event::LeaseExpired { .. } => "LEASE_EXPIRED",
            Event::Wounded { .. } => "WOUNDED",
            Event::SessionClosed { .. } => "SESSION_CLOSED",
        }
    }

    /// The session the event concerns.
    pub const fn session(&self) -> SessionId {
        match self {
            Event::Granted { session, .. }
            | Event::Acquired { session, .. }
            | Event::Released { session, .. }
            | Event::WaitTimeout { session, .. }
            | Event::Died { session, .. }
            | Event::LeaseExpired { session, .. }
            | Event::Wounded { session, .. }
            | Event::SessionClosed { session, .. } => *session,
        }
    }
}

/// Which leases a heartbeat renews.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseSelection<'a> {
    /// Every active lease of the session.
    All,
    /// These ids, each answered separately.
    Ids(&'a [LeaseId]),
}

/// The outcome of a heartbeat for one lease: the new expiry, or why it was not renewed
/// (`LEASE_EXPIRED`, `LEASE_RELEASED`, `NOT_OWNER`, `UNKNOWN_LEASE`, `LIFETIME_EXCEEDED`).
pub type HeartbeatOutcome = Result<u64, crate::ErrorCode>;

/// The kernel's truth about one lease (KLIS-3 VERIFY_ALL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "status", rename_all = "SCREAMING_SNAKE_CASE")
)]
pub enum LeaseStatus {
    /// Held by the asking session.
    Active {
        /// Effective expiry in milliseconds (suspension grace included).
        expires_at: u64,
        /// The lease's fencing token (docs/SPEC.md §7).
        fence: u64,
    },
    /// The asking session's lease expired.
    Expired,
    /// The asking session's lease was released (`release`, `release_all`, or a wound).
    Released,
    /// A lease of another session in the same namespace.
    NotOwner,
    /// Never issued, another namespace's, or an ended id no longer remembered
    /// (docs/SPEC.md §13.2).
    Unknown,
}

impl LeaseStatus {
    /// The stable upper-case name of the status.
    pub const fn name(&self) -> &'static str {
        match self {
            LeaseStatus::Active { .. } => "ACTIVE",
            LeaseStatus::Expired => "EXPIRED",
            LeaseStatus::Released => "RELEASED",
            LeaseStatus::NotOwner => "NOT_OWNER",
            LeaseStatus::Unknown => "UNKNOWN",
        }
    }
}

/// A holder of a lease on a node, as shown by [`resource_state`](crate::Kernel::resource_state).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Holder {
    /// The holding session.
    pub session_id: SessionId,
    /// The holding session's agent.
    pub agent_id: String,
    /// The lease.
    pub lease_id: LeaseId,
    /// Canonical `TYPE:/path` the lease is on (for `covering`, an ancestor or descendant).
    pub resource: String,
    /// The held predicate.
    pub predicate: Predicate,
    /// The lease's fencing token (docs/SPEC.md §7).
    pub fence: u64,
    /// Effective expiry in milliseconds (suspension grace included).
    pub expires_at: u64,
}

/// A queued intent on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Waiter {
    /// The waiting session.
    pub session_id: SessionId,
    /// The waiting session's agent.
    pub agent_id: String,
    /// The ticket the intent belongs to.
    pub ticket: TicketId,
    /// The queued predicate.
    pub predicate: Predicate,
    /// 0-based position in this node's queue.
    pub position: usize,
    /// When the wait times out, in milliseconds; `u64::MAX` means never (docs/SPEC.md §2).
    pub deadline: u64,
}

/// Who holds and who waits on one resource node (docs/SPEC.md §10).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ResourceState {
    /// The queried resource, normalised.
    pub resource: String,
    /// The queried namespace.
    pub namespace: String,
    /// Leases on exactly this node, by lease id.
    pub holders: Vec<Holder>,
    /// Intents queued on exactly this node, in queue order.
    pub waiting: Vec<Waiter>,
    /// Leases on ancestors and descendants, which overlap this node (docs/SPEC.md §3), by
    /// lease id; queued tickets there are not listed.
    pub covering: Vec<Holder>,
}

/// Persistent recovery state of a session (KLIS-8 shape).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StateDigest {
    /// The digest format, [`DIGEST_VERSION`]; a resume refuses another with `INVALID_DIGEST`.
    pub version: u32,
    /// Who the session is.
    pub identity: DigestIdentity,
    /// What it was doing.
    pub recovery: DigestRecovery,
}

/// Who the session is; checked against the kernel's record on resume.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DigestIdentity {
    /// Must equal the session's agent id on resume.
    pub agent_id: String,
    /// Must equal the session's namespace on resume.
    pub namespace: String,
    /// The session to resume; one that is not open is `UNKNOWN_SESSION`.
    pub session_id: SessionId,
    /// The session's priority when the digest was taken; on resume it must lie between the
    /// priority the session opened with and its current one (docs/SPEC.md §5).
    pub priority_timestamp: u64,
    /// The session's epoch when the digest was taken; one newer than the kernel's is
    /// `INVALID_DIGEST` on resume (docs/SPEC.md §13.2).
    pub epoch: u64,
}

/// What the session was doing when the digest was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DigestRecovery {
    /// `SUSPENDED` if suspended, else `WAITING` if it has a ticket, else `HOLDING` if it has a
    /// lease, else `IDLE`.
    pub last_phase: String,
    /// The intents the session's waiting tickets still wait for (not those it already
    /// holds), as `"PREDICATE TYPE:/path"`, in ticket order.
    pub pending_intents: Vec<String>,
}

/// The current digest format version.
pub const DIGEST_VERSION: u32 = 1;
