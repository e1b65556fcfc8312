//! The log store and the state machine on the file implementation across reopens (a
//! restart): entries, the vote, a purge, a truncation and the snapshot are all still there,
//! and the machine starts from the snapshot; a torn tail is cut back to the last whole entry
//! and the log goes on from it; a log purged past the stored snapshot is refused. A store is
//! closed (`LogStore::closed`) before its file is opened again.

mod support;

use klock_raft::log_store::{open_file, LogStore};
use klock_raft::state_machine::StateMachine;
use klock_raft::types::{RaftEntry, Vote};
use klock_server::store::TornTail;
use openraft::storage::{RaftLogStorage as _, RaftLogStorageExt as _, RaftStateMachine as _};
use openraft::{RaftLogReader as _, RaftSnapshotBuilder as _};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use support::{log_id, membership, normal, open, state_machine_on};

/// The log store and the state machine on the file at `path`.
fn opened(path: &Path) -> (LogStore, StateMachine, Option<TornTail>) {
    let (log, torn) = open_file(path).expect("open");
    (LogStore::new(Arc::clone(&log)), state_machine_on(log), torn)
}

/// Appends `entries` and waits until they are durable (the store reports so later).
async fn append(store: &mut LogStore, entries: Vec<RaftEntry>) {
    store.blocking_append(entries).await.expect("append");
}

async fn held(store: &mut LogStore) -> Vec<RaftEntry> {
    store.try_get_log_entries(0..100).await.expect("read")
}

fn entries() -> Vec<RaftEntry> {
    vec![
        membership(0, &[1]),
        normal(1, open(1_000, "a")),
        normal(2, open(2_000, "b")),
        normal(3, open(3_000, "c")),
    ]
}

#[tokio::test]
async fn a_restart_keeps_entries_vote_purge_truncation_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.redb");
    let vote = Vote::new(2, 1);
    let snapshot_bytes = {
        let (mut store, mut sm, torn) = opened(&path);
        assert_eq!(torn, None);
        append(&mut store, entries()).await;
        store.save_vote(&vote).await.unwrap();
        let committed = entries()[..3].to_vec();
        sm.apply(futures_util::stream::iter(
            committed.into_iter().map(|e| Ok((e, None))),
        ))
        .await
        .unwrap();
        let snapshot = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        store.purge(log_id(1, 1)).await.unwrap();
        store.truncate_after(Some(log_id(1, 2))).await.unwrap();
        store.closed().await;
        snapshot.snapshot.into_inner()
    };
    let (mut store, mut sm, torn) = opened(&path);
    assert_eq!(torn, None);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1)));
    assert_eq!(state.last_log_id, Some(log_id(1, 2)));
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
    assert_eq!(held(&mut store).await, entries()[2..3].to_vec());
    // Ranges are cut to what the log holds, whatever their bounds.
    assert_eq!(
        store.try_get_log_entries(..).await.unwrap(),
        entries()[2..3].to_vec()
    );
    assert_eq!(
        store.try_get_log_entries(2..=u64::MAX).await.unwrap().len(),
        1
    );
    assert_eq!(store.try_get_log_entries(3..).await.unwrap(), vec![]);
    assert_eq!(store.try_get_log_entries(0..2).await.unwrap(), vec![]);
    // The state machine starts from the stored snapshot.
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 2)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 0)));
    assert_eq!(
        sm.applier()
            .lock()
            .unwrap()
            .machine()
            .snapshot()
            .state
            .sessions
            .len(),
        2
    );
    let current = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a snapshot");
    assert_eq!(current.snapshot.into_inner(), snapshot_bytes);
}

#[tokio::test]
async fn a_log_purged_past_the_stored_snapshot_is_refused_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.redb");
    {
        let (mut store, _, _) = opened(&path);
        append(&mut store, entries()).await;
        store.purge(log_id(1, 2)).await.unwrap();
        store.closed().await;
    }
    let err = open_file(&path).err().expect("refused");
    assert!(err.to_string().contains("LOG_NEWER_THAN_DATA"), "{err}");
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.redb");
    let first = entries()[..2].to_vec();
    {
        let (mut store, _, _) = opened(&path);
        append(&mut store, first.clone()).await;
        store.closed().await;
    }
    // A crash in the middle of the next write: part of a record at the end of the log.
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("raft.redb.log"))
        .unwrap();
    log.write_all(&[42, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(log);

    let (mut store, _, torn) = opened(&path);
    assert_eq!(torn.map(|t| t.dropped), Some(7), "the torn tail is cut");
    assert_eq!(
        store.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 1))
    );
    let next = entries()[2].clone();
    append(&mut store, vec![next.clone()]).await;
    store.closed().await;

    let (mut store, _, torn) = opened(&path);
    assert_eq!(torn, None);
    let mut expected = first;
    expected.push(next);
    assert_eq!(held(&mut store).await, expected);
}

#[tokio::test]
async fn an_installed_snapshot_survives_a_restart() {
    let mut leader = support::state_machine();
    let committed = entries();
    leader
        .apply(futures_util::stream::iter(
            committed.into_iter().map(|e| Ok((e, None))),
        ))
        .await
        .unwrap();
    let snapshot = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft.redb");
    {
        let (mut store, mut follower, _) = opened(&path);
        follower
            .install_snapshot(&snapshot.meta, snapshot.snapshot.clone())
            .await
            .unwrap();
        // What openraft does next: the log the snapshot covers goes.
        store.purge(log_id(1, 3)).await.unwrap();
        store.closed().await;
    }
    let (mut store, mut follower, _) = opened(&path);
    assert_eq!(
        follower.applied_state().await.unwrap(),
        leader.applied_state().await.unwrap()
    );
    assert_eq!(
        store.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 3))
    );
    let current = follower
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a snapshot");
    assert_eq!(
        current.snapshot.into_inner(),
        snapshot.snapshot.into_inner()
    );
}
