//! Result codes, the per-thread error message and the panic boundary.
//!
//! Contract: [`klock_status`] mirrors `klock_core::ErrorCode` number for number and name for
//! name (checked at compile time below) and adds the 9xx block for problems of the C boundary.
//! Every exported function runs its body through [`ffi`] (or [`ffi_void`] for functions
//! that return nothing), which catches panics, stores the message of a failure in a
//! per-thread slot and clears it on success.

use klock_core::ErrorCode;
use std::any::Any;
use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every fallible function: 0 on success, otherwise a code grouped in blocks
/// (1xx bad input, 2xx unknown identifiers, 3xx state conflicts, 4xx limits, 9xx problems of
/// the C boundary). Codes below 900 equal the kernel's error codes. Numeric values and names
/// (klock_status_name()) never change once published.
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

/// Pairs each kernel-mirroring status with the kernel's code; checks numbers and names at
/// compile time and generates the conversions, so the two enums cannot drift apart.
macro_rules! mirror_kernel_codes {
    ($($status:ident = $code:ident, $name:literal;)*) => {
        const _: () = {
            $(
                assert!($status as u32 == ErrorCode::$code as u32, concat!(stringify!($status), ": number differs from the kernel"));
                assert!(same_text(ErrorCode::$code.name(), $name), concat!(stringify!($status), ": name differs from the kernel"));
            )*
        };

        impl From<ErrorCode> for klock_status {
            fn from(code: ErrorCode) -> klock_status {
                match code {
                    $(ErrorCode::$code => $status,)*
                }
            }
        }

        /// The NUL-terminated name of a status.
        fn status_name(status: u32) -> &'static str {
            $(if status == $status as u32 {
                return concat!($name, "\0");
            })*
            match status {
                0 => "OK\0",
                900 => "NULL_POINTER\0",
                901 => "INVALID_UTF8\0",
                902 => "BUFFER_TOO_SMALL\0",
                903 => "INVALID_ARGUMENT\0",
                999 => "PANIC\0",
                _ => "UNKNOWN_STATUS\0",
            }
        }
    };
}

const fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

mirror_kernel_codes! {
    KLOCK_INVALID_RESOURCE = InvalidResource, "INVALID_RESOURCE";
    KLOCK_INVALID_PREDICATE = InvalidPredicate, "INVALID_PREDICATE";
    KLOCK_INVALID_MANIFEST = InvalidManifest, "INVALID_MANIFEST";
    KLOCK_INVALID_TTL = InvalidTtl, "INVALID_TTL";
    KLOCK_INVALID_DIGEST = InvalidDigest, "INVALID_DIGEST";
    KLOCK_INVALID_AGENT_ID = InvalidAgentId, "INVALID_AGENT_ID";
    KLOCK_INVALID_NAMESPACE = InvalidNamespace, "INVALID_NAMESPACE";
    KLOCK_INVALID_CONFIG = InvalidConfig, "INVALID_CONFIG";
    KLOCK_UNKNOWN_SESSION = UnknownSession, "UNKNOWN_SESSION";
    KLOCK_UNKNOWN_LEASE = UnknownLease, "UNKNOWN_LEASE";
    KLOCK_UNKNOWN_TICKET = UnknownTicket, "UNKNOWN_TICKET";
    KLOCK_NOT_OWNER = NotOwner, "NOT_OWNER";
    KLOCK_LEASE_EXPIRED = LeaseExpired, "LEASE_EXPIRED";
    KLOCK_LEASE_RELEASED = LeaseReleased, "LEASE_RELEASED";
    KLOCK_HOLD_AND_WAIT = HoldAndWait, "HOLD_AND_WAIT";
    KLOCK_LIFETIME_EXCEEDED = LifetimeExceeded, "LIFETIME_EXCEEDED";
    KLOCK_QUOTA_EXCEEDED = QuotaExceeded, "QUOTA_EXCEEDED";
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
    ffi_void(c"UNKNOWN_STATUS".as_ptr(), || {
        status_name(status).as_ptr().cast()
    })
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

/// Exists only so the C tests can prove the panic boundary: panics inside the boundary
/// (with the kernel's lock held when `kernel` is not NULL, which poisons that kernel).
/// Not declared in klock.h.
///
/// # Safety
/// `kernel` must be NULL or a live handle from klock_kernel_new().
#[no_mangle]
pub unsafe extern "C" fn klock_testing_panic(
    kernel: *mut crate::api::klock_kernel,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller passes NULL or a live handle.
        if let Some(k) = unsafe { kernel.as_ref() } {
            let _guard = k.lock()?;
            panic!("klock_testing_panic called with a kernel");
        }
        panic!("klock_testing_panic called");
    })
}
