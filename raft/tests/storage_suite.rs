//! openraft's own storage conformance suite (`openraft::testing::log::Suite::test_all`) run
//! against Klock's log store and state machine, on both implementations of the server's log
//! seam: the file store (in a temporary directory) and the memory log. Each of the suite's
//! cases builds a fresh store.

use klock_core::Config;
use klock_raft::log_store::LogStore;
use klock_raft::state_machine::StateMachine;
use klock_raft::types::{KlockRaft, RaftEntry};
use klock_server::applier::Applier;
use klock_server::events::EventHub;
use klock_server::history::History;
use klock_server::log::{Log, MemoryLog};
use klock_server::machine::Machine;
use klock_server::store::Store;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use std::sync::{Arc, Mutex};

/// A state machine on a new, empty machine.
fn state_machine() -> StateMachine {
    let machine = Machine::new(Config::default()).expect("the default config is valid");
    let history = Arc::new(Mutex::new(History::new(&machine, 64)));
    let applier = Applier::new(machine, Arc::new(EventHub::new(1 << 20)), history);
    StateMachine::new(applier).expect("a new machine applied nothing")
}

/// Stores on the file implementation, each in its own temporary directory (kept alive by the
/// suite for the case's duration).
struct OnFile;

impl StoreBuilder<KlockRaft, LogStore, StateMachine, tempfile::TempDir> for OnFile {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<KlockRaft>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store: Store<RaftEntry> =
            Store::open_records(&dir.path().join("raft.redb"), false).expect("a new store");
        let log: Arc<dyn Log<RaftEntry>> = Arc::new(store);
        Ok((dir, LogStore::new(log), state_machine()))
    }
}

/// Stores on the memory log.
struct InMemory;

impl StoreBuilder<KlockRaft, LogStore, StateMachine> for InMemory {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<KlockRaft>> {
        let log: Arc<dyn Log<RaftEntry>> = Arc::new(MemoryLog::<RaftEntry>::default());
        Ok(((), LogStore::new(log), state_machine()))
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
