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
    AcquireOptions, Error, Event, HeartbeatOutcome, Kernel, LeaseId, LeaseSelection, LeaseStatus,
    ResourceState, SessionId, SessionInfo, Snapshot, StateDigest, Verdict,
};
use std::collections::BTreeMap;

/// The direct answer of one call.
#[derive(Debug)]
pub enum Output {
    Session(SessionInfo),
    Nothing,
    Digest(StateDigest),
    Verdict(Verdict),
    Heartbeat(Vec<(LeaseId, HeartbeatOutcome)>),
    Released(bool),
    ReleasedCount(usize),
    Statuses(Vec<(LeaseId, LeaseStatus)>),
    Resource(ResourceState),
    Deadline(Option<u64>),
}

/// A call with its aliases resolved to ids.
enum Call {
    Open {
        agent: String,
        namespace: String,
    },
    Close(SessionId),
    Suspend(SessionId),
    Digest(SessionId),
    Resume(Box<StateDigest>),
    Acquire {
        session: SessionId,
        intents: Vec<String>,
        options: AcquireOptions,
    },
    Heartbeat {
        session: SessionId,
        leases: Option<Vec<LeaseId>>,
    },
    Release {
        session: SessionId,
        lease: LeaseId,
    },
    ReleaseAll(SessionId),
    Reconcile {
        session: SessionId,
        leases: Vec<LeaseId>,
    },
    CancelWait {
        session: SessionId,
        ticket: klock_core::TicketId,
    },
    Advance,
    ResourceState {
        resource: String,
        namespace: String,
    },
    NextDeadline,
}

/// State of one vector run.
pub struct Runner {
    kernel: Kernel,
    aliases: Aliases,
    /// Priorities of the sessions seen opened or resumed, for `priority_lt`.
    priorities: BTreeMap<SessionId, u64>,
}

/// Runs a whole vector; `Err` is `step k: ...` (or a config failure).
pub fn run(vector: &Vector) -> Result<(), String> {
    let kernel = Kernel::new(vector.config.clone())
        .map_err(|e| format!("config rejected by the kernel: {e}"))?;
    let mut runner = Runner {
        kernel,
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

fn drain(kernel: &mut Kernel) -> Vec<Event> {
    std::iter::from_fn(|| kernel.poll_event()).collect()
}

impl Runner {
    fn step(&mut self, step: &Step) -> Result<(), String> {
        let now = step.now;
        let call = self.resolve(&step.action)?;
        let none = Expect::default();
        let expect = step.expect.as_ref().unwrap_or(&none);
        let baseline = expect.error.map(|_| {
            let mut clone = self.kernel.clone();
            clone.advance(now);
            let events = drain(&mut clone);
            (events, clone.snapshot(now))
        });
        // A resume never changes the session's priority (SPEC.md §5), which since rev 4 may
        // differ from the one it opened with: compare with the kernel's own view just before.
        let priority_before = match &call {
            Call::Resume(d) => self.current_priority(d.identity.session_id, now),
            _ => None,
        };
        let result = self.call(&call, now);
        let events = drain(&mut self.kernel);
        if let (Some(old), Ok(Output::Session(info))) = (priority_before, &result) {
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
                let (settled, before) = baseline.expect("taken when an error is expected");
                self.check_unchanged(now, &settled, &events, &before, &e)?;
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
        let after = self.kernel.snapshot(now);
        let extra = self.kernel.pending_events();
        if extra != 0 {
            return Err(format!(
                "taking a snapshot after the failed call emitted {extra} events"
            ));
        }
        if let Some(diff) = snapshot_diff(before, &after) {
            return Err(format!(
                "the failed call ({}) changed the state beyond settling time: {diff}",
                e.code.name()
            ));
        }
        Ok(())
    }

    fn resolve(&mut self, action: &Action) -> Result<Call, String> {
        let a = &mut self.aliases;
        Ok(match action {
            Action::Open {
                agent, namespace, ..
            } => Call::Open {
                agent: agent.clone(),
                namespace: namespace.clone(),
            },
            Action::Close { session } => Call::Close(a.session(session)?),
            Action::Suspend { session } => Call::Suspend(a.session(session)?),
            Action::Digest { session, .. } => Call::Digest(a.session(session)?),
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
                Call::Resume(Box::new(d))
            }
            Action::Acquire {
                session,
                intents,
                ttl_ms,
                wait,
                wait_timeout_ms,
            } => Call::Acquire {
                session: a.session(session)?,
                intents: intents.clone(),
                options: AcquireOptions {
                    ttl_ms: *ttl_ms,
                    wait: wait.unwrap_or(true),
                    wait_timeout_ms: *wait_timeout_ms,
                },
            },
            Action::Heartbeat { session, leases } => Call::Heartbeat {
                session: a.session(session)?,
                leases: match leases {
                    LeaseList::All => None,
                    LeaseList::Aliases(list) => {
                        Some(list.iter().map(|l| a.lease(l)).collect::<Result<_, _>>()?)
                    }
                },
            },
            Action::Release { session, lease } => Call::Release {
                session: a.session(session)?,
                lease: a.lease(lease)?,
            },
            Action::ReleaseAll { session } => Call::ReleaseAll(a.session(session)?),
            Action::Reconcile { session, leases } => Call::Reconcile {
                session: a.session(session)?,
                leases: leases
                    .iter()
                    .map(|l| a.lease(l))
                    .collect::<Result<_, _>>()?,
            },
            Action::CancelWait { session, ticket } => Call::CancelWait {
                session: a.session(session)?,
                ticket: a.ticket(ticket)?,
            },
            Action::Advance => Call::Advance,
            Action::ResourceState {
                resource,
                namespace,
            } => Call::ResourceState {
                resource: resource.clone(),
                namespace: namespace.clone(),
            },
            Action::NextDeadline => Call::NextDeadline,
        })
    }

    fn call(&mut self, call: &Call, now: u64) -> Result<Output, Error> {
        let k = &mut self.kernel;
        Ok(match call {
            Call::Open { agent, namespace } => {
                Output::Session(k.open_session(agent, namespace, now)?)
            }
            Call::Close(s) => k.close_session(*s, now).map(|()| Output::Nothing)?,
            Call::Suspend(s) => k.suspend_session(*s, now).map(|()| Output::Nothing)?,
            Call::Digest(s) => Output::Digest(k.digest(*s, now)?),
            Call::Resume(d) => Output::Session(k.resume_session(d, now)?),
            Call::Acquire {
                session,
                intents,
                options,
            } => Output::Verdict(k.acquire(*session, intents, *options, now)?),
            Call::Heartbeat { session, leases } => {
                let which = match leases {
                    None => LeaseSelection::All,
                    Some(ids) => LeaseSelection::Ids(ids),
                };
                Output::Heartbeat(k.heartbeat(*session, which, now)?)
            }
            Call::Release { session, lease } => Output::Released(k.release(*session, *lease, now)?),
            Call::ReleaseAll(s) => Output::ReleasedCount(k.release_all(*s, now)?),
            Call::Reconcile { session, leases } => {
                Output::Statuses(k.reconcile(*session, leases, now)?)
            }
            Call::CancelWait { session, ticket } => k
                .cancel_wait(*session, *ticket, now)
                .map(|()| Output::Nothing)?,
            Call::Advance => {
                k.advance(now);
                Output::Nothing
            }
            Call::ResourceState {
                resource,
                namespace,
            } => Output::Resource(k.resource_state(resource, namespace, now)?),
            Call::NextDeadline => Output::Deadline(k.next_deadline()),
        })
    }

    /// The session's priority as the kernel sees it at `now`, read from a clone so the real
    /// kernel settles nothing outside the step.
    fn current_priority(&self, session: SessionId, now: u64) -> Option<u64> {
        let snapshot = self.kernel.clone().snapshot(now);
        let view = snapshot.sessions.iter().find(|s| s.session_id == session);
        view.map(|s| s.priority)
    }

    /// Binds the `as` of open and digest, and remembers session priorities.
    fn bind_output(&mut self, action: &Action, output: &Output) -> Result<(), String> {
        match (action, output) {
            (Action::Open { bind, .. }, Output::Session(info)) => {
                if let Some(alias) = bind {
                    self.aliases.bind_session(alias, info.session_id)?;
                }
                self.priorities.insert(info.session_id, info.priority);
            }
            (Action::Resume { .. }, Output::Session(info)) => {
                self.priorities.insert(info.session_id, info.priority);
            }
            (
                Action::Digest {
                    bind: Some(alias), ..
                },
                Output::Digest(d),
            ) => self.aliases.bind_digest(alias, d.clone())?,
            _ => {}
        }
        Ok(())
    }
}

/// The lease ids a heartbeat or reconcile asked about (`None`: all, or not such a call).
fn call_request(call: &Call) -> Option<Vec<LeaseId>> {
    match call {
        Call::Heartbeat { leases, .. } => leases.clone(),
        Call::Reconcile { leases, .. } => Some(leases.clone()),
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
