//! The applier: committed log entries in; the machine's answers, the history and the event
//! streams out. One applier serves recovery (replaying the log on start) and the live path
//! (each batch once it is durable), so both derive exactly the same state, events and answers
//! from the same entries.
//!
//! Contract: [`Applier::apply`] and [`Applier::apply_batch`] take entries in log order, only
//! once they are durable (committed); nothing else changes the machine. For each entry they
//! apply the machine, add the step to the history, record the entry's events in the event
//! streams, and return the answer to release to the entry's sender. In a cluster, the event
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

    /// Applies the committed entry `index` and returns its answer.
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Reply {
        let (reply, step, membership) = self.apply_one(index, entry);
        lock(&self.history).push(step, &self.machine);
        self.events.record(index, &membership, &reply.events);
        reply
    }

    /// Moves past the committed entry `index`, a consensus layer's own that carries no
    /// command ([`Machine::pass`]): no answer, no event, no history step.
    pub fn pass(&mut self, index: u64) {
        self.machine.pass(index);
    }

    /// Applies a batch of committed entries (in log order) and returns their answers. The
    /// history gets the batch's steps once the whole batch is applied, so a checkpoint is only
    /// ever taken at the end of a batch (as when every entry is its own batch); then the
    /// events are recorded, in log order.
    pub fn apply_batch(&mut self, entries: &[(u64, Entry)]) -> Vec<Reply> {
        let mut steps = Vec::with_capacity(entries.len());
        let mut applied = Vec::with_capacity(entries.len());
        for (index, entry) in entries {
            let (reply, step, membership) = self.apply_one(*index, entry);
            steps.push(step);
            applied.push((reply, membership));
        }
        {
            let mut history = lock(&self.history);
            for step in steps {
                history.push(step, &self.machine);
            }
        }
        applied
            .into_iter()
            .map(|(reply, membership)| {
                self.events.record(reply.index, &membership, &reply.events);
                reply
            })
            .collect()
    }

    /// Applies one entry to the machine: its answer, its history step and whose streams its
    /// events go to.
    fn apply_one(&mut self, index: u64, entry: &Entry) -> (Reply, Step, Membership) {
        let Applied {
            output,
            events,
            repeat_of,
            kernel_calls,
        } = self.machine.apply(index, entry);
        let step = Step {
            index,
            now: self.machine.last_now(),
            commands: kernel_calls,
        };
        let membership = Membership::of(entry, &output, repeat_of.is_some());
        if let (Entry::LeaderChanged { .. }, Some(log)) = (entry, self.machine.log()) {
            // The first one named the cluster's log: the streams count its entries.
            self.events.name_log(log);
        }
        // A repeated request is answered as the first one was, at the first one's time.
        let now = repeat_of.map_or(self.machine.last_now(), |(_, first_now)| first_now);
        let reply = Reply {
            index,
            repeat_of: repeat_of.map(|(first, _)| first),
            now,
            output,
            events,
        };
        (reply, step, membership)
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
