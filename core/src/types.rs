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
    pub ttl_ms: Option<u64>,
    /// Whether a blocked request may wait (`false` = try-lock).
    pub wait: bool,
    /// How long a WAIT may last before WAIT_TIMEOUT; 0 means `wait: false`.
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
    pub session_id: SessionId,
    pub agent_id: String,
    pub namespace: String,
    /// Smaller = older = higher priority. Only the order is meaningful.
    pub priority: u64,
    pub epoch: u64,
}

/// A lease as reported to its holder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Lease {
    pub lease_id: LeaseId,
    pub session_id: SessionId,
    pub agent_id: String,
    /// Canonical `TYPE:/path`.
    pub resource: String,
    pub predicate: Predicate,
    /// Strictly increasing across every grant of the kernel: the protected resource must
    /// reject writes carrying a fence smaller than the largest it has seen.
    pub fence: u64,
    pub acquired_at: u64,
    /// Effective expiry (suspension grace included).
    pub expires_at: u64,
    pub ttl_ms: u64,
}

/// One intent of a blocking session, as reported in `held_by`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Intent {
    pub predicate: Predicate,
    pub resource: String,
}

/// A session that blocks a request, and its conflicting intents (held or queued ahead).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Blocker {
    pub session_id: SessionId,
    pub agent_id: String,
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
    Granted { leases: Vec<Lease> },
    /// Queued; resolved later by a GRANTED, WAIT_TIMEOUT, DIED or WOUNDED event.
    Wait {
        ticket: TicketId,
        held_by: Vec<Blocker>,
    },
    /// Nothing held or queued; retry after `retry_after_ms` (the session keeps its priority).
    Die {
        retry_after_ms: u64,
        held_by: Vec<Blocker>,
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
    Granted {
        ticket: TicketId,
        session: SessionId,
        leases: Vec<Lease>,
    },
    WaitTimeout {
        ticket: TicketId,
        session: SessionId,
    },
    Died {
        ticket: TicketId,
        session: SessionId,
        retry_after_ms: u64,
    },
    LeaseExpired {
        lease: LeaseId,
        session: SessionId,
    },
    Wounded {
        session: SessionId,
        by: SessionId,
        lost_leases: Vec<LeaseId>,
        lost_tickets: Vec<TicketId>,
        /// How long the wounded session should wait before asking again (docs/SPEC.md §8: a
        /// wound counts as a DIE).
        retry_after_ms: u64,
    },
    SessionClosed {
        session: SessionId,
        reason: CloseReason,
    },
}

impl Event {
    /// Every event kind's stable name, in declaration order (what [`Event::name`] returns).
    pub const KINDS: [&'static str; 6] = [
        "GRANTED",
        "WAIT_TIMEOUT",
        "DIED",
        "LEASE_EXPIRED",
        "WOUNDED",
        "SESSION_CLOSED",
    ];

    /// The stable upper-case name of the event kind, e.g. `"GRANTED"`.
    pub const fn name(&self) -> &'static str {
        match self {
            Event::Granted { .. } => "GRANTED",
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
    Active { expires_at: u64, fence: u64 },
    Expired,
    Released,
    NotOwner,
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
    pub session_id: SessionId,
    pub agent_id: String,
    pub lease_id: LeaseId,
    pub resource: String,
    pub predicate: Predicate,
    pub fence: u64,
    pub expires_at: u64,
}

/// A queued intent on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Waiter {
    pub session_id: SessionId,
    pub agent_id: String,
    pub ticket: TicketId,
    pub predicate: Predicate,
    /// 0-based position in this node's queue.
    pub position: usize,
    /// When the wait times out.
    pub deadline: u64,
}

/// Who holds and who waits on one resource node (docs/SPEC.md §10).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ResourceState {
    pub resource: String,
    pub namespace: String,
    pub holders: Vec<Holder>,
    /// In queue order.
    pub waiting: Vec<Waiter>,
    /// Holders on ancestors and descendants whose resources overlap this one.
    pub covering: Vec<Holder>,
}

/// Persistent recovery state of a session (KLIS-8 shape).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StateDigest {
    pub version: u32,
    pub identity: DigestIdentity,
    pub recovery: DigestRecovery,
}

/// Who the session is; checked against the kernel's record on resume.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DigestIdentity {
    pub agent_id: String,
    pub namespace: String,
    pub session_id: SessionId,
    pub priority_timestamp: u64,
    pub epoch: u64,
}

/// What the session was doing when the digest was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DigestRecovery {
    /// `IDLE`, `WAITING`, `HOLDING` or `SUSPENDED`.
    pub last_phase: String,
    /// The intents of the session's waiting tickets, as `"PREDICATE TYPE:/path"`.
    pub pending_intents: Vec<String>,
}

/// The current digest format version.
pub const DIGEST_VERSION: u32 = 1;
