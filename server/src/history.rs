//! The recent history of the kernel, kept for replay (the dashboard's replay mode).
//!
//! Contract:
//! - The kernel is one deterministic state machine for every namespace. The history keeps, for
//!   each log entry, its index, its time and the kernel calls it made ([`Step`], from
//!   `machine::Applied::kernel_calls`), plus checkpoints of the kernel's exported state
//!   ([`KernelState`]) every [`CHECKPOINT_EVERY`] entries, or every as many entries as the
//!   last checkpoint holds sessions, leases and tickets if that is more (a checkpoint costs
//!   O(state), so its cost per entry stays constant). A kernel imported from a
//!   checkpoint that makes each later step again (`Kernel::replay_step`: settle at the step's
//!   time, make its calls) is, after each step, in the state the server's kernel had after
//!   that entry: same state hash, bit for bit. Nothing else is needed: no session token, no
//!   idempotency key, no caller leaves the server (the machine already decided which calls
//!   reached the kernel).
//! - It is bounded: at most about `capacity` steps are kept (plus one checkpoint interval); a
//!   capacity of 0 keeps nothing (`push` does no work: the server was started without one);
//!   the oldest are dropped a whole checkpoint interval at a time, so the oldest kept step
//!   always follows a checkpoint.
//! - After a restart it starts at the store's latest snapshot and holds the entries replayed
//!   after it (the log before that snapshot is gone), then carries on.
//! - Reading ([`History::slice`]) copies what a range needs under a short lock; the replay
//!   to the range's start ([`Slice::state_at`]) runs outside it, on the caller's thread.

use crate::machine::Machine;
use klock_core::{Command, Kernel, KernelState};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;

/// Entries between two checkpoints.
pub const CHECKPOINT_EVERY: u64 = 4096;

/// Steps kept by default when a history is kept (`klock serve --dashboard`; `--history N`
/// sets it). A server started with neither keeps none: holding 200 000 steps costs about a
/// quarter of the batch endpoint's throughput (`server/bench/REPORT.md`).
pub const DEFAULT_CAPACITY: usize = 200_000;

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
}

/// The bounded history (see the module contract).
pub struct History {
    capacity: usize,
    /// Oldest first; `checkpoints[0]` is the state just before `steps[0]`.
    checkpoints: VecDeque<Checkpoint>,
    steps: VecDeque<Step>,
}

/// What a range needs: the checkpoint at or before it and the steps after that.
pub struct Slice {
    pub checkpoint: Checkpoint,
    pub steps: Vec<Step>,
}

impl History {
    /// A history starting at `machine` as it stands.
    pub fn new(machine: &Machine, capacity: usize) -> History {
        let mut checkpoints = VecDeque::new();
        checkpoints.push_back(Checkpoint {
            index: machine.applied(),
            now: machine.last_now(),
            state: Arc::new(machine.kernel().export_state()),
        });
        History {
            capacity,
            checkpoints,
            steps: VecDeque::new(),
        }
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
        }
    }

    /// Adds the next step (steps come in log order). `machine` is the machine after some
    /// entry at or after it: when it is exactly after this step, a checkpoint may be taken.
    pub fn push(&mut self, step: Step, machine: &Machine) {
        if self.capacity == 0 {
            return;
        }
        let index = step.index;
        self.steps.push_back(step);
        // A checkpoint costs O(state): the next one waits as many entries as the last one's
        // sessions, leases and tickets (an entry adds at most a few, so the state is at most
        // about twice that by then), keeping its cost per entry O(1) however many leases the
        // kernel holds, and this check O(1) on every entry.
        let due = self.checkpoints.back().is_none_or(|last| {
            let size =
                last.state.sessions.len() + last.state.leases.len() + last.state.tickets.len();
            index >= last.index + CHECKPOINT_EVERY.max(size as u64)
        }) && index == machine.applied();
        if due {
            self.checkpoints.push_back(Checkpoint {
                index,
                now: machine.last_now(),
                state: Arc::new(machine.kernel().export_state()),
            });
        }
        while self.steps.len() > self.capacity && self.checkpoints.len() > 1 {
            let next = self.checkpoints[1].index;
            while self.steps.front().is_some_and(|s| s.index <= next) {
                self.steps.pop_front();
            }
            self.checkpoints.pop_front();
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
