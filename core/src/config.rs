//! Kernel configuration (docs/SPEC.md defaults) and the deadlock-prevention policy.
//!
//! Contract: [`Config::default`] is exactly the defaults of docs/SPEC.md; [`Config::validate`]
//! rejects values that cannot mean anything (zero TTLs) with `INVALID_CONFIG`. A zero
//! `session_idle_ms` or `max_lease_lifetime_ms` means "never"; a zero `grace_ms` means a
//! suspension adds no time; a `default_ttl_ms` above `max_ttl_ms` is clamped like a request.

use crate::error::{Error, ErrorCode};
use alloc::format;

/// How conflicts between sessions are resolved (docs/SPEC.md §6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Policy {
    /// Older requesters wait, younger ones die (the default).
    #[default]
    WaitDie,
    /// Older requesters revoke younger blockers; younger requesters wait.
    WoundWait,
    /// One all-or-nothing FIFO lane per request; no hold-and-wait.
    Lanes,
    /// Everyone waits; only a cycle of waiters is broken, by its youngest unit of work
    /// (docs/SPEC.md §6.1).
    Detect,
}

impl Policy {
    /// Every policy, the default first.
    pub const ALL: [Policy; 4] = [
        Policy::WaitDie,
        Policy::WoundWait,
        Policy::Lanes,
        Policy::Detect,
    ];

    /// The configuration name: `wait_die`, `wound_wait`, `lanes` or `detect`.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::WaitDie => "wait_die",
            Policy::WoundWait => "wound_wait",
            Policy::Lanes => "lanes",
            Policy::Detect => "detect",
        }
    }

    /// Parses a configuration name.
    ///
    /// # Errors
    /// `INVALID_CONFIG` for anything but `wait_die`, `wound_wait`, `lanes`, `detect`.
    pub fn parse(text: &str) -> Result<Policy, Error> {
        match text {
            "wait_die" => Ok(Policy::WaitDie),
            "wound_wait" => Ok(Policy::WoundWait),
            "lanes" => Ok(Policy::Lanes),
            "detect" => Ok(Policy::Detect),
            _ => Err(Error::new(
                ErrorCode::InvalidConfig,
                format!("unknown policy {text:?}: expected wait_die, wound_wait, lanes or detect"),
            )),
        }
    }
}

/// Everything that makes two kernels behave differently. Same config + same calls = same
/// outputs, on every host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Config {
    /// How conflicts are resolved (default `wait_die`, docs/SPEC.md §6).
    pub policy: Policy,
    /// Seed of the jitter generator (splitmix64, docs/SPEC.md §2; default 0).
    pub seed: u64,
    /// Lease TTL in milliseconds when a request gives none (default 60 000; 0 is
    /// `INVALID_CONFIG`; above `max_ttl_ms` it is clamped, docs/SPEC.md §13.3).
    pub default_ttl_ms: u64,
    /// Largest lease TTL in milliseconds: a longer requested TTL is clamped to it (default
    /// 300 000; 0 is `INVALID_CONFIG`, docs/SPEC.md §6).
    pub max_ttl_ms: u64,
    /// How long a WAIT lasts, in milliseconds, when a request gives no `wait_timeout_ms`
    /// (default 30 000); 0 makes such requests not wait (docs/SPEC.md §6).
    pub default_wait_timeout_ms: u64,
    /// Backoff base in milliseconds: `retry_after_ms = min(cap, base · 2^attempts) + jitter`,
    /// jitter in `[0, base)` (default 100, docs/SPEC.md §8).
    pub backoff_base_ms: u64,
    /// Cap in milliseconds of the exponential part of the backoff; the jitter comes on top
    /// (default 10 000, docs/SPEC.md §8).
    pub backoff_cap_ms: u64,
    /// How long a suspended session's leases are kept past a missed heartbeat, in
    /// milliseconds from the suspension (default 15 000; 0 adds no time, docs/SPEC.md §5).
    pub grace_ms: u64,
    /// Milliseconds after which a session with no lease and no ticket is closed (default
    /// 300 000, docs/SPEC.md §5). 0 = sessions are never closed for idleness.
    pub session_idle_ms: u64,
    /// Most leases held plus intents waiting in tickets per session; beyond it acquire is
    /// `QUOTA_EXCEEDED` (default 1 024, docs/SPEC.md §7).
    pub max_leases_per_session: u64,
    /// Longest a lease may live, in milliseconds from `acquired_at`, renewals included
    /// (docs/SPEC.md §7). 0 = unlimited (the default).
    pub max_lease_lifetime_ms: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            policy: Policy::WaitDie,
            seed: 0,
            default_ttl_ms: 60_000,
            max_ttl_ms: 300_000,
            default_wait_timeout_ms: 30_000,
            backoff_base_ms: 100,
            backoff_cap_ms: 10_000,
            grace_ms: 15_000,
            session_idle_ms: 300_000,
            max_leases_per_session: 1_024,
            max_lease_lifetime_ms: 0,
        }
    }
}

/// Declares the numeric fields once: the list hosts check names against, and the accessors.
macro_rules! numeric_fields {
    ($($field:ident),* $(,)?) => {
        impl Config {
            /// The name of every numeric field (every field but `policy`), in declaration
            /// order. Hosts take config names from this list (converted to their language's
            /// case), never from a copy of it.
            pub const NUMERIC_FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// The numeric field called `name` (snake_case), if there is one.
            #[must_use]
            pub fn number(&self, name: &str) -> Option<u64> {
                match name {
                    $(stringify!($field) => Some(self.$field),)*
                    _ => None,
                }
            }

            /// Sets the numeric field called `name` (snake_case).
            ///
            /// # Errors
            /// `INVALID_CONFIG` naming the field when there is no such numeric field; the
            /// config is then unchanged.
            pub fn set_number(&mut self, name: &str, value: u64) -> Result<(), Error> {
                match name {
                    $(stringify!($field) => self.$field = value,)*
                    _ => return Err(unknown_field(name)),
                }
                Ok(())
            }
        }
    };
}

numeric_fields!(
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
);

fn unknown_field(name: &str) -> Error {
    Error::new(
        ErrorCode::InvalidConfig,
        format!(
            "unknown config field {name:?}: the fields are policy, {}",
            Config::NUMERIC_FIELDS.join(", ")
        ),
    )
}

impl Config {
    /// Every field name: `policy`, then [`Config::NUMERIC_FIELDS`].
    pub fn field_names() -> impl Iterator<Item = &'static str> {
        core::iter::once("policy").chain(Config::NUMERIC_FIELDS.iter().copied())
    }

    /// Checks that every field can mean something.
    ///
    /// # Errors
    /// `INVALID_CONFIG` naming the field: `default_ttl_ms` or `max_ttl_ms` of 0.
    pub fn validate(&self) -> Result<(), Error> {
        for (name, value) in [
            ("default_ttl_ms", self.default_ttl_ms),
            ("max_ttl_ms", self.max_ttl_ms),
        ] {
            if value == 0 {
                return Err(Error::new(
                    ErrorCode::InvalidConfig,
                    format!("{name} must be at least 1 ms"),
                ));
            }
        }
        Ok(())
    }
}
