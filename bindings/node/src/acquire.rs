//! `afterSetback`: the core's decision after an attempt to acquire that was not granted
//! ([`klock_core::client::Acquisition`]), for the friendly client's acquisition loop
//! (node/client.js).
//!
//! Contract: translation only. The setback comes in as the client has it (the verdict's or
//! event's kind, `retryAfterMs`, the wait the attempt asked for, `undefined` for none or the
//! kernel's default); the core's answer goes out as `{ what, ms }`: `ask_again`, `sleep` (for
//! `ms`), `died`, or `timeout_no_wait` / `timeout_wait_ended` / `timeout_retry_too_late`, so
//! the client throws its own errors with its own messages. Bad arguments throw the binding's
//! usual `TypeError`/`RangeError` naming them.

use crate::input::{self, Label, Place};
use crate::{output::num, throw};
use klock_core::client::{Acquisition, Setback};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// `afterSetback`'s answer to a DIE verdict to an attempt that asked for no wait
/// (`askedWaitMs` 0), which depends on nothing else: the client ends a refused
/// `timeoutMs: 0` at once with it, without the call.
#[napi]
pub const AFTER_NO_WAIT_DIE: &str = Acquisition::AFTER_NO_WAIT_DIE.name();

/// What the client does next.
#[napi(object, object_from_js = false)]
pub struct AfterSetback {
    #[napi(
        ts_type = "'ask_again' | 'sleep' | 'died' | 'timeout_no_wait' | 'timeout_wait_ended' | 'timeout_retry_too_late'"
    )]
    pub what: String,
    /// Milliseconds to sleep before asking again (`sleep` only; 0 otherwise).
    pub ms: f64,
}

/// The core's decision after an attempt to acquire that was not granted (the friendly
/// client's rules, `klock_core::client::Acquisition`): the `setback` at `now` (the wait the
/// refused attempt asked for, for a DIE), for an acquisition whose budget ends at `deadline`
/// (`undefined`: no client-side limit), while the session `holdsOthers` leases or not.
#[napi(
    ts_args_type = "deadline: number | undefined, setback: 'DIE' | 'DIED' | 'WOUNDED' | 'WAIT_TIMEOUT', retryAfterMs: number, askedWaitMs: number | undefined, holdsOthers: boolean, now: number"
)]
pub fn after_setback(
    env: Env,
    deadline: Unknown<'_>,
    setback: Unknown<'_>,
    retry_after_ms: Unknown<'_>,
    asked_wait_ms: Unknown<'_>,
    holds_others: Unknown<'_>,
    now: Unknown<'_>,
) -> Result<AfterSetback> {
    let deadline = input::optional_number_arg(&env, deadline, "deadline")?;
    let kind = input::string(&env, setback, "setback")?;
    let retry_after_ms = input::number_arg(&env, retry_after_ms, "retryAfterMs")?;
    let asked_wait_ms = input::optional_number_arg(&env, asked_wait_ms, "askedWaitMs")?;
    let holds_others = input::boolean(
        &env,
        holds_others,
        Label::Name("holdsOthers"),
        Place::Argument,
    )?;
    let now = input::number_arg(&env, now, "now")?;
    let Some(setback) = Setback::of_kind(&kind, retry_after_ms, asked_wait_ms) else {
        return Err(throw::range_error(
            &env,
            format!("setback must be one of {:?}, not {kind:?}", Setback::KINDS),
        ));
    };
    let next = Acquisition::until(deadline).after(setback, holds_others, now);
    Ok(AfterSetback {
        what: next.name().to_owned(),
        ms: num(next.sleep_ms()),
    })
}
