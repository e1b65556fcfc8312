//! The server's state machine: log entries in, answers and events out.
//!
//! Contract: [`Machine::apply`] is a pure function of the machine and one [`Entry`]: it reads
//! no clock, does no I/O and draws no randomness but the kernel's seeded jitter. The live path,
//! the replay after a restart and (later) Raft followers apply the same entries through it, so
//! the three can never disagree. Time inside the machine never goes back: an entry stamped
//! earlier than one already applied is applied at the later time (stamp order may differ from
//! log order once several writers stamp entries). A [`MachineSnapshot`] holds everything needed
//! to continue: the kernel's exported state, the last applied index and time, and a state hash.

use klock_core::{Command, Config, Error, Event, Kernel, KernelState, Output, StateError};
use serde::{Deserialize, Serialize};

/// One log entry. Self-contained: applying it needs nothing but the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// A client's command, or the server timer's `advance`, at the server's `now`.
    Command { now: u64, command: Command },
    /// The server started again from its log. Every open session is put in the suspension
    /// grace (SPEC.md §5) so its agent can reconnect, reconcile and heartbeat: a lease is never
    /// shortened because the server was down.
    Recovered { now: u64 },
}

impl Entry {
    /// The time the entry was stamped with.
    pub fn now(&self) -> u64 {
        match self {
            Entry::Command { now, .. } | Entry::Recovered { now } => *now,
        }
    }
}

/// What applying one entry produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The command's direct answer (`Recovered` answers `Done`).
    pub output: Result<Output, Error>,
    /// Every event the entry caused, in order.
    pub events: Vec<Event>,
}

/// The kernel plus what the log needs to know about it.
#[derive(Clone)]
pub struct Machine {
    kernel: Kernel,
    /// Index of the last applied entry (0: none).
    applied: u64,
    last_now: u64,
}

/// Everything needed to rebuild a [`Machine`]: a compaction point of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSnapshot {
    /// Index of the last entry the state includes.
    pub applied: u64,
    pub last_now: u64,
    /// [`KernelState::hash`] of `state`, checked on load.
    pub hash: u64,
    pub state: KernelState,
}

impl Machine {
    /// A machine with an empty kernel.
    ///
    /// # Errors
    /// The kernel's `INVALID_CONFIG`.
    pub fn new(config: Config) -> Result<Machine, Error> {
        Ok(Machine {
            kernel: Kernel::new(config)?,
            applied: 0,
            last_now: 0,
        })
    }

    /// The machine a snapshot describes.
    ///
    /// # Errors
    /// A hash that does not match the state, or a state the kernel refuses.
    pub fn restore(snapshot: &MachineSnapshot) -> Result<Machine, StateError> {
        let hash = snapshot.state.hash();
        if hash != snapshot.hash {
            return Err(StateError {
                message: format!(
                    "snapshot at index {} has hash {:016x}, but its state hashes to {hash:016x}",
                    snapshot.applied, snapshot.hash
                ),
            });
        }
        Ok(Machine {
            kernel: Kernel::import_state(&snapshot.state)?,
            applied: snapshot.applied,
            last_now: snapshot.last_now,
        })
    }

    /// A snapshot of the machine as it is.
    pub fn snapshot(&self) -> MachineSnapshot {
        let state = self.kernel.export_state();
        MachineSnapshot {
            applied: self.applied,
            last_now: self.last_now,
            hash: state.hash(),
            state,
        }
    }

    /// Applies the entry at `index` (the next one: indexes are dense and increasing).
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Applied {
        debug_assert_eq!(index, self.applied + 1, "entries are applied in log order");
        self.applied = index;
        let now = self.last_now.max(entry.now());
        self.last_now = now;
        let output = match entry {
            Entry::Command { command, .. } => self.kernel.apply(command, now),
            Entry::Recovered { .. } => {
                let open = self.kernel.snapshot(now).sessions;
                for session in open {
                    self.kernel
                        .suspend_session(session.session_id, now)
                        .expect("a session listed by the snapshot is open");
                }
                Ok(Output::Done)
            }
        };
        let events = std::iter::from_fn(|| self.kernel.poll_event()).collect();
        Applied { output, events }
    }

    /// The kernel, for reads that change nothing (`next_deadline`, `stats`, exports).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Index of the last applied entry.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The time of the last applied entry: where server time resumes after a restart.
    pub fn last_now(&self) -> u64 {
        self.last_now
    }
}
