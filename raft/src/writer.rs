//! The log's writer: one thread (or task, see below) that makes every change to the seam's log
//! the log store asks for, in the order asked, so that openraft's core never waits for a disk.
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
//! - The writer ends when every handle is dropped (the queued jobs are done first). A node
//!   stopped with its runtime drops its handles; a task is dropped with its queue (entries not
//!   reported durable may be lost, as Raft allows), a thread writes what was queued, then ends.
//! - Where it runs: on a multi-threaded runtime (a node serving), a thread of its own, since a
//!   write ends with a sync that would hold one of the runtime's workers (which serve the
//!   node's connections and its Raft core) for as long; on a current-thread runtime (the
//!   deterministic simulation, whose logs are in memory), a task on that runtime, so that the
//!   simulation stays deterministic.

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
    /// runtime, whose flavor says where the writer runs (module contract).
    pub fn start(log: Arc<dyn Log<RaftEntry>>, recent: Arc<Recent<RaftEntry>>) -> Writer {
        let (jobs, mut queue) = mpsc::channel(QUEUE);
        let (end, ended) = watch::channel(());
        let flavor = tokio::runtime::Handle::current().runtime_flavor();
        if flavor == tokio::runtime::RuntimeFlavor::CurrentThread {
            tokio::spawn(async move {
                let mut writing = Writing::new(log, recent);
                while let Some(job) = queue.recv().await {
                    writing.all(job, &mut queue);
                }
                drop(end);
            });
        } else {
            let thread = std::thread::Builder::new().name(String::from("klock-raft-log"));
            let started = thread.spawn(move || {
                let mut writing = Writing::new(log, recent);
                while let Some(job) = queue.blocking_recv() {
                    writing.all(job, &mut queue);
                }
                drop(end);
            });
            if let Err(e) = started {
                // No thread: the jobs' sender is dropped with the queue, so every append
                // answers "the log's writer stopped" (a storage failure the node reports).
                tracing::error!("cannot start the Raft log's writer thread: {e}");
            }
        }
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

/// The writer's state: the log, and the appends taken but not written yet.
struct Writing {
    log: Arc<dyn Log<RaftEntry>>,
    recent: Arc<Recent<RaftEntry>>,
    entries: Vec<(u64, RaftEntry)>,
    flushed: Vec<IOFlushed<KlockRaft>>,
}

impl Writing {
    fn new(log: Arc<dyn Log<RaftEntry>>, recent: Arc<Recent<RaftEntry>>) -> Writing {
        Writing {
            log,
            recent,
            entries: Vec::new(),
            flushed: Vec::new(),
        }
    }

    /// Carries out `job` and every job queued behind it, writing the appends among them
    /// together and each other job in its place (module contract).
    fn all(&mut self, job: Job, queue: &mut mpsc::Receiver<Job>) {
        let mut next = Some(job);
        while let Some(job) = next {
            match job {
                Job::Append(batch, callback) => {
                    self.entries.extend(batch);
                    self.flushed.push(callback);
                }
                Job::TruncateAfter(index, done) => {
                    self.write();
                    let truncated = self.log.truncate_after(index);
                    let _ = done.send(truncated.map(|()| self.recent.truncated(index)));
                }
                Job::PurgeUpto(index, done) => {
                    self.write();
                    let purged = self.log.purge_upto(index);
                    let _ = done.send(purged.map(|()| self.recent.purged(index)));
                }
            }
            next = if self.entries.len() < GROUP {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        self.write();
    }

    /// Appends the entries taken (one write, one sync) and tells each callback the outcome.
    fn write(&mut self) {
        let last = self.entries.last().map(|(index, _)| *index);
        let result = if self.entries.is_empty() {
            Ok(())
        } else {
            self.log.append(&self.entries)
        };
        self.entries.clear();
        if let (Ok(()), Some(last)) = (&result, last) {
            self.recent.written(last);
        }
        for callback in self.flushed.drain(..) {
            callback.io_completed(
                result
                    .as_ref()
                    .map(|_| ())
                    .map_err(|e| crate::io_error(&e.0)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LogId;
    use klock_server::log::{EncodedSnapshot, MemoryLog};
    use klock_server::machine::MachineSnapshot;
    use openraft::impls::leader_id_adv::LeaderId;
    use openraft::type_config::TypeConfigExt;
    use std::time::{Duration, Instant};

    /// A log on a slow disk: each append takes 300 ms.
    #[derive(Default)]
    struct SlowLog(MemoryLog<RaftEntry>);

    impl Log<RaftEntry> for SlowLog {
        fn append(&self, entries: &[(u64, RaftEntry)]) -> Result<(), StoreError> {
            std::thread::sleep(Duration::from_millis(300));
            self.0.append(entries)
        }
        fn truncate_after(&self, index: u64) -> Result<(), StoreError> {
            self.0.truncate_after(index)
        }
        fn purge_upto(&self, index: u64) -> Result<(), StoreError> {
            self.0.purge_upto(index)
        }
        fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, RaftEntry)>, StoreError> {
            self.0.read(from, to)
        }
        fn bounds(&self) -> (u64, u64) {
            self.0.bounds()
        }
        fn save_vote(&self, vote: &[u8]) -> Result<(), StoreError> {
            self.0.save_vote(vote)
        }
        fn read_vote(&self) -> Result<Option<Vec<u8>>, StoreError> {
            self.0.read_vote()
        }
        fn save_snapshot(&self, snapshot: &EncodedSnapshot<'_>) -> Result<(), StoreError> {
            self.0.save_snapshot(snapshot)
        }
        fn read_snapshot(&self) -> Result<Option<MachineSnapshot>, StoreError> {
            self.0.read_snapshot()
        }
    }

    /// On a multi-threaded runtime a slow sync holds none of the runtime's workers: with one
    /// worker, a task on it keeps running while an append syncs (as a task on that worker,
    /// the writer held it for the whole sync).
    #[test]
    fn a_slow_sync_holds_no_runtime_worker() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let recent = Arc::new(Recent::<RaftEntry>::default());
            let writer = Writer::start(Arc::new(SlowLog::default()), Arc::clone(&recent));
            let entry = RaftEntry {
                log_id: LogId::new(
                    LeaderId {
                        term: 1,
                        node_id: 1,
                    },
                    0,
                ),
                payload: openraft::EntryPayload::Blank,
            };
            let batch = vec![(1, entry)];
            recent.keep(&batch);
            let (flushed, synced) = KlockRaft::oneshot();
            let started = Instant::now();
            writer
                .append(batch, IOFlushed::signal(flushed))
                .await
                .unwrap();
            let ticker = tokio::spawn(async move {
                let mut ticks = 0u32;
                while started.elapsed() < Duration::from_millis(250) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks += 1;
                }
                ticks
            });
            let ticks = ticker.await.unwrap();
            synced.await.unwrap().unwrap();
            assert!(
                ticks >= 5,
                "the runtime's one worker ran {ticks} ticks of 10 ms during a 300 ms sync"
            );
            assert!(started.elapsed() >= Duration::from_millis(300));
            writer.ended().await;
        });
    }
}
