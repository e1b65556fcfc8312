//! The server's state machine: log entries in, answers and events out.
//!
//! Contract: [`Machine::apply`] is a pure function of the machine and one [`Entry`]: it reads
//! no clock, does no I/O and draws no randomness but the kernel's seeded jitter. The live path,
//! the replay after a restart and (later) Raft followers apply the same entries through it, so
//! the three can never disagree. Time inside the machine never goes back: an entry stamped
//! earlier than one already applied is applied at the later time (stamp order may differ from
//! log order once several writers stamp entries). A [`MachineSnapshot`] holds everything needed
//! to continue: the kernel's exported state, the last applied index and time, and a state hash.

use klock_core::{
    Command, Config, Error, Event, Kernel, KernelState, Output, SessionId, StateError,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// One log entry. Self-contained: applying it needs nothing but the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// A client's command, or the server timer's `advance`, at the server's `now`. With a
    /// `key` (a client's idempotency key, scoped by the server), a second entry with the same
    /// key is not applied again: it answers what the first one answered.
    ///
    /// With `token` (the SHA-256 of a secret the server handed out, in hex), a successful open
    /// or resume binds that token to the session: every later call naming the session must
    /// carry the secret (a session id alone never grants anything).
    Command {
        now: u64,
        command: Command,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
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
    /// For a repeated idempotency key: the index of the entry that first answered.
    pub repeat_of: Option<u64>,
}

/// The first answer to an idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remembered {
    pub key: String,
    pub index: u64,
    pub output: Result<Output, Error>,
}

/// How many idempotency keys the machine remembers (the oldest are forgotten first).
pub const REMEMBERED_KEYS: usize = 10_000;

/// The kernel plus what the log needs to know about it.
#[derive(Clone)]
pub struct Machine {
    kernel: Kernel,
    /// Index of the last applied entry (0: none).
    applied: u64,
    last_now: u64,
    /// First answers by idempotency key, oldest first, at most [`REMEMBERED_KEYS`].
    remembered: VecDeque<Remembered>,
    by_key: HashMap<String, usize>,
    /// How many keys were forgotten from the front of `remembered` (positions shift).
    forgotten: usize,
    /// The token hash bound to each open session that has one.
    tokens: BTreeMap<SessionId, String>,
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
    /// Remembered idempotency keys, oldest first.
    pub remembered: Vec<Remembered>,
    /// Token hashes of open sessions.
    pub tokens: BTreeMap<SessionId, String>,
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
            remembered: VecDeque::new(),
            by_key: HashMap::new(),
            forgotten: 0,
            tokens: BTreeMap::new(),
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
        if snapshot.remembered.len() > REMEMBERED_KEYS {
            return Err(StateError {
                message: format!("snapshot remembers more than {REMEMBERED_KEYS} keys"),
            });
        }
        let mut machine = Machine {
            kernel: Kernel::import_state(&snapshot.state)?,
            applied: snapshot.applied,
            last_now: snapshot.last_now,
            remembered: VecDeque::new(),
            by_key: HashMap::new(),
            forgotten: 0,
            tokens: snapshot.tokens.clone(),
        };
        if let Some(id) = machine
            .tokens
            .keys()
            .find(|id| machine.kernel.session_info_of(**id).is_none())
        {
            return Err(StateError {
                message: format!("snapshot binds a token to session {id}, which is not open"),
            });
        }
        for r in &snapshot.remembered {
            machine.remember(r.clone());
        }
        Ok(machine)
    }

    /// A snapshot of the machine as it is.
    pub fn snapshot(&self) -> MachineSnapshot {
        let state = self.kernel.export_state();
        MachineSnapshot {
            applied: self.applied,
            last_now: self.last_now,
            hash: state.hash(),
            state,
            remembered: self.remembered.iter().cloned().collect(),
            tokens: self.tokens.clone(),
        }
    }

    /// Applies the entry at `index` (the next one: indexes are dense and increasing).
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Applied {
        debug_assert_eq!(index, self.applied + 1, "entries are applied in log order");
        self.applied = index;
        let now = self.last_now.max(entry.now());
        self.last_now = now;
        if let Entry::Command { key: Some(key), .. } = entry {
            if let Some(first) = self.recall(key).cloned() {
                // A retried open or resume hands out a new token (the first answer may never
                // have arrived): the retry's token is the one that counts from now on.
                if let (Entry::Command { token: Some(t), .. }, Ok(Output::Session { session })) =
                    (entry, &first.output)
                {
                    if self.kernel.session_info_of(session.session_id).is_some() {
                        self.tokens.insert(session.session_id, t.clone());
                    }
                }
                return Applied {
                    output: first.output,
                    events: Vec::new(),
                    repeat_of: Some(first.index),
                };
            }
        }
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
        let events: Vec<Event> = std::iter::from_fn(|| self.kernel.poll_event()).collect();
        self.track_tokens(entry, &output, &events);
        if let Entry::Command { key: Some(key), .. } = entry {
            self.remember(Remembered {
                key: key.clone(),
                index,
                output: output.clone(),
            });
        }
        Applied {
            output,
            events,
            repeat_of: None,
        }
    }

    /// Binds a new session's token; forgets the tokens of sessions that closed.
    fn track_tokens(&mut self, entry: &Entry, output: &Result<Output, Error>, events: &[Event]) {
        if let (Entry::Command { token, command, .. }, Ok(out)) = (entry, output) {
            match (command, out) {
                (Command::Open { .. } | Command::Resume { .. }, Output::Session { session }) => {
                    match token {
                        Some(t) => self.tokens.insert(session.session_id, t.clone()),
                        None => self.tokens.remove(&session.session_id),
                    };
                }
                (Command::Close { session }, Output::Done) => {
                    self.tokens.remove(session);
                }
                _ => {}
            }
        }
        for event in events {
            if let Event::SessionClosed { session, .. } = event {
                self.tokens.remove(session);
            }
        }
    }

    /// The token hash bound to `session`, if any.
    pub fn token_of(&self, session: SessionId) -> Option<&str> {
        self.tokens.get(&session).map(String::as_str)
    }

    fn recall(&self, key: &str) -> Option<&Remembered> {
        let at = self.by_key.get(key)? - self.forgotten;
        self.remembered.get(at)
    }

    fn remember(&mut self, r: Remembered) {
        if self.remembered.len() == REMEMBERED_KEYS {
            let oldest = self.remembered.pop_front().expect("full, so not empty");
            self.by_key.remove(&oldest.key);
            self.forgotten += 1;
        }
        self.by_key
            .insert(r.key.clone(), self.forgotten + self.remembered.len());
        self.remembered.push_back(r);
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
