//! The recent history of the kernel, kept for replay (the dashboard's replay mode).
//!
//! Contract:
//! - The kernel is one deterministic state machine for every namespace. The history keeps, for
//!   each log entry, its index, its time and the kernel calls it made ([`Step`], from
//!   `machine::Applied::kernel_calls`), plus checkpoints of the kernel's exported state
//!   ([`KernelState`]) every [`CHECKPOINT_EVERY`] entries, or every as many entries as the
//!   last checkpoint holds records (sessions, leases, tickets, remembered ended ids) if that
//!   is more (a checkpoint costs O(state), so its cost per entry stays constant). A kernel
//!   imported from a checkpoint that makes each later step again (`Kernel::replay_step`:
//!   settle at the step's time, make its calls) is, after each step, in the state the
//!   server's kernel had after that entry: same state hash, bit for bit. Nothing else is
//!   needed: no session token, no idempotency key, no caller leaves the server (the machine
//!   already decided which calls reached the kernel).
//! - It is bounded: at most about `capacity` steps are kept, and at most about `capacity ×`
//!   [`BYTES_PER_STEP`] bytes of steps and checkpoints (estimated by [`step_bytes`] and
//!   [`state_bytes`]), plus one checkpoint interval; a capacity of 0 keeps nothing (`push`
//!   does no work: the server was started without one). Large steps (an acquire may carry
//!   256 intents of 4 KiB, a cluster's batch entry 1,000 calls) so shorten the history
//!   instead of growing memory without limit. A checkpoint is also due once the steps since
//!   the last one reach an eighth of the byte budget (and at least the last checkpoint's own
//!   size, so its O(state) cost stays paid by as many bytes of steps). The oldest are
//!   dropped a whole checkpoint interval at a time, so the oldest kept step always follows a
//!   checkpoint.
//! - After a restart it starts at the store's latest snapshot and holds the entries replayed
//!   after it (the log before that snapshot is gone), then carries on.
//! - Reading ([`History::slice`]) copies what a range needs under a short lock; the replay
//!   to the range's start ([`Slice::state_at`]) runs outside it, on the caller's thread.

use crate::machine::Machine;
use klock_core::{Command, Kernel, KernelState, StateDigest};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;

/// Entries between two checkpoints.
pub const CHECKPOINT_EVERY: u64 = 4096;

/// Steps kept by default when a history is kept (`klock serve --dashboard`; `--history N`
/// sets it). A server started with neither keeps none: keeping one costs throughput (each
/// entry's calls are copied, and checkpoints copy the state; docs/DECISIONS.md, "the replay
/// history bounded by bytes too", has the batch endpoint with a history of 200,000).
pub const DEFAULT_CAPACITY: usize = 200_000;

/// Bytes of history allowed per step of capacity: a history of `capacity` steps keeps at
/// most about `capacity × BYTES_PER_STEP` bytes. One uncontended acquire's step is estimated
/// at about 200, so a history of ordinary steps is bounded by its step count.
pub const BYTES_PER_STEP: usize = 512;

/// What one log entry did to the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The entry's log index.
    pub index: u64,
    /// The machine's time for the entry (never smaller than the previous step's).
    pub now: u64,
    /// The kernel calls, in order, after settling at `now`.
    pub commands: Vec<Command>,
}

/// The kernel's state after entry `index` (0: before any entry).
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub index: u64,
    pub now: u64,
    pub state: Arc<KernelState>,
    /// The state's estimated bytes ([`state_bytes`]), computed once.
    pub bytes: usize,
    /// The state's records ([`state_records`]): what taking it copied.
    pub records: usize,
}

impl Checkpoint {
    fn of(machine: &Machine) -> Checkpoint {
        let state = machine.kernel().export_state();
        Checkpoint {
            index: machine.applied(),
            now: machine.last_now(),
            bytes: state_bytes(&state),
            records: state_records(&state),
            state: Arc::new(state),
        }
    }
}

/// The bounded history (see the module contract).
pub struct History {
    capacity: usize,
    /// Oldest first; `checkpoints[0]` is the state just before `steps[0]`.
    checkpoints: VecDeque<Checkpoint>,
    steps: VecDeque<Step>,
    /// The estimated bytes of `checkpoints` and `steps` ([`state_bytes`], [`step_bytes`]).
    bytes: usize,
    /// The estimated bytes of the steps after the newest checkpoint.
    since_checkpoint: usize,
}

/// What a range needs: the checkpoint at or before it and the steps after that.
pub struct Slice {
    pub checkpoint: Checkpoint,
    pub steps: Vec<Step>,
}

impl History {
    /// A history starting at `machine` as it stands.
    pub fn new(machine: &Machine, capacity: usize) -> History {
        let first = Checkpoint::of(machine);
        let bytes = first.bytes;
        History {
            capacity,
            checkpoints: VecDeque::from([first]),
            steps: VecDeque::new(),
            bytes,
            since_checkpoint: 0,
        }
    }

    /// The most bytes kept (estimated), beyond one checkpoint interval.
    fn byte_budget(&self) -> usize {
        self.capacity.saturating_mul(BYTES_PER_STEP)
    }

    /// The most steps kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keeps at most about `capacity` steps from now on (0: none, and what was kept is
    /// dropped).
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        if capacity == 0 {
            self.steps.clear();
            let newest = self.checkpoints.pop_back();
            self.checkpoints.clear();
            self.checkpoints.extend(newest);
            self.bytes = self.checkpoints.iter().map(|c| c.bytes).sum();
            self.since_checkpoint = 0;
        }
    }

    /// Adds the next step (steps come in log order). `machine` is the machine after some
    /// entry at or after it: when it is exactly after this step, a checkpoint may be taken.
    pub fn push(&mut self, step: Step, machine: &Machine) {
        if self.capacity == 0 {
            return;
        }
        let index = step.index;
        let added = step_bytes(&step);
        self.steps.push_back(step);
        self.bytes += added;
        self.since_checkpoint += added;
        // A checkpoint costs O(state): the next one waits as many entries as the last one
        // copied records (sessions, leases, tickets and remembered ended ids; an entry adds
        // at most a few, so the state is at most about twice that by then), keeping its cost
        // per entry O(1) however much the kernel holds, and this check O(1) on every entry;
        // or, for large steps, as many bytes of steps as the last checkpoint's (and an eighth
        // of the budget), so that dropping whole intervals can keep the bytes near the budget.
        let due = self.checkpoints.back().is_none_or(|last| {
            index >= last.index + CHECKPOINT_EVERY.max(last.records as u64)
                || self.since_checkpoint >= (self.byte_budget() / 8).max(last.bytes)
        }) && index == machine.applied();
        if due {
            let checkpoint = Checkpoint::of(machine);
            self.bytes += checkpoint.bytes;
            self.since_checkpoint = 0;
            self.checkpoints.push_back(checkpoint);
        }
        while (self.steps.len() > self.capacity || self.bytes > self.byte_budget())
            && self.checkpoints.len() > 1
        {
            let next = self.checkpoints[1].index;
            while self.steps.front().is_some_and(|s| s.index <= next) {
                let oldest = self.steps.pop_front().expect("a front step");
                self.bytes -= step_bytes(&oldest);
            }
            let dropped = self.checkpoints.pop_front().expect("more than one");
            self.bytes -= dropped.bytes;
        }
    }

    /// The oldest kept state: `(index, now)`.
    pub fn oldest(&self) -> (u64, u64) {
        let c = &self.checkpoints[0];
        (c.index, c.now)
    }

    /// The newest kept entry: `(index, now)`.
    pub fn newest(&self) -> (u64, u64) {
        match self.steps.back() {
            Some(s) => (s.index, s.now),
            None => self.oldest(),
        }
    }

    /// The latest checkpoint at or before index `at`, and every kept step after it up to and
    /// including the last one with `now <= until` (all of them when `until` is `None`).
    /// `None` when `at` is older than the oldest checkpoint.
    pub fn slice(&self, at: u64, until: Option<u64>) -> Option<Slice> {
        let checkpoint = self
            .checkpoints
            .iter()
            .rev()
            .find(|c| c.index <= at)?
            .clone();
        let steps = self
            .steps
            .iter()
            .skip_while(|s| s.index <= checkpoint.index)
            .take_while(|s| until.is_none_or(|u| s.now <= u))
            .cloned()
            .collect();
        Some(Slice { checkpoint, steps })
    }

    /// The index of the last kept entry with `now <= at` (the oldest checkpoint's index when
    /// `at` is before every kept step), or `None` when `at` is before the oldest kept state.
    pub fn index_at(&self, at: u64) -> Option<u64> {
        let (oldest_index, oldest_now) = self.oldest();
        if at < oldest_now {
            return None;
        }
        let after = self.steps.partition_point(|s| s.now <= at);
        Some(match after {
            0 => oldest_index,
            n => self.steps[n - 1].index,
        })
    }
}

/// The estimated bytes a step holds: its records and what their strings and lists own.
/// Estimated the same way each time, so what [`History::push`] adds is what dropping it
/// takes away.
pub fn step_bytes(step: &Step) -> usize {
    let owned = |c: &Command| match c {
        Command::Open {
            agent_id,
            namespace,
        } => agent_id.len() + namespace.len(),
        Command::Resume { digest } => {
            size_of::<StateDigest>()
                + digest.identity.agent_id.len()
                + digest.identity.namespace.len()
                + digest.recovery.last_phase.len()
                + strings_bytes(&digest.recovery.pending_intents)
        }
        Command::Acquire { intents, .. } => strings_bytes(intents),
        Command::Heartbeat { leases, .. } => leases.as_ref().map_or(0, |l| l.len() * 8),
        Command::Reconcile { leases, .. } => leases.len() * 8,
        Command::ResourceState {
            resource,
            namespace,
        } => resource.len() + namespace.len(),
        Command::Close { .. }
        | Command::Suspend { .. }
        | Command::Digest { .. }
        | Command::Release { .. }
        | Command::ReleaseAll { .. }
        | Command::CancelWait { .. }
        | Command::Advance
        | Command::NextDeadline => 0,
        // A call this estimate does not know yet (the enum is non-exhaustive): its JSON.
        other => serde_json::to_vec(other).map_or(0, |json| json.len()),
    };
    size_of::<Step>()
        + step
            .commands
            .iter()
            .map(|c| size_of::<Command>() + owned(c))
            .sum::<usize>()
}

/// The bytes a list of strings owns.
fn strings_bytes(strings: &[String]) -> usize {
    strings.iter().map(|s| size_of::<String>() + s.len()).sum()
}

/// The records a state holds: sessions, leases, tickets and remembered ended ids.
fn state_records(state: &KernelState) -> usize {
    let ended: usize = state
        .sessions
        .iter()
        .map(|s| s.ended_leases.len() + s.ended_tickets.len())
        .sum();
    state.sessions.len() + state.leases.len() + state.tickets.len() + ended
}

/// The estimated bytes a checkpoint's state holds: its records and their strings and lists.
pub fn state_bytes(state: &KernelState) -> usize {
    let sessions: usize = state
        .sessions
        .iter()
        .map(|s| {
            size_of_val(s)
                + s.agent_id.len()
                + s.namespace.len()
                + s.ended_leases.len() * 16
                + s.ended_tickets.len() * 8
        })
        .sum();
    let leases: usize = state
        .leases
        .iter()
        .map(|l| size_of_val(l) + l.resource.len())
        .sum();
    let tickets: usize = state
        .tickets
        .iter()
        .map(|t| {
            size_of_val(t)
                + t.intents
                    .iter()
                    .map(|i| size_of_val(i) + i.resource.len())
                    .sum::<usize>()
        })
        .sum();
    let tables: usize = state
        .contention
        .iter()
        .map(|(n, r, _)| n.len() + r.len() + 56)
        .chain(state.ghosts.iter().map(|(a, _, _)| a.len() + 40))
        .sum();
    size_of::<KernelState>()
        + sessions
        + leases
        + tickets
        + tables
        + state.events.len() * size_of::<klock_core::Event>()
}

impl Slice {
    /// The kernel after entry `index` (which must be the checkpoint's or one of the steps'),
    /// and the steps after it.
    ///
    /// # Errors
    /// The checkpoint cannot be imported (a bug: it was exported by the same kernel).
    pub fn state_at(self, index: u64) -> Result<(Kernel, u64, Vec<Step>), String> {
        let mut kernel = Kernel::import_state(&self.checkpoint.state).map_err(|e| e.message)?;
        let mut now = self.checkpoint.now;
        let mut steps = self.steps.into_iter().peekable();
        while let Some(step) = steps.next_if(|s| s.index <= index) {
            kernel.replay_step(step.now, &step.commands, |_| {});
            now = step.now;
        }
        Ok((kernel, now, steps.collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::{AcquireOptions, SessionId};

    fn acquire(intents: Vec<String>) -> Step {
        Step {
            index: 1,
            now: 0,
            commands: vec![Command::Acquire {
                session: SessionId(1),
                intents,
                options: AcquireOptions::default(),
            }],
        }
    }

    #[test]
    fn an_ordinary_step_fits_its_share_and_a_large_one_counts_its_strings() {
        let ordinary = step_bytes(&acquire(vec!["MUTATES FILE:/src/main.rs".into()]));
        assert!(
            ordinary <= BYTES_PER_STEP / 2,
            "an ordinary history stays bounded by its step count: {ordinary} bytes"
        );
        let large = step_bytes(&acquire(vec!["x".repeat(4000); 256]));
        assert!(large >= 256 * 4000, "{large}");
    }
}
