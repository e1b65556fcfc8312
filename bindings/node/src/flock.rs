//! `flock(2)` for the fence helper of the npm package (`node/fence.js`): Node has no flock,
//! and the helper must take the very lock the Python helper takes with `fcntl.flock`, so that
//! writers in both languages exclude each other on `<path>.fence`.
//!
//! Contract: Node-only (not part of the one JavaScript API of bindings/js-api, which the wasm
//! package shares: a browser has no file descriptors). `flock(fd, operation)` applies an
//! exclusive lock (`"exclusive"`, blocking until it is had), tries one (`"try-exclusive"`:
//! `false` when another open file description holds it) or releases it (`"unlock"`). EINTR is
//! retried; any other failure is an `Error` naming the errno text. The OS releases the lock
//! when the descriptor is closed or the process dies, so a killed writer never blocks others.
//! The libc function is declared directly (std links the C library already): no dependency.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use std::os::raw::c_int;

unsafe extern "C" {
    #[link_name = "flock"]
    fn c_flock(fd: c_int, operation: c_int) -> c_int;
}

// <sys/file.h>: the same values on Linux, the BSDs and macOS.
const LOCK_EX: c_int = 2;
const LOCK_NB: c_int = 4;
const LOCK_UN: c_int = 8;

/// `flock(2)` on an open file descriptor: `"exclusive"` (blocks), `"try-exclusive"` (returns
/// `false` if the lock is held elsewhere) or `"unlock"`. Returns `true` when done.
#[napi(ts_args_type = "fd: number, operation: 'exclusive' | 'try-exclusive' | 'unlock'")]
pub fn flock(fd: i32, operation: String) -> Result<bool> {
    let op = match operation.as_str() {
        "exclusive" => LOCK_EX,
        "try-exclusive" => LOCK_EX | LOCK_NB,
        "unlock" => LOCK_UN,
        other => {
            return Err(Error::new(
                Status::InvalidArg,
                format!("flock: operation must be \"exclusive\", \"try-exclusive\" or \"unlock\", got {other:?}"),
            ))
        }
    };
    if fd < 0 {
        return Err(Error::new(
            Status::InvalidArg,
            format!("flock: bad file descriptor {fd}"),
        ));
    }
    loop {
        // SAFETY: flock takes any int; a bad descriptor is reported as EBADF.
        if unsafe { c_flock(fd, op) } == 0 {
            return Ok(true);
        }
        let error = std::io::Error::last_os_error();
        match error.kind() {
            std::io::ErrorKind::Interrupted => continue,
            std::io::ErrorKind::WouldBlock if op & LOCK_NB != 0 => return Ok(false),
            _ => {
                return Err(Error::new(
                    Status::GenericFailure,
                    format!("flock(fd {fd}, {operation}): {error}"),
                ))
            }
        }
    }
}
