//! openraft's own storage conformance suite (`openraft::testing::log::Suite::test_all`) run
//! against Klock's log store and state machine, on both implementations of the server's log
//! seam: the file store (in a temporary directory) and the memory log. Each of the suite's
//! cases builds a fresh store.

mod support;

use klock_raft::log_store::{open_file, LogStore};
use klock_raft::state_machine::StateMachine;
use klock_raft::types::{KlockRaft, RaftEntry};
use klock_server::log::{Log, MemoryLog};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use std::sync::Arc;
use support::state_machine_on;

/// Stores on the file implementation, each in its own temporary directory (kept alive by the
/// suite for the case's duration).
struct OnFile;

impl StoreBuilder<KlockRaft, LogStore, StateMachine, tempfile::TempDir> for OnFile {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<KlockRaft>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (log, torn) = open_file(&dir.path().join("raft.redb")).expect("a store");
        assert_eq!(torn, None, "a new log has no torn tail");
        Ok((dir, LogStore::new(Arc::clone(&log)), state_machine_on(log)))
    }
}

/// Stores on the memory log.
struct InMemory;

impl StoreBuilder<KlockRaft, LogStore, StateMachine> for InMemory {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<KlockRaft>> {
        let log: Arc<dyn Log<RaftEntry>> = Arc::new(MemoryLog::<RaftEntry>::default());
        Ok(((), LogStore::new(Arc::clone(&log)), state_machine_on(log)))
    }
}

#[tokio::test]
async fn the_suite_passes_on_the_file_store() {
    Suite::test_all(OnFile).await.expect("the storage suite");
}

#[tokio::test]
async fn the_suite_passes_on_the_memory_log() {
    Suite::test_all(InMemory).await.expect("the storage suite");
}
