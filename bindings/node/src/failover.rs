//! `Servers` and `Attempts`: which node of a cluster a remote call asks next, and when it
//! gives up ([`klock_core::client::failover`]), for the remote client's retry loop
//! (node/remote.js).
//!
//! Contract: translation only. Nodes are positions in the client's list of URLs (the client
//! keeps the URLs); times are the client's monotonic milliseconds. An attempt's outcome
//! comes in as the client saw it (`'answered'`, `'unreachable'`, `'unavailable'`: a 503,
//! `'busy'`: a 429, with the server's `Retry-After` in milliseconds or `undefined`); the
//! core's answer goes out as `{ what, node, ms }`: `done`, `retry` (to `node` after `ms`),
//! `gave_up_unreachable` or `gave_up_busy`, so the client sends, waits and throws its own
//! errors with its own messages. An empty list is a `RangeError`, an unknown outcome a
//! `RangeError` naming it, bad numbers the binding's usual `TypeError`/`RangeError`.

use crate::input::{self, Label, Place};
use crate::{output::num, throw};
use klock_core::client::failover::{self, GaveUp, Next, Outcome};
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// The outcomes an attempt can have, by name.
const OUTCOMES: [&str; 4] = ["answered", "unreachable", "unavailable", "busy"];

/// A client's servers and the node it prefers (the core's `Servers`).
#[napi]
pub struct Servers(failover::Servers);

#[napi]
impl Servers {
    /// A client of `count` servers, preferring the first.
    #[napi(constructor, ts_args_type = "count: number")]
    pub fn new(env: Env, count: Unknown<'_>) -> Result<Self> {
        let count = input::number_arg(&env, count, "count")?;
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        failover::Servers::new(count).map(Servers).map_err(|_| {
            throw::range_error(
                &env,
                "a client needs at least one server URL, got none".into(),
            )
        })
    }

    /// How many servers.
    #[napi(getter)]
    pub fn count(&self) -> f64 {
        num(self.0.count() as u64)
    }

    /// The node a call starts with: the last that answered.
    #[napi(getter)]
    pub fn preferred(&self) -> f64 {
        num(self.0.preferred() as u64)
    }

    /// An answer named `leader` (its `Klock-Leader`) as the cluster's leader: the node among
    /// `urls` (the client's, in order) that it names is preferred from now on and returned;
    /// `null` when it names none of them.
    #[napi]
    pub fn led_by(&mut self, leader: String, urls: Vec<String>) -> Option<f64> {
        self.0
            .led_by(&leader, urls.iter().map(String::as_str))
            .map(|node| num(node as u64))
    }

    /// A call started at `nowMs` with `budgetMs` to get an answer.
    #[napi(ts_args_type = "nowMs: number, budgetMs: number")]
    pub fn call(&self, env: Env, now_ms: Unknown<'_>, budget_ms: Unknown<'_>) -> Result<Attempts> {
        let now_ms = input::number_arg(&env, now_ms, "nowMs")?;
        let budget_ms = input::number_arg(&env, budget_ms, "budgetMs")?;
        Ok(Attempts(self.0.call(now_ms, budget_ms)))
    }

    /// A best-effort call: every node once, without pauses, within `budgetMs`.
    #[napi(ts_args_type = "nowMs: number, budgetMs: number")]
    pub fn call_once(
        &self,
        env: Env,
        now_ms: Unknown<'_>,
        budget_ms: Unknown<'_>,
    ) -> Result<Attempts> {
        let now_ms = input::number_arg(&env, now_ms, "nowMs")?;
        let budget_ms = input::number_arg(&env, budget_ms, "budgetMs")?;
        Ok(Attempts(self.0.call_once(now_ms, budget_ms)))
    }
}

/// What the client does after an attempt.
#[napi(object, object_from_js = false)]
pub struct AfterAttempt {
    #[napi(ts_type = "'done' | 'retry' | 'gave_up_unreachable' | 'gave_up_busy'")]
    pub what: String,
    /// `retry`: the node to ask next; otherwise the node the attempt went to.
    pub node: f64,
    /// `retry`: how long to wait first (0: at once); otherwise 0.
    pub ms: f64,
}

/// One call's attempts (the core's `Attempts`).
#[napi]
pub struct Attempts(failover::Attempts);

#[napi]
impl Attempts {
    /// The node the next attempt goes to.
    #[napi(getter)]
    pub fn node(&self) -> f64 {
        num(self.0.node() as u64)
    }

    /// When the budget ends, on the client's clock.
    #[napi(getter)]
    pub fn ends_ms(&self) -> f64 {
        num(self.0.ends_ms())
    }

    /// How long the attempt sent at `nowMs` may take (the request limit, cut to the budget).
    #[napi(ts_args_type = "nowMs: number, requestLimitMs: number")]
    pub fn attempt_limit_ms(
        &self,
        env: Env,
        now_ms: Unknown<'_>,
        request_limit_ms: Unknown<'_>,
    ) -> Result<f64> {
        let now_ms = input::number_arg(&env, now_ms, "nowMs")?;
        let limit = input::number_arg(&env, request_limit_ms, "requestLimitMs")?;
        Ok(num(self.0.attempt_limit_ms(now_ms, limit)))
    }

    /// What to do after the attempt to `node` ended with `outcome` at `nowMs`.
    #[napi(
        ts_args_type = "servers: Servers, outcome: 'answered' | 'unreachable' | 'unavailable' | 'busy', retryAfterMs: number | undefined, nowMs: number"
    )]
    pub fn after(
        &mut self,
        env: Env,
        servers: &mut Servers,
        outcome: Unknown<'_>,
        retry_after_ms: Unknown<'_>,
        now_ms: Unknown<'_>,
    ) -> Result<AfterAttempt> {
        let kind = input::string(&env, outcome, "outcome")?;
        let retry_after_ms = if retry_after_ms.get_type()? == ValueType::Undefined {
            None
        } else {
            Some(input::number(
                &env,
                retry_after_ms,
                Label::Name("retryAfterMs"),
                Place::Argument,
            )?)
        };
        let now_ms = input::number_arg(&env, now_ms, "nowMs")?;
        let outcome = match kind.as_str() {
            "answered" => Outcome::Answered,
            "unreachable" => Outcome::Unreachable,
            "unavailable" => Outcome::Unavailable { retry_after_ms },
            "busy" => Outcome::Busy { retry_after_ms },
            other => {
                return Err(throw::range_error(
                    &env,
                    format!("outcome must be one of {OUTCOMES:?}, not {other:?}"),
                ))
            }
        };
        let node = self.0.node();
        let (what, node, ms) = match self.0.after(&mut servers.0, outcome, now_ms) {
            Next::Done => ("done", node, 0),
            Next::Retry { node, after_ms } => ("retry", node, after_ms),
            Next::GiveUp(GaveUp::Unreachable) => ("gave_up_unreachable", node, 0),
            Next::GiveUp(GaveUp::Busy) => ("gave_up_busy", node, 0),
        };
        Ok(AfterAttempt {
            what: what.to_owned(),
            node: num(node as u64),
            ms: num(ms),
        })
    }
}
