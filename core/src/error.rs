//! The kernel's one error type.
//!
//! Contract: every fallible operation returns [`Error`], which carries a stable [`ErrorCode`]
//! (numeric value and upper-case name never change once published) and a message telling the
//! caller what to fix. Codes are grouped in blocks: 1xx bad input, 2xx unknown identifiers,
//! 3xx state conflicts, 4xx limits. Bindings map the code to their language's native error.

use alloc::string::String;
use core::fmt;

macro_rules! error_codes {
    ($($variant:ident = $value:literal, $name:literal;)*) => {
        /// Stable error codes. The numeric values and names are part of the public contract.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[cfg_attr(feature = "serde", serde(rename_all = "SCREAMING_SNAKE_CASE"))]
        #[repr(u32)]
        pub enum ErrorCode {
            $($variant = $value,)*
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
    InvalidResource = 100, "INVALID_RESOURCE";
    InvalidPredicate = 101, "INVALID_PREDICATE";
    InvalidManifest = 102, "INVALID_MANIFEST";
    InvalidTtl = 103, "INVALID_TTL";
    InvalidDigest = 104, "INVALID_DIGEST";
    InvalidAgentId = 105, "INVALID_AGENT_ID";
    InvalidNamespace = 106, "INVALID_NAMESPACE";
    InvalidConfig = 107, "INVALID_CONFIG";
    UnknownSession = 200, "UNKNOWN_SESSION";
    UnknownLease = 201, "UNKNOWN_LEASE";
    UnknownTicket = 202, "UNKNOWN_TICKET";
    NotOwner = 300, "NOT_OWNER";
    LeaseExpired = 301, "LEASE_EXPIRED";
    LeaseReleased = 302, "LEASE_RELEASED";
    HoldAndWait = 303, "HOLD_AND_WAIT";
    LifetimeExceeded = 304, "LIFETIME_EXCEEDED";
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
