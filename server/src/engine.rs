//! The one task that owns the machine (and so the kernel), its timer and its log.
//!
//! Contract:
//! - Handlers send [`Request`]s over a channel and await the [`Reply`]; nothing else touches
//!   the kernel, so there is no lock around it.
//! - Group commit: the task takes every request waiting in the channel as one batch, stamps
//!   each command with the server's `now` (or the request's own, under the manual clock),
//!   applies the batch, appends it to the store in one durable write, and only then answers
//!   and publishes the batch's events (output commit). Requests that arrive meanwhile form the
//!   next batch. A failed write stops the process: it never serves state the disk lacks.
//! - The timer: when the kernel's `next_deadline` is due (monotonic clock only), the task
//!   logs and applies an `advance`, so expiries and timeouts happen without any client call.
//! - Every `snapshot_every` entries the task stores a snapshot and drops the entries it covers.
//! - Events go to the [`EventHub`] only after they are durable, in log order.

use crate::events::{EventHub, Membership};
use crate::history::{History, Step};
use crate::machine::{Applied, Caller, Entry, Machine, MachineSnapshot, Refused};
use crate::metrics::Metrics;
use crate::store::Store;
use klock_core::{Command, Event, Output};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// A batch takes at most about this many entries (a request of many commands is never split).
const MAX_BATCH_ENTRIES: usize = 1024;

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

/// The answer to one command, released once its entry is durable.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The entry's index in the log (its events carry it).
    pub index: u64,
    /// The time the answer was given at (for a repeat, the first entry's time).
    pub now: u64,
    pub output: Result<Output, Refused>,
    pub events: Vec<Event>,
}

/// What a handler can ask of the engine.
// Nearly every request is a command; boxing it would cost an allocation per command.
#[allow(clippy::large_enum_variant)]
pub enum Request {
    /// A command to log and apply.
    Command {
        submission: Submission,
        reply: Responder,
    },
    /// Several commands, applied in this order in one batch (the batch endpoint).
    Many(Vec<(Submission, Responder)>),
    /// A read of the machine as it stands (no time passes, nothing is logged).
    Read(Box<dyn FnOnce(&Machine) + Send>),
    /// Manual clock without a store only (conformance runs): start over with a fresh machine
    /// and `config`, and empty event streams.
    Reset {
        config: klock_core::Config,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

/// A client's command and what comes with it.
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

/// The handle handlers hold.
#[derive(Clone)]
pub struct EngineHandle {
    requests: mpsc::Sender<Request>,
    events: Arc<EventHub>,
    metrics: Arc<Metrics>,
    history: Arc<Mutex<History>>,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The engine stopped (shutdown or a fatal storage error).
    Stopped,
    /// The manual clock needs a `now` in every request; the monotonic clock refuses one.
    Clock(&'static str),
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
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::Command { submission, reply })
            .await
            .map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)?
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
        let (many, answers): (Vec<_>, Vec<_>) = submissions
            .into_iter()
            .map(|s| {
                let (reply, answer) = oneshot::channel();
                ((s, reply), answer)
            })
            .unzip();
        self.requests
            .send(Request::Many(many))
            .await
            .map_err(|_| EngineError::Stopped)?;
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            out.push(answer.await.map_err(|_| EngineError::Stopped)?);
        }
        Ok(out)
    }

    /// Runs `read` on the machine as it stands.
    ///
    /// # Errors
    /// [`EngineError::Stopped`].
    pub async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Machine) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        let job = Box::new(move |k: &Machine| {
            let _ = tx.send(read(k));
        });
        self.requests
            .send(Request::Read(job))
            .await
            .map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)
    }

    /// Manual clock without a store only: starts over with `config` (see [`Request::Reset`]).
    ///
    /// # Errors
    /// The engine refuses (durable or monotonic), or the config is invalid.
    pub async fn reset(&self, config: klock_core::Config) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Request::Reset { config, reply })
            .await
            .map_err(|_| String::from("the engine stopped"))?;
        answer
            .await
            .map_err(|_| String::from("the engine stopped"))?
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

/// How the engine runs.
pub struct EngineConfig {
    pub clock: Clock,
    /// Store a snapshot every this many entries (0: never).
    pub snapshot_every: u64,
    /// Entries in the log after its last snapshot when the engine starts.
    pub log_entries: u64,
    pub metrics: Arc<Metrics>,
}

/// Starts the engine task on `machine` (already recovered) and returns its handle; its
/// history starts at `machine` and keeps the default number of steps.
pub fn spawn(
    machine: Machine,
    store: Option<Arc<Store>>,
    config: EngineConfig,
    events: Arc<EventHub>,
) -> EngineHandle {
    let history = History::new(&machine, crate::history::DEFAULT_CAPACITY);
    spawn_with_history(machine, store, config, events, history)
}

/// [`spawn`] with a history that already holds what recovery replayed.
pub fn spawn_with_history(
    mut machine: Machine,
    store: Option<Arc<Store>>,
    config: EngineConfig,
    events: Arc<EventHub>,
    history: History,
) -> EngineHandle {
    let (requests, inbox) = mpsc::channel(4096);
    let metrics = Arc::clone(&config.metrics);
    machine.record_calls(history.capacity() > 0);
    let history = Arc::new(Mutex::new(history));
    let engine = Engine {
        machine,
        store,
        since_snapshot: config.log_entries,
        config,
        events: Arc::clone(&events),
        history: Arc::clone(&history),
    };
    tokio::spawn(engine.run(inbox));
    EngineHandle {
        requests,
        events,
        metrics,
        history,
    }
}

struct Engine {
    machine: Machine,
    store: Option<Arc<Store>>,
    config: EngineConfig,
    since_snapshot: u64,
    events: Arc<EventHub>,
    history: Arc<Mutex<History>>,
}

impl Engine {
    async fn run(mut self, mut inbox: mpsc::Receiver<Request>) {
        loop {
            let timer = self.timer();
            let first = tokio::select! {
                request = inbox.recv() => match request {
                    Some(r) => Some(r),
                    None => return,
                },
                () = sleep_until(timer) => None,
            };
            let mut batch: Vec<(Entry, Option<Responder>)> = Vec::new();
            let mut next = first;
            loop {
                match next {
                    Some(Request::Read(read)) => read(&self.machine),
                    Some(Request::Reset { config, reply }) => {
                        let _ = reply.send(self.reset(config));
                    }
                    Some(Request::Command { submission, reply }) => {
                        self.admit(submission, reply, &mut batch);
                    }
                    Some(Request::Many(many)) => {
                        for (submission, reply) in many {
                            self.admit(submission, reply, &mut batch);
                        }
                    }
                    None => {
                        if let Some(now) = self.config.clock.read() {
                            let command = Command::Advance;
                            let entry = Entry::Command {
                                now,
                                command,
                                key: None,
                                token: None,
                                caller: None,
                                resume: None,
                                fingerprint: None,
                            };
                            batch.push((entry, None));
                        }
                    }
                }
                // A full batch is committed before taking more: a request taken from the
                // channel must not be left behind.
                if batch.len() >= MAX_BATCH_ENTRIES {
                    break;
                }
                match inbox.try_recv() {
                    Ok(r) => next = Some(r),
                    Err(_) => break,
                }
            }
            self.commit(batch).await;
        }
    }

    /// When the timer fires: the kernel's next deadline on the monotonic clock.
    fn timer(&self) -> Option<Instant> {
        let Clock::Monotonic { start, at } = self.config.clock else {
            return None;
        };
        let due = self.machine.kernel().next_deadline()?;
        let after = due.saturating_sub(start);
        Some(at + std::time::Duration::from_millis(after.min(u64::MAX / 2)))
    }

    fn reset(&mut self, config: klock_core::Config) -> Result<(), String> {
        if self.store.is_some() || !matches!(self.config.clock, Clock::Manual) {
            return Err(String::from(
                "only a server started with --memory --clock manual can be reset",
            ));
        }
        self.machine = Machine::new(config).map_err(|e| e.message)?;
        self.events.clear();
        let capacity = self.history.lock().expect("history lock").capacity();
        self.machine.record_calls(capacity > 0);
        *self.history.lock().expect("history lock") = History::new(&self.machine, capacity);
        Ok(())
    }

    /// Stamps a submission and adds it to the batch being formed (or refuses it).
    fn admit(
        &self,
        submission: Submission,
        reply: Responder,
        batch: &mut Vec<(Entry, Option<Responder>)>,
    ) {
        match self.stamp(submission.now) {
            Ok(now) => {
                let entry = Entry::Command {
                    now,
                    command: submission.command,
                    key: submission.key,
                    token: submission.token,
                    caller: submission.caller,
                    resume: submission.resume,
                    fingerprint: submission.fingerprint,
                };
                batch.push((entry, Some(reply)));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The `now` a command is applied at.
    fn stamp(&self, now: Option<u64>) -> Result<u64, EngineError> {
        match (self.config.clock.read(), now) {
            (Some(now), None) => Ok(now),
            (Some(_), Some(_)) => Err(EngineError::Clock(
                "this server keeps its own time: a request may not carry `now` (only a server started with --clock manual takes it)",
            )),
            (None, Some(now)) => Ok(now),
            (None, None) => Err(EngineError::Clock(
                "this server runs on a manual clock: every request must carry `now`",
            )),
        }
    }

    /// Applies a batch, makes it durable, then answers and publishes (output commit).
    async fn commit(&mut self, batch: Vec<(Entry, Option<Responder>)>) {
        if batch.is_empty() {
            return;
        }
        let mut entries = Vec::with_capacity(batch.len());
        let mut answers = Vec::with_capacity(batch.len());
        let mut steps = Vec::with_capacity(batch.len());
        for (entry, responder) in batch {
            let index = self.machine.applied() + 1;
            let Applied {
                output,
                events,
                repeat_of,
                kernel_calls,
            } = self.machine.apply(index, &entry);
            steps.push(Step {
                index,
                now: self.machine.last_now(),
                commands: kernel_calls,
            });
            let membership = Membership::of(&entry, &output, repeat_of.is_some());
            entries.push((index, entry));
            // A repeated request is answered as the first one was, at the first one's time.
            let now = repeat_of.map_or(self.machine.last_now(), |(_, first_now)| first_now);
            let reply = Reply {
                index,
                now,
                output,
                events,
            };
            answers.push((responder, reply, membership));
        }
        let count = entries.len() as u64;
        if let Some(store) = &self.store {
            let store = Arc::clone(store);
            let started = Instant::now();
            let written = tokio::task::spawn_blocking(move || store.append(&entries)).await;
            match written {
                Ok(Ok(())) => self
                    .config
                    .metrics
                    .commit_seconds
                    .observe(started.elapsed()),
                Ok(Err(e)) => fail_stop(&e.to_string()),
                Err(e) => fail_stop(&format!("the log writer failed: {e}")),
            }
        }
        {
            // Durable now: the history may show it.
            let mut history = self.history.lock().expect("history lock");
            for step in steps {
                history.push(step, &self.machine);
            }
        }
        for (responder, reply, membership) in answers {
            self.events.record(reply.index, &membership, &reply.events);
            if let Some(responder) = responder {
                let _ = responder.send(Ok(reply));
            }
        }
        self.since_snapshot += count;
        let metrics = &self.config.metrics;
        metrics.commit_entries.fetch_add(count, Ordering::Relaxed);
        if self.config.snapshot_every > 0 && self.since_snapshot >= self.config.snapshot_every {
            self.since_snapshot = 0;
            if let Some(store) = &self.store {
                let store = Arc::clone(store);
                let snapshot: MachineSnapshot = self.machine.snapshot();
                let written = tokio::task::spawn_blocking(move || store.compact(&snapshot)).await;
                match written {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => fail_stop(&e.to_string()),
                    Err(e) => fail_stop(&format!("the snapshot writer failed: {e}")),
                }
            }
        }
        if self.store.is_some() {
            let len = self.since_snapshot;
            self.config
                .metrics
                .log_entries
                .store(len, Ordering::Relaxed);
        }
    }
}

/// Stops the process after a storage failure: memory is ahead of the disk, and serving it
/// could hand out a grant or a fence that a restart would forget.
fn fail_stop(why: &str) -> ! {
    eprintln!("klock serve: storage failed, stopping: {why}");
    std::process::exit(74)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
