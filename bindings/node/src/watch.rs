//! `Follow`: where a remote client's watch of one namespace resumes, and when it may have
//! missed events ([`klock_core::client::watch::Follow`]), for the event reader of
//! node/remote.js.
//!
//! Contract: translation only. `new Follow(entry)` reads from log entry `entry` on (an
//! open's or resume's `Klock-Index`), `new Follow()` from the oldest kept event; `after` is
//! the id to ask after (`null`: ask without `after=`); `failed()` notes a poll the client
//! could not use; `answered(node, next, gap)` takes a poll's answer (`node`: its position in
//! the client's list of URLs) and says whether events may have been missed (`true`: renew
//! every held lease of the namespace now). A `next` that is not an event id is a
//! `RangeError` naming it, and moves nothing; bad numbers the binding's usual
//! `TypeError`/`RangeError`.

use crate::input::{self, Label, Place};
use crate::throw;
use klock_core::client::watch::{self, Resync};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// A client's cursor on one namespace's watch (the core's `Follow`).
#[napi]
pub struct Follow(watch::Follow);

#[napi]
impl Follow {
    /// A watch that reads from log entry `entry` on, or from the oldest kept event.
    #[napi(constructor, ts_args_type = "entry?: number")]
    pub fn new(env: Env, entry: Unknown<'_>) -> Result<Self> {
        let entry = input::optional_number_arg(&env, entry, "entry")?;
        Ok(Follow(entry.map_or_else(
            watch::Follow::new,
            watch::Follow::from_entry,
        )))
    }

    /// The event id to ask after, or `null`: from the oldest kept event.
    #[napi(getter, ts_return_type = "string | null")]
    pub fn after(&self) -> Option<String> {
        self.0.after().map(|after| after.to_string())
    }

    /// A poll failed: the next answer may follow missed events.
    #[napi]
    pub fn failed(&mut self) {
        self.0.failed();
    }

    /// A poll answered by node `node` with `next` and `gap`: whether to resync the held
    /// leases (the events are routed first).
    #[napi(ts_args_type = "node: number, next: string, gap: boolean")]
    pub fn answered(
        &mut self,
        env: Env,
        node: Unknown<'_>,
        next: Unknown<'_>,
        gap: Unknown<'_>,
    ) -> Result<bool> {
        let node = input::number_arg(&env, node, "node")?;
        let next = input::string(&env, next, "next")?;
        let gap = input::boolean(&env, gap, Label::Name("gap"), Place::Argument)?;
        let node = usize::try_from(node).unwrap_or(usize::MAX);
        match self.0.answered(node, &next, gap) {
            Ok(resync) => Ok(resync == Resync::Held),
            Err(bad) => Err(throw::range_error(&env, format!("{bad}, not {next:?}"))),
        }
    }
}
