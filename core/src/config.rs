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
}

impl Policy {
    /// The configuration name: `wait_die`, `wound_wait` or `lanes`.
    pub const fn name(self) -> &'static str {
        match self {
            Policy::WaitDie => "wait_die",
            Policy::WoundWait => "wound_wait",
            Policy::Lanes => "lanes",
        }
    }

    /// Parses a configuration name.
    ///
    /// # Errors
    /// `INVALID_CONFIG` for anything but `wait_die`, `wound_wait`, `lanes`.
    pub fn parse(text: &str) -> Result<Policy, Error> {
        match text {
            "wait_die" => Ok(Policy::WaitDie),
            "wound_wait" => Ok(Policy::WoundWait),
            "lanes" => Ok(Policy::Lanes),
            _ => Err(Error::new(
                ErrorCode::InvalidConfig,
                format!("unknown policy {text:?}: expected wait_die, wound_wait or lanes"),
            )),
        }
    }
}

/// Everything that makes two kernels behave differently. Same config + same calls = same
/// outputs, on every host.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Config {
    pub policy: Policy,
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
