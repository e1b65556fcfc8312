//! The applier: committed log entries in; the machine's answers, the history and the event
//! streams out. One applier serves recovery (replaying the log on start) and the live path
//! (each batch once it is durable), so both derive exactly the same state, events and answers
//! from the same entries.
//!
//! Contract: [`Applier::apply`] and [`Applier::apply_batch`] take entries in log order, only
//! once they are durable (committed); nothing else changes the machine. For each entry they
//! apply the machine, add the step to the history, record the entry's events in the event
//! streams, and return the answers to release to the entry's senders (one per command: several
//! for an `Entry::Batch`, whose events are numbered across the entry). In a cluster, the event
//! streams are told which log their ids count ([`EventHub::name_log`]) from the machine: when
//! the applier is made and when an entry may have named it.

use crate::engine::Reply;
use crate::events::{EventHub, Membership};
use crate::history::{History, Step};
use crate::machine::{Applied, Entry, Machine};
use std::sync::{Arc, Mutex};

/// The machine and what follows it (see the module contract).
pub struct Applier {
    machine: Machine,
    events: Arc<EventHub>,
    history: Arc<Mutex<History>>,
}

impl Applier {
    /// An applier on `machine` (at its last applied entry), recording into `events` and
    /// `history`.
    pub fn new(machine: Machine, events: Arc<EventHub>, history: Arc<Mutex<History>>) -> Applier {
        if let Some(log) = machine.log() {
            events.name_log(log);
        }
        Applier {
            machine,
            events,
            history,
        }
    }

    /// Applies the committed entry `index` and returns its answers: one, or one per command
    /// of an [`Entry::Batch`], in order.
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Vec<Reply> {
        let (replies, step, memberships) = self.apply_one(index, entry);
        lock(&self.history).push(step, &self.machine);
        self.record(&replies, &memberships);
        replies
    }

    /// Moves past the committed entry `index`, a consensus layer's own that carries no
    /// command ([`Machine::pass`]): no answer, no event, no history step.
    pub fn pass(&mut self, index: u64) {
        self.machine.pass(index);
    }

    /// Applies a batch of committed entries (in log order) and returns their answers (one per
    /// entry, or per command of an [`Entry::Batch`]). The history gets the batch's steps once
    /// the whole batch is applied, so a checkpoint is only ever taken at the end of a batch
    /// (as when every entry is its own batch); then the events are recorded, in log order.
    pub fn apply_batch(&mut self, entries: &[(u64, Entry)]) -> Vec<Reply> {
        let mut steps = Vec::with_capacity(entries.len());
        let mut applied = Vec::with_capacity(entries.len());
        for (index, entry) in entries {
            let (replies, step, memberships) = self.apply_one(*index, entry);
            steps.push(step);
            applied.push((replies, memberships));
        }
        {
            let mut history = lock(&self.history);
            for step in steps {
                history.push(step, &self.machine);
            }
        }
        let mut all = Vec::with_capacity(applied.len());
        for (replies, memberships) in applied {
            self.record(&replies, &memberships);
            all.extend(replies);
        }
        all
    }

    /// Records the events of one entry's answers in the streams, numbered across the entry.
    fn record(&self, replies: &[Reply], memberships: &[Membership]) {
        let mut k = 0u32;
        for (reply, membership) in replies.iter().zip(memberships) {
            self.events
                .record_from(reply.index, k, membership, &reply.events);
            k = k.saturating_add(u32::try_from(reply.events.len()).unwrap_or(u32::MAX));
        }
    }

    /// Applies one entry to the machine: its answers, its history step (one for the entry:
    /// a batch's kernel calls all follow its one settling time) and whose streams each
    /// answer's events go to.
    fn apply_one(&mut self, index: u64, entry: &Entry) -> (Vec<Reply>, Step, Vec<Membership>) {
        let all = self.machine.apply_entry(index, entry);
        let calls = entry.calls();
        let mut step = Step {
            index,
            now: self.machine.last_now(),
            commands: Vec::new(),
        };
        if let (Entry::LeaderChanged { .. }, Some(log)) = (entry, self.machine.log()) {
            // The first one named the cluster's log: the streams count its entries.
            self.events.name_log(log);
        }
        let mut replies = Vec::with_capacity(all.len());
        let mut memberships = Vec::with_capacity(all.len());
        for (k, applied) in all.into_iter().enumerate() {
            let Applied {
                output,
                events,
                repeat_of,
                kernel_calls,
            } = applied;
            step.commands.extend(kernel_calls);
            memberships.push(Membership::of(
                calls.get(k).copied(),
                &output,
                repeat_of.is_some(),
            ));
            // A repeated request is answered as the first one was, at the first one's time.
            let now = repeat_of.map_or(self.machine.last_now(), |(_, first_now)| first_now);
            replies.push(Reply {
                index,
                repeat_of: repeat_of.map(|(first, _)| first),
                now,
                output,
                events,
            });
        }
        (replies, step, memberships)
    }

    /// The machine as it stands (after the last applied entry).
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The event streams it records into.
    pub fn events(&self) -> &Arc<EventHub> {
        &self.events
    }

    /// The history it records into.
    pub fn history(&self) -> &Arc<Mutex<History>> {
        &self.history
    }

    /// The machine, for the caller to keep (recovery hands it to the engine).
    pub fn into_machine(self) -> Machine {
        self.machine
    }
}

/// The history, even after a panic elsewhere left its lock poisoned (each push leaves it
/// whole).
pub fn lock(history: &Mutex<History>) -> std::sync::MutexGuard<'_, History> {
    history.lock().unwrap_or_else(|e| e.into_inner())
}
