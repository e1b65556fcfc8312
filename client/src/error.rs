//! The friendly client's errors: one enum, every variant with a stable name
//! ([`Error::name`]) and a message that says what happened and what to do.
//!
//! Contract: bad input (a URL, an intent, a TTL, a fence file) is refused with its own
//! variant before any request is sent; a server's refusal keeps the server's error name
//! (`UNKNOWN_SESSION`, `INVALID_RESOURCE`, ...); `Died` and `Timeout` are the outcomes the
//! core's [`klock_core::client::Acquisition`] decides, with the sessions that were in the way.

use crate::describe::describe_blockers;
use crate::transport::Failure;
use klock_core::client::TimedOut;
use klock_core::Blocker;
use std::fmt;
use std::path::PathBuf;

/// What went wrong.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The server URL is not `http://HOST:PORT` or `https://HOST:PORT`.
    BadUrl(String),
    /// Refused before any request: an intent the kernel would not read, no intent, a TTL of
    /// zero, a CA bundle that is not one. The message names the value.
    InvalidInput(String),
    /// The server could not be reached in time (nothing listens, the connection broke, no
    /// answer within the request's bound).
    Unreachable(String),
    /// The server answered with an error: its HTTP status, stable name and message.
    Refused {
        status: u16,
        name: String,
        message: String,
    },
    /// Wait-Die refused the request while this session holds other leases: release them
    /// (drop their guards), sleep `retry_after_ms`, and ask again for everything at once.
    Died {
        retry_after_ms: u64,
        blockers: Vec<Blocker>,
    },
    /// The lease's timeout passed before it was granted.
    Timeout {
        why: TimedOut,
        blockers: Vec<Blocker>,
    },
    /// A fenced write carried a fence older than one the file accepted: the lease was lost,
    /// and a newer holder wrote since.
    StaleFence {
        path: PathBuf,
        fence: u64,
        stored: u64,
    },
    /// A fenced write could not read or write its files.
    Io { path: PathBuf, message: String },
}

impl Error {
    /// The stable name: `BAD_URL`, `INVALID_INPUT`, `UNREACHABLE`, the server's own name for
    /// a refusal, `DIED`, `TIMEOUT`, `STALE_FENCE` or `IO`.
    pub fn name(&self) -> &str {
        match self {
            Error::BadUrl(_) => "BAD_URL",
            Error::InvalidInput(_) => "INVALID_INPUT",
            Error::Unreachable(_) => "UNREACHABLE",
            Error::Refused { name, .. } => name,
            Error::Died { .. } => "DIED",
            Error::Timeout { .. } => "TIMEOUT",
            Error::StaleFence { .. } => "STALE_FENCE",
            Error::Io { .. } => "IO",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadUrl(why) | Error::InvalidInput(why) | Error::Unreachable(why) => {
                f.write_str(why)
            }
            Error::Refused { .. } => {
                let failure = Failure::from(self.clone());
                write!(f, "{failure}")
            }
            Error::Died {
                retry_after_ms,
                blockers,
            } => write!(
                f,
                "DIED: {} has priority, and this session holds other leases: release them, then after {retry_after_ms} ms ask again for everything at once",
                describe_blockers(blockers)
            ),
            Error::Timeout { why, blockers } => {
                let how = match why {
                    TimedOut::NoWait => "not granted at once, and the timeout was 0",
                    TimedOut::WaitEnded => "the wait ran out",
                    TimedOut::RetryTooLate => {
                        "the kernel's backoff before the next try would end after the timeout"
                    }
                };
                write!(f, "TIMEOUT: {how}; held by {}", describe_blockers(blockers))
            }
            Error::StaleFence {
                path,
                fence,
                stored,
            } => write!(
                f,
                "STALE_FENCE: {}: fence {fence} is older than the fence {stored} this file has accepted (the lease was lost; another holder wrote since)",
                path.display()
            ),
            Error::Io { path, message } => write!(f, "{}: {message}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

impl From<Failure> for Error {
    fn from(failure: Failure) -> Error {
        match failure {
            Failure::Unreachable(why) => Error::Unreachable(why),
            Failure::Refused {
                status,
                name,
                message,
            } => Error::Refused {
                status,
                name,
                message,
            },
        }
    }
}

impl From<Error> for Failure {
    /// For the agent tools, which speak [`Failure`]: what is not the server's refusal is
    /// told as a refusal with the error's own name (status 0: no answer carried it).
    fn from(error: Error) -> Failure {
        match error {
            Error::Unreachable(why) => Failure::Unreachable(why),
            Error::Refused {
                status,
                name,
                message,
            } => Failure::Refused {
                status,
                name,
                message,
            },
            other => Failure::Refused {
                status: 0,
                name: other.name().to_owned(),
                message: other.to_string(),
            },
        }
    }
}
