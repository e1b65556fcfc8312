//! `Follow`: where a remote client's watch of one namespace resumes, and when it may have
//! missed events ([`klock_core::client::watch::Follow`]), for the event reader of
//! node/remote.js.
//!
//! Contract: translation only. `new Follow(entry, log)` reads from log entry `entry` on (an
//! open's or resume's `Klock-Index`) of log `log` (the answer's `log`, if any), `new
//! Follow()` from the oldest kept event; `after` is the id to ask after (`null`: ask without
//! `after=`) and `log` the log it is of (`null`: not known; else the query's `log=`);
//! `opened(entry, log)` notes a session of the stream opened by entry `entry` of log `log`
//! (on another log the stream moves to it); `failed()` notes a poll that gave up;
//! `answered(node, next, gap, log)` takes a poll's answer (`node`: its position in the
//! client's list of URLs; `log` its `log`, if any) and says whether events may have been
//! missed (`true`: renew every held lease of the namespace now). A `next` that is not an event id is a
//! `RangeError` naming it, and moves nothing; bad numbers the binding's usual
//! `TypeError`/`RangeError`.
//!
//! `ends(event)` is the core's [`watch::ending`]: which of its session's leases an event ends
//! (an event object as the kernel's `drainEvents` or the remote client makes them: `event`,
//! `lease`, `lostLeases`); `null` for an event that ends none, else `{ leases, name }` with
//! `leases` `null` when every lease of the session ends (it was closed) and `name` the
//! kernel's. A field of the wrong type is the binding's usual `TypeError`/`RangeError`
//! naming it; a missing `lease`/`lostLeases` names no lease. `LOST_AT_LOCAL_DEADLINE` (set by
//! the module's init) is the core's name of a lease lost at its local deadline.

use crate::input::{self, Label, Place};
use crate::{output::num, throw};
use klock_core::client::watch::{self, Ending, Resync};
use napi::bindgen_prelude::*;
use napi::ValueType;
use napi_derive::napi;

/// A client's cursor on one namespace's watch (the core's `Follow`).
#[napi]
pub struct Follow(watch::Follow);

#[napi]
impl Follow {
    /// A watch that reads from log entry `entry` (of log `log`) on, or from the oldest kept
    /// event.
    #[napi(constructor, ts_args_type = "entry?: number, log?: string | null")]
    pub fn new(env: Env, entry: Unknown<'_>, log: Unknown<'_>) -> Result<Self> {
        let entry = input::optional_number_arg(&env, entry, "entry")?;
        let log = input::optional_string_arg(&env, log, "log")?;
        Ok(Follow(entry.map_or_else(watch::Follow::new, |entry| {
            watch::Follow::from_entry(entry, log.as_deref())
        })))
    }

    /// The event id to ask after, or `null`: from the oldest kept event.
    #[napi(getter, ts_return_type = "string | null")]
    pub fn after(&self) -> Option<String> {
        self.0.after().map(|after| after.to_string())
    }

    /// The log the cursor is of (the query's `log=`), or `null`: not known yet.
    #[napi(getter, ts_return_type = "string | null")]
    pub fn log(&self) -> Option<String> {
        self.0.log().map(str::to_owned)
    }

    /// A session of the stream was opened (or resumed) by log entry `entry` of log `log`.
    #[napi(ts_args_type = "entry: number, log?: string | null")]
    pub fn opened(&mut self, env: Env, entry: Unknown<'_>, log: Unknown<'_>) -> Result<()> {
        let entry = input::number_arg(&env, entry, "entry")?;
        let log = input::optional_string_arg(&env, log, "log")?;
        self.0.opened(entry, log.as_deref());
        Ok(())
    }

    /// How long the next poll asks the server to wait for an event (`wait_ms=`): `long`, or 0
    /// right after a failed poll (its answer is the resync's).
    #[napi]
    pub fn wait_ms(&self, long: u32) -> u32 {
        // The core's answer is `long` or 0, so it fits what came in.
        u32::try_from(self.0.wait_ms(u64::from(long))).unwrap_or(long)
    }

    /// A poll failed: the next answer may follow missed events.
    #[napi]
    pub fn failed(&mut self) {
        self.0.failed();
    }

    /// A poll answered by node `node` with `next`, `gap` and `log`: whether to resync the
    /// held leases (the events are routed first).
    #[napi(ts_args_type = "node: number, next: string, gap: boolean, log?: string | null")]
    pub fn answered(
        &mut self,
        env: Env,
        node: Unknown<'_>,
        next: Unknown<'_>,
        gap: Unknown<'_>,
        log: Unknown<'_>,
    ) -> Result<bool> {
        let node = input::number_arg(&env, node, "node")?;
        let next = input::string(&env, next, "next")?;
        let gap = input::boolean(&env, gap, Label::Name("gap"), Place::Argument)?;
        let log = input::optional_string_arg(&env, log, "log")?;
        let node = usize::try_from(node).unwrap_or(usize::MAX);
        match self.0.answered(node, &next, gap, log.as_deref()) {
            Ok(resync) => Ok(resync == Resync::Held),
            Err(bad) => Err(throw::range_error(&env, format!("{bad}, not {next:?}"))),
        }
    }
}

/// The leases an event ends, and the kernel's name for why.
#[napi(object, object_from_js = false)]
pub struct Ends {
    /// The ended leases, or `null`: every lease of the event's session (it was closed).
    #[napi(ts_type = "number[] | null")]
    pub leases: Either<Vec<f64>, Null>,
    #[napi(ts_type = "'LEASE_EXPIRED' | 'WOUNDED' | 'SESSION_CLOSED'")]
    pub name: String,
}

/// A field that is absent, `undefined` or `null`.
fn absent(value: &Unknown<'_>) -> Result<bool> {
    Ok(matches!(
        value.get_type()?,
        ValueType::Undefined | ValueType::Null
    ))
}

/// Which of its session's leases `event` ends, and the kernel's name for why (module
/// contract); `null` when it ends none.
#[napi(ts_args_type = "event: { event: string; lease?: number; lostLeases?: number[] }")]
pub fn ends(env: Env, event: Unknown<'_>) -> Result<Option<Ends>> {
    let event = input::object(&env, event, Label::Name("event"), Place::Argument)?;
    let kind: Unknown<'_> = event.get_named_property_unchecked("event")?;
    let kind = input::string_at(&env, kind, Label::Key("event", "event"), Place::Field)?;
    let Some(ending) = watch::ending(&kind) else {
        return Ok(None);
    };
    let leases = match ending {
        Ending::Lease => {
            let lease: Unknown<'_> = event.get_named_property_unchecked("lease")?;
            Either::A(if absent(&lease)? {
                Vec::new()
            } else {
                let label = Label::Key("event", "lease");
                vec![num(input::number(&env, lease, label, Place::Field)?)]
            })
        }
        Ending::LostLeases => {
            let lost: Unknown<'_> = event.get_named_property_unchecked("lostLeases")?;
            Either::A(if absent(&lost)? {
                Vec::new()
            } else {
                let label = Label::Key("event", "lostLeases");
                input::list(&env, lost, label, Place::Field, |id, at| {
                    input::number(&env, id, at, Place::Field).map(num)
                })?
            })
        }
        Ending::Session => Either::B(Null),
    };
    Ok(Some(Ends {
        leases,
        name: ending.name().to_owned(),
    }))
}
