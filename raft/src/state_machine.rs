//! openraft's state machine on the server's applier.
//!
//! Contract:
//! - Committed entries are applied in log order through the server's
//!   [`Applier`], exactly as the single-node server applies its own: a `Normal` entry's
//!   [`Proposal`] is the log record, applied at `max(last_now, entry.now)` (the machine's rule:
//!   time never goes back), and its [`Reply`] goes to the proposer's responder (on the node that
//!   proposed it; none elsewhere or on replay). A blank entry (a new leader's) or a membership
//!   entry carries no command: the machine only moves its index past it
//!   ([`Applier::pass`]), and a membership entry becomes the state machine's membership.
//! - The machine's index is the Raft index plus one, as the log seam's (see
//!   [`crate::log_store`]): a snapshot's [`MachineSnapshot::applied`] is always its last log
//!   id's index plus one.
//! - Applying reads no clock and does no I/O beyond what the applier does (its event hub and
//!   history, in memory).
//! - A snapshot is the machine's [`MachineSnapshot`] as JSON (the kernel's exported state, the
//!   last applied index and time, the state hash, the remembered answers and session secrets),
//!   with openraft's metadata (last log id, membership) beside it. Installing one restores the
//!   machine from it ([`Machine::restore`], which checks its hash) and takes its metadata; a
//!   snapshot whose index does not match its metadata is refused by name, and the machine is
//!   left as it was.
//! - The current snapshot is kept in memory (persisting it is the next step: raft/README.md).

use crate::io_error;
use crate::types::{KlockRaft, LogId, Proposal};
use futures_util::{Stream, TryStreamExt as _};
use klock_core::Output;
use klock_server::applier::Applier;
use klock_server::engine::Reply;
use klock_server::machine::{Machine, MachineSnapshot};
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use std::io::{self, Cursor};
use std::sync::{Arc, Mutex};

/// A snapshot's metadata and data.
pub type Snapshot = SnapshotOf<KlockRaft, Cursor<Vec<u8>>>;
type Meta = SnapshotMetaOf<KlockRaft>;
type Membership = StoredMembershipOf<KlockRaft>;

/// The latest snapshot built or installed, shared with the builders.
type Current = Arc<Mutex<Option<(Meta, Vec<u8>)>>>;

/// Raft's state machine on an applier (see the module contract).
pub struct StateMachine {
    applier: Applier,
    last_applied: Option<LogId>,
    membership: Membership,
    current: Current,
}

impl StateMachine {
    /// A state machine on `applier`, whose machine has applied nothing yet.
    ///
    /// # Errors
    /// A machine that has already applied entries: what Raft entries they were is unknown
    /// (a machine is restored with its Raft metadata by installing a snapshot).
    pub fn new(applier: Applier) -> io::Result<StateMachine> {
        let applied = applier.machine().applied();
        if applied != 0 {
            return Err(io_error(format!(
                "a Raft state machine starts from a machine that applied nothing; this one \
                 applied {applied} entries"
            )));
        }
        Ok(StateMachine {
            applier,
            last_applied: None,
            membership: Membership::default(),
            current: Arc::default(),
        })
    }

    /// The applier (its machine, event streams and history).
    pub fn applier(&self) -> &Applier {
        &self.applier
    }

    /// The answer to an entry that carries no command.
    fn done(&self, index: u64) -> Reply {
        Reply {
            index,
            now: self.applier.machine().last_now(),
            output: Ok(Output::Done),
            events: Vec::new(),
        }
    }
}

/// Builds a snapshot of the state machine as it was when the builder was made.
pub struct SnapshotBuilder {
    meta: Meta,
    snapshot: MachineSnapshot,
    current: Current,
}

impl RaftSnapshotBuilder<KlockRaft> for SnapshotBuilder {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let bytes = serde_json::to_vec(&self.snapshot).map_err(io_error)?;
        *lock(&self.current) = Some((self.meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Cursor::new(bytes),
        })
    }
}

impl RaftStateMachine<KlockRaft> for StateMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, Membership)> {
        Ok((self.last_applied.clone(), self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<KlockRaft>>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let index = entry.log_id.index + 1;
            let reply = match entry.payload {
                EntryPayload::Normal(Proposal(record)) => self.applier.apply(index, &record),
                EntryPayload::Blank => {
                    self.applier.pass(index);
                    self.done(index)
                }
                EntryPayload::Membership(membership) => {
                    self.applier.pass(index);
                    self.membership = Membership::new(Some(entry.log_id.clone()), membership);
                    self.done(index)
                }
            };
            self.last_applied = Some(entry.log_id);
            if let Some(responder) = responder {
                responder.send(reply);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            meta: Meta {
                last_log_id: self.last_applied.clone(),
                last_membership: self.membership.clone(),
            },
            snapshot: self.applier.machine().snapshot(),
            current: Arc::clone(&self.current),
        }
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Cursor<Vec<u8>>) -> io::Result<()> {
        let bytes = snapshot.into_inner();
        let machine_snapshot: MachineSnapshot = serde_json::from_slice(&bytes)
            .map_err(|e| io_error(format!("the snapshot cannot be decoded: {e}")))?;
        let expected = meta.last_log_id.as_ref().map_or(0, |id| id.index + 1);
        if machine_snapshot.applied != expected {
            return Err(io_error(format!(
                "SNAPSHOT_MISMATCH: the snapshot's machine applied {} entries, its Raft \
                 metadata says {expected}",
                machine_snapshot.applied
            )));
        }
        let machine = Machine::restore(&machine_snapshot)
            .map_err(|e| io_error(format!("the snapshot cannot be restored: {}", e.message)))?;
        let events = Arc::clone(self.applier.events());
        let history = Arc::clone(self.applier.history());
        self.applier = Applier::new(machine, events, history);
        self.last_applied = meta.last_log_id.clone();
        self.membership = meta.last_membership.clone();
        *lock(&self.current) = Some((meta.clone(), bytes));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(lock(&self.current).clone().map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        }))
    }
}

/// The current snapshot, even after a panic elsewhere poisoned its lock (it is replaced
/// whole).
fn lock(current: &Current) -> std::sync::MutexGuard<'_, Option<(Meta, Vec<u8>)>> {
    current.lock().unwrap_or_else(|e| e.into_inner())
}
