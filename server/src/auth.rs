//! Bearer tokens, roles, namespaces and per-token limits.
//!
//! Contract:
//! - With no token file, the server serves loopback only and asks for no bearer token (one user
//!   on one laptop needs no setup); session tokens still guard every session.
//! - With a token file (`--tokens FILE`), every route but `/v1/health` needs
//!   `Authorization: Bearer <secret>`. The file holds each token's SHA-256, never the secret;
//!   secrets are compared as digests, in constant time, against every entry.
//! - A token grants a role on a set of namespaces (`"*"`: all). `observer` reads (watch,
//!   stats, resource state, deadline, version, metrics); `agent` also opens sessions and
//!   works with leases; `admin` also settles time (`/v1/advance`).
//!   The path's namespace is checked before any kernel call.
//! - Per token: at most `max_long_polls` requests that wait (held acquires, ticket and event
//!   long-polls, streams) at once, and at most `rate_per_second` requests a second (a token
//!   bucket with a burst of one second's worth); over either limit the answer is 429. Without
//!   a token file the same limits apply to all callers together, with the defaults below.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a role may do, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Observer,
    Agent,
    Admin,
}

/// Long-polls at once, per token (or for everyone without a token file), by default.
pub const DEFAULT_LONG_POLLS: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    role: Role,
    namespaces: Vec<String>,
    max_long_polls: Option<usize>,
    rate_per_second: Option<u32>,
}

/// One configured token, with its live limits.
pub struct Grant {
    pub name: String,
    /// The name again, shared: who asks, in idempotency scopes (no copy per request).
    pub id: Arc<str>,
    digest: [u8; 32],
    pub role: Role,
    namespaces: Vec<String>,
    limits: Limits,
}

impl Grant {
    /// Whether the token may act in `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespaces.iter().any(|n| n == "*" || n == namespace)
    }

    /// Whether the token may act in every namespace (`"*"`).
    pub fn covers_all(&self) -> bool {
        self.namespaces.iter().any(|n| n == "*")
    }
}

/// Live limits of one caller.
pub struct Limits {
    long_polls: PollSlots,
    rate: Option<Mutex<Bucket>>,
}

/// A caller's long-poll slots (cheap to clone: requests carry them to their handler).
#[derive(Clone)]
pub struct PollSlots {
    max: usize,
    taken: Arc<AtomicUsize>,
}

impl PollSlots {
    /// A slot, or `None` when all are taken.
    pub fn take(&self) -> Option<LongPoll> {
        let taken = self.taken.fetch_add(1, Ordering::SeqCst);
        if taken >= self.max {
            self.taken.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(LongPoll(Arc::clone(&self.taken)))
    }

    /// A slot for a stream that outlives its request (SSE): taken without a check while the
    /// request still holds the slot the access layer took for it, which is freed when the handler
    /// returns, so the stream keeps counting against the limit for as long as it is open.
    pub fn hand_over(&self) -> LongPoll {
        self.taken.fetch_add(1, Ordering::SeqCst);
        LongPoll(Arc::clone(&self.taken))
    }

    /// The most long-polls at once.
    pub fn max(&self) -> usize {
        self.max
    }
}

struct Bucket {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

/// Held while a long-poll runs; frees its slot when dropped.
pub struct LongPoll(Arc<AtomicUsize>);

impl Drop for LongPoll {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Limits {
    fn new(max_long_polls: usize, rate_per_second: Option<u32>) -> Limits {
        Limits {
            long_polls: PollSlots {
                max: max_long_polls,
                taken: Arc::new(AtomicUsize::new(0)),
            },
            rate: rate_per_second.map(|r| {
                Mutex::new(Bucket {
                    per_second: f64::from(r),
                    tokens: f64::from(r),
                    at: Instant::now(),
                })
            }),
        }
    }

    /// Takes one request from the bucket; false when over the rate.
    pub fn admit(&self) -> bool {
        let Some(bucket) = &self.rate else {
            return true;
        };
        let mut b = bucket.lock().expect("rate bucket lock");
        let now = Instant::now();
        let refill = now.duration_since(b.at).as_secs_f64() * b.per_second;
        b.tokens = (b.tokens + refill).min(b.per_second.max(1.0));
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The caller's long-poll slots.
    pub fn long_polls(&self) -> &PollSlots {
        &self.long_polls
    }
}

/// The server's access rules.
pub struct Auth {
    grants: Vec<Grant>,
    /// The limits of everyone together when no token file is configured.
    open: Limits,
}

/// Who a request is.
pub enum Caller<'a> {
    /// No token file: anyone on loopback.
    Local(&'a Limits),
    Token(&'a Grant),
}

impl Caller<'_> {
    /// The caller's live limits.
    pub fn limits(&self) -> &Limits {
        match self {
            Caller::Local(l) => l,
            Caller::Token(g) => &g.limits,
        }
    }
}

/// The credentials of an `Authorization: Bearer <token>` header. The scheme is matched without
/// regard to case (RFC 7235 §2.1), and spaces around the token are ignored.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, rest) = header.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// The SHA-256 of a secret.
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Lower-case hex of bytes (a digest, a fresh secret): one allocation, digits from a table
/// (it runs on every request naming a session, for its token's digest).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0x0f)]);
    }
    // Only ASCII digits were pushed.
    String::from_utf8(out).unwrap_or_default()
}

/// Equality of two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// No token file: loopback callers, no bearer tokens.
    pub fn open() -> Auth {
        Auth {
            grants: Vec::new(),
            open: Limits::new(DEFAULT_LONG_POLLS, None),
        }
    }

    /// The rules of a token file's text.
    ///
    /// # Errors
    /// The text is not a token file, or an entry is invalid (named in the message).
    pub fn from_json(text: &str) -> Result<Auth, String> {
        let file: TokenFile =
            serde_json::from_str(text).map_err(|e| format!("the token file: {e}"))?;
        if file.tokens.is_empty() {
            return Err(String::from("the token file lists no token"));
        }
        let mut grants: Vec<Grant> = Vec::new();
        for t in file.tokens {
            let what = format!("token {:?}", t.name);
            let bytes = (t.sha256.len() == 64)
                .then(|| {
                    (0..32)
                        .map(|i| u8::from_str_radix(&t.sha256[2 * i..2 * i + 2], 16).ok())
                        .collect::<Option<Vec<u8>>>()
                })
                .flatten()
                .ok_or_else(|| {
                    format!("{what}: sha256 must be 64 hex digits (klock token-hash prints it)")
                })?;
            if t.namespaces.is_empty() {
                return Err(format!(
                    "{what}: namespaces is empty; name some, or \"*\" for all"
                ));
            }
            if t.max_long_polls == Some(0) || t.rate_per_second == Some(0) {
                return Err(format!(
                    "{what}: a limit of 0 would refuse everything; omit it for the default"
                ));
            }
            if grants.iter().any(|g| g.name == t.name) {
                return Err(format!("{what} is listed twice"));
            }
            let mut digest = [0u8; 32];
            digest.copy_from_slice(&bytes);
            grants.push(Grant {
                id: Arc::from(t.name.as_str()),
                name: t.name,
                digest,
                role: t.role,
                namespaces: t.namespaces,
                limits: Limits::new(
                    t.max_long_polls.unwrap_or(DEFAULT_LONG_POLLS),
                    t.rate_per_second,
                ),
            });
        }
        Ok(Auth {
            grants,
            open: Limits::new(DEFAULT_LONG_POLLS, None),
        })
    }

    /// Whether bearer tokens are required.
    pub fn required(&self) -> bool {
        !self.grants.is_empty()
    }

    /// The caller a request's `Authorization` header makes it.
    ///
    /// # Errors
    /// A message for a missing or unknown token (a 401).
    pub fn identify(&self, authorization: Option<&str>) -> Result<Caller<'_>, &'static str> {
        if !self.required() {
            return Ok(Caller::Local(&self.open));
        }
        let secret = authorization
            .and_then(bearer)
            .ok_or("this server needs a bearer token: send Authorization: Bearer <token>")?;
        let given = digest(secret);
        // Every entry is compared, so the time does not tell which one matched.
        let mut found = None;
        for g in &self.grants {
            if constant_time_eq(&given, &g.digest) {
                found = Some(g);
            }
        }
        found
            .map(Caller::Token)
            .ok_or("the bearer token is not one this server knows")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lower_case_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff, 0x10]), "000fa5ff10");
        let d = digest("secret");
        let slow: String = d.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&d), slow);
    }
}
