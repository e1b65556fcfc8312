//! openraft's log storage on the server's log seam ([`klock_server::log::Log`]).
//!
//! Contract:
//! - The log holds whole Raft entries ([`RaftEntry`]: log id and payload), the file store in
//!   its single-node record format (one JSON record per entry). Raft numbers entries from 0;
//!   the seam from 1 (0 means "none", and the file store's header record has index 0), so
//!   Raft entry `i` is the seam's entry `i + 1`, in both directions and nowhere else.
//! - [`RaftLogStorage::append`] returns once the entries are readable: they are kept in
//!   memory ([`Recent`]) and queued for the log's [`Writer`]. It reports them flushed
//!   (`io_completed`) only after the seam's append returned, which is after they are durable
//!   (the file store's one `write` and one `fdatasync`, shared by the appends queued
//!   together). Reads take what they can from the kept entries and the rest from the log.
//! - The seam's vote slot holds this layer's durable metadata ([`Meta`]): the vote and the
//!   last purged log id (whose term the log no longer holds once purged). Both are saved
//!   durably before the call that changes them returns; a purge saves the purged id first,
//!   then drops the entries, so a crash between the two leaves entries that are merely
//!   purged again.
//! - An empty log starts where the first entry appended to it does (the seam's entries
//!   before it are marked purged, which Raft's last purged log id does not change).
//! - Truncation and purging are the seam's, done by the writer after the appends queued before
//!   them, and durable when they return. Reads return the
//!   entries the log holds inside the asked range: a range reaching before the first entry
//!   (purged) or past the last (not appended yet) is cut there, never elsewhere.

use crate::io_error;
use crate::recent::Recent;
use crate::types::{KlockRaft, LogId, RaftEntry, Vote};
use crate::writer::Writer;
use klock_server::log::Log;
use klock_server::store::{Store, TornTail};
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

/// What this layer keeps in the seam's vote slot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub vote: Option<Vote>,
    /// The last purged entry's log id (none before the first purge).
    pub purged: Option<LogId>,
}

/// Raft's log storage and reader on a seam log (see the module contract). Clones share the
/// log, the kept entries and the writer: a clone is the reader openraft asks for.
#[derive(Clone)]
pub struct LogStore {
    log: Arc<dyn Log<RaftEntry>>,
    recent: Arc<Recent<RaftEntry>>,
    writer: Writer,
}

impl LogStore {
    /// The store on `log` (the file store, see [`open_file`], or a memory log), with its
    /// writer started on the current tokio runtime.
    pub fn new(log: Arc<dyn Log<RaftEntry>>) -> LogStore {
        let recent = Arc::new(Recent::default());
        let writer = Writer::start(Arc::clone(&log), Arc::clone(&recent));
        LogStore {
            log,
            recent,
            writer,
        }
    }

    /// Drops this handle, then waits until the log is closed: every other handle on it
    /// dropped too, and its writer done with the queued jobs (a log reopened in the same
    /// process must wait so).
    pub async fn closed(self) {
        let LogStore { log, writer, .. } = self;
        drop(log);
        writer.ended().await;
    }

    /// `(first, last)` as the seam's [`Log::bounds`], the entries accepted but not written
    /// yet included.
    fn bounds(&self) -> (u64, u64) {
        self.recent.bounds_over(self.log.bounds())
    }

    /// The entries `from..to`: the kept ones from memory, the others from the log.
    fn read(&self, from: u64, to: u64) -> io::Result<Vec<(u64, RaftEntry)>> {
        let (split, kept) = self.recent.tail_of(from, to);
        let mut entries = if from < split {
            self.log.read(from, split).map_err(io_error)?
        } else {
            Vec::new()
        };
        entries.extend(kept);
        Ok(entries)
    }

    /// The metadata last saved (the default before any).
    ///
    /// # Errors
    /// A storage failure, or bytes that are not this layer's metadata.
    pub fn meta(&self) -> io::Result<Meta> {
        match self.log.read_vote().map_err(io_error)? {
            None => Ok(Meta::default()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| io_error(format!("the stored Raft metadata cannot be decoded: {e}"))),
        }
    }

    fn save_meta(&self, meta: &Meta) -> io::Result<()> {
        let bytes = serde_json::to_vec(meta).map_err(io_error)?;
        self.log.save_vote(&bytes).map_err(io_error)
    }

    /// The last entry's log id, if the log holds any.
    fn last_held(&self) -> io::Result<Option<LogId>> {
        let (first, last) = self.bounds();
        if last < first {
            return Ok(None);
        }
        let entries = self.read(last, last + 1)?;
        Ok(entries.into_iter().next().map(|(_, e)| e.log_id))
    }
}

/// The file log at `path` (a redb file and `path.log` beside it, in the single-node format,
/// holding Raft entries), for a [`LogStore`] and a
/// [`StateMachine`](crate::state_machine::StateMachine) to share, and the torn tail its log
/// ended in, if it did. Opening loads the log once, which cuts a torn tail (a crash in the
/// middle of a write) back to the last whole entry and refuses a log with a gap or an
/// undecodable entry, or one purged past the snapshot stored beside it (`LOG_NEWER_THAN_DATA`:
/// Raft purges only entries a snapshot covers, and the state machine stores its snapshots
/// before).
///
/// # Errors
/// As [`Store::open`](klock_server::store::Store::open) and
/// [`Store::load`](klock_server::store::Store::load).
pub fn open_file(path: &Path) -> io::Result<(Arc<dyn Log<RaftEntry>>, Option<TornTail>)> {
    let store: Store<RaftEntry> = Store::open_records(path, false).map_err(io_error)?;
    let loaded = store.load().map_err(io_error)?;
    Ok((Arc::new(store), loaded.torn))
}

/// The seam index of Raft index `index`.
fn seam(index: u64) -> u64 {
    index + 1
}

impl RaftLogReader<KlockRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<RaftEntry>> {
        // Seam indexes, end exclusive (saturating: a range may reach the end of the u64s).
        let from = match range.start_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => i.saturating_add(2),
            Bound::Unbounded => 1,
        };
        let to = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(2),
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => u64::MAX,
        };
        let (first, last) = self.bounds();
        let (from, to) = (from.max(first), to.min(last + 1));
        if from >= to {
            return Ok(Vec::new());
        }
        let entries = self.read(from, to)?;
        Ok(entries.into_iter().map(|(_, e)| e).collect())
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(self.meta()?.vote)
    }
}

impl RaftLogStorage<KlockRaft> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<KlockRaft>> {
        let purged = self.meta()?.purged;
        let last = self.last_held()?.or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let mut meta = self.meta()?;
        meta.vote = Some(*vote);
        self.save_meta(&meta)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<KlockRaft>) -> io::Result<()>
    where
        I: IntoIterator<Item = RaftEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let batch: Vec<(u64, RaftEntry)> = entries
            .into_iter()
            .map(|e| (seam(e.log_id.index), e))
            .collect();
        let (first, last) = self.bounds();
        if let Some((start, _)) = batch.first().filter(|_| last < first) {
            // An empty log has no position of its own: it starts where its first entry does
            // (openraft may append to an empty log from any index; its own suite does).
            if *start > last + 1 {
                self.writer.purge_upto(start - 1).await.map_err(io_error)?;
            }
        }
        // Readable from now on; flushed once the writer wrote it.
        self.recent.keep(&batch);
        self.writer.append(batch, callback).await.map_err(io_error)
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let keep = last_log_id.map_or(0, |id| seam(id.index));
        self.writer.truncate_after(keep).await.map_err(io_error)
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let mut meta = self.meta()?;
        let index = log_id.index;
        meta.purged = Some(log_id);
        self.save_meta(&meta)?;
        self.writer.purge_upto(seam(index)).await.map_err(io_error)
    }
}
