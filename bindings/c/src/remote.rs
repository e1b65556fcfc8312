//! The blocking remote client: `klock_remote_*`, a `klock serve` reached over HTTP(S) through
//! the `klock-client` crate's blocking facade.
//!
//! Contract: translation only. Every rule of the remote path (asking until granted, waiting on
//! the server's events, Wait-Die backoff, `Died` and `Timeout`, renewals a third of the way to
//! each lease's local deadline, the report of a lost lease, kept-alive connections) is
//! `klock-client`'s, driven by `klock_core::client`. This module checks pointers and strings,
//! calls one facade method, converts its answer, and maps [`klock_client::Error`] to a
//! [`klock_status`] (the 5xx block, or the kernel's own status when the server's stable name
//! is a kernel error's) with a message that starts with that stable name.
//!
//! Handles: a [`klock_remote_client`] (the facade's client and its private runtime thread),
//! a [`klock_remote_session`], a [`klock_remote_lease`] (one grant, renewed while it lives).
//! Each keeps the runtime alive, so they may be freed in any order; the runtime's thread is
//! joined when the last of them is freed, which leaves no thread or allocation behind.

use crate::convert::{boxed, clear_out, free_boxed, opt_text, out, slice, text};
use crate::status::{ffi, ffi_void, klock_status, Failure, Outcome};
use crate::types::klock_lease;
use klock_client::blocking::{Client, LeaseGuard, Session};
use klock_client::{Error, LeaseOptions};
use klock_core::ErrorCode;
use std::ffi::c_char;
use std::sync::Mutex;
use std::time::Duration;

/// A connection to `klock serve`. Opaque; create with klock_remote_connect(), free with
/// klock_remote_client_free(). Usable from several threads at once.
pub struct klock_remote_client {
    client: Client,
}

/// A session opened on the server. Opaque; create with klock_remote_session_open(), free with
/// klock_remote_session_free(). Usable from several threads at once.
pub struct klock_remote_session {
    session: Session,
}

/// The leases of one grant, renewed by the client while this handle lives. Opaque; create
/// with klock_remote_acquire(), free with klock_remote_lease_free().
pub struct klock_remote_lease {
    /// `None` once released.
    guard: Mutex<Option<LeaseGuard>>,
    /// The grant as C reads it (klock_remote_lease_grant()), made once.
    leases: Vec<klock_lease>,
    fence: u64,
}

/// The grant behind a klock_remote_lease, written into a struct the caller owns. The pointers
/// are the lease handle's: valid until klock_remote_lease_free(), read-only.
#[repr(C)]
#[derive(Debug)]
pub struct klock_remote_grant {
    /// The largest fence of the grant: strictly larger than every earlier grant's of these
    /// resources; a store must refuse writes carrying a smaller one.
    pub fence: u64,
    /// One lease per intent, in the server's order. Their times (`acquired_at`,
    /// `expires_at`) are the server's clock as of the grant; renewals move the expiry on.
    pub leases: *const klock_lease,
    pub leases_len: usize,
}

/// How klock_remote_acquire() asks. Start from klock_remote_acquire_options_default(); owned
/// by the caller and only read during the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_remote_acquire_options {
    /// The TTL of each lease (at least 1): how long the server keeps it after the last renewal
    /// reached it. The client renews it every third of it.
    pub ttl_ms: u64,
    /// Whether `timeout_ms` is given; false = no client-side limit: wait until granted.
    pub has_timeout_ms: bool,
    /// The budget of the whole acquisition, waits and Wait-Die backoffs included; 0 is a
    /// try-lock. Past it: KLOCK_TIMEOUT.
    pub timeout_ms: u64,
}

impl Default for klock_remote_acquire_options {
    fn default() -> klock_remote_acquire_options {
        klock_remote_acquire_options {
            ttl_ms: u64::try_from(klock_client::session::DEFAULT_TTL.as_millis())
                .expect("the default TTL fits in u64 milliseconds"),
            has_timeout_ms: false,
            timeout_ms: 0,
        }
    }
}

impl From<&klock_remote_acquire_options> for LeaseOptions {
    fn from(o: &klock_remote_acquire_options) -> LeaseOptions {
        let options = LeaseOptions::default().ttl(Duration::from_millis(o.ttl_ms));
        if o.has_timeout_ms {
            options.timeout(Duration::from_millis(o.timeout_ms))
        } else {
            options
        }
    }
}

/// The status and message of a client error. The message starts with the stable name (the
/// server's own for a refusal), so a C program can log or match it.
fn failure(error: Error) -> Failure {
    let name = error.name().to_owned();
    let status = match &error {
        Error::BadUrl(_) => klock_status::KLOCK_BAD_URL,
        Error::InvalidInput(_) => klock_status::KLOCK_INVALID_ARGUMENT,
        Error::Unreachable(_) => klock_status::KLOCK_UNREACHABLE,
        Error::Died { .. } => klock_status::KLOCK_DIED,
        Error::Timeout { .. } => klock_status::KLOCK_TIMEOUT,
        Error::Refused { name, .. } => ErrorCode::ALL
            .iter()
            .find(|code| code.name() == name)
            .map_or(klock_status::KLOCK_REFUSED, |&code| code.into()),
        // Fenced writes and what a newer client may add: none of the calls here returns them,
        // and a name the C API does not know is still told by its name.
        _ => klock_status::KLOCK_REFUSED,
    };
    let message = match error {
        Error::Refused {
            status, message, ..
        } => format!("{name}: the server refused (HTTP {status}): {message}"),
        // Died and Timeout say their name first already.
        error @ (Error::Died { .. } | Error::Timeout { .. }) => error.to_string(),
        error => format!("{name}: {error}"),
    };
    Failure::new(status, message)
}

/// # Safety
/// `p` must be NULL or a live handle of this module's type `T`.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Outcome<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(what))
}

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

/// How klock_remote_connect_with() connects. Start from
/// klock_remote_connect_options_default(); owned by the caller and only read during the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct klock_remote_connect_options {
    /// The bearer token to show (NUL-terminated); NULL = `$KLOCK_TOKEN` if set, else none.
    pub token: *const c_char,
    /// The PEM certificates to trust for `https://` (the client carries no system trust
    /// store); NULL = `$KLOCK_CA` if set.
    pub ca_path: *const c_char,
    /// Every call's budget (at least 1; default 30 000): how long a call tries an unreachable
    /// server, pauses included, before it fails with KLOCK_UNREACHABLE. A wait the server
    /// holds has that long more. Held leases are lost at their local deadline meanwhile.
    pub reconnect_timeout_ms: u64,
}

/// klock-client's default budget in milliseconds. A constant, so that
/// klock_remote_connect(), which builds its options before the panic boundary of
/// klock_remote_connect_with(), has nothing that could panic (30 000 fits in a u64).
const DEFAULT_RECONNECT_TIMEOUT_MS: u64 =
    klock_client::transport::DEFAULT_RECONNECT_TIMEOUT.as_millis() as u64;

impl Default for klock_remote_connect_options {
    fn default() -> klock_remote_connect_options {
        klock_remote_connect_options {
            token: std::ptr::null(),
            ca_path: std::ptr::null(),
            reconnect_timeout_ms: DEFAULT_RECONNECT_TIMEOUT_MS,
        }
    }
}

/// Writes the default options into `*out_options`: no token or CA file given (the
/// environment's, if set) and a 30 000 ms budget. klock_remote_connect() uses them with its
/// token and CA file.
///
/// Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
///
/// # Safety
/// `out_options` must be NULL or point to a writable klock_remote_connect_options.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_connect_options_default(
    out_options: *mut klock_remote_connect_options,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        *unsafe { out(out_options, "out_options") }? = klock_remote_connect_options::default();
        Ok(())
    })
}

/// Connects to the `klock serve` at `url` (`http://HOST:PORT`, or `https://HOST:PORT` with
/// `ca_path`) showing the bearer `token`, and stores the client in `*out_client`: what
/// klock_remote_connect_with() does with the default options and this token and CA file.
///
/// `token`: NULL = `$KLOCK_TOKEN` if set, else none. `ca_path`: the PEM certificates to trust
/// for `https://` (the client carries no system trust store); NULL = `$KLOCK_CA` if set.
///
/// Errors, ownership and thread-safety: as klock_remote_connect_with().
///
/// # Safety
/// `url`, `token` and `ca_path` must be NULL or NUL-terminated; `out_client` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_connect(
    url: *const c_char,
    token: *const c_char,
    ca_path: *const c_char,
    out_client: *mut *mut klock_remote_client,
) -> klock_status {
    let options = klock_remote_connect_options {
        token,
        ca_path,
        ..klock_remote_connect_options::default()
    };
    // SAFETY: the caller's contract, forwarded; `options` is a local.
    unsafe { klock_remote_connect_with(url, &options, out_client) }
}

/// Connects to the `klock serve` at `url` (`http://HOST:PORT`, or `https://HOST:PORT` with
/// the options' `ca_path`) as `options` say, and stores the client in `*out_client`. One
/// authenticated read is made, so an unreachable server or a refused token fails here, not
/// at the first acquire. The client starts one thread of its own (its runtime), which renews
/// leases and reads the server's events.
///
/// `options`: NULL = klock_remote_connect_options_default().
///
/// Errors: KLOCK_NULL_POINTER (`url`, `out_client`), KLOCK_INVALID_UTF8, KLOCK_BAD_URL (a URL
/// that is not `http(s)://HOST:PORT`), KLOCK_INVALID_ARGUMENT (a `reconnect_timeout_ms` of 0,
/// a CA file that cannot be used), KLOCK_UNREACHABLE (within the budget), KLOCK_REFUSED
/// (`UNAUTHORIZED`: a missing or wrong token). On failure `*out_client` is NULL and no thread
/// is left running.
///
/// Ownership: the handle is the caller's; free it with klock_remote_client_free().
/// Thread-safety: any thread.
///
/// # Safety
/// `url` must be NULL or NUL-terminated; `options` NULL or readable, its strings NULL or
/// NUL-terminated; `out_client` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_connect_with(
    url: *const c_char,
    options: *const klock_remote_connect_options,
    out_client: *mut *mut klock_remote_client,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_client) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_client, "out_client") }?;
        let url = unsafe { text(url, "url") }?;
        let given = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let token = unsafe { opt_text(given.token, "token") }?;
        let ca_path = unsafe { opt_text(given.ca_path, "ca_path") }?;
        if given.reconnect_timeout_ms == 0 {
            return Err(Failure::new(
                klock_status::KLOCK_INVALID_ARGUMENT,
                "INVALID_INPUT: reconnect_timeout_ms must be at least 1 (milliseconds), got 0",
            ));
        }
        let mut options = klock_client::Client::options(&url)
            .reconnect_timeout(Duration::from_millis(given.reconnect_timeout_ms));
        if let Some(token) = token {
            options = options.token(token.into_owned());
        }
        if let Some(ca_path) = ca_path {
            options = options.ca(ca_path.into_owned());
        }
        let client = Client::connect_with(options).map_err(failure)?;
        *slot = boxed(klock_remote_client { client });
        Ok(())
    })
}

/// Frees a client. Its sessions and leases stay usable (they share its connections and
/// runtime); the runtime's thread ends when the last of them is freed.
///
/// NULL is a no-op. Thread-safety: must not race with another use of the same handle.
///
/// # Safety
/// `client` must be NULL or a handle from klock_remote_connect() not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_client_free(client: *mut klock_remote_client) {
    // SAFETY: forwarded contract.
    ffi_void((), || unsafe { free_boxed(client) })
}

// ---------------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------------

/// Opens a session for `agent_id` in `namespace` (NULL = "default") and stores it in
/// `*out_session`. Sessions are the unit of priority (Wait-Die: an older session waits, a
/// younger one dies).
///
/// Errors: KLOCK_NULL_POINTER (`client`, `agent_id`, `out_session`), KLOCK_INVALID_UTF8,
/// KLOCK_INVALID_AGENT_ID and KLOCK_INVALID_NAMESPACE (the server's refusal),
/// KLOCK_UNREACHABLE, KLOCK_REFUSED. On failure `*out_session` is NULL.
///
/// Ownership: the handle is the caller's; free it with klock_remote_session_free().
/// Thread-safety: any thread.
///
/// # Safety
/// `client` must be NULL or a live client; `agent_id` and `namespace_name` NULL or
/// NUL-terminated; `out_session` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_session_open(
    client: *const klock_remote_client,
    agent_id: *const c_char,
    namespace_name: *const c_char,
    out_session: *mut *mut klock_remote_session,
) -> klock_status {
    // SAFETY: the caller's contract.
    unsafe { clear_out(out_session) };
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_session, "out_session") }?;
        let client = unsafe { handle(client, "client") }?;
        let agent_id = unsafe { text(agent_id, "agent_id") }?;
        let namespace = unsafe { opt_text(namespace_name, "namespace_name") }?;
        let in_namespace;
        let client = match namespace {
            Some(namespace) => {
                in_namespace = client.client.in_namespace(&namespace);
                &in_namespace
            }
            None => &client.client,
        };
        let session = client.session(&agent_id).map_err(failure)?;
        *slot = boxed(klock_remote_session { session });
        Ok(())
    })
}

/// Writes the session's id on the server into `*out_id`.
///
/// Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
///
/// # Safety
/// `session` must be NULL or a live session; `out_id` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_session_id(
    session: *const klock_remote_session,
    out_id: *mut u64,
) -> klock_status {
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_id, "out_id") }?;
        *slot = unsafe { handle(session, "session") }?.session.id();
        Ok(())
    })
}

/// Closes the session on the server: every lease released, every wait withdrawn. Its lease
/// handles then report KLOCK_LEASE_LOST (`SESSION_CLOSED`) and release nothing when freed.
/// The handle must still be freed with klock_remote_session_free().
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_UNREACHABLE, KLOCK_UNKNOWN_SESSION (closed already, or
/// closed by the server for idleness). Thread-safety: any thread.
///
/// # Safety
/// `session` must be NULL or a live session.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_session_close(
    session: *const klock_remote_session,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let session = unsafe { handle(session, "session") }?;
        session.session.close().map_err(failure)
    })
}

/// Frees a session handle. When no lease of it is held any more and it was not closed, it is
/// closed on the server first (blocking, bounded by the request's time limit; a server that
/// cannot be reached lets its leases end at their TTL).
///
/// NULL is a no-op. Thread-safety: must not race with another use of the same handle.
///
/// # Safety
/// `session` must be NULL or a handle from klock_remote_session_open() not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_session_free(session: *mut klock_remote_session) {
    // SAFETY: forwarded contract.
    ffi_void((), || unsafe { free_boxed(session) })
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// Writes the default options into `*out_options`: a 60 000 ms TTL and no timeout (wait until
/// granted). NULL options to klock_remote_acquire() mean the same.
///
/// Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
///
/// # Safety
/// `out_options` must be NULL or point to a writable klock_remote_acquire_options.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_acquire_options_default(
    out_options: *mut klock_remote_acquire_options,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        *unsafe { out(out_options, "out_options") }? = klock_remote_acquire_options::default();
        Ok(())
    })
}

/// Acquires every intent (`"PREDICATE TYPE:/path"`, like `"MUTATES FILE:/src/app.rs"`) at
/// once, blocking until granted or refused, and stores the grant in `*out_lease`. While
/// waiting the client follows the server's events and the kernel's backoff; once granted it
/// renews the leases in the background until they are released or the handle is freed.
///
/// `options`: NULL = klock_remote_acquire_options_default(). `out_retry_after_ms` (may be
/// NULL) receives, on KLOCK_DIED, how long to wait before asking again (the kernel's backoff:
/// never compute it yourself), and 0 otherwise.
///
/// Errors: KLOCK_NULL_POINTER (`session`, `intents` with a length, an intent, `out_lease`),
/// KLOCK_INVALID_UTF8, KLOCK_INVALID_ARGUMENT (no intent, one the kernel cannot read, a TTL of
/// 0, a closed session), KLOCK_DIED (Wait-Die refused it while this session holds other
/// leases: free or release them, wait `*out_retry_after_ms`, ask again for everything),
/// KLOCK_TIMEOUT (the timeout passed first; the message names the holders), the server's
/// refusal (its kernel status, or KLOCK_REFUSED), KLOCK_UNREACHABLE. On failure `*out_lease`
/// is NULL.
///
/// Ownership: the handle is the caller's; free it with klock_remote_lease_free().
/// Thread-safety: any thread; concurrent acquires on one session are allowed.
///
/// # Safety
/// `session` must be NULL or a live session; `intents` NULL or `intents_len` pointers, each
/// NULL or NUL-terminated; `options` NULL or readable; `out_lease` NULL or writable;
/// `out_retry_after_ms` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_acquire(
    session: *const klock_remote_session,
    intents: *const *const c_char,
    intents_len: usize,
    options: *const klock_remote_acquire_options,
    out_lease: *mut *mut klock_remote_lease,
    out_retry_after_ms: *mut u64,
) -> klock_status {
    // SAFETY (both): the caller's contract.
    unsafe { clear_out(out_lease) };
    if let Some(retry) = unsafe { out_retry_after_ms.as_mut() } {
        *retry = 0;
    }
    ffi(|| {
        // SAFETY (all blocks): the caller's contract.
        let slot = unsafe { out(out_lease, "out_lease") }?;
        let session = unsafe { handle(session, "session") }?;
        let pointers = unsafe { slice(intents, intents_len, "intents") }?;
        let intents = pointers
            .iter()
            .enumerate()
            .map(|(i, &p)| unsafe { text(p, &format!("intents[{i}]")) }.map(|t| t.into_owned()))
            .collect::<Outcome<Vec<String>>>()?;
        let options = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let guard = session
            .session
            .lease(intents, LeaseOptions::from(&options))
            .map_err(|error| {
                if let (Error::Died { retry_after_ms, .. }, Some(retry)) =
                    (&error, unsafe { out_retry_after_ms.as_mut() })
                {
                    *retry = *retry_after_ms;
                }
                failure(error)
            })?;
        let leases = guard
            .leases()
            .iter()
            .cloned()
            .map(klock_lease::from)
            .collect();
        *slot = boxed(klock_remote_lease {
            fence: guard.fence(),
            guard: Mutex::new(Some(guard)),
            leases,
        });
        Ok(())
    })
}

/// Writes the grant (its fence and leases) into `*out_grant`; its pointers belong to the lease
/// handle and stay valid until klock_remote_lease_free(), released or not.
///
/// Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
///
/// # Safety
/// `lease` must be NULL or a live lease; `out_grant` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_lease_grant(
    lease: *const klock_remote_lease,
    out_grant: *mut klock_remote_grant,
) -> klock_status {
    ffi(|| {
        // SAFETY (both): the caller's contract.
        let slot = unsafe { out(out_grant, "out_grant") }?;
        let lease = unsafe { handle(lease, "lease") }?;
        *slot = klock_remote_grant {
            fence: lease.fence,
            leases: lease.leases.as_ptr(),
            leases_len: lease.leases.len(),
        };
        Ok(())
    })
}

/// The guard of a live lease handle, locked; `None` once released.
fn locked(lease: &klock_remote_lease) -> Outcome<std::sync::MutexGuard<'_, Option<LeaseGuard>>> {
    lease.guard.lock().map_err(|_| {
        Failure::new(
            klock_status::KLOCK_PANIC,
            "this lease handle is poisoned: an earlier call panicked inside it; free it",
        )
    })
}

/// Whether the leases are still held: KLOCK_OK while they are and no loss was reported;
/// KLOCK_LEASE_LOST once (some of) them were lost (the message names the reason:
/// `LEASE_EXPIRED`, also when no renewal was answered before the lease's local deadline,
/// `WOUNDED`, `SESSION_CLOSED`, `LEASE_RELEASED`, ...): stop acting on them; KLOCK_LEASE_RELEASED
/// after klock_remote_lease_release(). Asks the server nothing: the client's background
/// renewals and event stream decide.
///
/// Errors: KLOCK_NULL_POINTER. Thread-safety: any thread.
///
/// # Safety
/// `lease` must be NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_lease_check(
    lease: *const klock_remote_lease,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let lease = unsafe { handle(lease, "lease") }?;
        let guard = locked(lease)?;
        let guard = guard.as_ref().ok_or_else(|| {
            Failure::new(
                klock_status::KLOCK_LEASE_RELEASED,
                "LEASE_RELEASED: these leases were released by klock_remote_lease_release()",
            )
        })?;
        match guard.lost() {
            None => Ok(()),
            Some(loss) => {
                let ids: Vec<String> = loss
                    .leases
                    .iter()
                    .map(|l| format!("{} ({})", l.lease_id.0, l.resource))
                    .collect();
                Err(Failure::new(
                    klock_status::KLOCK_LEASE_LOST,
                    format!(
                        "LEASE_LOST: {}: lease {} lost; stop acting on it",
                        loss.reason,
                        ids.join(", ")
                    ),
                ))
            }
        }
    })
}

/// Releases the leases now (blocking) and stops renewing them. The handle stays readable
/// (klock_remote_lease_grant()) and must still be freed.
///
/// Errors: KLOCK_NULL_POINTER, KLOCK_LEASE_RELEASED (released already), KLOCK_UNREACHABLE,
/// the server's refusal (KLOCK_UNKNOWN_SESSION: the session is gone, its leases with it).
/// Whatever the outcome, the handle no longer holds the leases.
/// Thread-safety: any thread.
///
/// # Safety
/// `lease` must be NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_lease_release(
    lease: *const klock_remote_lease,
) -> klock_status {
    ffi(|| {
        // SAFETY: the caller's contract.
        let lease = unsafe { handle(lease, "lease") }?;
        let guard = locked(lease)?.take().ok_or_else(|| {
            Failure::new(
                klock_status::KLOCK_LEASE_RELEASED,
                "LEASE_RELEASED: these leases were released already",
            )
        })?;
        guard.release().map_err(failure)
    })
}

/// Frees a lease handle; leases still held are released first (blocking, bounded by the
/// request's time limit; a server that cannot be reached lets them end at their TTL).
///
/// NULL is a no-op. Thread-safety: must not race with another use of the same handle.
///
/// # Safety
/// `lease` must be NULL or a handle from klock_remote_acquire() not freed yet.
#[no_mangle]
pub unsafe extern "C" fn klock_remote_lease_free(lease: *mut klock_remote_lease) {
    // SAFETY: forwarded contract.
    ffi_void((), || unsafe { free_boxed(lease) })
}
