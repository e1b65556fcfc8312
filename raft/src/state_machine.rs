//! openraft's state machine on the server's applier.
//!
//! Contract:
//! - Committed entries are applied in log order through the server's
//!   [`Applier`], exactly as the single-node server applies its own: a `Normal` entry's
//!   [`Proposal`] is the log record, applied at `max(last_now, entry.now)` (the machine's rule:
//!   time never goes back), and its [`Replies`] (one per command: several for an
//!   `Entry::Batch`) go to the proposer's responder (on the node that
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
//!   with openraft's metadata (last log id, membership) beside it and inside it
//!   ([`MachineSnapshot::consensus`]): the JSON sent is the JSON stored, encoded once. Installing one restores the
//!   machine from it ([`Machine::restore`], which checks its hash) and takes its metadata; a
//!   snapshot whose index does not match its metadata is refused by name, and the machine is
//!   left as it was.
//! - Snapshots come every [`SnapshotDue::every`] commands applied (a batch entry counts its
//!   commands, any other entry one), not every so many log entries: a cluster's entry may
//!   carry up to a batch request's 1,000 operations, and what a restart replays (the log after
//!   the last snapshot) is bounded by commands. The state machine counts them and wakes
//!   [`SnapshotDue::wait`]; the node's task then asks openraft for the snapshot.
//! - Snapshots are durable: one built or installed is stored through the log seam (the same
//!   [`Log`] the log store uses: in the file store, one redb commit), with its Raft metadata
//!   in [`MachineSnapshot::consensus`], before the call returns; so the log store may purge
//!   what it covers. [`StateMachine::open`] starts from the snapshot stored there, and openraft
//!   re-applies the log after it.

use crate::io_error;
use crate::types::{KlockRaft, LogId, RaftEntry, Replies};
use futures_util::{Stream, TryStreamExt as _};
use klock_core::Output;
use klock_server::applier::Applier;
use klock_server::engine::Reply;
use klock_server::log::{EncodedSnapshot, Log};
use klock_server::machine::{Machine, MachineSnapshot};
use openraft::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use std::io::{self, Cursor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A snapshot's metadata and data.
pub type Snapshot = SnapshotOf<KlockRaft, Cursor<Vec<u8>>>;
type Meta = SnapshotMetaOf<KlockRaft>;
type Membership = StoredMembershipOf<KlockRaft>;

/// The latest snapshot built or installed, shared with the builders.
type Current = Arc<Mutex<Option<(Meta, Vec<u8>)>>>;

/// When a snapshot is due (module contract): the commands applied since the last one was
/// begun, shared by the state machine that counts them and the task that asks for it.
pub struct SnapshotDue {
    /// A snapshot every this many commands (0: never).
    pub every: u64,
    since: AtomicU64,
    wake: tokio::sync::Notify,
}

impl SnapshotDue {
    /// Whether the commands applied since the last snapshot reached [`SnapshotDue::every`].
    pub fn due(&self) -> bool {
        self.every > 0 && self.since.load(Ordering::Acquire) >= self.every
    }

    /// Waits until the state machine may have made a snapshot due (check [`SnapshotDue::due`]:
    /// a wake-up can be stale).
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    fn applied(&self, commands: u64) {
        self.since.fetch_add(commands, Ordering::AcqRel);
        if self.due() {
            self.wake.notify_one();
        }
    }

    fn begun(&self) {
        self.since.store(0, Ordering::Release);
    }
}

/// Raft's state machine on an applier (see the module contract).
pub struct StateMachine {
    /// Shared with the engine of a cluster node: its reads see what is applied here.
    applier: Arc<Mutex<Applier>>,
    last_applied: Option<LogId>,
    membership: Membership,
    current: Current,
    /// Where snapshots are stored (shared with the log store).
    log: Arc<dyn Log<RaftEntry>>,
    /// The commands applied since the last snapshot (module contract).
    due: Arc<SnapshotDue>,
}

impl StateMachine {
    /// A state machine on `applier` (shared: a cluster node's engine reads it), whose machine
    /// has applied nothing yet, storing its snapshots in `log`; when `log` holds one, the
    /// machine starts from it.
    ///
    /// # Errors
    /// A machine that has already applied entries (what Raft entries they were is unknown),
    /// or a stored snapshot that is unreadable, has no Raft metadata, or does not restore.
    pub fn open(
        applier: Arc<Mutex<Applier>>,
        log: Arc<dyn Log<RaftEntry>>,
    ) -> io::Result<StateMachine> {
        let applied = locked(&applier).machine().applied();
        if applied != 0 {
            return Err(io_error(format!(
                "a Raft state machine starts from a machine that applied nothing; this one \
                 applied {applied} entries"
            )));
        }
        let mut sm = StateMachine {
            applier,
            last_applied: None,
            membership: Membership::default(),
            current: Arc::default(),
            log,
            due: Arc::new(SnapshotDue {
                every: 0,
                since: AtomicU64::new(0),
                wake: tokio::sync::Notify::new(),
            }),
        };
        if let Some(stored) = sm.log.read_snapshot().map_err(io_error)? {
            let consensus = stored.consensus.clone().ok_or_else(|| {
                io_error("the stored snapshot has no Raft metadata: it is a single node's")
            })?;
            let meta: Meta = serde_json::from_value(consensus).map_err(|e| {
                io_error(format!(
                    "the stored snapshot's Raft metadata cannot be decoded: {e}"
                ))
            })?;
            let machine = checked(&meta, &stored)?;
            let bytes = serde_json::to_vec(&stored).map_err(io_error)?;
            sm.take(&meta, machine, &stored, bytes);
        }
        Ok(sm)
    }

    /// Makes a snapshot due every `every` commands applied (0: never; module contract); the
    /// node's task waits on what this returns and asks openraft for each snapshot.
    pub fn snapshot_every(&mut self, every: u64) -> Arc<SnapshotDue> {
        self.due = Arc::new(SnapshotDue {
            every,
            since: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
        });
        Arc::clone(&self.due)
    }

    /// The applier (its machine, event streams and history), shared.
    pub fn applier(&self) -> &Arc<Mutex<Applier>> {
        &self.applier
    }

    /// The answer to an entry that carries no command.
    fn done(applier: &Applier, index: u64) -> Replies {
        vec![Reply {
            index,
            repeat_of: None,
            now: applier.machine().last_now(),
            output: Ok(Output::Done),
            events: Vec::new(),
        }]
    }
}

impl Drop for StateMachine {
    /// Wakes the task that waits for a snapshot to be due, so that it sees the state machine
    /// gone and ends.
    fn drop(&mut self) {
        self.due.wake.notify_one();
    }
}

/// Gives `snapshot` its Raft metadata `meta` and stores it through `log`, durably; its JSON,
/// encoded once for both, is what the node sends to a follower that lags.
fn store(
    log: &dyn Log<RaftEntry>,
    meta: &Meta,
    snapshot: &mut MachineSnapshot,
    expected: usize,
) -> io::Result<Vec<u8>> {
    snapshot.consensus = Some(serde_json::to_value(meta).map_err(io_error)?);
    let encoded = EncodedSnapshot::new(snapshot, expected).map_err(io_error)?;
    log.save_snapshot(&encoded).map_err(io_error)?;
    Ok(encoded.into_json())
}

/// Builds a snapshot of the state machine as it was when the builder was made.
pub struct SnapshotBuilder {
    meta: Meta,
    snapshot: MachineSnapshot,
    current: Current,
    log: Arc<dyn Log<RaftEntry>>,
}

impl RaftSnapshotBuilder<KlockRaft> for SnapshotBuilder {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        // The last snapshot's length: the room its encoding starts with.
        let expected = lock(&self.current).as_ref().map_or(0, |(_, b)| b.len());
        let bytes = store(self.log.as_ref(), &self.meta, &mut self.snapshot, expected)?;
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
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<KlockRaft>>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let index = entry.log_id.index + 1;
            let mut applier = locked(&self.applier);
            let replies = match entry.payload {
                EntryPayload::Normal(proposal) => applier.apply(index, proposal.entry()),
                EntryPayload::Blank => {
                    applier.pass(index);
                    Self::done(&applier, index)
                }
                EntryPayload::Membership(membership) => {
                    applier.pass(index);
                    self.membership = Membership::new(Some(entry.log_id), membership);
                    Self::done(&applier, index)
                }
            };
            drop(applier);
            self.last_applied = Some(entry.log_id);
            // One answer per command (a batch entry's several; any other entry's one).
            self.due.applied(replies.len() as u64);
            if let Some(responder) = responder {
                responder.send(replies);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // Whatever asked for it, this snapshot covers every command applied so far.
        self.due.begun();
        SnapshotBuilder {
            meta: Meta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
            },
            snapshot: locked(&self.applier).machine().snapshot(),
            current: Arc::clone(&self.current),
            log: Arc::clone(&self.log),
        }
    }

    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Cursor<Vec<u8>>) -> io::Result<()> {
        let mut machine_snapshot: MachineSnapshot = serde_json::from_slice(snapshot.get_ref())
            .map_err(|e| io_error(format!("the snapshot cannot be decoded: {e}")))?;
        // Checked before it is stored: a snapshot that cannot be restored changes nothing.
        let machine = checked(meta, &machine_snapshot)?;
        // Encoded again (with this node's metadata): about as long as it came.
        let expected = snapshot.get_ref().len();
        let bytes = store(self.log.as_ref(), meta, &mut machine_snapshot, expected)?;
        self.take(meta, machine, &machine_snapshot, bytes);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(lock(&self.current).clone().map(|(meta, bytes)| Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        }))
    }
}

impl StateMachine {
    /// Takes `machine`, restored from `snapshot` (whose bytes are `bytes`) with Raft metadata
    /// `meta`. The machine keeps the node's own settings (its answer budget, which every node
    /// must share for their machines to stay equal, and whether it records kernel calls). As
    /// a single server's recovery does, the snapshot's sessions are bound to their namespaces'
    /// event streams (else the events of a session opened before the snapshot would reach its
    /// own stream only, never its namespace's watch), and the events the snapshot folded in
    /// are marked lost, so a reader from before it learns of a gap.
    fn take(
        &mut self,
        meta: &Meta,
        mut machine: Machine,
        snapshot: &MachineSnapshot,
        bytes: Vec<u8>,
    ) {
        let mut applier = locked(&self.applier);
        machine.set_answer_budget(applier.machine().answer_budget());
        machine.record_calls(applier.machine().records_calls());
        let events = Arc::clone(applier.events());
        let sessions = snapshot.state.sessions.iter();
        events.restore(
            snapshot.applied,
            sessions.map(|s| (s.session_id, s.namespace.as_str())),
        );
        let history = Arc::clone(applier.history());
        *applier = Applier::new(machine, events, history);
        drop(applier);
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.due.begun();
        *lock(&self.current) = Some((meta.clone(), bytes));
    }
}

/// The machine `snapshot` restores, if its index matches its Raft metadata `meta`.
fn checked(meta: &Meta, snapshot: &MachineSnapshot) -> io::Result<Machine> {
    let expected = meta.last_log_id.as_ref().map_or(0, |id| id.index + 1);
    if snapshot.applied != expected {
        return Err(io_error(format!(
            "SNAPSHOT_MISMATCH: the snapshot's machine applied {} entries, its Raft metadata \
             says {expected}",
            snapshot.applied
        )));
    }
    Machine::restore(snapshot)
        .map_err(|e| io_error(format!("the snapshot cannot be restored: {}", e.message)))
}

/// The applier. A panic while it was held (a bug) may have left the machine half-applied;
/// the engine stops the process then (it never serves such a machine), so here it is only
/// taken again for that to happen.
fn locked(applier: &Mutex<Applier>) -> std::sync::MutexGuard<'_, Applier> {
    applier.lock().unwrap_or_else(|e| e.into_inner())
}

/// The current snapshot, even after a panic elsewhere poisoned its lock (it is replaced
/// whole).
fn lock(current: &Current) -> std::sync::MutexGuard<'_, Option<(Meta, Vec<u8>)>> {
    current.lock().unwrap_or_else(|e| e.into_inner())
}
