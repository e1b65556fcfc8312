//! The engine: the proposer that stamps, batches and logs commands, and the applier that
//! applies them once they are durable. Handlers call it through an [`EngineHandle`].
//!
//! Contract:
//! - Append, then apply (the replication seam): a command is stamped with the server's `now`
//!   (or the request's own, under the manual clock), given the next log index, appended to
//!   the log, and applied by the [`Applier`] only once the append is durable. Answers, events,
//!   grants and fences are therefore derived from committed entries only, by the same applier
//!   recovery replays with. A failed write stops the process: it never serves state the disk
//!   lacks.
//! - Group commit on the engine's own thread. Handlers send their commands to it; it takes
//!   every command waiting as one batch, appends the batch (durable: one write and one sync,
//!   on this thread; in memory there is no log), applies it, then answers and publishes.
//!   Commands that arrive meanwhile form the next batch. Every `snapshot_every` entries a
//!   durable engine stores a snapshot and purges the entries it covers.
//! - Under load, a durable batch lingers for the requests about to come (group commit): when
//!   the last batch answered several requests, the next one waits for as many requests as
//!   that batch answered plus those already queued (the answered clients' next requests),
//!   at most as long as the last append took (at most [`MAX_LINGER`]), so that one sync
//!   serves them all instead of the clients splitting into groups that each pay a sync. A
//!   lone request, and every request in memory, never waits. While it lingers, the engine's
//!   thread is woken by the arrival that completes the number it waits for, not by each.
//! - Reads run on the handler's task under the applier's lock: they see the machine between
//!   batches, after the last committed entry.
//! - The timer (monotonic clock only): when the kernel's `next_deadline` is due, a task
//!   proposes an `advance`, so expiries and timeouts happen without any client call. Each
//!   batch re-arms it when it makes the next deadline earlier.
//! - Events go to the [`EventHub`] in log order, only after their entry is durable.
//! - The proposer is a seam ([`Path`]): on one node it is the engine's thread above; on a
//!   cluster node ([`spawn_replicated`]) a consensus layer ([`Replicate`]) stamps, replicates
//!   and applies through the same [`Applier`], and the timer proposes only while it leads.

use crate::applier::Applier;
use crate::events::EventHub;
use crate::history::History;
use crate::log::Log;
use crate::machine::{Caller, Entry, Machine, MachineSnapshot, Refused};
use crate::metrics::Metrics;
use crate::relay::Relayed;
use crate::store::Store;
use axum::body::Bytes;
use axum::http::HeaderMap;
use klock_core::{Command, Event, Output};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

/// A batch takes at most about this many entries (a request of many commands is never split).
const MAX_BATCH_ENTRIES: usize = 1024;

/// The longest a durable batch lingers for requests about to come (see the module contract).
const MAX_LINGER: Duration = Duration::from_millis(5);

/// Where `now` comes from.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// Milliseconds of a monotonic clock, continuing from `start` (the last logged `now` on a
    /// restart: time does not pass while the server is down).
    Monotonic { start: u64, at: Instant },
    /// Each request carries its own `now` (conformance runs only).
    Manual,
}

impl Clock {
    /// A monotonic clock that reads `start` now.
    pub fn monotonic(start: u64) -> Clock {
        Clock::Monotonic {
            start,
            at: Instant::now(),
        }
    }

    fn read(&self) -> Option<u64> {
        match self {
            Clock::Monotonic { start, at } => {
                Some(start.saturating_add(at.elapsed().as_millis() as u64))
            }
            Clock::Manual => None,
        }
    }
}

/// The answer to one command, released once its entry is durable. Serializable: a
/// consensus layer hands it back through its own client-write answer.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    /// The entry's index in the log (its events carry it).
    pub index: u64,
    /// For a repeated idempotency key: the index of the entry that first answered, where the
    /// command took effect (this entry changed nothing).
    #[serde(default)]
    pub repeat_of: Option<u64>,
    /// The time the answer was given at (for a repeat, the first entry's time).
    pub now: u64,
    pub output: Result<Output, Refused>,
    pub events: Vec<Event>,
}

/// A client's command and what comes with it. Serializable: a cluster's follower hands it to
/// its leader, which stamps and proposes it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    pub command: Command,
    /// Its time, under the manual clock only.
    pub now: Option<u64>,
    /// The idempotency key, already scoped by the caller: a repeat answers the first answer.
    pub key: Option<String>,
    /// The token hash to bind to the session an open or resume creates.
    pub token: Option<String>,
    /// Who sends it, checked atomically with the command.
    pub caller: Option<Caller>,
    /// The resume-secret hash to bind to the session an open or resume creates.
    pub resume: Option<String>,
    /// The request's fingerprint, checked against the first request of the same key.
    pub fingerprint: Option<String>,
}

impl Submission {
    /// `command` at `now`, with no key, token or caller.
    pub fn new(command: Command, now: Option<u64>) -> Submission {
        Submission {
            command,
            now,
            key: None,
            token: None,
            caller: None,
            resume: None,
            fingerprint: None,
        }
    }
}

/// Where a command's answer goes.
pub type Responder = oneshot::Sender<Result<Reply, EngineError>>;

/// Commands for the engine's thread, answered in order once applied.
type Proposal = Vec<(Submission, Responder)>;

/// The handle handlers hold.
#[derive(Clone)]
pub struct EngineHandle {
    core: Arc<Core>,
    events: Arc<EventHub>,
    metrics: Arc<Metrics>,
    history: Arc<Mutex<History>>,
}

/// The engine's thread, to wait for once every handle is gone (it ends when the last handle
/// drops, after answering what it was sent): then the log is closed.
#[derive(Default)]
pub struct Stopped(Option<std::thread::JoinHandle<()>>);

impl Stopped {
    /// Waits for the engine's thread to end. Call it only
    /// after dropping every [`EngineHandle`] (or the runtime holding them): it waits for that.
    pub fn wait(self) {
        if let Some(thread) = self.0 {
            let _ = thread.join();
        }
    }
}

/// How a batch of submissions becomes durable and applied: the proposer seam.
enum Path {
    /// One node: the engine's thread stamps, appends to the file log (or nothing, in memory)
    /// and applies. It is the thread's inbox, with the clock it stamps with.
    Local {
        writer: mpsc::Sender<Proposal>,
        clock: Clock,
        arrivals: Arc<Arrivals>,
    },
    /// A cluster: the consensus layer stamps (on its leader), replicates and applies, through
    /// the same applier (see [`Replicate`]).
    Replicated(Arc<dyn Replicate>),
}

/// The answers to a batch of submissions, in their order (see [`EngineHandle::submit_many`]).
pub type Answers = Result<Vec<Result<Reply, EngineError>>, EngineError>;

/// A consensus layer that makes submissions durable and applied in the engine's place (a
/// cluster's Raft, `klock-raft`). Its contract:
/// - [`Replicate::propose`] answers each submission once its entry is committed and applied
///   to this node's applier (the one given to [`spawn_replicated`]), in the order given; a
///   node that cannot have it committed now answers [`EngineError::Unavailable`].
/// - [`Replicate::clock`] is the clock entries are stamped with while this node leads (`None`
///   otherwise): the engine's timer proposes `advance` on it.
/// - [`Replicate::relay`] passes a client's request to another node that leads, as it came
///   ([`crate::relay`]); [`Replicate::propose_here`] proposes only if this node leads (a
///   request relayed here is never relayed or forwarded again).
pub trait Replicate: Send + Sync + 'static {
    fn propose(
        &self,
        submissions: Vec<Submission>,
    ) -> futures_util::future::BoxFuture<'static, Answers>;
    /// [`Replicate::propose`], but never passed on to another node: a node that does not lead
    /// answers [`EngineError::Unavailable`].
    fn propose_here(
        &self,
        submissions: Vec<Submission>,
    ) -> futures_util::future::BoxFuture<'static, Answers> {
        self.propose(submissions)
    }
    /// The leader's answer to a request to `path` with `headers` and `body` when another node
    /// leads (`None`: this node answers it itself, as it leads or knows no leader to send it
    /// to).
    fn relay(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Option<futures_util::future::BoxFuture<'static, Result<Relayed, EngineError>>> {
        let _ = (path, headers, body);
        None
    }
    fn clock(&self) -> Option<Clock>;
    /// The API URL of the node that leads, when another node does and it is known (`None` on
    /// the leader, a single server, or with no leader known): a client's answer names it
    /// (`Klock-Leader`), so that the client sends its next calls there.
    fn leader_url(&self) -> Option<String> {
        None
    }
    /// The server is stopping (SIGTERM, Ctrl-C, `Server::shutdown`), its listener still open:
    /// hand over what this node does for the others (a leader its leadership) and stop. The
    /// server closes its connections once this ends.
    fn leave(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    /// Ends once this node has applied every entry the cluster had committed when it was
    /// called (a read index), so that a read after it sees every write acknowledged before
    /// the call, through any node. A single server has applied everything already.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`]: no leader to ask, or not caught up in time.
    fn caught_up(&self) -> futures_util::future::BoxFuture<'static, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }
    /// The machine index of the last write this node answered (0: none). A node may answer a
    /// write once it is committed, before it applied it itself (a follower that proxied it to
    /// its leader): every read through this node first applies up to this index
    /// ([`EngineHandle::settled`]), so it sees the writes this node answered.
    fn answered(&self) -> u64 {
        0
    }
    /// Ends once this node has applied its machine up to `index` (see
    /// [`Replicate::answered`]).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`]: not applied in time.
    fn applied_up_to(
        &self,
        index: u64,
    ) -> futures_util::future::BoxFuture<'static, Result<(), EngineError>> {
        let _ = index;
        Box::pin(async { Ok(()) })
    }
}

/// What every handle shares.
struct Core {
    state: Arc<Mutex<Applier>>,
    path: Path,
    /// The engine's thread, until [`EngineHandle::take_stopped`] takes it.
    thread: Mutex<Stopped>,
    timer: Arc<Timer>,
}

/// The timer's arming: the deadline it sleeps until, and how to wake it for an earlier one.
struct Timer {
    /// The kernel time it is armed for (`u64::MAX`: none).
    armed: AtomicU64,
    wake: Notify,
}

impl Timer {
    /// Wakes the timer if `deadline` is earlier than what it sleeps until.
    fn rearm(&self, deadline: Option<u64>) {
        if deadline.is_some_and(|d| d < self.armed.load(Ordering::Acquire)) {
            self.wake.notify_one();
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The engine stopped (shutdown or a fatal storage error).
    Stopped,
    /// The manual clock needs a `now` in every request; the monotonic clock refuses one.
    Clock(&'static str),
    /// A cluster node that cannot have the command committed now (no leader known, or one
    /// that does not answer yet): worth retrying in a second.
    Unavailable(String),
}

impl EngineHandle {
    /// Logs and applies `command`, returning its answer once durable.
    ///
    /// # Errors
    /// [`EngineError`].
    pub async fn command(&self, command: Command, now: Option<u64>) -> Result<Reply, EngineError> {
        self.submit(Submission::new(command, now)).await
    }

    /// Logs and applies a client's command (see [`Submission`]).
    ///
    /// # Errors
    /// [`EngineError`].
    pub async fn submit(&self, submission: Submission) -> Result<Reply, EngineError> {
        let mut answers = self.core.propose(vec![submission]).await?;
        answers.pop().unwrap_or(Err(EngineError::Stopped))
    }

    /// Logs and applies several commands in this order, in one batch (one durable write),
    /// and returns their answers in the same order.
    ///
    /// # Errors
    /// [`EngineError::Stopped`]; a command the clock refuses has its own error in the list.
    pub async fn submit_many(
        &self,
        submissions: Vec<Submission>,
    ) -> Result<Vec<Result<Reply, EngineError>>, EngineError> {
        self.core.propose(submissions).await
    }

    /// [`EngineHandle::submit_many`] for a request another node relayed here: a cluster node
    /// that does not lead refuses it ([`Replicate::propose_here`]) rather than pass it on.
    ///
    /// # Errors
    /// As [`EngineHandle::submit_many`].
    pub async fn submit_many_here(
        &self,
        submissions: Vec<Submission>,
    ) -> Result<Vec<Result<Reply, EngineError>>, EngineError> {
        match &self.core.path {
            Path::Replicated(replicate) => replicate.propose_here(submissions).await,
            Path::Local { .. } => self.core.propose(submissions).await,
        }
    }

    /// The leader's answer to a request to `path` with `headers` and `body`, when this is a
    /// cluster node that another node leads (see [`crate::relay`]); `None`: this node answers
    /// it itself.
    pub fn relay(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Option<futures_util::future::BoxFuture<'static, Result<Relayed, EngineError>>> {
        match &self.core.path {
            Path::Replicated(replicate) => replicate.relay(path, headers, body),
            Path::Local { .. } => None,
        }
    }

    /// The leader's API URL when this is a cluster node that another node leads
    /// ([`Replicate::leader_url`]).
    pub fn leader_url(&self) -> Option<String> {
        match &self.core.path {
            Path::Replicated(replicate) => replicate.leader_url(),
            Path::Local { .. } => None,
        }
    }

    /// Runs `read` on the machine as it stands, once it has applied every write this node
    /// answered ([`EngineHandle::settled`]).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`]: a cluster node that did not apply its answered writes in
    /// time.
    pub async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Machine) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        self.settled().await?;
        Ok(read(lock(&self.core.state).machine()))
    }

    /// Ends once this node's machine has applied every write it answered (at once on a single
    /// server, which answers a write once applied; a cluster node may answer a proxied write
    /// once committed, see [`Replicate::answered`]): a read through this node after it sees
    /// the node's own answered writes, its events too.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`]: not applied in time.
    pub async fn settled(&self) -> Result<(), EngineError> {
        if let Path::Replicated(replicate) = &self.core.path {
            let answered = replicate.answered();
            if answered > lock(&self.core.state).machine().applied() {
                replicate.applied_up_to(answered).await?;
            }
        }
        Ok(())
    }

    /// [`EngineHandle::read`] once this node has applied everything the cluster had
    /// committed when it was called ([`Replicate::caught_up`]; at once on a single server):
    /// for a read that must see a write acknowledged through another node a moment ago.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] from the read index.
    pub async fn read_caught_up<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Machine) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        if let Path::Replicated(replicate) = &self.core.path {
            replicate.caught_up().await?;
        }
        self.read(read).await
    }

    /// The engine's thread, to wait for once the handles are gone (taken once; later calls get
    /// one that waits for nothing).
    pub fn take_stopped(&self) -> Stopped {
        std::mem::take(&mut *self.core.thread.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What the server counts.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The per-session streams of durable events.
    pub fn events(&self) -> &Arc<EventHub> {
        &self.events
    }

    /// The recent history of the kernel (durable entries only), for replay.
    pub fn history(&self) -> &Arc<Mutex<History>> {
        &self.history
    }
}

impl Core {
    /// Logs and applies `submissions` as one batch, on the engine's thread (see the module
    /// contract). Applying on the handler's own task instead measured slower in memory on
    /// two cores (docs/DECISIONS.md, "Where the work runs").
    async fn propose(&self, submissions: Vec<Submission>) -> Answers {
        let (writer, arrivals) = match &self.path {
            Path::Local {
                writer, arrivals, ..
            } => (writer, arrivals),
            Path::Replicated(replicate) => return replicate.propose(submissions).await,
        };
        let (many, answers): (Vec<_>, Vec<_>) = submissions
            .into_iter()
            .map(|s| {
                let (reply, answer) = oneshot::channel();
                ((s, reply), answer)
            })
            .unzip();
        writer.send(many).await.map_err(|_| EngineError::Stopped)?;
        arrivals.arrived();
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            out.push(answer.await.map_err(|_| EngineError::Stopped)?);
        }
        Ok(out)
    }

    /// The clock commands are stamped with now (`None` on a cluster node that does not lead).
    fn clock(&self) -> Option<Clock> {
        match &self.path {
            Path::Local { clock, .. } => Some(*clock),
            Path::Replicated(replicate) => replicate.clock(),
        }
    }
}

/// How the engine runs.
pub struct EngineConfig {
    pub clock: Clock,
    /// Store a snapshot every this many entries (0: never).
    pub snapshot_every: u64,
    /// Entries in the log after its last snapshot when the engine starts.
    pub log_entries: u64,
    pub metrics: Arc<Metrics>,
}

/// Starts the engine on `machine` (already recovered) and returns its handle; its history
/// starts at `machine` and keeps the default number of steps.
pub fn spawn(
    machine: Machine,
    store: Option<Arc<Store>>,
    config: EngineConfig,
    events: Arc<EventHub>,
) -> EngineHandle {
    let history = History::new(&machine, crate::history::DEFAULT_CAPACITY);
    spawn_with_history(machine, store, config, events, history)
}

/// [`spawn`] with a history that already holds what recovery replayed. Must be called inside
/// a tokio runtime (the timer is a task on it).
pub fn spawn_with_history(
    mut machine: Machine,
    store: Option<Arc<Store>>,
    config: EngineConfig,
    events: Arc<EventHub>,
    history: History,
) -> EngineHandle {
    let metrics = Arc::clone(&config.metrics);
    machine.record_calls(history.capacity() > 0);
    let history = Arc::new(Mutex::new(history));
    let next_deadline = machine.kernel().next_deadline();
    let state = Arc::new(Mutex::new(Applier::new(
        machine,
        Arc::clone(&events),
        Arc::clone(&history),
    )));
    let timer = Arc::new(Timer {
        armed: AtomicU64::new(u64::MAX),
        wake: Notify::new(),
    });
    let (writer, inbox) = mpsc::channel(4096);
    let arrivals = Arc::new(Arrivals::default());
    let thread = {
        let writer = Writer {
            log: store,
            arrivals: Arc::clone(&arrivals),
            state: Arc::clone(&state),
            clock: config.clock,
            timer: Arc::clone(&timer),
            metrics: Arc::clone(&metrics),
            snapshot_every: config.snapshot_every,
            since_snapshot: config.log_entries,
        };
        let spawned = std::thread::Builder::new()
            .name(String::from("klock-engine"))
            .spawn(move || writer.run(inbox))
            .unwrap_or_else(|e| fail_stop(&format!("cannot start the engine's thread: {e}")));
        let _ = arrivals.engine.set(spawned.thread().clone());
        Stopped(Some(spawned))
    };
    let core = Arc::new(Core {
        state,
        path: Path::Local {
            writer,
            clock: config.clock,
            arrivals,
        },
        thread: Mutex::new(thread),
        timer,
    });
    if let Clock::Monotonic { .. } = config.clock {
        tokio::spawn(run_timer(Arc::downgrade(&core)));
        core.timer.rearm(next_deadline);
    }
    EngineHandle {
        core,
        events,
        metrics,
        history,
    }
}

/// Starts the engine of a cluster node: `replicate` makes its submissions durable and applies
/// them to `state` (module contract, [`Replicate`]); reads see `state`. Must be called inside
/// a tokio runtime (the timer is a task on it).
pub fn spawn_replicated(
    state: Arc<Mutex<Applier>>,
    replicate: Arc<dyn Replicate>,
    metrics: Arc<Metrics>,
) -> EngineHandle {
    let (events, history) = {
        let applier = lock(&state);
        (Arc::clone(applier.events()), Arc::clone(applier.history()))
    };
    let core = Arc::new(Core {
        state,
        path: Path::Replicated(replicate),
        thread: Mutex::new(Stopped::default()),
        timer: Arc::new(Timer {
            armed: AtomicU64::new(u64::MAX),
            wake: Notify::new(),
        }),
    });
    tokio::spawn(run_timer(Arc::downgrade(&core)));
    EngineHandle {
        core,
        events,
        metrics,
        history,
    }
}

/// How long a cluster node's timer sleeps at most before looking again: its entries are
/// applied, and its leadership gained or lost, without the timer being told.
const REPLICATED_TIMER_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// The timer task (see the module contract); it ends with the engine. On a cluster node it
/// proposes only while the node leads, on the leader's clock, and looks again at least every
/// [`REPLICATED_TIMER_POLL`].
async fn run_timer(core: Weak<Core>) {
    loop {
        let Some(engine) = core.upgrade() else { return };
        let timer = Arc::clone(&engine.timer);
        // Armed under the applier's lock: a batch applied after this re-arms (once it has
        // released the lock) against this arming, and wakes the timer for an earlier deadline;
        // a batch applied before is in the deadline read here. Arming after releasing the lock
        // could miss a deadline a batch added in between, until the next batch.
        let deadline = {
            let state = lock(&engine.state);
            let deadline = state.machine().kernel().next_deadline();
            timer
                .armed
                .store(deadline.unwrap_or(u64::MAX), Ordering::Release);
            deadline
        };
        let clock = engine.clock();
        let now = clock.and_then(|c| c.read());
        if let (Some(d), Some(now)) = (deadline, now) {
            if d <= now {
                // Due: settle it (the answer is the batch's business: nobody waits on it).
                let _ = engine
                    .propose(vec![Submission::new(Command::Advance, None)])
                    .await;
                continue;
            }
        }
        let replicated = matches!(engine.path, Path::Replicated(_));
        drop(engine);
        let sleep = match (deadline, clock) {
            (Some(d), Some(Clock::Monotonic { start, at })) => {
                Some(at + std::time::Duration::from_millis(d - start.min(d)))
            }
            _ => None,
        };
        let sleep = if replicated {
            let poll = Instant::now() + REPLICATED_TIMER_POLL;
            Some(sleep.map_or(poll, |s| s.min(poll)))
        } else {
            sleep
        };
        tokio::select! {
            () = sleep_until(sleep) => {}
            () = timer.wake.notified() => {}
        }
    }
}

/// The engine's thread: group commit (see the module contract).
struct Writer {
    /// `None` in memory: nothing to write.
    log: Option<Arc<Store>>,
    arrivals: Arc<Arrivals>,
    state: Arc<Mutex<Applier>>,
    clock: Clock,
    timer: Arc<Timer>,
    metrics: Arc<Metrics>,
    snapshot_every: u64,
    since_snapshot: u64,
}

impl Writer {
    fn run(mut self, mut inbox: mpsc::Receiver<Proposal>) {
        let mut next = lock(&self.state).machine().applied() + 1;
        let mut group = GroupCommit::default();
        while let Some(first) = inbox.blocking_recv() {
            let mut entries: Vec<(u64, Entry)> = Vec::new();
            let mut responders = Vec::new();
            let mut proposal = Some(first);
            let mut requests = 0usize;
            let until = group.deadline(self.log.is_some(), Instant::now());
            while let Some(many) = proposal.take() {
                requests += 1;
                for (submission, reply) in many {
                    match stamp(&self.clock, submission) {
                        Ok(entry) => {
                            entries.push((next, entry));
                            responders.push(reply);
                            next += 1;
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e));
                        }
                    }
                }
                // A full batch is committed before taking more.
                if entries.len() < MAX_BATCH_ENTRIES {
                    proposal = match (inbox.try_recv().ok(), until) {
                        (None, Some(until)) if group.waits(requests) => {
                            let missing = group.missing(requests);
                            recv_until(&mut inbox, until, missing, &self.arrivals)
                        }
                        (taken, _) => taken,
                    };
                }
            }
            let appended = if entries.is_empty() {
                Duration::ZERO
            } else {
                self.commit(&entries, responders)
            };
            group.committed(requests, inbox.len(), appended);
        }
    }

    /// Appends the batch durably, applies it, answers, and snapshots when due; returns how
    /// long the append took (zero in memory).
    fn commit(&mut self, entries: &[(u64, Entry)], responders: Vec<Responder>) -> Duration {
        let started = Instant::now();
        let mut appended = Duration::ZERO;
        if let Some(log) = &self.log {
            if let Err(e) = log.append(entries) {
                fail_stop(&format!("storage failed: {e}"));
            }
            appended = started.elapsed();
            self.metrics.commit_seconds.observe(appended);
        }
        let count = entries.len() as u64;
        self.since_snapshot += count;
        let snapshot_due = self.log.is_some()
            && self.snapshot_every > 0
            && self.since_snapshot >= self.snapshot_every;
        let mut state = lock(&self.state);
        let replies = state.apply_batch(entries);
        let deadline = state.machine().kernel().next_deadline();
        let snapshot: Option<MachineSnapshot> = snapshot_due.then(|| state.machine().snapshot());
        drop(state);
        // Counted before the answers go: a client that reads /metrics after its answer sees
        // its entry (counted after, a read right behind the answer could miss it).
        self.metrics
            .commit_entries
            .fetch_add(count, Ordering::Relaxed);
        self.metrics
            .log_entries
            .store(self.since_snapshot, Ordering::Relaxed);
        for (responder, reply) in responders.into_iter().zip(replies) {
            let _ = responder.send(Ok(reply));
        }
        self.timer.rearm(deadline);
        if let Some(snapshot) = snapshot {
            self.since_snapshot = 0;
            let compacted = self
                .log
                .as_ref()
                .map_or(Ok(()), |log| log.compact(&snapshot));
            if let Err(e) = compacted {
                fail_stop(&format!("storage failed: {e}"));
            }
            tracing::info!(
                index = snapshot.applied,
                "snapshot stored at entry {}; the log before it compacted away",
                snapshot.applied
            );
            self.metrics.log_entries.store(0, Ordering::Relaxed);
        }
        appended
    }
}

/// The group-commit policy of a durable engine (module contract): how many requests the next
/// batch waits for, and until when.
#[derive(Debug, Default)]
struct GroupCommit {
    /// The requests of the last batch (whose clients are about to send their next ones), plus
    /// those already queued when it was answered.
    expected: usize,
    /// How long the last append took, at most [`MAX_LINGER`]: waiting costs no more than
    /// the sync it saves.
    linger: Duration,
}

impl GroupCommit {
    /// When a batch whose first request was taken at `now` stops waiting for more (`None`:
    /// it does not wait: in memory, at the start, or after a lone request).
    fn deadline(&self, durable: bool, now: Instant) -> Option<Instant> {
        (durable && self.expected > 1).then(|| now + self.linger)
    }

    /// Whether a batch of `requests` so far waits for more.
    fn waits(&self, requests: usize) -> bool {
        requests < self.expected
    }

    /// How many more requests a batch of `requests` so far waits for.
    fn missing(&self, requests: usize) -> usize {
        self.expected.saturating_sub(requests)
    }

    /// Notes a batch of `requests` whose append took `appended`, with `queued` requests
    /// waiting after it.
    fn committed(&mut self, requests: usize, queued: usize, appended: Duration) {
        self.expected = requests + queued;
        self.linger = appended.min(MAX_LINGER);
    }
}

/// The requests a lingering durable batch still waits for (module contract, group commit):
/// each handler counts its arrival after its send, and only the arrival that completes the
/// count wakes the engine's thread. Woken by every send instead, the thread paid a wake-up
/// and a context switch per request while it lingered.
#[derive(Default)]
struct Arrivals {
    /// Arrivals still waited for (0: the engine's thread is not waiting).
    wanted: AtomicUsize,
    /// The engine's thread, to wake.
    engine: std::sync::OnceLock<std::thread::Thread>,
}

impl Arrivals {
    /// A handler's proposal is in the inbox: wakes the engine's thread if it completes the
    /// number it waits for.
    fn arrived(&self) {
        // Pairs with the fence in `recv_until`: either this load sees the thread's count, or
        // the thread, after setting it, sees this proposal in the inbox.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.wanted.load(Ordering::SeqCst) == 0 {
            return;
        }
        let was = self
            .wanted
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| w.checked_sub(1));
        if was == Ok(1) {
            if let Some(engine) = self.engine.get() {
                engine.unpark();
            }
        }
    }
}

/// The next proposal, waiting until `until` at most (`None` then, or when every sender is
/// gone) for `missing` more to arrive before looking again (see [`Arrivals`]). A wake-up
/// missed in a race costs at most the wait until `until`.
fn recv_until(
    inbox: &mut mpsc::Receiver<Proposal>,
    until: Instant,
    missing: usize,
    arrivals: &Arrivals,
) -> Option<Proposal> {
    loop {
        match inbox.try_recv() {
            Ok(proposal) => return Some(proposal),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        arrivals.wanted.store(missing.max(1), Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if inbox.is_empty() && !inbox.is_closed() {
            std::thread::park_timeout(left);
        }
        arrivals.wanted.store(0, Ordering::SeqCst);
    }
}

/// The entry a submission is logged as, stamped with the time it is applied at.
///
/// # Errors
/// [`EngineError::Clock`]: a `now` the clock refuses, or none where it needs one.
pub fn stamp(clock: &Clock, submission: Submission) -> Result<Entry, EngineError> {
    stamp_at(clock.read(), submission)
}

/// Every submission stamped as [`stamp`] does, the clock read once for all of them: under a
/// server's own clock they share one `now` (a batch request's commands, one entry of a
/// cluster's log: `machine::Entry::Batch`).
pub fn stamp_all(clock: &Clock, submissions: Vec<Submission>) -> Vec<Result<Entry, EngineError>> {
    let read = clock.read();
    submissions.into_iter().map(|s| stamp_at(read, s)).collect()
}

/// A submission stamped with the clock's reading `read` (none: a manual clock).
fn stamp_at(read: Option<u64>, submission: Submission) -> Result<Entry, EngineError> {
    let now = match (read, submission.now) {
        (Some(now), None) => now,
        (Some(_), Some(_)) => return Err(EngineError::Clock(
            "this server keeps its own time: a request may not carry `now` (only a server started with --clock manual takes it)",
        )),
        (None, Some(now)) => now,
        (None, None) => return Err(EngineError::Clock(
            "this server runs on a manual clock: every request must carry `now`",
        )),
    };
    Ok(Entry::Command {
        now,
        command: submission.command,
        key: submission.key,
        token: submission.token,
        caller: submission.caller,
        resume: submission.resume,
        fingerprint: submission.fingerprint,
    })
}

/// The applier (or the queue in front of it). A panic while the applier was held (a bug) may
/// have left the machine half-applied: serving it could break a promise, so the process stops
/// (a durable server recovers its committed entries on restart), as on a storage failure.
fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(|_| fail_stop(POISONED))
}

const POISONED: &str = "the engine panicked while applying an entry";

/// Stops the process after a storage failure (memory would be ahead of the disk, and serving
/// it could hand out a grant or a fence that a restart would forget) or a broken machine.
fn fail_stop(why: &str) -> ! {
    tracing::error!("stopping: {why}");
    // Also said plainly: the process is about to end, and a host without a logger would
    // otherwise not say why.
    if !tracing::enabled!(tracing::Level::ERROR) {
        eprintln!("klock serve: stopping: {why}");
    }
    std::process::exit(74)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A durable batch waits only after a batch of several requests, for as many as that batch
    /// answered plus those queued behind it, and no longer than the last append took (capped).
    #[test]
    fn group_commit_waits_for_the_requests_about_to_come() {
        let now = Instant::now();
        let mut group = GroupCommit::default();
        assert_eq!(
            group.deadline(true, now),
            None,
            "the first batch never waits"
        );
        group.committed(1, 0, Duration::from_millis(2));
        assert_eq!(
            group.deadline(true, now),
            None,
            "a lone request never waits"
        );
        group.committed(3, 2, Duration::from_millis(2));
        assert_eq!(group.deadline(false, now), None, "memory never waits");
        assert_eq!(
            group.deadline(true, now),
            Some(now + Duration::from_millis(2))
        );
        assert!(group.waits(4));
        assert!(!group.waits(5));
        group.committed(3, 0, Duration::from_secs(1));
        assert_eq!(group.deadline(true, now), Some(now + MAX_LINGER));
    }

    /// `recv_until` gives up at its deadline, is woken by the arrival that completes the
    /// number it waits for (not by the ones before), and ends when every sender is gone.
    #[test]
    fn recv_until_waits_for_its_arrivals_or_its_deadline() {
        let (tx, mut inbox) = mpsc::channel::<Proposal>(4);
        let arrivals = Arc::new(Arrivals::default());
        let _ = arrivals.engine.set(std::thread::current());
        let started = Instant::now();
        let deadline = started + Duration::from_millis(30);
        assert!(recv_until(&mut inbox, deadline, 1, &arrivals).is_none());
        assert!(started.elapsed() >= Duration::from_millis(30));
        let sending = Arc::clone(&arrivals);
        let sender = std::thread::spawn(move || {
            // The first comes late enough for the thread to be waiting already.
            for pause in [200, 300] {
                std::thread::sleep(Duration::from_millis(pause));
                tx.blocking_send(Vec::new()).unwrap();
                sending.arrived();
            }
            tx
        });
        let started = Instant::now();
        let got = recv_until(&mut inbox, started + Duration::from_secs(20), 2, &arrivals);
        assert!(got.is_some(), "the proposals sent meanwhile");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(500),
            "not woken by the first of two arrivals ({waited:?})"
        );
        assert!(waited < Duration::from_secs(10), "woken by the second");
        assert!(inbox.try_recv().is_ok(), "the second is there");
        drop(sender.join().unwrap());
        let started = Instant::now();
        let gone = recv_until(&mut inbox, started + Duration::from_secs(20), 1, &arrivals);
        assert!(gone.is_none());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "every sender gone"
        );
    }
}
