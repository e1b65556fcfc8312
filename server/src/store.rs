//! The durable log: entries and the latest snapshot in one redb file.
//!
//! Contract:
//! - [`Store::append`] writes a whole batch of entries in one write transaction and returns
//!   only once redb's commit is durable (`Durability::Immediate`: one fsync). The caller
//!   releases no answer and no event of a batch before that (output commit), and stops the
//!   process if it fails (fail-stop): memory would be ahead of the disk.
//! - [`Store::compact`] stores a snapshot and deletes every entry it covers, in one
//!   transaction, so a crash leaves either the old snapshot and its entries or the new one.
//! - [`Store::load`] returns the snapshot and the entries after it, checked to be dense and to
//!   start right after the snapshot; a gap or an undecodable entry is an error naming it.
//! - The kernel configuration is stored once, when the file is created: replaying a log with
//!   another configuration would give another history.
//! - Entries are stored as JSON (`machine::Entry`): self-contained, readable with any redb
//!   tool, and the same encoding a Raft log will carry.

use crate::machine::{Entry, MachineSnapshot};
use klock_core::Config;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::path::Path;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT_KEY: &str = "snapshot";
const CONFIG_KEY: &str = "config";

/// A storage failure, with what was being done.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

fn fail<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError(format!("{what}: {e}"))
}

/// What a store holds on open.
pub struct Loaded {
    pub snapshot: Option<MachineSnapshot>,
    /// `(index, entry)` after the snapshot, in order.
    pub entries: Vec<(u64, Entry)>,
}

/// The redb file.
pub struct Store {
    db: Database,
}

impl Store {
    /// Opens the file at `path`, creating it if needed.
    ///
    /// # Errors
    /// The file cannot be opened or created, or is not a redb file.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let db = Database::create(path).map_err(|e| {
            StoreError(format!("cannot open the data file {}: {e}", path.display()))
        })?;
        let txn = db.begin_write().map_err(fail("begin"))?;
        txn.open_table(LOG).map_err(fail("open the log table"))?;
        txn.open_table(META).map_err(fail("open the meta table"))?;
        txn.commit().map_err(fail("commit"))?;
        Ok(Store { db })
    }

    /// The snapshot and the entries after it.
    ///
    /// # Errors
    /// An unreadable file, an undecodable record, or a gap in the log.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let meta = txn.open_table(META).map_err(fail("open the meta table"))?;
        let snapshot: Option<MachineSnapshot> =
            match meta.get(SNAPSHOT_KEY).map_err(fail("read the snapshot"))? {
                Some(bytes) => Some(serde_json::from_slice(bytes.value()).map_err(|e| {
                    StoreError(format!("the stored snapshot cannot be decoded: {e}"))
                })?),
                None => None,
            };
        let log = txn.open_table(LOG).map_err(fail("open the log table"))?;
        let first = snapshot.as_ref().map_or(0, |s| s.applied) + 1;
        let mut entries = Vec::new();
        for (expected, item) in (first..).zip(log.iter().map_err(fail("read the log"))?) {
            let (index, bytes) = item.map_err(fail("read a log entry"))?;
            let index = index.value();
            if index != expected {
                return Err(StoreError(format!(
                    "the log has entry {index} where entry {expected} was expected"
                )));
            }
            let entry: Entry = serde_json::from_slice(bytes.value())
                .map_err(|e| StoreError(format!("log entry {index} cannot be decoded: {e}")))?;
            entries.push((index, entry));
        }
        Ok(Loaded { snapshot, entries })
    }

    /// Appends `entries` (`(index, entry)`, dense, following the last stored index) and returns
    /// once they are durable.
    ///
    /// # Errors
    /// Any storage failure; the caller must stop serving (see the module contract).
    pub fn append(&self, entries: &[(u64, Entry)]) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(fail("begin a write"))?;
        {
            let mut log = txn.open_table(LOG).map_err(fail("open the log table"))?;
            for (index, entry) in entries {
                let bytes = serde_json::to_vec(entry).map_err(fail("encode an entry"))?;
                log.insert(*index, bytes.as_slice())
                    .map_err(fail("write a log entry"))?;
            }
        }
        txn.commit().map_err(fail("commit a batch"))
    }

    /// Stores `snapshot` and deletes the entries it covers, atomically.
    ///
    /// # Errors
    /// Any storage failure.
    pub fn compact(&self, snapshot: &MachineSnapshot) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(snapshot).map_err(fail("encode the snapshot"))?;
        let txn = self.db.begin_write().map_err(fail("begin a write"))?;
        {
            let mut meta = txn.open_table(META).map_err(fail("open the meta table"))?;
            meta.insert(SNAPSHOT_KEY, bytes.as_slice())
                .map_err(fail("write the snapshot"))?;
            let mut log = txn.open_table(LOG).map_err(fail("open the log table"))?;
            log.retain_in(..=snapshot.applied, |_, _| false)
                .map_err(fail("truncate the log"))?;
        }
        txn.commit().map_err(fail("commit the snapshot"))
    }

    /// The configuration the file was created with, if any.
    ///
    /// # Errors
    /// Any storage failure, or an undecodable record.
    pub fn config(&self) -> Result<Option<Config>, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let meta = txn.open_table(META).map_err(fail("open the meta table"))?;
        let bytes = meta.get(CONFIG_KEY).map_err(fail("read the config"))?;
        bytes
            .map(|b| {
                serde_json::from_slice(b.value()).map_err(|e| {
                    StoreError(format!("the stored configuration cannot be decoded: {e}"))
                })
            })
            .transpose()
    }

    /// Records the configuration of a new file (durably).
    ///
    /// # Errors
    /// Any storage failure.
    pub fn set_config(&self, config: &Config) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(config).map_err(fail("encode the config"))?;
        let txn = self.db.begin_write().map_err(fail("begin a write"))?;
        {
            let mut meta = txn.open_table(META).map_err(fail("open the meta table"))?;
            meta.insert(CONFIG_KEY, bytes.as_slice())
                .map_err(fail("write the config"))?;
        }
        txn.commit().map_err(fail("commit the config"))
    }

    /// How many entries the log holds (not counting those folded into the snapshot).
    ///
    /// # Errors
    /// Any storage failure.
    pub fn log_len(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let log = txn.open_table(LOG).map_err(fail("open the log table"))?;
        log.len().map_err(fail("count the log"))
    }
}
