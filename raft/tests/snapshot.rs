//! The state machine through openraft's traits: entries applied as the single-node server
//! applies them (time never goes back), Raft's own entries passed over, and snapshots that
//! round-trip: a snapshot installed elsewhere and taken again is the same bytes, and the two
//! machines go on identically, their namespace event streams too.

mod support;

use klock_core::SessionId;
use klock_raft::state_machine::StateMachine;
use klock_raft::types::RaftEntry;
use klock_server::events::{EventId, Stream};
use klock_server::machine::{Machine, MachineSnapshot};
use openraft::storage::RaftStateMachine as _;
use openraft::RaftSnapshotBuilder as _;
use support::{acquire, blank, log_id, membership, normal, open, state_machine};

async fn apply(sm: &mut StateMachine, entries: Vec<RaftEntry>) {
    let stream = futures_util::stream::iter(entries.into_iter().map(|e| Ok((e, None))));
    sm.apply(stream).await.expect("apply");
}

/// The snapshot's bytes as the state machine builds them now.
async fn snapshot_bytes(
    sm: &mut StateMachine,
) -> (
    openraft::alias::SnapshotMetaOf<klock_raft::types::KlockRaft>,
    Vec<u8>,
) {
    let mut builder = sm.get_snapshot_builder().await;
    let snapshot = builder.build_snapshot().await.expect("build a snapshot");
    (snapshot.meta, snapshot.snapshot.into_inner())
}

/// The first session the kernel holds.
fn first_session(sm: &StateMachine) -> SessionId {
    sm.applier()
        .lock()
        .unwrap()
        .machine()
        .snapshot()
        .state
        .sessions[0]
        .session_id
}

/// A state machine that applied a membership change, two opens, a blank entry of a new
/// term and an acquire stamped earlier than the entry before it.
async fn with_history() -> StateMachine {
    let mut sm = state_machine();
    apply(
        &mut sm,
        vec![membership(0, &[1, 2, 3]), normal(1, open(5_000, "a"))],
    )
    .await;
    let session = first_session(&sm);
    apply(
        &mut sm,
        vec![
            normal(2, open(6_000, "b")),
            blank(2, 3),
            // Stamped before the entry above it (stamp order differs from log order).
            normal(4, acquire(4_000, session, "x")),
        ],
    )
    .await;
    sm
}

#[tokio::test]
async fn entries_apply_as_the_single_node_server_applies_them() {
    let mut sm = with_history().await;
    {
        let applier = sm.applier().lock().unwrap();
        let machine = applier.machine();
        // The machine's index is the Raft index plus one; Raft's own entries were passed over.
        assert_eq!(machine.applied(), 5);
        // Time never goes back: the acquire stamped 4,000 was applied at 6,000.
        assert_eq!(machine.last_now(), 6_000);
        let state = machine.snapshot().state;
        assert_eq!(state.sessions.len(), 2, "both opens applied");
        assert_eq!(state.leases.len(), 1, "the acquire granted its lease");
    }
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 4)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 0)));
}

#[tokio::test]
async fn a_snapshot_round_trips_byte_for_byte() {
    let mut leader = with_history().await;
    let (meta, bytes) = snapshot_bytes(&mut leader).await;
    assert_eq!(meta.last_log_id, Some(log_id(1, 4)));

    // The bytes are the snapshot as stored: the machine's, with Raft's metadata in it.
    let mut decoded: MachineSnapshot = serde_json::from_slice(&bytes).unwrap();
    let consensus = decoded.consensus.take();
    assert_eq!(consensus, Some(serde_json::to_value(&meta).unwrap()));
    // The machine's own snapshot: export(import(x)) == x.
    let restored = Machine::restore(&decoded).expect("restore");
    assert_eq!(restored.snapshot(), decoded);
    assert_eq!(
        serde_json::to_vec(&restored.snapshot()).unwrap(),
        serde_json::to_vec(&decoded).unwrap()
    );

    // Through openraft's traits: installed on a new state machine, taken again.
    let mut follower = state_machine();
    follower
        .install_snapshot(&meta, std::io::Cursor::new(bytes.clone()))
        .await
        .expect("install");
    assert_eq!(
        follower.applied_state().await.unwrap(),
        leader.applied_state().await.unwrap()
    );
    let (meta_again, bytes_again) = snapshot_bytes(&mut follower).await;
    assert_eq!(meta_again, meta);
    assert_eq!(bytes_again, bytes, "the same bytes after install");

    // Both go on identically from there.
    let session = first_session(&leader);
    let next = vec![normal(5, acquire(7_000, session, "y"))];
    apply(&mut leader, next.clone()).await;
    apply(&mut follower, next).await;
    assert_eq!(
        snapshot_bytes(&mut follower).await,
        snapshot_bytes(&mut leader).await
    );
}

/// The ids of the events namespace `ns`'s stream holds after `after`, and whether a reader
/// from there missed some.
fn namespace_events(sm: &StateMachine, after: EventId) -> (Vec<String>, bool) {
    let hub = std::sync::Arc::clone(sm.applier().lock().unwrap().events());
    let batch = hub.after(&Stream::Namespace(String::from("ns")), after);
    let ids = batch.events.iter().map(|e| e.id().to_string()).collect();
    (ids, batch.gap)
}

/// A node that installed a snapshot binds the snapshot's sessions to their namespaces' event
/// streams, as a single server's recovery does: the later events of a session opened before
/// the snapshot reach its namespace's stream with the ids the leader gives them (a client
/// resumes a stream on another node by id), and a reader from before the snapshot learns of
/// a gap. Without the binding, the follower's namespace stream stayed empty.
#[tokio::test]
async fn after_a_snapshot_a_sessions_events_reach_its_namespace_stream() {
    let mut leader = with_history().await;
    let (meta, bytes) = snapshot_bytes(&mut leader).await;
    let mut follower = state_machine();
    follower
        .install_snapshot(&meta, std::io::Cursor::new(bytes))
        .await
        .expect("install");
    let session = first_session(&leader);
    let next = vec![normal(5, acquire(7_000, session, "y"))];
    apply(&mut leader, next.clone()).await;
    apply(&mut follower, next).await;
    // A reader of every event up to the snapshot (the machine's entry 5) resumes here.
    let installed = EventId::end_of(5);
    let (ids, gap) = namespace_events(&follower, installed);
    assert!(!ids.is_empty(), "the acquire's event reached the namespace");
    assert!(!gap);
    assert_eq!((ids, gap), namespace_events(&leader, installed));
    // From before the snapshot: the events it folded in are gone, and the reader is told.
    assert!(namespace_events(&follower, EventId::default()).1);
}

#[tokio::test]
async fn a_snapshot_whose_metadata_disagrees_is_refused_and_changes_nothing() {
    let mut leader = with_history().await;
    let (mut meta, bytes) = snapshot_bytes(&mut leader).await;
    meta.last_log_id = Some(log_id(1, 9));
    let mut follower = state_machine();
    let before = snapshot_bytes(&mut follower).await;
    let err = follower
        .install_snapshot(&meta, std::io::Cursor::new(bytes))
        .await
        .expect_err("a mismatched snapshot");
    assert!(err.to_string().contains("SNAPSHOT_MISMATCH"), "{err}");
    assert_eq!(snapshot_bytes(&mut follower).await, before);
    assert_eq!(follower.applied_state().await.unwrap().0, None);
}

#[tokio::test]
async fn a_snapshot_that_is_not_a_machine_snapshot_is_refused() {
    let mut leader = with_history().await;
    let (meta, _) = snapshot_bytes(&mut leader).await;
    let mut follower = state_machine();
    let err = follower
        .install_snapshot(&meta, std::io::Cursor::new(b"{}".to_vec()))
        .await
        .expect_err("not a snapshot");
    assert!(
        err.to_string().contains("the snapshot cannot be decoded"),
        "{err}"
    );
}

/// An applier on a new machine with the default configuration.
fn new_applier(
    machine: Machine,
) -> std::sync::Arc<std::sync::Mutex<klock_server::applier::Applier>> {
    use std::sync::{Arc, Mutex};
    let history = Arc::new(Mutex::new(klock_server::history::History::new(&machine, 8)));
    let events = Arc::new(klock_server::events::EventHub::new(1 << 16));
    Arc::new(Mutex::new(klock_server::applier::Applier::new(
        machine, events, history,
    )))
}

#[test]
fn a_state_machine_refuses_a_machine_that_applied_entries_or_a_single_nodes_snapshot() {
    use klock_server::log::{EncodedSnapshot, Log as _, MemoryLog};
    use std::sync::Arc;
    let config = klock_core::Config::default();

    let mut used = Machine::new(config.clone()).unwrap();
    used.apply(1, &open(1_000, "a"));
    let log = Arc::new(MemoryLog::<RaftEntry>::default());
    let err = StateMachine::open(new_applier(used.clone()), log)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("applied 1 entries"), "{err}");

    // A snapshot stored without Raft's metadata (as a single node stores its own).
    let log = Arc::new(MemoryLog::<RaftEntry>::default());
    let single = used.snapshot();
    log.save_snapshot(&EncodedSnapshot::new(&single, 0).unwrap())
        .unwrap();
    let fresh = Machine::new(config).unwrap();
    let err = StateMachine::open(new_applier(fresh), log)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("has no Raft metadata"), "{err}");
}
