//! The kernel's one error type.
//!
//! Contract: every fallible operation returns [`Error`], which carries a stable [`ErrorCode`]
//! (numeric value and upper-case name never change once published) and a message telling the
//! caller what to fix. Codes are grouped in blocks: 1xx bad input, 2xx unknown identifiers,
//! 3xx state conflicts, 4xx limits. Bindings map the code to their language's native error.

use alloc::string::String;
use core::fmt;

macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident = $value:literal, $name:literal;)*) => {
        /// Stable error codes. The numeric values and names are part of the public contract.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(rename_all = "SCREAMING_SNAKE_CASE"))]
        #[repr(u32)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant = $value,)*
        }

        impl ErrorCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The stable upper-case name, e.g. `"INVALID_RESOURCE"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }

            /// The code whose [`name`](Self::name) is `name` (exact, upper case).
            pub fn from_name(name: &str) -> Option<ErrorCode> {
                match name {
                    $($name => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// A resource is not a valid `TYPE:/path` (docs/SPEC.md §3).
    InvalidResource = 100, "INVALID_RESOURCE";
    /// A predicate is not one of the six names (docs/SPEC.md §4).
    InvalidPredicate = 101, "INVALID_PREDICATE";
    /// A manifest has no intent or more than 256 (docs/SPEC.md §6).
    InvalidManifest = 102, "INVALID_MANIFEST";
    /// A requested `ttl_ms` of 0 (docs/SPEC.md §6).
    InvalidTtl = 103, "INVALID_TTL";
    /// A digest's version, agent, namespace or priority does not match the session's record,
    /// or its epoch is newer than the kernel's (docs/SPEC.md §5, §13.2).
    InvalidDigest = 104, "INVALID_DIGEST";
    /// An agent id that is not 1..=256 bytes of printable UTF-8 (docs/SPEC.md §5).
    InvalidAgentId = 105, "INVALID_AGENT_ID";
    /// A namespace that is not 1..=256 bytes of printable UTF-8 (docs/SPEC.md §5).
    InvalidNamespace = 106, "INVALID_NAMESPACE";
    /// A configuration that cannot mean anything: a zero `default_ttl_ms` or `max_ttl_ms`, an
    /// unknown policy or field name (docs/SPEC.md §13.1).
    InvalidConfig = 107, "INVALID_CONFIG";
    /// No open session has that id (closed, closed for idleness, or never opened).
    UnknownSession = 200, "UNKNOWN_SESSION";
    /// The lease was never issued, is another namespace's, or is an ended lease no longer
    /// remembered (docs/SPEC.md §12, §13.2).
    UnknownLease = 201, "UNKNOWN_LEASE";
    /// The ticket is not waiting (resolved, withdrawn or never issued) or is another
    /// namespace's (docs/SPEC.md §9, §13.2).
    UnknownTicket = 202, "UNKNOWN_TICKET";
    /// The lease or ticket belongs to another session of the same namespace (docs/SPEC.md §7).
    NotOwner = 300, "NOT_OWNER";
    /// Heartbeat: the lease expired and is never resurrected (docs/SPEC.md §7).
    LeaseExpired = 301, "LEASE_EXPIRED";
    /// Heartbeat: the lease was released (by its session or by a wound).
    LeaseReleased = 302, "LEASE_RELEASED";
    /// Under `lanes`, a session that holds or waits asked for more (docs/SPEC.md §6).
    HoldAndWait = 303, "HOLD_AND_WAIT";
    /// Heartbeat: the lease's expiry already equals its lifetime cap, `acquired_at +
    /// max_lease_lifetime_ms` (docs/SPEC.md §13.3).
    LifetimeExceeded = 304, "LIFETIME_EXCEEDED";
    /// The session would hold and wait for more than `max_leases_per_session` intents
    /// (docs/SPEC.md §7).
    QuotaExceeded = 400, "QUOTA_EXCEEDED";
}

impl ErrorCode {
    /// The numeric code.
    pub const fn code(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed operation: a stable code and a message for a human.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Error {
    /// What went wrong, machine-readable.
    pub code: ErrorCode,
    /// What went wrong and what to fix, human-readable.
    pub message: String,
}

impl Error {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl core::error::Error for Error {}
