//! Every kernel operation as a value: a [`Command`] in, an [`Output`] out.
//!
//! Contract: [`Kernel::apply`] makes exactly the one call a command names, at `now`, and
//! returns its direct answer; events are drained with [`Kernel::poll_event`] as after any
//! call. It reads no clock and does no I/O, so a log of `(command, now)` pairs is a complete
//! record of a kernel: applying the same log to a kernel with the same config gives the same
//! outputs and events, bit for bit. That is what the control plane logs and replays (and,
//! later, what Raft replicates), and what a conformance run can record as a resolved script.
//! With `serde`, commands and outputs serialize as tagged JSON objects (`{"op": "acquire",
//! ...}`, `{"output": "verdict", ...}`).

use crate::error::Error;
use crate::kernel::Kernel;
use crate::types::{
    AcquireOptions, Event, HeartbeatOutcome, LeaseId, LeaseSelection, LeaseStatus, ResourceState,
    SessionId, SessionInfo, StateDigest, TicketId, Verdict,
};
use alloc::{boxed::Box, string::String, vec::Vec};

/// One kernel operation with its arguments (not its `now`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)
)]
#[non_exhaustive]
pub enum Command {
    /// [`Kernel::open_session`]; answered by [`Output::Session`].
    Open {
        /// 1..=256 bytes of printable UTF-8 (docs/SPEC.md §5).
        agent_id: String,
        /// 1..=256 bytes of printable UTF-8 (docs/SPEC.md §5).
        namespace: String,
    },
    /// [`Kernel::close_session`]; answered by [`Output::Done`].
    Close {
        /// The session to close.
        session: SessionId,
    },
    /// [`Kernel::suspend_session`]; answered by [`Output::Done`].
    Suspend {
        /// The session that is restarting.
        session: SessionId,
    },
    /// [`Kernel::digest`]; answered by [`Output::Digest`].
    Digest {
        /// The session to describe.
        session: SessionId,
    },
    /// [`Kernel::resume_session`]; answered by [`Output::Session`].
    Resume {
        /// The digest the restarted agent saved.
        digest: Box<StateDigest>,
    },
    /// [`Kernel::acquire`]; answered by [`Output::Verdict`].
    Acquire {
        /// The requesting session.
        session: SessionId,
        /// The manifest: 1..=256 intents, each `"PREDICATE TYPE:/path"` (docs/SPEC.md §6).
        intents: Vec<String>,
        /// TTL, wait and wait timeout.
        options: AcquireOptions,
    },
    /// [`Kernel::heartbeat`]; answered by [`Output::Heartbeat`]. `leases: None` renews every
    /// lease of the session.
    Heartbeat {
        /// The session whose leases to renew.
        session: SessionId,
        /// The leases to renew, each answered separately; `None` = every active lease.
        leases: Option<Vec<LeaseId>>,
    },
    /// [`Kernel::release`]; answered by [`Output::Released`].
    Release {
        /// The owning session.
        session: SessionId,
        /// The lease to release.
        lease: LeaseId,
    },
    /// [`Kernel::release_all`]; answered by [`Output::ReleasedAll`].
    ReleaseAll {
        /// The session whose active leases to release (its waits are kept).
        session: SessionId,
    },
    /// [`Kernel::reconcile`]; answered by [`Output::Reconcile`].
    Reconcile {
        /// The asking session.
        session: SessionId,
        /// The leases to report on.
        leases: Vec<LeaseId>,
    },
    /// [`Kernel::cancel_wait`]; answered by [`Output::Done`].
    CancelWait {
        /// The owning session.
        session: SessionId,
        /// The waiting ticket to withdraw.
        ticket: TicketId,
    },
    /// Settles what is due (the host's timer): [`Kernel::advance`]; answered by
    /// [`Output::Done`].
    Advance,
    /// [`Kernel::resource_state`]; answered by [`Output::ResourceState`].
    ResourceState {
        /// The resource, `TYPE:/path`.
        resource: String,
        /// The namespace to look in (required here: no default is filled in).
        namespace: String,
    },
    /// A pure query: its `now` is ignored. [`Kernel::next_deadline`]; answered by
    /// [`Output::NextDeadline`].
    NextDeadline,
}

/// The direct answer of one [`Command`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "output", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Output {
    /// Open and resume.
    Session {
        /// The session as opened or resumed.
        session: SessionInfo,
    },
    /// Close, suspend, cancel_wait, advance.
    Done,
    /// Digest.
    Digest {
        /// The session's recovery digest, to save for a resume.
        digest: StateDigest,
    },
    /// Acquire.
    Verdict {
        /// GRANTED, WAIT or DIE.
        verdict: Verdict,
    },
    /// Serialized as `[{"lease_id": 1, "status": "OK", "expires_at": n}, {"lease_id": 2,
    /// "status": "LEASE_RELEASED"}, ...]`.
    Heartbeat {
        /// One answer per lease, in request order (`leases: None`: every active lease, by
        /// id): the new effective expiry in milliseconds, or why it was not renewed.
        #[cfg_attr(feature = "serde", serde(with = "wire::heartbeat_results"))]
        results: Vec<(LeaseId, HeartbeatOutcome)>,
    },
    /// Release: whether this call released the lease.
    Released {
        /// `true` if this call released it; `false` if it had already ended (idempotent).
        released: bool,
    },
    /// Release_all: how many leases it released.
    ReleasedAll {
        /// The number of leases released.
        count: usize,
    },
    /// Serialized as `[{"lease_id": 1, "status": "ACTIVE", "expires_at": n, "fence": f},
    /// {"lease_id": 2, "status": "RELEASED"}, ...]`.
    Reconcile {
        /// One status per requested lease, in request order.
        #[cfg_attr(feature = "serde", serde(with = "wire::reconcile_statuses"))]
        statuses: Vec<(LeaseId, LeaseStatus)>,
    },
    /// Resource_state.
    ResourceState {
        /// Holders, queue and covering holders of the node.
        state: ResourceState,
    },
    /// Next_deadline.
    NextDeadline {
        /// The earliest pending deadline in milliseconds, possibly already past; `None` when
        /// nothing is pending (docs/SPEC.md §2).
        deadline: Option<u64>,
    },
}

impl Command {
    /// The operation's stable snake_case name, e.g. `"acquire"`.
    pub const fn name(&self) -> &'static str {
        match self {
            Command::Open { .. } => "open",
            Command::Close { .. } => "close",
            Command::Suspend { .. } => "suspend",
            Command::Digest { .. } => "digest",
            Command::Resume { .. } => "resume",
            Command::Acquire { .. } => "acquire",
            Command::Heartbeat { .. } => "heartbeat",
            Command::Release { .. } => "release",
            Command::ReleaseAll { .. } => "release_all",
            Command::Reconcile { .. } => "reconcile",
            Command::CancelWait { .. } => "cancel_wait",
            Command::Advance => "advance",
            Command::ResourceState { .. } => "resource_state",
            Command::NextDeadline => "next_deadline",
        }
    }

    /// The session a command names, if any.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            Command::Close { session }
            | Command::Suspend { session }
            | Command::Digest { session }
            | Command::Acquire { session, .. }
            | Command::Heartbeat { session, .. }
            | Command::Release { session, .. }
            | Command::ReleaseAll { session }
            | Command::Reconcile { session, .. }
            | Command::CancelWait { session, .. } => Some(*session),
            Command::Resume { digest } => Some(digest.identity.session_id),
            Command::Open { .. }
            | Command::Advance
            | Command::ResourceState { .. }
            | Command::NextDeadline => None,
        }
    }
}

/// What [`Kernel::replay_step`] reports, in the order it happened.
#[derive(Debug)]
pub enum Replayed<'a> {
    /// An event that settling at the step's time emitted, before its first call.
    Settled(Event),
    /// A call and its answer (an error is an answer too); the events it emitted follow as
    /// [`Replayed::Emitted`].
    Answer(&'a Command, Result<Output, Error>),
    /// An event the call before it emitted.
    Emitted(Event),
}

impl Kernel {
    /// Makes a recorded step again as the host that recorded it made it: settles at `now`
    /// ([`Kernel::advance`]), then applies each of `commands` at `now`, in order, and drains
    /// the events after each, handing everything to `seen`. A failed call changed nothing
    /// but time, where it was recorded too, so it is one more answer. From a state a host
    /// exported, replaying its later steps this way gives the host's kernel after each step,
    /// bit for bit: a server's history (one step per log entry), the dashboard's replay.
    pub fn replay_step<'a>(
        &mut self,
        now: u64,
        commands: &'a [Command],
        mut seen: impl FnMut(Replayed<'a>),
    ) {
        self.advance(now);
        while let Some(event) = self.poll_event() {
            seen(Replayed::Settled(event));
        }
        for command in commands {
            seen(Replayed::Answer(command, self.apply(command, now)));
            while let Some(event) = self.poll_event() {
                seen(Replayed::Emitted(event));
            }
        }
    }

    /// Applies `command` at `now` (see the module contract).
    ///
    /// # Errors
    /// The error of the call the command names; as for that call, a failure changes nothing
    /// but the settlement of time.
    pub fn apply(&mut self, command: &Command, now: u64) -> Result<Output, Error> {
        Ok(match command {
            Command::Open {
                agent_id,
                namespace,
            } => Output::Session {
                session: self.open_session(agent_id, namespace, now)?,
            },
            Command::Close { session } => {
                self.close_session(*session, now)?;
                Output::Done
            }
            Command::Suspend { session } => {
                self.suspend_session(*session, now)?;
                Output::Done
            }
            Command::Digest { session } => Output::Digest {
                digest: self.digest(*session, now)?,
            },
            Command::Resume { digest } => Output::Session {
                session: self.resume_session(digest, now)?,
            },
            Command::Acquire {
                session,
                intents,
                options,
            } => Output::Verdict {
                verdict: self.acquire(*session, intents, *options, now)?,
            },
            Command::Heartbeat { session, leases } => {
                let which = match leases {
                    None => LeaseSelection::All,
                    Some(ids) => LeaseSelection::Ids(ids),
                };
                Output::Heartbeat {
                    results: self.heartbeat(*session, which, now)?,
                }
            }
            Command::Release { session, lease } => Output::Released {
                released: self.release(*session, *lease, now)?,
            },
            Command::ReleaseAll { session } => Output::ReleasedAll {
                count: self.release_all(*session, now)?,
            },
            Command::Reconcile { session, leases } => Output::Reconcile {
                statuses: self.reconcile(*session, leases, now)?,
            },
            Command::CancelWait { session, ticket } => {
                self.cancel_wait(*session, *ticket, now)?;
                Output::Done
            }
            Command::Advance => {
                self.advance(now);
                Output::Done
            }
            Command::ResourceState {
                resource,
                namespace,
            } => Output::ResourceState {
                state: self.resource_state(resource, namespace, now)?,
            },
            Command::NextDeadline => Output::NextDeadline {
                deadline: self.next_deadline(),
            },
        })
    }
}

/// The JSON shape of per-lease answers: one flat object per lease, named by `lease_id`.
#[cfg(feature = "serde")]
mod wire {
    use crate::error::ErrorCode;
    use crate::types::{HeartbeatOutcome, LeaseId, LeaseStatus};
    use alloc::{format, string::String, vec::Vec};
    use serde::{de::Error as _, Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct HeartbeatItem {
        lease_id: LeaseId,
        /// `OK`, or the error name of why the lease was not renewed.
        status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expires_at: Option<u64>,
    }

    pub mod heartbeat_results {
        use super::*;

        pub fn serialize<S: Serializer>(
            results: &[(LeaseId, HeartbeatOutcome)],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            let items: Vec<HeartbeatItem> = results
                .iter()
                .map(|(lease_id, outcome)| match outcome {
                    Ok(expires_at) => HeartbeatItem {
                        lease_id: *lease_id,
                        status: String::from("OK"),
                        expires_at: Some(*expires_at),
                    },
                    Err(code) => HeartbeatItem {
                        lease_id: *lease_id,
                        status: String::from(code.name()),
                        expires_at: None,
                    },
                })
                .collect();
            items.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Vec<(LeaseId, HeartbeatOutcome)>, D::Error> {
            let items = Vec::<HeartbeatItem>::deserialize(deserializer)?;
            items
                .into_iter()
                .map(|item| {
                    let outcome = match (item.status.as_str(), item.expires_at) {
                        ("OK", Some(at)) => Ok(at),
                        ("OK", None) => return Err(D::Error::missing_field("expires_at")),
                        (name, None) => Err(ErrorCode::from_name(name).ok_or_else(|| {
                            D::Error::custom(format!("unknown heartbeat status {name:?}"))
                        })?),
                        (_, Some(_)) => {
                            return Err(D::Error::custom("expires_at belongs to status OK only"))
                        }
                    };
                    Ok((item.lease_id, outcome))
                })
                .collect()
        }
    }

    #[derive(Serialize, Deserialize)]
    struct ReconcileItem {
        lease_id: LeaseId,
        #[serde(flatten)]
        status: LeaseStatus,
    }

    pub mod reconcile_statuses {
        use super::*;

        pub fn serialize<S: Serializer>(
            statuses: &[(LeaseId, LeaseStatus)],
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            let items: Vec<ReconcileItem> = statuses
                .iter()
                .map(|(lease_id, status)| ReconcileItem {
                    lease_id: *lease_id,
                    status: *status,
                })
                .collect();
            items.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Vec<(LeaseId, LeaseStatus)>, D::Error> {
            let items = Vec::<ReconcileItem>::deserialize(deserializer)?;
            Ok(items.into_iter().map(|i| (i.lease_id, i.status)).collect())
        }
    }
}
