//! Executing a parsed vector against a fresh [`Kernel`].
//!
//! Contract: [`run`] builds the kernel from the vector's config and runs the steps in order,
//! stopping at the first step that does not behave as written; the error is
//! `step k: <what differed>` with `k` counted from 1. For every step it resolves the aliases,
//! makes exactly the one kernel call the `do` names at the step's `now`, drains every event
//! with [`Kernel::poll_event`], binds the step's aliases, and checks the answer and the events
//! ([`crate::check`]). A step without `expect` must succeed and emit nothing. When an error is
//! expected, the runner also proves the failed call changed nothing but the settlement of time:
//! a clone of the kernel taken before the call is advanced to the same `now`; its events must
//! equal the call's events and its snapshot the kernel's snapshot after the call.

use crate::aliases::Aliases;
use crate::check;
use crate::vector::{Action, Expect, LeaseList, SessionRef, Step, Vector};
use klock_core::{
    AcquireOptions, Command, Error, Event, Kernel, LeaseId, Output, SessionId, Snapshot,
};
use std::collections::BTreeMap;

/// What vectors run against: the kernel itself, or a host that exposes it (the server).
pub trait Host {
    /// Makes the call at `now`; its answer and every event it caused, in order. `Err` is a
    /// failure of the host itself (a transport error, an answer it cannot read).
    fn call(&mut self, command: &Command, now: u64) -> Result<Answer, String>;

    /// The events settling time alone at `now` would emit and the state after them, taken
    /// before a call expected to fail; `None` when the host cannot show it (the kernel's own
    /// run proves that property).
    fn probe(&self, now: u64) -> Option<(Vec<Event>, Snapshot)>;

    /// The state at `now` after a failed call, to compare with the probe (same `None` rule).
    fn settled_state(&mut self, now: u64) -> Option<Result<Snapshot, String>>;

    /// A session's current priority, read without side effects, if the host can.
    fn priority(&self, session: SessionId, now: u64) -> Option<u64>;
}

/// A host borrowed for one run (so its owner can inspect it afterwards).
impl<H: Host> Host for &mut H {
    fn call(&mut self, command: &Command, now: u64) -> Result<Answer, String> {
        (**self).call(command, now)
    }

    fn probe(&self, now: u64) -> Option<(Vec<Event>, Snapshot)> {
        (**self).probe(now)
    }

    fn settled_state(&mut self, now: u64) -> Option<Result<Snapshot, String>> {
        (**self).settled_state(now)
    }

    fn priority(&self, session: SessionId, now: u64) -> Option<u64> {
        (**self).priority(session, now)
    }
}

/// A call's direct answer and the events it caused.
pub type Answer = (Result<Output, Error>, Vec<Event>);

impl Host for Kernel {
    fn call(&mut self, command: &Command, now: u64) -> Result<Answer, String> {
        let result = self.apply(command, now);
        Ok((result, std::iter::from_fn(|| self.poll_event()).collect()))
    }

    fn probe(&self, now: u64) -> Option<(Vec<Event>, Snapshot)> {
        let mut clone = self.clone();
        clone.advance(now);
        let events = std::iter::from_fn(|| clone.poll_event()).collect();
        Some((events, clone.snapshot(now)))
    }

    fn settled_state(&mut self, now: u64) -> Option<Result<Snapshot, String>> {
        let after = self.snapshot(now);
        let extra = self.pending_events();
        Some(match extra {
            0 => Ok(after),
            n => Err(format!(
                "taking a snapshot after the failed call emitted {n} events"
            )),
        })
    }

    fn priority(&self, session: SessionId, now: u64) -> Option<u64> {
        let snapshot = self.clone().snapshot(now);
        let view = snapshot.sessions.iter().find(|s| s.session_id == session);
        view.map(|s| s.priority)
    }
}

/// State of one vector run.
pub struct Runner<H: Host> {
    host: H,
    aliases: Aliases,
    /// Priorities of the sessions seen opened or resumed, for `priority_lt`.
    priorities: BTreeMap<SessionId, u64>,
}

/// Runs a whole vector against the kernel; `Err` is `step k: ...` (or a config failure).
pub fn run(vector: &Vector) -> Result<(), String> {
    let kernel = Kernel::new(vector.config.clone())
        .map_err(|e| format!("config rejected by the kernel: {e}"))?;
    run_on(kernel, vector)
}

/// Runs a whole vector against `host`, which must start in the vector's configuration.
pub fn run_on<H: Host>(host: H, vector: &Vector) -> Result<(), String> {
    let mut runner = Runner {
        host,
        aliases: Aliases::default(),
        priorities: BTreeMap::new(),
    };
    for (i, step) in vector.steps.iter().enumerate() {
        runner
            .step(step)
            .map_err(|e| format!("step {}: {} @{}: {e}", i + 1, step.action.name(), step.now))?;
    }
    Ok(())
}

impl<H: Host> Runner<H> {
    fn step(&mut self, step: &Step) -> Result<(), String> {
        let now = step.now;
        let call = self.resolve(&step.action)?;
        let none = Expect::default();
        let expect = step.expect.as_ref().unwrap_or(&none);
        let baseline = expect.error.and_then(|_| self.host.probe(now));
        // A resume never changes the session's priority (docs/SPEC.md §5), which since rev 4 may
        // differ from the one it opened with: compare with the kernel's own view just before.
        let priority_before = match &call {
            Command::Resume { digest } => self.host.priority(digest.identity.session_id, now),
            _ => None,
        };
        let (result, events) = self.host.call(&call, now)?;
        if let (Some(old), Ok(Output::Session { session: info })) = (priority_before, &result) {
            if old != info.priority {
                return Err(format!(
                    "resume changed the session's priority from {old} to {}",
                    info.priority
                ));
            }
        }
        match (expect.error, result) {
            (None, Ok(output)) => {
                self.bind_output(&step.action, &output)?;
                check::output(
                    expect,
                    &call_request(&call),
                    &output,
                    &mut self.aliases,
                    &self.priorities,
                )?;
            }
            (None, Err(e)) => {
                return Err(format!(
                    "expected success, got error {}: {}{}",
                    e.code.name(),
                    e.message,
                    check::events_note(&events, &self.aliases)
                ))
            }
            (Some(code), Ok(output)) => {
                return Err(format!(
                    "expected error {}, got success: {}",
                    code.name(),
                    check::describe_output(&output, &self.aliases)
                ))
            }
            (Some(code), Err(e)) => {
                if e.code != code {
                    return Err(format!(
                        "error: expected {}, got {}: {}",
                        code.name(),
                        e.code.name(),
                        e.message
                    ));
                }
                if let Some((settled, before)) = baseline {
                    self.check_unchanged(now, &settled, &events, &before, &e)?;
                }
            }
        }
        check::events(&expect.events, &events, &mut self.aliases)
    }

    /// A failed call may only have settled time: same events and state as a plain advance.
    fn check_unchanged(
        &mut self,
        now: u64,
        settled: &[Event],
        events: &[Event],
        before: &Snapshot,
        e: &Error,
    ) -> Result<(), String> {
        if settled != events {
            return Err(format!(
                "the failed call ({}) emitted {} but settling time alone emits {}",
                e.code.name(),
                check::describe_events(events, &self.aliases),
                check::describe_events(settled, &self.aliases)
            ));
        }
        let after = match self.host.settled_state(now) {
            Some(after) => after?,
            None => return Ok(()),
        };
        if let Some(diff) = snapshot_diff(before, &after) {
            return Err(format!(
                "the failed call ({}) changed the state beyond settling time: {diff}",
                e.code.name()
            ));
        }
        Ok(())
    }

    fn resolve(&mut self, action: &Action) -> Result<Command, String> {
        let a = &mut self.aliases;
        Ok(match action {
            Action::Open {
                agent, namespace, ..
            } => Command::Open {
                agent_id: agent.clone(),
                namespace: namespace.clone(),
            },
            Action::Close { session } => Command::Close {
                session: a.session(session)?,
            },
            Action::Suspend { session } => Command::Suspend {
                session: a.session(session)?,
            },
            Action::Digest { session, .. } => Command::Digest {
                session: a.session(session)?,
            },
            Action::Resume { digest, tamper } => {
                let mut d = a.digest(digest)?;
                let id = &mut d.identity;
                if let Some(v) = &tamper.agent_id {
                    id.agent_id.clone_from(v);
                }
                if let Some(v) = &tamper.namespace {
                    id.namespace.clone_from(v);
                }
                match &tamper.session_id {
                    Some(SessionRef::Alias(alias)) => id.session_id = a.session(alias)?,
                    Some(SessionRef::Number(n)) => id.session_id = SessionId(*n),
                    None => {}
                }
                if let Some(v) = tamper.priority_timestamp {
                    id.priority_timestamp = v;
                }
                if let Some(v) = tamper.epoch {
                    id.epoch = v;
                }
                Command::Resume {
                    digest: Box::new(d),
                }
            }
            Action::Acquire {
                session,
                intents,
                ttl_ms,
                wait,
                wait_timeout_ms,
            } => Command::Acquire {
                session: a.session(session)?,
                intents: intents.clone(),
                options: AcquireOptions {
                    ttl_ms: *ttl_ms,
                    wait: wait.unwrap_or(true),
                    wait_timeout_ms: *wait_timeout_ms,
                },
            },
            Action::Heartbeat { session, leases } => Command::Heartbeat {
                session: a.session(session)?,
                leases: match leases {
                    LeaseList::All => None,
                    LeaseList::Aliases(list) => {
                        Some(list.iter().map(|l| a.lease(l)).collect::<Result<_, _>>()?)
                    }
                },
            },
            Action::Release { session, lease } => Command::Release {
                session: a.session(session)?,
                lease: a.lease(lease)?,
            },
            Action::ReleaseAll { session } => Command::ReleaseAll {
                session: a.session(session)?,
            },
            Action::Reconcile { session, leases } => Command::Reconcile {
                session: a.session(session)?,
                leases: leases
                    .iter()
                    .map(|l| a.lease(l))
                    .collect::<Result<_, _>>()?,
            },
            Action::CancelWait { session, ticket } => Command::CancelWait {
                session: a.session(session)?,
                ticket: a.ticket(ticket)?,
            },
            Action::Advance => Command::Advance,
            Action::ResourceState {
                resource,
                namespace,
            } => Command::ResourceState {
                resource: resource.clone(),
                namespace: namespace.clone(),
            },
            Action::NextDeadline => Command::NextDeadline,
        })
    }

    /// Binds the `as` of open and digest, and remembers session priorities.
    fn bind_output(&mut self, action: &Action, output: &Output) -> Result<(), String> {
        match (action, output) {
            (Action::Open { bind, .. }, Output::Session { session: info }) => {
                if let Some(alias) = bind {
                    self.aliases.bind_session(alias, info.session_id)?;
                }
                self.priorities.insert(info.session_id, info.priority);
            }
            (Action::Resume { .. }, Output::Session { session: info }) => {
                self.priorities.insert(info.session_id, info.priority);
            }
            (
                Action::Digest {
                    bind: Some(alias), ..
                },
                Output::Digest { digest: d },
            ) => self.aliases.bind_digest(alias, d.clone())?,
            _ => {}
        }
        Ok(())
    }
}

/// The lease ids a heartbeat or reconcile asked about (`None`: all, or not such a call).
fn call_request(call: &Command) -> Option<Vec<LeaseId>> {
    match call {
        Command::Heartbeat { leases, .. } => leases.clone(),
        Command::Reconcile { leases, .. } => Some(leases.clone()),
        _ => None,
    }
}

/// The first part of two snapshots that differs, shown both ways.
fn snapshot_diff(before: &Snapshot, after: &Snapshot) -> Option<String> {
    let parts: [(&str, String, String); 7] = [
        (
            "now",
            format!("{:?}", before.now),
            format!("{:?}", after.now),
        ),
        (
            "policy",
            format!("{:?}", before.policy),
            format!("{:?}", after.policy),
        ),
        (
            "next_deadline",
            format!("{:?}", before.next_deadline),
            format!("{:?}", after.next_deadline),
        ),
        (
            "sessions",
            format!("{:?}", before.sessions),
            format!("{:?}", after.sessions),
        ),
        (
            "leases",
            format!("{:?}", before.leases),
            format!("{:?}", after.leases),
        ),
        (
            "tickets",
            format!("{:?}", before.tickets),
            format!("{:?}", after.tickets),
        ),
        (
            "stats",
            format!("{:?}", before.stats),
            format!("{:?}", after.stats),
        ),
    ];
    if before == after {
        return None;
    }
    Some(parts.into_iter().find(|(_, b, a)| b != a).map_or_else(
        || String::from("snapshots differ"),
        |(name, b, a)| format!("snapshot.{name}: expected {b}, got {a}"),
    ))
}
