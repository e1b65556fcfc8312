//! The online backup and its restore.
//!
//! Contract:
//! - A backup is the machine's snapshot at a batch boundary, taken while serving: the engine
//!   applies an entry only after it is durable (append, then apply), so the machine under the
//!   applier's lock is exactly the state of the committed log prefix `1..=applied`, the state
//!   a restart would rebuild from that prefix, with nothing half-applied and nothing that is
//!   not on disk. Taking it holds the applier's lock only while the state is copied in memory
//!   (as a periodic snapshot does); encoding and sending happen after, without it.
//! - The file is JSON ([`Backup`]): a format tag and version, the build that wrote it, the
//!   wall-clock time it was taken at, and the [`MachineSnapshot`] (kernel configuration,
//!   state and its hash, remembered idempotency answers, session token hashes). It holds
//!   token and secret hashes: it is written readable by its owner only.
//! - [`restore`] makes a new data file (refusing one that exists) from a backup whose state
//!   hash checks out. The restored state is moved past anything the server the backup came
//!   from can have issued since ([`crate::recovery::raised_past`], as for an accepted log
//!   loss): a backup lags its server, and a fence the old server gave out after the backup
//!   must never be given out again. Sessions, leases (with their fences), queues and
//!   remembered answers are the backup's; on start the server puts every session in its
//!   grace to reconnect, as after any restart.

use crate::machine::{Machine, MachineSnapshot};
use crate::recovery::raised_past;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The format tag every backup carries.
pub const FORMAT: &str = "klock-backup";
/// The version of the format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// A backup file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backup {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written.
    pub format_version: u32,
    /// The server's version and commit that wrote it.
    pub server: String,
    /// Wall-clock ms (Unix) when it was taken: what bounds what its server issued since.
    pub wall_ms: u64,
    pub snapshot: MachineSnapshot,
}

fn wall_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Backup {
    /// A backup of `snapshot`, taken now.
    pub fn of(snapshot: MachineSnapshot) -> Backup {
        Backup {
            format: FORMAT.to_owned(),
            format_version: FORMAT_VERSION,
            server: crate::about::long_version(),
            wall_ms: wall_now(),
            snapshot,
        }
    }

    /// Reads a backup from its JSON, checking its format, version and state hash.
    ///
    /// # Errors
    /// `BACKUP_INVALID` naming what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Backup, String> {
        let invalid = |why: String| format!("BACKUP_INVALID: {why}");
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(format!("not JSON: {e}")))?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(invalid(format!(
                "not a Klock backup (no \"format\": \"{FORMAT}\")"
            )));
        }
        let version = value.get("format_version").and_then(|v| v.as_u64());
        if version != Some(u64::from(FORMAT_VERSION)) {
            return Err(invalid(format!(
                "format_version {version:?}; this build reads version {FORMAT_VERSION}"
            )));
        }
        let backup: Backup = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        Machine::restore(&backup.snapshot).map_err(|e| invalid(e.to_string()))?;
        Ok(backup)
    }
}

/// What [`restore`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The log index and state hash of the backup.
    pub applied: u64,
    pub hash: u64,
    /// How long before the restore the backup was taken (ms).
    pub age_ms: u64,
    /// Where fences, log indexes and server time now start.
    pub next_fence: u64,
    pub next_index: u64,
    pub server_time_ms: u64,
}

/// Makes the new data file `data` (and its log) from the backup file `from` (module
/// contract).
///
/// # Errors
/// `data` or its log exists (`RESTORE_TARGET_EXISTS`), the backup cannot be read or is
/// invalid, its time is later than the wall clock (`BACKUP_IN_THE_FUTURE`), or the files
/// cannot be written.
pub fn restore(from: &Path, data: &Path) -> Result<Restored, String> {
    let log = crate::store::log_path(data);
    for path in [data, log.as_path()] {
        if path.exists() {
            return Err(format!(
                "RESTORE_TARGET_EXISTS: {} exists; a backup is restored into a new data file \
                 only (move the old one away first)",
                path.display()
            ));
        }
    }
    let bytes = std::fs::read(from)
        .map_err(|e| format!("cannot read the backup {}: {e}", from.display()))?;
    let backup = Backup::decode(&bytes)?;
    let age_ms = wall_now().checked_sub(backup.wall_ms).ok_or_else(|| {
        format!(
            "BACKUP_IN_THE_FUTURE: the backup was taken at {} ms (Unix), later than this \
             machine's clock: nothing bounds what its server issued since; fix the clock",
            backup.wall_ms
        )
    })?;
    let raised = raised_past(&backup.snapshot, age_ms);
    let store = Store::open(data).map_err(|e| e.to_string())?;
    store
        .set_config(&backup.snapshot.state.config)
        .map_err(|e| e.to_string())?;
    store.compact(&raised).map_err(|e| e.to_string())?;
    Ok(Restored {
        applied: backup.snapshot.applied,
        hash: backup.snapshot.hash,
        age_ms,
        next_fence: raised.state.next_lease,
        next_index: raised.applied + 1,
        server_time_ms: raised.last_now,
    })
}

/// Writes `bytes` to `path` whole, readable by its owner only: beside it first, synced, then
/// renamed over it, so a failed backup never leaves half a file under the name.
///
/// # Errors
/// The file cannot be written.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    let partial = std::path::PathBuf::from(name);
    let _ = std::fs::remove_file(&partial);
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", partial.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&partial, path)
        .map_err(|e| format!("cannot put the backup at {}: {e}", path.display()))
}
