//! Result codes, the per-thread error message and the panic boundary.
//!
//! Contract: [`klock_status`] mirrors `klock_core::ErrorCode` number for number and name for
//! name (checked at compile time below) and adds the 5xx block for the outcomes of the remote
//! client and the 9xx block for problems of the C boundary. Every exported function runs its
//! body through [`ffi`] (or [`ffi_void`] for functions that return nothing), which catches
//! panics, stores the message of a failure in a per-thread slot and clears it on success.

use klock_core::ErrorCode;
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every fallible function: 0 on success, otherwise a code grouped in blocks
/// (1xx bad input, 2xx unknown identifiers, 3xx state conflicts, 4xx limits, 5xx outcomes of
/// the remote client, 9xx problems of the C boundary). Codes below 500 equal the kernel's
/// error codes. Numeric values and names (klock_status_name()) never change once published.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum klock_status {
    /// Success.
    KLOCK_OK = 0,
    /// A resource is not `TYPE:/path` (bad TYPE, relative path, `..`, control character, too long).
    KLOCK_INVALID_RESOURCE = 100,
    /// A predicate is not one of the six names.
    KLOCK_INVALID_PREDICATE = 101,
    /// A manifest has 0 or more than 256 intents.
    KLOCK_INVALID_MANIFEST = 102,
    /// `ttl_ms` is 0.
    KLOCK_INVALID_TTL = 103,
    /// A digest does not match the kernel's record of its session.
    KLOCK_INVALID_DIGEST = 104,
    /// An agent id is empty, longer than 256 bytes, or has a control character.
    KLOCK_INVALID_AGENT_ID = 105,
    /// A namespace is empty, longer than 256 bytes, or has a control character.
    KLOCK_INVALID_NAMESPACE = 106,
    /// A configuration value cannot mean anything (a zero TTL, an unknown policy).
    KLOCK_INVALID_CONFIG = 107,
    /// No open session has this id (closed, closed for idleness, or never opened).
    KLOCK_UNKNOWN_SESSION = 200,
    /// No lease with this id is known to the session's namespace.
    KLOCK_UNKNOWN_LEASE = 201,
    /// The ticket is not waiting (resolved, withdrawn, or never issued).
    KLOCK_UNKNOWN_TICKET = 202,
    /// The lease or ticket belongs to another session.
    KLOCK_NOT_OWNER = 300,
    /// The lease has expired (heartbeat outcome).
    KLOCK_LEASE_EXPIRED = 301,
    /// The lease was released (heartbeat outcome).
    KLOCK_LEASE_RELEASED = 302,
    /// Under the `lanes` policy the session already holds or waits: ask for everything at once.
    KLOCK_HOLD_AND_WAIT = 303,
    /// The lease reached its lifetime cap and cannot be renewed (heartbeat outcome).
    KLOCK_LIFETIME_EXCEEDED = 304,
    /// A quota (`max_leases_per_session`) would be exceeded.
    KLOCK_QUOTA_EXCEEDED = 400,
    /// Remote client: the server URL is not `http://HOST:PORT` or `https://HOST:PORT`.
    KLOCK_BAD_URL = 500,
    /// Remote client: the server could not be reached in time (nothing listens, the
    /// connection broke, no answer within the request's bound).
    KLOCK_UNREACHABLE = 501,
    /// Remote client: the server refused with an error that has no kernel status (e.g.
    /// `UNAUTHORIZED`, `RATE_LIMITED`); the message starts with the server's stable name.
    KLOCK_REFUSED = 502,
    /// Remote client: Wait-Die refused the acquire while the session holds other leases:
    /// release them, wait the reported `retry_after_ms`, ask again for everything at once.
    KLOCK_DIED = 503,
    /// Remote client: the acquire's timeout passed before the grant.
    KLOCK_TIMEOUT = 504,
    /// Remote client: a held lease was lost (expired, wounded, its session closed, or no
    /// renewal reached the server in time); the message names the reason.
    KLOCK_LEASE_LOST = 505,
    /// A required pointer argument is NULL.
    KLOCK_NULL_POINTER = 900,
    /// A string argument is not valid UTF-8.
    KLOCK_INVALID_UTF8 = 901,
    /// The caller's buffer was too small: the text was truncated, the required size reported.
    KLOCK_BUFFER_TOO_SMALL = 902,
    /// An argument is out of its domain at the C level (e.g. malformed digest JSON).
    KLOCK_INVALID_ARGUMENT = 903,
    /// The library panicked (a bug): the call was abandoned and the kernel is poisoned.
    KLOCK_PANIC = 999,
}

use klock_status::*;

/// Pairs each kernel-mirroring status with the kernel's code; checks at compile time that the
/// number is the code's and the spelling is `KLOCK_` + the code's name, and generates the
/// conversion, whose match fails to compile when the kernel gains a code.
macro_rules! mirror_kernel_codes {
    ($($status:ident = $code:ident;)*) => {
        const _: () = {
            $(
                assert!($status as u32 == ErrorCode::$code as u32, concat!(stringify!($status), ": number differs from the kernel"));
                assert!(crate::names::prefixed(stringify!($status), "KLOCK_", ErrorCode::$code.name()), concat!(stringify!($status), ": name differs from the kernel"));
            )*
        };

        impl From<ErrorCode> for klock_status {
            fn from(code: ErrorCode) -> klock_status {
                match code {
                    $(ErrorCode::$code => $status,)*
                }
            }
        }
    };
}

mirror_kernel_codes! {
    KLOCK_INVALID_RESOURCE = InvalidResource;
    KLOCK_INVALID_PREDICATE = InvalidPredicate;
    KLOCK_INVALID_MANIFEST = InvalidManifest;
    KLOCK_INVALID_TTL = InvalidTtl;
    KLOCK_INVALID_DIGEST = InvalidDigest;
    KLOCK_INVALID_AGENT_ID = InvalidAgentId;
    KLOCK_INVALID_NAMESPACE = InvalidNamespace;
    KLOCK_INVALID_CONFIG = InvalidConfig;
    KLOCK_UNKNOWN_SESSION = UnknownSession;
    KLOCK_UNKNOWN_LEASE = UnknownLease;
    KLOCK_UNKNOWN_TICKET = UnknownTicket;
    KLOCK_NOT_OWNER = NotOwner;
    KLOCK_LEASE_EXPIRED = LeaseExpired;
    KLOCK_LEASE_RELEASED = LeaseReleased;
    KLOCK_HOLD_AND_WAIT = HoldAndWait;
    KLOCK_LIFETIME_EXCEEDED = LifetimeExceeded;
    KLOCK_QUOTA_EXCEEDED = QuotaExceeded;
}

/// The NUL-terminated name of a status: the kernel's name for its codes, the C boundary's own
/// for the others.
fn status_name(status: u32) -> *const c_char {
    if let Some(name) = crate::names::error_name(status) {
        return name;
    }
    let name: &'static CStr = match status {
        0 => c"OK",
        500 => c"BAD_URL",
        501 => c"UNREACHABLE",
        502 => c"REFUSED",
        503 => c"DIED",
        504 => c"TIMEOUT",
        505 => c"LEASE_LOST",
        900 => c"NULL_POINTER",
        901 => c"INVALID_UTF8",
        902 => c"BUFFER_TOO_SMALL",
        903 => c"INVALID_ARGUMENT",
        999 => c"PANIC",
        _ => c"UNKNOWN_STATUS",
    };
    name.as_ptr()
}

/// A failed call: its status and a message saying what to fix.
#[derive(Debug)]
pub struct Failure {
    pub status: klock_status,
    pub message: String,
}

impl Failure {
    pub fn new(status: klock_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub fn null(what: &str) -> Failure {
        Failure::new(KLOCK_NULL_POINTER, format!("{what} is NULL"))
    }
}

impl From<klock_core::Error> for Failure {
    fn from(e: klock_core::Error) -> Failure {
        Failure {
            status: e.code.into(),
            message: e.message,
        }
    }
}

pub type Outcome<T = ()> = Result<T, Failure>;

thread_local! {
    /// The status and message of the last failed call on this thread (KLOCK_OK and "" after
    /// a success). The String keeps its capacity, so a steady state allocates nothing.
    static LAST_ERROR: RefCell<(klock_status, String)> = const { RefCell::new((KLOCK_OK, String::new())) };
}

fn remember(status: klock_status, message: &str) {
    // try_with: during thread teardown the slot may be gone; losing a message beats aborting.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            slot.0 = status;
            slot.1.clear();
            slot.1.push_str(message);
        }
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let detail = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| String::from("(no message)"));
    format!("klock panicked (a bug; please report it): {detail}")
}

/// The panic boundary of a fallible exported function: runs `body`, maps its failure or panic
/// to a status, and records the message for klock_last_error_message().
pub fn ffi(body: impl FnOnce() -> Outcome) -> klock_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            remember(KLOCK_OK, "");
            KLOCK_OK
        }
        Ok(Err(failure)) => {
            remember(failure.status, &failure.message);
            failure.status
        }
        Err(payload) => {
            let message = panic_message(&*payload);
            // Dropping a payload can itself panic; never let that escape either.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            remember(KLOCK_PANIC, &message);
            KLOCK_PANIC
        }
    }
}

/// The panic boundary of an infallible exported function (the `_free` functions): a panic is
/// swallowed after recording its message, and `fallback` is returned.
pub fn ffi_void<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            let message = panic_message(&*payload);
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            remember(KLOCK_PANIC, &message);
            fallback
        }
    }
}

/// The stable upper-case name of a status code ("OK", "INVALID_RESOURCE", ..., "PANIC"), or
/// "UNKNOWN_STATUS" for a number that is not a status.
///
/// Ownership: the returned string is static; never free it. Thread-safety: any thread.
/// Does not touch the per-thread error message.
#[no_mangle]
pub extern "C" fn klock_status_name(status: u32) -> *const c_char {
    ffi_void(c"UNKNOWN_STATUS".as_ptr(), || status_name(status))
}

/// The status of the last call on this thread that set one: the failing call's status, or
/// KLOCK_OK after a success.
///
/// Thread-safety: per thread. Does not change the stored message.
#[no_mangle]
pub extern "C" fn klock_last_error_status() -> klock_status {
    ffi_void(KLOCK_PANIC, || {
        LAST_ERROR
            .try_with(|slot| slot.try_borrow().map_or(KLOCK_OK, |s| s.0))
            .unwrap_or(KLOCK_OK)
    })
}

/// Copies the message of the last failed call on this thread ("" after a success) into
/// `buffer` of `buffer_len` bytes, always NUL-terminated when `buffer_len > 0`. A message
/// that does not fit is truncated at a UTF-8 character boundary.
///
/// `required` (may be NULL) receives the size needed for the whole message, NUL included.
/// Returns KLOCK_OK when it fit, KLOCK_BUFFER_TOO_SMALL when truncated (`buffer` may be NULL
/// with `buffer_len` 0 to ask for the size only), KLOCK_NULL_POINTER when `buffer` is NULL
/// but `buffer_len` is not 0.
///
/// Ownership: `buffer` is the caller's. Thread-safety: per thread. Reading the message does
/// not change it (not even on KLOCK_BUFFER_TOO_SMALL).
///
/// # Safety
/// `buffer` must be NULL or point to `buffer_len` writable bytes; `required` must be NULL or
/// point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn klock_last_error_message(
    buffer: *mut c_char,
    buffer_len: usize,
    required: *mut usize,
) -> klock_status {
    ffi_void(KLOCK_PANIC, || {
        let message = LAST_ERROR
            .try_with(|slot| slot.try_borrow().map(|s| s.1.clone()).unwrap_or_default())
            .unwrap_or_default();
        // SAFETY: the caller passes NULL or valid pointers (see # Safety).
        unsafe { crate::convert::write_text(&message, buffer, buffer_len, required) }
    })
}

/// The version of the library, e.g. "0.1.0".
///
/// Ownership: static; never free it. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn klock_version() -> *const c_char {
    ffi_void(c"".as_ptr(), || {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    })
}

#[cfg(test)]
mod tests {
    //! The panic boundary, proven from Rust: no exported function is test-only any more.
    use super::*;
    use crate::api::{klock_kernel_advance, klock_kernel_free, klock_kernel_new};
    use crate::api::{klock_kernel_poll_event, klock_session_open};
    use crate::types::{klock_config, klock_event, klock_session_info};
    use std::ptr;

    fn last_message() -> String {
        let mut buffer = [0 as c_char; 512];
        // SAFETY: a writable buffer of its length; `required` may be NULL.
        let status =
            unsafe { klock_last_error_message(buffer.as_mut_ptr(), buffer.len(), ptr::null_mut()) };
        assert_eq!(status, KLOCK_OK);
        // SAFETY: klock_last_error_message NUL-terminates what it writes.
        unsafe { CStr::from_ptr(buffer.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_klock_panic_and_its_message() {
        assert_eq!(ffi(|| panic!("boom")), KLOCK_PANIC);
        assert_eq!(klock_last_error_status(), KLOCK_PANIC);
        let message = last_message();
        assert!(
            message.contains("panicked") && message.contains("boom"),
            "{message}"
        );
        assert_eq!(ffi(|| Ok(())), KLOCK_OK);
        assert_eq!(
            (klock_last_error_status(), last_message()),
            (KLOCK_OK, String::new())
        );

        assert_eq!(ffi_void(7, || panic!("in a _free")), 7);
        assert_eq!(klock_last_error_status(), KLOCK_PANIC);
    }

    #[test]
    fn a_payload_that_panics_when_dropped_is_contained_too() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("dropping the payload");
            }
        }
        assert_eq!(ffi(|| std::panic::panic_any(Bomb)), KLOCK_PANIC);
        assert!(last_message().contains("(no message)"));
        assert_eq!(ffi_void((), || std::panic::panic_any(Bomb)), ());
    }

    #[test]
    fn a_panic_inside_a_kernel_poisons_it_and_it_can_still_be_freed() {
        let mut config: klock_config = klock_config::from(&klock_core::Config::default());
        config.seed = 1;
        let mut kernel = ptr::null_mut();
        // SAFETY (all blocks): valid pointers to locals; `kernel` is live until freed below.
        assert_eq!(unsafe { klock_kernel_new(&config, &mut kernel) }, KLOCK_OK);
        let mut info = klock_session_info::from(&klock_core::SessionInfo {
            session_id: klock_core::SessionId(0),
            agent_id: String::new(),
            namespace: String::new(),
            priority: 0,
            epoch: 0,
        });
        let open = |kernel, agent: &CStr, info: &mut klock_session_info| unsafe {
            klock_session_open(kernel, agent.as_ptr(), ptr::null(), 1, info)
        };
        assert_eq!(open(kernel, c"alice", &mut info), KLOCK_OK);

        // What a bug in the kernel would do: panic while the handle's lock is held.
        let handle = unsafe { &*kernel };
        assert_eq!(
            ffi(|| {
                let _locked = handle.lock()?;
                panic!("a bug inside the kernel")
            }),
            KLOCK_PANIC
        );
        assert_eq!(unsafe { klock_kernel_advance(kernel, 2) }, KLOCK_PANIC);
        assert!(last_message().contains("poisoned"));
        assert_eq!(open(kernel, c"bob", &mut info), KLOCK_PANIC);
        let mut event: *mut klock_event = ptr::NonNull::dangling().as_ptr();
        assert_eq!(
            unsafe { klock_kernel_poll_event(kernel, &mut event) },
            KLOCK_PANIC
        );
        assert!(event.is_null(), "a failed poll leaves nothing to free");
        unsafe { klock_kernel_free(kernel) };
    }

    #[test]
    fn every_status_is_named_after_its_variant() {
        let all = [
            KLOCK_OK,
            KLOCK_INVALID_RESOURCE,
            KLOCK_INVALID_PREDICATE,
            KLOCK_INVALID_MANIFEST,
            KLOCK_INVALID_TTL,
            KLOCK_INVALID_DIGEST,
            KLOCK_INVALID_AGENT_ID,
            KLOCK_INVALID_NAMESPACE,
            KLOCK_INVALID_CONFIG,
            KLOCK_UNKNOWN_SESSION,
            KLOCK_UNKNOWN_LEASE,
            KLOCK_UNKNOWN_TICKET,
            KLOCK_NOT_OWNER,
            KLOCK_LEASE_EXPIRED,
            KLOCK_LEASE_RELEASED,
            KLOCK_HOLD_AND_WAIT,
            KLOCK_LIFETIME_EXCEEDED,
            KLOCK_QUOTA_EXCEEDED,
            KLOCK_BAD_URL,
            KLOCK_UNREACHABLE,
            KLOCK_REFUSED,
            KLOCK_DIED,
            KLOCK_TIMEOUT,
            KLOCK_LEASE_LOST,
            KLOCK_NULL_POINTER,
            KLOCK_INVALID_UTF8,
            KLOCK_BUFFER_TOO_SMALL,
            KLOCK_INVALID_ARGUMENT,
            KLOCK_PANIC,
        ];
        for status in all {
            // SAFETY: klock_status_name returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(klock_status_name(status as u32)) };
            assert_eq!(
                format!("KLOCK_{}", name.to_str().unwrap()),
                format!("{status:?}")
            );
        }
        assert_eq!(all.len(), ErrorCode::ALL.len() + 12);
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(klock_status_name(5)) };
        assert_eq!(unknown, c"UNKNOWN_STATUS");
    }
}
