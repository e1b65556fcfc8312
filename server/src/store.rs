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
//! - Entries are JSON: self-contained and readable. The record type is `machine::Entry` by
//!   default; a consensus layer opens a store of its own records (Raft entries, which carry
//!   an `Entry`) with [`Store::open_records`], in the same format.
//! - The two files belong together (issue 22 item 13). The redb file records a random id when
//!   it is created; the log starts with a header record (index 0, which no entry has) naming
//!   that id and the snapshot it follows. A log is only ever replaced whole (written beside,
//!   synced, renamed over), so it always has its header. Opening refuses, by name, a data file
//!   with history whose log is gone (`LOG_MISSING`), a log whose header names another data
//!   file (`LOG_MISMATCH`), and a log that follows a later snapshot than the data file holds
//!   (`LOG_NEWER_THAN_DATA`: the data file was restored from an older copy). With
//!   `accept_log_loss` these start from the data file alone (a log that is not its own is
//!   renamed aside, never deleted) and [`Loaded::lost`] says so; the caller must then move
//!   fences, server time and log indexes past anything the lost log could have issued
//!   ([`Store::wall_ms`]: the wall-clock time of the last snapshot bounds it). A log cut
//!   short, even inside its header, is a torn tail as before; a log without any header is one
//!   written before headers existed and is adopted (given the data file's id).

use crate::log::{EncodedSnapshot, Log as _};
use crate::machine::{Entry, MachineSnapshot};
use klock_core::Config;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::marker::PhantomData;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const SNAPSHOT_KEY: &str = "snapshot";
const CONFIG_KEY: &str = "config";
/// The consensus layer's vote (opaque bytes).
const VOTE_KEY: &str = "vote";
/// The data file's id, which its log's header names.
const ID_KEY: &str = "id";
/// Wall-clock ms (Unix) when the snapshot (or, before any, the configuration) was stored.
const WALL_KEY: &str = "wall_ms";
/// Bytes before a record's entry: length, CRC, index.
const HEADER: usize = 16;
/// The largest append buffer kept for the next append (a larger one is let go).
const SCRATCH_KEPT: usize = 8 << 20;
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

pub(crate) fn fail<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> StoreError {
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
pub struct Loaded<E = Entry> {
    pub snapshot: Option<MachineSnapshot>,
    /// `(index, entry)` after the snapshot, in order.
    pub entries: Vec<(u64, E)>,
    /// The torn tail the log ended in, if it did.
    pub torn: Option<TornTail>,
    /// The log that was missing or not this file's, accepted (`accept_log_loss`): the
    /// entries after the snapshot are lost.
    pub lost: Option<LogLoss>,
}

/// A log that cannot continue the data file (see the module contract).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogLoss {
    /// The data file has history but no log beside it.
    Missing,
    /// The log's header names another data file (renamed aside to `moved_to`).
    Mismatch { moved_to: PathBuf },
    /// The log follows the snapshot at entry `base`; the data file's ends at `applied`.
    Newer {
        base: u64,
        applied: u64,
        moved_to: PathBuf,
    },
}

impl LogLoss {
    /// The stable name of the condition.
    pub fn name(&self) -> &'static str {
        match self {
            LogLoss::Missing => "LOG_MISSING",
            LogLoss::Mismatch { .. } => "LOG_MISMATCH",
            LogLoss::Newer { .. } => "LOG_NEWER_THAN_DATA",
        }
    }
}

/// The header record that starts every log: the data file it belongs to and the snapshot it
/// follows.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    log_of: String,
    base: u64,
}

struct Log {
    file: File,
    /// `(index, end offset)` of each whole record after the header, in file order; `None`
    /// until the file is first scanned (by [`Store::load`], or by the first call needing it).
    records: Option<Vec<(u64, u64)>>,
    /// Where the header record ends (the first entry's record starts).
    header_end: u64,
    /// The snapshot index the log follows (its header's `base`).
    base: u64,
    /// The bytes of the last append, kept for the next one: an append of thousands of
    /// entries would otherwise grow a fresh buffer of megabytes each time.
    scratch: Vec<u8>,
}

impl Log {
    /// Appends the records of `entries` (encoded into `buffer`) with one write and one sync.
    fn write_records<E: Serialize>(
        &mut self,
        buffer: &mut Vec<u8>,
        entries: &[(u64, E)],
    ) -> Result<(), StoreError> {
        let mut ends = Vec::with_capacity(entries.len());
        for (index, entry) in entries {
            push_record(buffer, *index, entry)?;
            ends.push((*index, buffer.len() as u64));
        }
        let at = self
            .file
            .metadata()
            .map_err(fail("read the log's size"))?
            .len();
        self.file.write_all(buffer).map_err(fail("write the log"))?;
        self.file.sync_data().map_err(fail("sync the log"))?;
        let records = self.scanned()?;
        records.extend(ends.into_iter().map(|(i, end)| (i, at + end)));
        Ok(())
    }

    /// The records, scanning the file if it has not been yet (a torn tail is left for
    /// [`Store::load`] to report and cut).
    fn scanned(&mut self) -> Result<&mut Vec<(u64, u64)>, StoreError> {
        if self.records.is_none() {
            let len = self
                .file
                .metadata()
                .map_err(fail("read the log's size"))?
                .len();
            let mut bytes = vec![0u8; len as usize];
            self.file
                .read_exact_at(&mut bytes, 0)
                .map_err(fail("read the log"))?;
            let (whole, _) = records(&bytes);
            self.index(&whole);
        }
        Ok(self.records.as_mut().expect("just scanned"))
    }

    /// Records the positions of `whole` (the file's records, the header first if it has one).
    fn index(&mut self, whole: &[Found<'_>]) {
        let (header_end, base, rest) = match whole.first() {
            Some((0, payload, end)) => {
                let base = serde_json::from_slice::<Header>(payload).map_or(0, |h| h.base);
                (*end as u64, base, &whole[1..])
            }
            _ => (0, 0, whole),
        };
        self.header_end = header_end;
        self.base = base;
        self.records = Some(rest.iter().map(|(i, _, end)| (*i, *end as u64)).collect());
    }

    /// `(first, last)` as [`crate::log::Log::bounds`] defines them.
    fn bounds(&mut self) -> Result<(u64, u64), StoreError> {
        self.scanned()?;
        Ok(self.known_bounds().expect("just scanned"))
    }

    /// The bounds, if the records are scanned.
    fn known_bounds(&self) -> Option<(u64, u64)> {
        let records = self.records.as_ref()?;
        Some(match (records.first(), records.last()) {
            (Some((first, _)), Some((last, _))) => (*first, *last),
            _ => (self.base + 1, self.base),
        })
    }

    /// Where the record of entry `index` ends (the header's end for the entry before the first).
    fn end_of(&mut self, index: u64) -> Result<Option<u64>, StoreError> {
        self.scanned()?;
        let header_end = self.header_end;
        let records = self.records.as_ref().expect("just scanned");
        Ok(match records.binary_search_by_key(&index, |(i, _)| *i) {
            Ok(at) => Some(records[at].1),
            Err(0) => (records.first().is_none_or(|(i, _)| index + 1 == *i)).then_some(header_end),
            Err(_) => None,
        })
    }
}

/// The log, locked; letting go of it publishes its bounds (if scanned) to
/// [`Store::bounds`](Store), so they can be read without waiting for the lock.
struct LogGuard<'a> {
    log: std::sync::MutexGuard<'a, Log>,
    bounds: &'a Mutex<Option<(u64, u64)>>,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = Log;
    fn deref(&self) -> &Log {
        &self.log
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut Log {
        &mut self.log
    }
}

impl Drop for LogGuard<'_> {
    /// Published while the log is still locked, so publications follow the log's changes
    /// in order.
    fn drop(&mut self) {
        *lock_bounds(self.bounds) = self.log.known_bounds();
    }
}

fn lock_bounds(
    bounds: &Mutex<Option<(u64, u64)>>,
) -> std::sync::MutexGuard<'_, Option<(u64, u64)>> {
    // Only whole values are ever stored in it.
    bounds.lock().unwrap_or_else(|e| e.into_inner())
}

/// The data files.
pub struct Store<E = Entry> {
    db: Database,
    log_path: PathBuf,
    log: Mutex<Log>,
    /// The log's bounds as of the last change made whole, published each time the log's lock
    /// is let go (by [`LogGuard`]): what [`crate::log::Log::bounds`] answers without the lock,
    /// which an append holds through its `fdatasync`. `None` until the log is first scanned.
    bounds: Mutex<Option<(u64, u64)>>,
    /// The length of the last snapshot's JSON stored (0: none since open), the room the next
    /// one's encoding starts with ([`EncodedSnapshot::new`]).
    snapshot_len: AtomicUsize,
    /// The data file's id, which the log's header names.
    id: String,
    accept_log_loss: bool,
    /// A loss found (and accepted) on open, for [`Store::load`] to report.
    lost: Mutex<Option<LogLoss>>,
    /// The record type the log holds (a function type: the store holds no `E` itself).
    records: PhantomData<fn() -> E>,
}

/// The path of the log beside the redb file `data`.
pub fn log_path(data: &Path) -> PathBuf {
    let mut name = data.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

/// Appends the record of `entry` at `index` to `out`, encoding the entry in place (`out` is
/// left as it was on an error).
fn push_record<E: Serialize>(out: &mut Vec<u8>, index: u64, entry: &E) -> Result<(), StoreError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    let encoded = serde_json::to_writer(&mut *out, entry).map_err(fail("encode an entry"));
    let len = encoded.and_then(|()| {
        u32::try_from(out.len() - start - HEADER)
            .ok()
            .filter(|&n| n <= MAX_ENTRY_BYTES)
            .ok_or_else(|| StoreError(format!("entry {index} is too large to log")))
    });
    let len = match len {
        Ok(len) => len,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    let crc = crc_of(index, &out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out[start + 8..start + HEADER].copy_from_slice(&index.to_le_bytes());
    Ok(())
}

/// The checksum of a record: its index and payload.
fn crc_of(index: u64, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&index.to_le_bytes());
    crc.update(payload);
    crc.finalize()
}

/// A record of `payload` at `index` (0: the header).
fn record_bytes(index: u64, payload: &[u8]) -> Result<Vec<u8>, StoreError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| n <= MAX_ENTRY_BYTES)
        .ok_or_else(|| StoreError(format!("entry {index} is too large to log")))?;
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc_of(index, payload).to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

fn header_of(id: &str, base: u64) -> Result<Vec<u8>, StoreError> {
    let header = Header {
        log_of: id.to_owned(),
        base,
    };
    serde_json::to_vec(&header).map_err(fail("encode the log's header"))
}

/// A fresh random id for a data file.
/// A new random id (32 hex digits): a data file's, or a log's (`Machine::log`).
///
/// # Errors
/// The system has no randomness to give.
pub fn new_id() -> Result<String, StoreError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(fail("draw a data file id"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Replaces the log at `path` with `bytes` whole: written beside it, synced, renamed over it,
/// and the directory synced, so a crash leaves the old log or the new one, never a part.
fn replace_log(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    let beside = PathBuf::from(name);
    // The log holds every agent's leases and the hashes of session secrets: a new one is
    // readable by its owner only (0600); one that replaces a log keeps that log's mode (an
    // operator may have chosen it). Made anew, so a stale `.new` passes on no other mode.
    let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o777);
    let _ = std::fs::remove_file(&beside);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&beside)
        .map_err(|e| StoreError(format!("cannot write {}: {e}", beside.display())))?;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail("set the new log's mode"))?;
    file.write_all(bytes).map_err(fail("write the new log"))?;
    file.sync_all().map_err(fail("sync the new log"))?;
    std::fs::rename(&beside, path).map_err(fail("put the new log in place"))?;
    sync_dir(path)
}

fn sync_dir(path: &Path) -> Result<(), StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(fail("sync the data directory"))?;
    }
    Ok(())
}

/// A new log at `path`: only its header, naming data file `id` and the snapshot at `base`.
fn start_log(path: &Path, id: &str, base: u64) -> Result<(), StoreError> {
    replace_log(path, &record_bytes(0, &header_of(id, base)?)?)
}

/// Renames a log that is not the data file's out of the way (never deletes it).
fn set_aside(path: &Path) -> Result<PathBuf, StoreError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".set-aside-{stamp}"));
    let aside = PathBuf::from(name);
    std::fs::rename(path, &aside).map_err(|e| {
        StoreError(format!(
            "cannot set the log aside to {}: {e}",
            aside.display()
        ))
    })?;
    Ok(aside)
}

fn wall_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The first whole record of the log at `path`, `(index, payload)`: `None` if it has none
/// (empty, or cut inside its first record).
fn first_record(path: &Path) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let mut file = File::open(path)?;
    let mut head = [0u8; HEADER];
    let cut = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Ok(None),
        _ => Err(e),
    };
    if let Err(e) = file.read_exact(&mut head) {
        return cut(e);
    }
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let (len, crc) = (word(0), word(4));
    let index = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if len > MAX_ENTRY_BYTES {
        return Ok(None);
    }
    let mut payload = vec![0u8; len as usize];
    if let Err(e) = file.read_exact(&mut payload) {
        return cut(e);
    }
    let mut check = crc32fast::Hasher::new();
    check.update(&index.to_le_bytes());
    check.update(&payload);
    Ok((check.finalize() == crc).then_some((index, payload)))
}

/// A whole record found in the log's bytes: `(index, payload, end offset)`.
type Found<'a> = (u64, &'a [u8], usize);

/// Whole records of `bytes`, and where the last one ends.
fn records(bytes: &[u8]) -> (Vec<Found<'_>>, usize) {
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
        out.push((index, payload, end));
        at = end;
    }
    (out, at)
}

impl Store {
    /// Opens the data files at `path` (and `path.log`), creating them if needed; a log that
    /// is missing or not this file's is refused (see the module contract).
    ///
    /// # Errors
    /// A file cannot be opened or created, `path` is not a redb file, or the log is not the
    /// data file's.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, false)
    }

    /// The data file's id (random, made with the file): also the id of its log's history
    /// (`Machine::log`), which no other data file shares.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// [`Store::open`], and with `accept_log_loss` a log that is missing or not this file's
    /// is accepted as lost (see the module contract).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(path: &Path, accept_log_loss: bool) -> Result<Store, StoreError> {
        Store::open_records(path, accept_log_loss)
    }
}

impl<E: Serialize + DeserializeOwned> Store<E> {
    /// [`Store::open_with`] for a log of records of type `E` (a consensus layer's own, in the
    /// same file format).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_records(path: &Path, accept_log_loss: bool) -> Result<Store<E>, StoreError> {
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
        let (mut id, has_history, has_id) = {
            let txn = db.begin_write().map_err(fail("begin"))?;
            let found = {
                let mut meta = txn.open_table(META).map_err(fail("open the meta table"))?;
                let history = meta
                    .get(CONFIG_KEY)
                    .map_err(fail("read the config"))?
                    .is_some();
                let id = meta
                    .get(ID_KEY)
                    .map_err(fail("read the data file's id"))?
                    .map(|v| String::from_utf8_lossy(v.value()).into_owned());
                match id {
                    Some(id) => (id, history, true),
                    None => {
                        let id = new_id()?;
                        meta.insert(ID_KEY, id.as_bytes())
                            .map_err(fail("write the data file's id"))?;
                        (id, history, false)
                    }
                }
            };
            txn.commit().map_err(fail("commit"))?;
            found
        };
        let log_path = log_path(path);
        let mut lost = None;
        // Only the first record is read here (a log can be large: `load` reads it once).
        match first_record(&log_path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if has_history {
                    if !accept_log_loss {
                        return Err(StoreError(format!(
                            "LOG_MISSING: the data file {} has history but its log {} is gone: \
                             everything after its last snapshot would be lost and fences could \
                             repeat. Restore the log beside it (the two are one backup), or \
                             start with --accept-log-loss to go on from the snapshot",
                            path.display(),
                            log_path.display()
                        )));
                    }
                    lost = Some(LogLoss::Missing);
                }
                start_log(&log_path, &id, 0)?;
            }
            Err(e) => {
                return Err(StoreError(format!(
                    "cannot read the log {}: {e}",
                    log_path.display()
                )))
            }
            Ok(first) => {
                let header = first.as_ref().filter(|(index, _)| *index == 0);
                match header {
                    Some((_, payload)) => {
                        let header: Header = serde_json::from_slice(payload).map_err(|e| {
                            StoreError(format!("the log's header cannot be decoded: {e}"))
                        })?;
                        if header.log_of != id && (has_id || has_history) {
                            if !accept_log_loss {
                                return Err(StoreError(format!(
                                    "LOG_MISMATCH: the log {} belongs to another data file than {} \
                                     (its header names {}, the data file is {id}): put each log \
                                     beside its own data file, or start with --accept-log-loss \
                                     to set this log aside and go on from the data file's snapshot",
                                    log_path.display(),
                                    path.display(),
                                    header.log_of
                                )));
                            }
                            let moved_to = set_aside(&log_path)?;
                            lost = Some(LogLoss::Mismatch { moved_to });
                            start_log(&log_path, &id, 0)?;
                        } else if header.log_of != id {
                            // A data file just created beside a log with a header: the
                            // recovery refuses a log with history and no configuration;
                            // an empty one becomes this file's.
                            let txn = db.begin_write().map_err(fail("begin"))?;
                            {
                                let mut meta =
                                    txn.open_table(META).map_err(fail("open the meta table"))?;
                                meta.insert(ID_KEY, header.log_of.as_bytes())
                                    .map_err(fail("write the data file's id"))?;
                            }
                            txn.commit().map_err(fail("commit"))?;
                            id = header.log_of;
                        }
                    }
                    None if first.is_none() => {
                        // Cut short inside its header (or to nothing): a torn tail, which
                        // `load` reports and cuts; the header is written again then.
                    }
                    None if has_id && has_history => {
                        if !accept_log_loss {
                            return Err(StoreError(format!(
                                "LOG_MISMATCH: the log {} has no header naming the data file {}: \
                                 it is not this file's log. Put it beside its own data file, or \
                                 start with --accept-log-loss to set it aside",
                                log_path.display(),
                                path.display()
                            )));
                        }
                        let moved_to = set_aside(&log_path)?;
                        lost = Some(LogLoss::Mismatch { moved_to });
                        start_log(&log_path, &id, 0)?;
                    }
                    None => {
                        // A log from before headers: adopted whole, behind a header.
                        let bytes = std::fs::read(&log_path).map_err(fail("read the log"))?;
                        let mut adopted = record_bytes(0, &header_of(&id, 0)?)?;
                        adopted.extend_from_slice(&bytes);
                        replace_log(&log_path, &adopted)?;
                    }
                }
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| StoreError(format!("cannot open the log {}: {e}", log_path.display())))?;
        Ok(Store {
            db,
            log_path,
            log: Mutex::new(Log {
                file,
                records: None,
                header_end: 0,
                base: 0,
                scratch: Vec::new(),
            }),
            bounds: Mutex::new(None),
            snapshot_len: AtomicUsize::new(0),
            id,
            accept_log_loss,
            lost: Mutex::new(lost),
            records: PhantomData,
        })
    }

    /// Wall-clock ms (Unix) when the last snapshot was stored (or, before any, when the data
    /// file got its configuration): what a lost log issued is bounded by the time since.
    ///
    /// # Errors
    /// Any storage failure.
    pub fn wall_ms(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let meta = txn.open_table(META).map_err(fail("open the meta table"))?;
        let bytes = meta.get(WALL_KEY).map_err(fail("read the wall time"))?;
        Ok(bytes.and_then(|b| b.value().try_into().ok().map(u64::from_le_bytes)))
    }

    /// The snapshot and the entries after it; a torn tail is cut off (see the module contract).
    ///
    /// # Errors
    /// An unreadable file, an undecodable record, or a gap in the log.
    pub fn load(&self) -> Result<Loaded<E>, StoreError> {
        let snapshot = self.read_snapshot()?;
        let mut log = self.lock_log();
        let mut bytes = Vec::new();
        File::open(&self.log_path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(fail("read the log"))?;
        let (mut whole, end) = records(&bytes);
        let torn = (end < bytes.len()).then(|| TornTail {
            at: end as u64,
            dropped: (bytes.len() - end) as u64,
        });
        if let Some(t) = torn {
            log.file.set_len(t.at).map_err(fail("cut the torn tail"))?;
            log.file.sync_data().map_err(fail("sync the log"))?;
        }
        let applied = snapshot.as_ref().map_or(0, |s| s.applied);
        let mut lost = self.lost.lock().expect("lost lock").take();
        let base = match whole.first() {
            Some((0, payload, _)) => {
                let header: Header = serde_json::from_slice(payload)
                    .map_err(|e| StoreError(format!("the log's header cannot be decoded: {e}")))?;
                header.base
            }
            Some(_) => 0,
            None => {
                // Cut inside its header (or to nothing): it begins again with one.
                self.restart_log(&mut log, applied)?;
                applied
            }
        };
        if base > applied {
            if !self.accept_log_loss {
                return Err(StoreError(format!(
                    "LOG_NEWER_THAN_DATA: the log {} follows the snapshot of entry {base}, but \
                     the data file's snapshot ends at entry {applied}: the data file is older \
                     than its log (restored from an older copy?). Restore both from one \
                     backup, or start with --accept-log-loss to set the log aside and go on \
                     from the data file's snapshot",
                    self.log_path.display()
                )));
            }
            let moved_to = set_aside(&self.log_path)?;
            self.restart_log(&mut log, applied)?;
            lost = Some(LogLoss::Newer {
                base,
                applied,
                moved_to,
            });
            whole.clear();
        }
        if !whole.is_empty() {
            log.index(&whole);
        }
        let mut entries = Vec::new();
        let after_header = whole.iter().filter(|(i, _, _)| *i > 0);
        for (index, payload, _) in after_header.filter(|(i, _, _)| *i > applied) {
            let expected = applied + 1 + entries.len() as u64;
            if *index != expected {
                return Err(StoreError(format!(
                    "the log has entry {index} where entry {expected} was expected"
                )));
            }
            entries.push((*index, decode(*index, payload)?));
        }
        Ok(Loaded {
            snapshot,
            entries,
            torn,
            lost,
        })
    }

    /// Replaces the log with a new one holding only its header (after the snapshot at `base`).
    fn restart_log(&self, log: &mut Log, base: u64) -> Result<(), StoreError> {
        start_log(&self.log_path, &self.id, base)?;
        self.restart_file(log)
    }

    /// Opens the log file again after it was replaced; its records are scanned when next
    /// needed.
    fn restart_file(&self, log: &mut Log) -> Result<(), StoreError> {
        log.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| {
                StoreError(format!(
                    "cannot open the log {}: {e}",
                    self.log_path.display()
                ))
            })?;
        log.records = None;
        Ok(())
    }

    fn lock_log(&self) -> LogGuard<'_> {
        // A panic while holding it leaves whole values behind (every change is a whole
        // file operation followed by its bookkeeping).
        LogGuard {
            log: self.log.lock().unwrap_or_else(|e| e.into_inner()),
            bounds: &self.bounds,
        }
    }

    /// Stores `snapshot` (durably), then empties the log it covers: `save_snapshot`, then
    /// `purge_upto` its index ([`crate::log::Log`]).
    ///
    /// # Errors
    /// Any storage failure.
    pub fn compact(&self, snapshot: &MachineSnapshot) -> Result<(), StoreError> {
        let expected = self.snapshot_len.load(Ordering::Relaxed);
        self.save_snapshot(&EncodedSnapshot::new(snapshot, expected)?)?;
        self.purge_upto(snapshot.applied)
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
        self.put(CONFIG_KEY, &bytes, true)
    }

    /// Stores `bytes` under `key` in one redb commit, with the wall-clock time beside it when
    /// `stamp_wall` (a snapshot or the configuration: what a lost log is bounded by).
    fn put(&self, key: &str, bytes: &[u8], stamp_wall: bool) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(fail("begin a write"))?;
        {
            let mut meta = txn.open_table(META).map_err(fail("open the meta table"))?;
            meta.insert(key, bytes)
                .map_err(fail("write the data file"))?;
            if stamp_wall {
                meta.insert(WALL_KEY, wall_now().to_le_bytes().as_slice())
                    .map_err(fail("write the wall time"))?;
            }
        }
        txn.commit().map_err(fail("commit to the data file"))
    }

    /// How many entries the log holds (not counting those folded into the snapshot; after a
    /// [`load`](Self::load), or counted since open).
    ///
    /// # Errors
    /// None today; kept fallible for storage that must read to count.
    pub fn log_len(&self) -> Result<u64, StoreError> {
        Ok(self.lock_log().scanned()?.len() as u64)
    }
}

/// An entry's JSON, decoded.
fn decode<E: DeserializeOwned>(index: u64, payload: &[u8]) -> Result<E, StoreError> {
    serde_json::from_slice(payload)
        .map_err(|e| StoreError(format!("log entry {index} cannot be decoded: {e}")))
}

impl<E: Serialize + DeserializeOwned> crate::log::Log<E> for Store<E> {
    /// One `write` and one `fdatasync` for the whole batch.
    fn append(&self, entries: &[(u64, E)]) -> Result<(), StoreError> {
        let mut log = self.lock_log();
        let (_, last) = log.bounds()?;
        crate::log::check_follows(last, entries)?;
        let mut buffer = std::mem::take(&mut log.scratch);
        buffer.clear();
        let written = log.write_records(&mut buffer, entries);
        if buffer.capacity() <= SCRATCH_KEPT {
            log.scratch = buffer;
        }
        written
    }

    fn truncate_after(&self, index: u64) -> Result<(), StoreError> {
        let mut log = self.lock_log();
        let (first, last) = log.bounds()?;
        if index >= last {
            return Ok(());
        }
        let Some(end) = log.end_of(index)? else {
            return Err(StoreError(format!(
                "cannot truncate after entry {index}: the log holds {first}..={last}"
            )));
        };
        log.file.set_len(end).map_err(fail("truncate the log"))?;
        log.file.sync_data().map_err(fail("sync the log"))?;
        log.scanned()?.retain(|(i, _)| *i <= index);
        Ok(())
    }

    /// Writes a new log (the header, then the entries after `index`) beside the old one and
    /// renames it over (see [`replace_log`]).
    fn purge_upto(&self, index: u64) -> Result<(), StoreError> {
        let mut log = self.lock_log();
        let (_, last) = log.bounds()?;
        if index >= last {
            let base = index.max(log.base);
            return self.restart_log(&mut log, base);
        }
        let Some(from) = log.end_of(index)? else {
            return Ok(()); // already purged beyond it
        };
        let len = log
            .file
            .metadata()
            .map_err(fail("read the log's size"))?
            .len();
        let mut rest = vec![0u8; (len - from) as usize];
        log.file
            .read_exact_at(&mut rest, from)
            .map_err(fail("read the log"))?;
        let mut bytes = record_bytes(0, &header_of(&self.id, index)?)?;
        bytes.extend_from_slice(&rest);
        replace_log(&self.log_path, &bytes)?;
        self.restart_file(&mut log)
    }

    fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, E)>, StoreError> {
        let mut log = self.lock_log();
        let bounds = log.bounds()?;
        if from > to || (from < to && (from < bounds.0 || to > bounds.1 + 1)) {
            return Err(crate::log::outside(from, to, bounds));
        }
        if from == to {
            return Ok(Vec::new());
        }
        let start = log.end_of(from - 1)?.expect("inside the bounds");
        let end = log.end_of(to - 1)?.expect("inside the bounds");
        let mut bytes = vec![0u8; (end - start) as usize];
        log.file
            .read_exact_at(&mut bytes, start)
            .map_err(fail("read the log"))?;
        let (whole, _) = records(&bytes);
        whole
            .into_iter()
            .map(|(index, payload, _)| Ok((index, decode(index, payload)?)))
            .collect()
    }

    /// The bounds published when the log's lock was last let go: a reader (a consensus
    /// layer's core, its replication) never waits for an append's sync, and does not see
    /// that append's entries before it is durable.
    fn bounds(&self) -> (u64, u64) {
        if let Some(bounds) = *lock_bounds(&self.bounds) {
            return bounds;
        }
        // A log that cannot be read has no entries to offer; `read` says why.
        self.lock_log().bounds().unwrap_or((1, 0))
    }

    fn save_vote(&self, vote: &[u8]) -> Result<(), StoreError> {
        self.put(VOTE_KEY, vote, false)
    }

    fn read_vote(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let meta = txn.open_table(META).map_err(fail("open the meta table"))?;
        let bytes = meta.get(VOTE_KEY).map_err(fail("read the vote"))?;
        Ok(bytes.map(|b| b.value().to_vec()))
    }

    fn save_snapshot(&self, snapshot: &EncodedSnapshot<'_>) -> Result<(), StoreError> {
        self.put(SNAPSHOT_KEY, snapshot.json(), true)?;
        self.snapshot_len
            .store(snapshot.json().len(), Ordering::Relaxed);
        Ok(())
    }

    fn read_snapshot(&self) -> Result<Option<MachineSnapshot>, StoreError> {
        let txn = self.db.begin_read().map_err(fail("begin a read"))?;
        let meta = txn.open_table(META).map_err(fail("open the meta table"))?;
        let bytes = meta.get(SNAPSHOT_KEY).map_err(fail("read the snapshot"))?;
        bytes
            .map(|b| {
                serde_json::from_slice(b.value())
                    .map_err(|e| StoreError(format!("the stored snapshot cannot be decoded: {e}")))
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn release_all(now: u64) -> Entry {
        Entry::Command {
            now,
            command: klock_core::Command::ReleaseAll {
                session: klock_core::SessionId(1),
            },
            key: None,
            token: None,
            caller: None,
            resume: None,
            fingerprint: None,
        }
    }

    /// An append holds the log's lock through its `fdatasync`; a reader of the bounds (a
    /// consensus layer's core, on a worker thread the server's connections need) must not
    /// wait for it. Here the lock is held as an append would hold it, without end.
    #[test]
    fn bounds_are_read_while_an_append_holds_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("k.redb")).unwrap());
        let entries: Vec<_> = (1..=3).map(|i| (i, release_all(i))).collect();
        store.append(&entries).unwrap();
        let held = store.lock_log();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = Arc::clone(&store);
        std::thread::spawn(move || tx.send(reader.bounds()).unwrap());
        let read = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        assert_eq!(read, Ok((1, 3)), "the bounds waited for the log's lock");
    }

    /// The bounds follow every change once it is whole, including a log replaced by a purge
    /// (scanned again when next asked) and a store opened without a scan.
    #[test]
    fn published_bounds_follow_appends_truncations_purges_and_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.redb");
        {
            let store = Store::open(&path).unwrap();
            assert_eq!(store.bounds(), (1, 0));
            let entries: Vec<_> = (1..=6).map(|i| (i, release_all(i))).collect();
            store.append(&entries).unwrap();
            assert_eq!(store.bounds(), (1, 6));
            store.truncate_after(4).unwrap();
            assert_eq!(store.bounds(), (1, 4));
            store.purge_upto(2).unwrap();
            assert_eq!(
                *lock_bounds(&store.bounds),
                None,
                "a replaced log is scanned anew"
            );
            assert_eq!(store.bounds(), (3, 4));
            assert_eq!(*lock_bounds(&store.bounds), Some((3, 4)));
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.bounds(), (3, 4), "after a reopen");
    }
}
