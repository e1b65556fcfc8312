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
    Command, Config, Error, ErrorCode, Event, Kernel, KernelState, Output, SessionId, StateError,
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
        /// Who sent it, when it came from a client (checked before the kernel sees it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caller: Option<Caller>,
    },
    /// The server started again from its log. Every open session is put in the suspension
    /// grace (docs/SPEC.md §5) so its agent can reconnect, reconcile and heartbeat: a lease is never
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

/// Why a command got no kernel answer of its own, or the kernel's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The kernel's answer (or, for another namespace's session, its words for an unknown one).
    Kernel(Error),
    /// The caller did not carry the session's token.
    Unauthorized(String),
}

/// Who sends a command: the namespace of its request and the SHA-256 (hex) of the session
/// token it carried, checked by the machine atomically with the command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caller {
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// What applying one entry produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The command's direct answer (`Recovered` answers `Done`).
    pub output: Result<Output, Refused>,
    /// Every event the entry caused, in order.
    pub events: Vec<Event>,
    /// For a repeated idempotency key: the index and time of the entry that first answered.
    pub repeat_of: Option<(u64, u64)>,
    /// The kernel calls the entry made after settling its time, in order: the command itself,
    /// nothing for a refused caller or a repeated key, one `suspend` per open session for
    /// `Recovered`. A kernel that settles at the entry's time and makes these calls is in
    /// the machine's state after the entry (the history export replays exactly this). Empty
    /// for commands when [`Machine::record_calls`] is off.
    pub kernel_calls: Vec<Command>,
}

/// The first answer to an idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remembered {
    pub key: String,
    pub index: u64,
    /// The time the first answer was given at.
    pub now: u64,
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
    /// Whether [`Applied::kernel_calls`] is filled: only a kept history reads it, and copying
    /// every command costs the batch endpoint about a tenth of its throughput.
    record_calls: bool,
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
            record_calls: true,
        })
    }

    /// Whether later entries fill [`Applied::kernel_calls`] (on by default).
    pub fn record_calls(&mut self, on: bool) {
        self.record_calls = on;
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
            record_calls: true,
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
    ///
    /// Every entry first settles what is due at its time, as every kernel call does, so a
    /// refused or repeated command reports the same settlement as any other. Then a command
    /// naming an open session is checked against its caller (namespace, then token) before
    /// the kernel sees it: another namespace's session is `UNKNOWN_SESSION`, exactly as if it
    /// did not exist, and a missing or wrong token is refused. The check and the command are
    /// one step of the log, so no session can appear or change hands between them.
    pub fn apply(&mut self, index: u64, entry: &Entry) -> Applied {
        debug_assert_eq!(index, self.applied + 1, "entries are applied in log order");
        self.applied = index;
        let now = self.last_now.max(entry.now());
        self.last_now = now;
        self.kernel.advance(now);
        let mut kernel_calls = Vec::new();
        let (output, repeat_of) = self.decide(index, entry, now, &mut kernel_calls);
        let events: Vec<Event> = std::iter::from_fn(|| self.kernel.poll_event()).collect();
        self.track_tokens(entry, &output, &events);
        Applied {
            output,
            events,
            repeat_of,
            kernel_calls,
        }
    }

    fn decide(
        &mut self,
        index: u64,
        entry: &Entry,
        now: u64,
        kernel_calls: &mut Vec<Command>,
    ) -> (Result<Output, Refused>, Option<(u64, u64)>) {
        let (command, key, token, caller) = match entry {
            Entry::Command {
                command,
                key,
                token,
                caller,
                ..
            } => (command, key, token, caller),
            Entry::Recovered { .. } => {
                let open = self.kernel.snapshot(now).sessions;
                for session in open {
                    self.kernel
                        .suspend_session(session.session_id, now)
                        .expect("a session listed by the snapshot is open");
                    kernel_calls.push(Command::Suspend {
                        session: session.session_id,
                    });
                }
                return (Ok(Output::Done), None);
            }
        };
        if let Some(caller) = caller {
            if let Err(refused) = self.check_caller(command, caller) {
                return (Err(refused), None);
            }
        }
        if let Some(key) = key {
            if let Some(first) = self.recall(key).cloned() {
                // A retried open or resume hands out a new token (the first answer may never
                // have arrived): the retry's token is the one that counts from now on.
                if let (Some(t), Ok(Output::Session { session })) = (token, &first.output) {
                    if self.kernel.session_info_of(session.session_id).is_some() {
                        self.tokens.insert(session.session_id, t.clone());
                    }
                }
                let first_at = (first.index, first.now);
                return (first.output.map_err(Refused::Kernel), Some(first_at));
            }
        }
        let output = self.kernel.apply(command, now);
        if self.record_calls {
            kernel_calls.push(command.clone());
        }
        if let Some(key) = key {
            self.remember(Remembered {
                key: key.clone(),
                index,
                now,
                output: output.clone(),
            });
        }
        (output.map_err(Refused::Kernel), None)
    }

    /// For reads that make no command (event streams): `caller` may read `session` only if it
    /// is open in the caller's namespace and the caller carries its token.
    ///
    /// # Errors
    /// [`Refused`], as a command naming the session would get it.
    pub fn check_reader(&self, session: SessionId, caller: &Caller) -> Result<(), Refused> {
        if self.kernel.session_info_of(session).is_none() {
            return Err(Refused::Kernel(Error::new(
                ErrorCode::UnknownSession,
                format!(
                    "no open session {session} (closed, expired for idleness, or never opened)"
                ),
            )));
        }
        let probe = Command::ReleaseAll { session };
        self.check_caller(&probe, caller)
    }

    /// The caller rules of [`apply`](Self::apply); an unknown session is left to the kernel.
    fn check_caller(&self, command: &Command, caller: &Caller) -> Result<(), Refused> {
        let Some(session) = command.session() else {
            return Ok(());
        };
        let Some(info) = self.kernel.session_info_of(session) else {
            return Ok(());
        };
        if info.namespace != caller.namespace {
            // The kernel's own words for a session that does not exist.
            return Err(Refused::Kernel(Error::new(
                ErrorCode::UnknownSession,
                format!(
                    "no open session {session} (closed, expired for idleness, or never opened)"
                ),
            )));
        }
        if matches!(command, Command::Resume { .. }) {
            return Ok(()); // the digest is the credential; the kernel checks it
        }
        let expected = self.tokens.get(&session).map(String::as_bytes);
        match (caller.token.as_deref().map(str::as_bytes), expected) {
            (Some(given), Some(expected)) if crate::auth::constant_time_eq(given, expected) => Ok(()),
            (None, _) => Err(Refused::Unauthorized(String::from(
                "this call names a session: send its token (from open or resume) in the Klock-Session-Token header",
            ))),
            _ => Err(Refused::Unauthorized(String::from(
                "the session token does not match this session",
            ))),
        }
    }

    /// Binds a new session's token; forgets the tokens of sessions that closed.
    fn track_tokens(&mut self, entry: &Entry, output: &Result<Output, Refused>, events: &[Event]) {
        if let (Entry::Command { token, command, .. }, Ok(out)) = (entry, output) {
            match (command, out) {
                (Command::Open { .. } | Command::Resume { .. }, Output::Session { session })
                    if self.kernel.session_info_of(session.session_id).is_some() =>
                {
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
