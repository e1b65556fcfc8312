//! Asking until granted: the loop that carries out the core's acquisition decisions over HTTP,
//! for the friendly [`crate::Session::lease`] and for `klock exec` / `klock elect`.
//!
//! Contract: nothing here decides what a setback means; [`Acquisition::after`] does (the same
//! rules as the Python and Node clients, through their bindings). [`Acquire::run`]:
//! - sends the whole manifest in one request, asking the kernel to wait what is left of the
//!   budget ([`Acquisition::wait_ms`]); a GRANTED is handed to the [`Keeper`], its local
//!   deadline counted from the request's send time;
//! - follows a WAIT by long polls of its ticket ([`Acquire::ticket`] names it meanwhile) until
//!   it resolves, or until a second past the budget (then it withdraws the ticket, and keeps a
//!   grant that raced the withdrawal); a grant that came during the wait is renewed at once, so
//!   its TTL counts from a known moment; if one of its leases is already gone the rest are
//!   released and the manifest is asked again;
//! - gives every setback (DIE, DIED, WOUNDED, WAIT_TIMEOUT) to [`Acquisition::after`], with
//!   whether the session holds other leases (the keeper's), and does what it says: ask again,
//!   sleep the kernel's backoff, or fail with [`Error::Died`] or [`Error::Timeout`] naming the
//!   sessions of the last WAIT or DIE verdict.
//!
//! A server error ends the run with it ([`Error::Refused`], [`Error::Unreachable`]).
//! [`Acquire::run_or`] also ends, with [`Stopped::Interrupted`], when its `interrupt` future
//! does while the run waits for a ticket or sleeps a backoff (never in the middle of a request,
//! whose outcome would be unknown); the ticket then still waits, named by [`Acquire::ticket`],
//! for the caller to withdraw. Dropping an [`Acquire`] whose ticket still waits withdraws it in
//! the background (best effort), so a cancelled lease does not stay queued.

use crate::error::Error;
use crate::keeper::Keeper;
use crate::routes::{Acquired, Outcome, Session, MAX_HOLD};
use klock_core::client::{Acquisition, Failure, Next, Setback};
use klock_core::{Blocker, Lease, Verdict};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long past the budget a followed ticket is polled: the kernel's own WAIT_TIMEOUT then
/// arrives, rather than racing the client's withdrawal.
const GRACE_MS: u64 = 1_000;

/// Why [`Acquire::run_or`] ended without a grant.
#[derive(Debug)]
pub enum Stopped<T> {
    /// The core's failure, or the server's.
    Error(Error),
    /// The interrupt came first, with its output.
    Interrupted(T),
}

/// One acquisition of a manifest (see the module contract).
pub struct Acquire<'a> {
    session: &'a Session,
    keeper: &'a Keeper,
    intents: &'a [String],
    ttl_ms: u64,
    budget: Acquisition,
    /// The zero of the budget's milliseconds: the first attempt.
    origin: Instant,
    /// The ticket being followed, and the sessions the last WAIT or DIE named.
    state: Mutex<(Option<u64>, Vec<Blocker>)>,
}

impl<'a> Acquire<'a> {
    /// An acquisition of `intents` for `ttl_ms` each, starting now; `timeout`: its budget
    /// (`None`: no client-side limit, each wait the kernel's default, asked again after it).
    pub fn new(
        session: &'a Session,
        keeper: &'a Keeper,
        intents: &'a [String],
        ttl_ms: u64,
        timeout: Option<Duration>,
    ) -> Acquire<'a> {
        let budget = match timeout {
            Some(timeout) => Acquisition::new(0, Some(millis(timeout))),
            None => Acquisition::kernel_default(),
        };
        Acquire::with_budget(session, keeper, intents, ttl_ms, budget)
    }

    /// [`Acquire::new`] with the core's budget given (`Acquisition::new(0, None)`: one wait
    /// the kernel never times out, as `klock elect` campaigns). Its times count from now.
    pub fn with_budget(
        session: &'a Session,
        keeper: &'a Keeper,
        intents: &'a [String],
        ttl_ms: u64,
        budget: Acquisition,
    ) -> Acquire<'a> {
        Acquire {
            session,
            keeper,
            intents,
            ttl_ms,
            budget,
            origin: Instant::now(),
            state: Mutex::default(),
        }
    }

    /// The ticket waiting now, if any.
    pub fn ticket(&self) -> Option<u64> {
        self.state.lock().expect("acquire lock").0
    }

    /// The sessions the last WAIT or DIE verdict named (empty before one).
    pub fn blockers(&self) -> Vec<Blocker> {
        self.state.lock().expect("acquire lock").1.clone()
    }

    fn now_ms(&self) -> u64 {
        millis(self.origin.elapsed())
    }

    /// Asks until granted, or until the core says to fail (module contract).
    ///
    /// # Errors
    /// [`Error::Died`], [`Error::Timeout`], or the server's refusal or absence.
    pub async fn run(&self) -> Result<Vec<Lease>, Error> {
        match self.run_or(std::future::pending::<Infallible>()).await {
            Ok(leases) => Ok(leases),
            Err(Stopped::Error(e)) => Err(e),
            Err(Stopped::Interrupted(never)) => match never {},
        }
    }

    /// [`Acquire::run`], or stopped by `interrupt` while it waits (module contract).
    ///
    /// # Errors
    /// [`Stopped::Interrupted`], or as [`Acquire::run`].
    pub async fn run_or<T>(
        &self,
        interrupt: impl Future<Output = T>,
    ) -> Result<Vec<Lease>, Stopped<T>> {
        let mut interrupt = std::pin::pin!(interrupt);
        let error = |e: Error| Stopped::Error(e);
        loop {
            let sent = Instant::now();
            let asked = self.budget.wait_ms(self.now_ms());
            let answer = self
                .session
                .acquire(self.intents, self.ttl_ms, asked, Duration::ZERO)
                .await
                .map_err(|e| error(e.into()))?;
            let setback = match answer {
                Acquired::Verdict(Verdict::Granted { leases }) => {
                    self.keeper.hold(&leases, sent);
                    return Ok(leases);
                }
                Acquired::Verdict(Verdict::Die {
                    retry_after_ms,
                    held_by,
                    ..
                }) => {
                    self.state.lock().expect("acquire lock").1 = held_by;
                    Setback::Die {
                        retry_after_ms,
                        asked_wait_ms: asked,
                    }
                }
                Acquired::Verdict(Verdict::Wait { ticket, held_by }) => {
                    *self.state.lock().expect("acquire lock") = (Some(ticket.0), held_by);
                    let outcome = tokio::select! {
                        outcome = self.follow(ticket.0) => outcome,
                        stop = &mut interrupt => return Err(Stopped::Interrupted(stop)),
                    };
                    self.state.lock().expect("acquire lock").0 = None;
                    match outcome.map_err(error)? {
                        Outcome::Granted(leases) => {
                            let kept = self.keeper.hold_renewed(self.session, &leases).await;
                            if kept.map_err(|e| error(e.into()))? {
                                return Ok(leases);
                            }
                            let ids: Vec<u64> = leases.iter().map(|l| l.lease_id.0).collect();
                            let released = self.session.release(Some(&ids)).await;
                            released.map_err(|e| error(e.into()))?;
                            continue;
                        }
                        Outcome::Died(retry_after_ms) => Setback::Withdrawn { retry_after_ms },
                        Outcome::TimedOut | Outcome::Waiting => Setback::WaitTimeout,
                    }
                }
                // Never asked for (no hold_ms): an answer this client cannot place.
                Acquired::Resolved(..) => {
                    return Err(error(Error::Unreachable(String::from(
                        "the server answered an unheld acquire as if held: is it the same version as this client?",
                    ))))
                }
            };
            let holds_others = !self.keeper.held().is_empty();
            match self.budget.after(setback, holds_others, self.now_ms()) {
                Next::AskAgain => {}
                Next::Sleep { ms } => tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    stop = &mut interrupt => return Err(Stopped::Interrupted(stop)),
                },
                Next::Fail(Failure::Died) => {
                    let retry_after_ms = match setback {
                        Setback::Die { retry_after_ms, .. }
                        | Setback::Withdrawn { retry_after_ms } => retry_after_ms,
                        Setback::WaitTimeout => 0,
                    };
                    return Err(error(Error::Died {
                        retry_after_ms,
                        blockers: self.blockers(),
                    }));
                }
                Next::Fail(Failure::Timeout(why)) => {
                    return Err(error(Error::Timeout {
                        why,
                        blockers: self.blockers(),
                    }))
                }
            }
        }
    }

    /// Long-polls a ticket until it resolves, or withdraws it a second past the budget.
    async fn follow(&self, ticket: u64) -> Result<Outcome, Error> {
        loop {
            let left = match self.budget.deadline() {
                Some(deadline) => Duration::from_millis(
                    deadline
                        .saturating_add(GRACE_MS)
                        .saturating_sub(self.now_ms()),
                ),
                None => MAX_HOLD,
            };
            let outcome = self.session.ticket(ticket, left).await?;
            if outcome != Outcome::Waiting {
                return Ok(outcome);
            }
            if left.is_zero() {
                if self.session.cancel(ticket).await.is_ok() {
                    return Ok(Outcome::TimedOut);
                }
                // Resolved as it was withdrawn: a grant is kept, anything else ends the wait.
                return match self.session.ticket(ticket, Duration::ZERO).await? {
                    Outcome::Waiting => Ok(Outcome::TimedOut),
                    resolved => Ok(resolved),
                };
            }
        }
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.state.get_mut().ok().and_then(|s| s.0.take()) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session = self.session.best_effort();
            runtime.spawn(async move { session.cancel(ticket).await });
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
