//! The durable log and the latest snapshot: an append-only log file beside a redb file.
//!
//! Contract:
//! - The log (`<data>.log`) is a sequence of records `[length u32][crc32 u32][index u64][entry
//!   JSON]` (little-endian; the CRC covers the index and the entry). [`Store::append`] writes a
//!   whole batch with one `write` and one `fdatasync`, and returns only once it is durable. The
//!   caller releases no answer and no event of a batch before that (output commit), and stops
//!   the process if it fails (fail-stop): memory would be ahead of the disk.
//! - The redb file (`<data>`) holds the kernel configuration (stored once, when the file is
//!   created: replaying a log with another configuration would give another history) and the
//!   latest snapshot, written with redb's atomic, checksummed commits.
//! - [`Store::compact`] commits a snapshot to redb, then empties the log. A crash between the
//!   two leaves entries the snapshot already covers; [`Store::load`] skips them.
//! - [`Store::load`] returns the snapshot and the entries after it, which must be dense and
//!   start right after the snapshot (a gap or an undecodable entry is an error naming it). A
//!   record cut short or failing its CRC at the end of the log (a torn tail: a crash in the
//!   middle of a write, or a file cut short) ends the log there: the file is truncated to the
//!   last whole record, and the load says how much it dropped, so the server recovers to a
//!   prefix and says so. Nothing in a torn tail was ever answered (answers wait for the sync).
//! - Entries are JSON (`machine::Entry`): self-contained, readable, and the encoding a Raft log
//!   will carry.

use crate::machine::{Entry, MachineSnapshot};
use klock_core::Config;
use redb::{Database, ReadableDatabase, TableDefinition};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT_KEY: &str = "snapshot";
const CONFIG_KEY: &str = "config";
/// Bytes before a record's entry: length, CRC, index.
const HEADER: usize = 16;
/// The largest entry a record may carry (a manifest of 256 long resources fits many times).
const MAX_ENTRY_BYTES: u32 = 64 << 20;

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

/// A torn tail found (and cut) by [`Store::load`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the last whole record ends: the log's new length.
    pub at: u64,
    /// Bytes dropped after it.
    pub dropped: u64,
}

/// What a store holds on open.
pub struct Loaded {
    pub snapshot: Option<MachineSnapshot>,
    /// `(index, entry)` after the snapshot, in order.
    pub entries: Vec<(u64, Entry)>,
    /// The torn tail the log ended in, if it did.
    pub torn: Option<TornTail>,
}

struct Log {
    file: File,
    /// Records in the file.
    records: u64,
}

/// The data files.
pub struct Store {
    db: Database,
    log_path: PathBuf,
    log: Mutex<Log>,
}

/// The path of the log beside the redb file `data`.
pub fn log_path(data: &Path) -> PathBuf {
    let mut name = data.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

fn record(index: u64, entry: &Entry) -> Result<Vec<u8>, StoreError> {
    let payload = serde_json::to_vec(entry).map_err(fail("encode an entry"))?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| n <= MAX_ENTRY_BYTES)
        .ok_or_else(|| StoreError(format!("entry {index} is too large to log")))?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&index.to_le_bytes());
    crc.update(&payload);
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Whole records of `bytes` and where they end: `(index, payload)` pairs.
fn records(bytes: &[u8]) -> (Vec<(u64, &[u8])>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let word =
            |i: usize| u32::from_le_bytes(bytes[at + i..at + i + 4].try_into().expect("4 bytes"));
        let (len, crc) = (word(0), word(4));
        let index = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        let end = at + HEADER + len as usize;
        if len > MAX_ENTRY_BYTES || end > bytes.len() {
            break;
        }
        let payload = &bytes[at + HEADER..end];
        let mut check = crc32fast::Hasher::new();
        check.update(&index.to_le_bytes());
        check.update(payload);
        if check.finalize() != crc {
            break;
        }
        out.push((index, payload));
        at = end;
    }
    (out, at)
}

impl Store {
    /// Opens the data files at `path` (and `path.log`), creating them if needed.
    ///
    /// # Errors
    /// A file cannot be opened or created, or `path` is not a redb file.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        // Both files are created readable by their owner only (0600): they hold every
        // agent's leases and the hashes of session secrets. redb fills an empty file.
        if !path.exists() {
            let _ = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path);
        }
        let db = Database::create(path).map_err(|e| {
            StoreError(format!("cannot open the data file {}: {e}", path.display()))
        })?;
        let txn = db.begin_write().map_err(fail("begin"))?;
        txn.open_table(META).map_err(fail("open the meta table"))?;
        txn.commit().map_err(fail("commit"))?;
        let log_path = log_path(path);
        let created = !log_path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| StoreError(format!("cannot open the log {}: {e}", log_path.display())))?;
        if created {
            // The new file's name must be durable too.
            if let Some(dir) = log_path.parent().filter(|d| !d.as_os_str().is_empty()) {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(fail("sync the data directory"))?;
            }
        }
        Ok(Store {
            db,
            log_path,
            log: Mutex::new(Log { file, records: 0 }),
        })
    }

    /// The snapshot and the entries after it; a torn tail is cut off (see the module contract).
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
        let mut log = self.log.lock().expect("log lock");
        let mut bytes = Vec::new();
        File::open(&self.log_path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(fail("read the log"))?;
        let (whole, end) = records(&bytes);
        let torn = (end < bytes.len()).then(|| TornTail {
            at: end as u64,
            dropped: (bytes.len() - end) as u64,
        });
        if let Some(t) = torn {
            log.file.set_len(t.at).map_err(fail("cut the torn tail"))?;
            log.file.sync_data().map_err(fail("sync the log"))?;
        }
        log.records = whole.len() as u64;
        let applied = snapshot.as_ref().map_or(0, |s| s.applied);
        let mut entries = Vec::new();
        for (index, payload) in whole.into_iter().filter(|(i, _)| *i > applied) {
            let expected = applied + 1 + entries.len() as u64;
            if index != expected {
                return Err(StoreError(format!(
                    "the log has entry {index} where entry {expected} was expected"
                )));
            }
            let entry: Entry = serde_json::from_slice(payload)
                .map_err(|e| StoreError(format!("log entry {index} cannot be decoded: {e}")))?;
            entries.push((index, entry));
        }
        Ok(Loaded {
            snapshot,
            entries,
            torn,
        })
    }

    /// Appends `entries` (`(index, entry)`, dense, following the last stored index) and returns
    /// once they are durable.
    ///
    /// # Errors
    /// Any storage failure; the caller must stop serving (see the module contract).
    pub fn append(&self, entries: &[(u64, Entry)]) -> Result<(), StoreError> {
        let mut buffer = Vec::new();
        for (index, entry) in entries {
            buffer.extend(record(*index, entry)?);
        }
        let mut log = self.log.lock().expect("log lock");
        log.file.write_all(&buffer).map_err(fail("write the log"))?;
        log.file.sync_data().map_err(fail("sync the log"))?;
        log.records += entries.len() as u64;
        Ok(())
    }

    /// Stores `snapshot` (durably), then empties the log it covers.
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
        }
        txn.commit().map_err(fail("commit the snapshot"))?;
        let mut log = self.log.lock().expect("log lock");
        log.file.set_len(0).map_err(fail("empty the log"))?;
        log.file.sync_data().map_err(fail("sync the log"))?;
        log.records = 0;
        Ok(())
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

    /// How many entries the log holds (not counting those folded into the snapshot; after a
    /// [`load`](Self::load), or counted since open).
    ///
    /// # Errors
    /// None today; kept fallible for storage that must read to count.
    pub fn log_len(&self) -> Result<u64, StoreError> {
        Ok(self.log.lock().expect("log lock").records)
    }
}
