//! The log's writer: one task that makes every change to the seam's log the log store asks
//! for, in the order asked, so that openraft's core never waits for a disk.
//!
//! openraft's log storage contract: an append returns once its entries are readable, and
//! reports them durable later, through its callback. The log store keeps them readable in
//! memory ([`Recent`]) and queues them here. Before, the core wrote and synced each append
//! itself, and nothing else of the node's Raft work (replicating, committing, answering) ran
//! during the sync.
//!
//! Contract:
//! - Jobs are carried out one after another, in the order queued: appends, truncations and
//!   purges, so a truncation or a purge sees every append queued before it.
//! - Appends queued while the writer was busy go to the log together, as one append (one
//!   write and one sync: group commit), up to [`GROUP`] entries. Once written, their entries
//!   are marked so in [`Recent`], and each append's callback is told the outcome, in order.
//! - A truncation or a purge answers once done; [`Recent`] follows it first.
//! - The task ends when every handle is dropped (the queued jobs are done first). A node
//!   stopped with its runtime drops the task and its queue: entries not reported durable may be
//!   lost, as Raft allows.

use crate::recent::Recent;
use crate::types::{KlockRaft, RaftEntry};
use klock_server::log::Log;
use klock_server::store::StoreError;
use openraft::storage::IOFlushed;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// How many jobs may wait for the writer before the log store waits to queue more.
const QUEUE: usize = 1024;
/// Appends stop being grouped once this many entries wait (a queue fed without pause must
/// still be written: the group is cut there).
const GROUP: usize = 4096;

/// One change to the log.
enum Job {
    Append(Vec<(u64, RaftEntry)>, IOFlushed<KlockRaft>),
    TruncateAfter(u64, oneshot::Sender<Result<(), StoreError>>),
    PurgeUpto(u64, oneshot::Sender<Result<(), StoreError>>),
}

/// A handle on the writer task (module contract). Clones share the task.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Job>,
    /// Closed when the task ended, after it let go of the log.
    ended: watch::Receiver<()>,
}

impl Writer {
    /// Starts the writer of `log`, keeping `recent` in step. Must be called in a tokio
    /// runtime: the task runs on it.
    pub fn start(log: Arc<dyn Log<RaftEntry>>, recent: Arc<Recent<RaftEntry>>) -> Writer {
        let (jobs, queue) = mpsc::channel(QUEUE);
        let (end, ended) = watch::channel(());
        tokio::spawn(async move {
            run(log, recent, queue).await;
            drop(end);
        });
        Writer { jobs, ended }
    }

    /// Drops this handle, then waits for the task to end (once every handle is dropped and
    /// the queued jobs are done): the log is no longer in use then, and may be opened again.
    pub async fn ended(self) {
        let mut ended = self.ended.clone();
        drop(self);
        // Err: the task dropped its end; no value is ever sent.
        let _ = ended.changed().await;
    }

    /// Queues `entries` (already kept in [`Recent`]); `flushed` is told when they are durable.
    pub async fn append(
        &self,
        entries: Vec<(u64, RaftEntry)>,
        flushed: IOFlushed<KlockRaft>,
    ) -> Result<(), StoreError> {
        self.queue(Job::Append(entries, flushed)).await
    }

    /// Removes every entry after `index`, once the appends queued before are written.
    pub async fn truncate_after(&self, index: u64) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        self.queue(Job::TruncateAfter(index, done)).await?;
        answer.await.map_err(|_| stopped())?
    }

    /// Drops every entry up to `index`, once the appends queued before are written.
    pub async fn purge_upto(&self, index: u64) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        self.queue(Job::PurgeUpto(index, done)).await?;
        answer.await.map_err(|_| stopped())?
    }

    async fn queue(&self, job: Job) -> Result<(), StoreError> {
        self.jobs.send(job).await.map_err(|_| stopped())
    }
}

fn stopped() -> StoreError {
    StoreError(String::from("the log's writer stopped"))
}

/// The writer task: takes every job queued, writes the appends among them together, and
/// carries out each other job in its place.
async fn run(
    log: Arc<dyn Log<RaftEntry>>,
    recent: Arc<Recent<RaftEntry>>,
    mut queue: mpsc::Receiver<Job>,
) {
    let mut entries: Vec<(u64, RaftEntry)> = Vec::new();
    let mut flushed: Vec<IOFlushed<KlockRaft>> = Vec::new();
    while let Some(job) = queue.recv().await {
        let mut next = Some(job);
        while let Some(job) = next {
            match job {
                Job::Append(batch, callback) => {
                    entries.extend(batch);
                    flushed.push(callback);
                }
                Job::TruncateAfter(index, done) => {
                    write(log.as_ref(), &recent, &mut entries, &mut flushed);
                    let _ = done.send(log.truncate_after(index).map(|()| recent.truncated(index)));
                }
                Job::PurgeUpto(index, done) => {
                    write(log.as_ref(), &recent, &mut entries, &mut flushed);
                    let _ = done.send(log.purge_upto(index).map(|()| recent.purged(index)));
                }
            }
            next = if entries.len() < GROUP {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        write(log.as_ref(), &recent, &mut entries, &mut flushed);
    }
}

/// Appends `entries` to the log (one write, one sync) and tells each callback the outcome.
fn write(
    log: &dyn Log<RaftEntry>,
    recent: &Recent<RaftEntry>,
    entries: &mut Vec<(u64, RaftEntry)>,
    flushed: &mut Vec<IOFlushed<KlockRaft>>,
) {
    let last = entries.last().map(|(index, _)| *index);
    let result = if entries.is_empty() {
        Ok(())
    } else {
        log.append(entries)
    };
    entries.clear();
    if let (Ok(()), Some(last)) = (&result, last) {
        recent.written(last);
    }
    for callback in flushed.drain(..) {
        callback.io_completed(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| crate::io_error(&e.0)),
        );
    }
}
