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
// Nearly every entry is a command; boxing it would cost an allocation per command to shrink
// the rare `Recovered`.
#[allow(clippy::large_enum_variant)]
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
        /// With an open or resume: the SHA-256 (hex) of the resume secret handed out with the
        /// answer. The next resume of the session must present that secret (a digest holds only
        /// public data), and binds the one handed out with its own answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<String>,
        /// With a `key`: the SHA-256 (hex) of the request (query and body). A second entry with
        /// the same key and another fingerprint is refused ([`Refused::KeyReused`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fingerprint: Option<String>,
    },
    /// The server started again from its log. Every open session is put in the suspension
    /// grace (docs/SPEC.md §5) so its agent can reconnect, reconcile and heartbeat: a lease is never
    /// shortened because the server was down.
    Recovered { now: u64 },
    /// A new leader of a cluster took over: applied as [`Entry::Recovered`] (every session in
    /// its grace), and the first one a machine applies names its log ([`Machine::log`]): a
    /// random id its leader drew, so every node of the cluster, and a node rebuilt from a
    /// snapshot, says the same one.
    LeaderChanged { now: u64, log: String },
    /// Several commands (a cluster leader's batch request, or the requests a follower passed
    /// on together) stamped with one `now`: applied one after another, each exactly as the
    /// [`Entry::Command`] of the same fields at that time would be (its own caller check,
    /// idempotency key, answer and events), so that one log entry carries them all. Every
    /// answer carries the entry's index; the events count across the entry (docs/SPEC.md
    /// §13).
    ///
    /// `caller` is the caller of every item that names none of its own: a batch is nearly
    /// always one client's, whose caller (namespace and token digest, about 100 bytes) would
    /// otherwise be written, sent to every follower and decoded once per item. Made by
    /// [`Entry::batch`]; absent, each item's own caller (or none) is its caller, as before.
    Batch {
        now: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caller: Option<Caller>,
        commands: Vec<Item>,
    },
}

/// One command of an [`Entry::Batch`]: the fields of an [`Entry::Command`] but its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl Item {
    /// Its fields, as the machine reads a command: its own caller, else the batch's `shared`
    /// one ([`Entry::Batch`]).
    pub fn call<'a>(&'a self, shared: Option<&'a Caller>) -> Call<'a> {
        Call {
            command: &self.command,
            key: &self.key,
            token: &self.token,
            caller: self.caller.as_ref().or(shared),
            resume: &self.resume,
            fingerprint: &self.fingerprint,
        }
    }

    /// The [`Entry::Command`] of its fields at `now` (what it is applied as).
    pub fn at(self, now: u64) -> Entry {
        Entry::Command {
            now,
            command: self.command,
            key: self.key,
            token: self.token,
            caller: self.caller,
            resume: self.resume,
            fingerprint: self.fingerprint,
        }
    }
}

/// A command and what comes with it, borrowed from an [`Entry::Command`] or an [`Item`].
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub command: &'a Command,
    pub key: &'a Option<String>,
    pub token: &'a Option<String>,
    pub caller: Option<&'a Caller>,
    pub resume: &'a Option<String>,
    pub fingerprint: &'a Option<String>,
}

impl Entry {
    /// The [`Entry::Batch`] of `items` at `now`, their caller written once: when every item
    /// has a caller, the first item's becomes the batch's, and each item whose caller is the
    /// same drops its own (an item with none keeps the batch from sharing any, since in a
    /// batch with a caller an item without one is checked as that caller).
    pub fn batch(now: u64, mut items: Vec<Item>) -> Entry {
        let shared = match items.first() {
            Some(Item {
                caller: Some(first),
                ..
            }) if items.iter().all(|i| i.caller.is_some()) => Some(first.clone()),
            _ => None,
        };
        if let Some(shared) = &shared {
            for item in &mut items {
                if item.caller.as_ref() == Some(shared) {
                    item.caller = None;
                }
            }
        }
        Entry::Batch {
            now,
            caller: shared,
            commands: items,
        }
    }

    /// The time the entry was stamped with.
    pub fn now(&self) -> u64 {
        match self {
            Entry::Command { now, .. }
            | Entry::Recovered { now }
            | Entry::LeaderChanged { now, .. }
            | Entry::Batch { now, .. } => *now,
        }
    }

    /// An [`Entry::Command`] as an [`Item`] of a batch (its `now` is the batch's); `None` for
    /// another kind of entry.
    pub fn into_item(self) -> Option<Item> {
        match self {
            Entry::Command {
                command,
                key,
                token,
                caller,
                resume,
                fingerprint,
                ..
            } => Some(Item {
                command,
                key,
                token,
                caller,
                resume,
                fingerprint,
            }),
            _ => None,
        }
    }

    /// The command of an [`Entry::Command`].
    pub fn call(&self) -> Option<Call<'_>> {
        match self {
            Entry::Command {
                command,
                key,
                token,
                caller,
                resume,
                fingerprint,
                ..
            } => Some(Call {
                command,
                key,
                token,
                caller: caller.as_ref(),
                resume,
                fingerprint,
            }),
            _ => None,
        }
    }

    /// The commands of an [`Entry::Command`] (one) or of an [`Entry::Batch`]: as many as the
    /// entry has answers, but for `Recovered` and `LeaderChanged` (none, and one answer).
    pub fn calls(&self) -> Vec<Call<'_>> {
        match self {
            Entry::Batch {
                commands, caller, ..
            } => commands.iter().map(|i| i.call(caller.as_ref())).collect(),
            _ => self.call().into_iter().collect(),
        }
    }
}

/// Why a command got no kernel answer of its own, or the kernel's error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refused {
    /// The kernel's answer (or, for another namespace's session, its words for an unknown one).
    Kernel(Error),
    /// The caller did not carry the session's token: 401 `SESSION_TOKEN_REFUSED`, a name of
    /// its own so that a client tells "this session is no longer mine" (another client resumed
    /// it) from a refused bearer token (`UNAUTHORIZED`) without reading the message.
    SessionToken(String),
    /// A resume without the session's current resume secret: 401 `RESUME_SECRET_REFUSED`.
    ResumeSecret(String),
    /// An idempotency key already answered a request with another fingerprint (Stripe's rule:
    /// a key names one request, never two).
    KeyReused(String),
    /// The first answer to an idempotency key was dropped to keep remembered answers within
    /// their byte budget: the request is not applied again, and its answer is not known.
    AnswerForgotten(String),
    /// An open over the session cap of its bearer token or of its namespace.
    TooManySessions(String),
}

/// Who sends a command: the namespace of its request and the SHA-256 (hex) of the session
/// token it carried, checked by the machine atomically with the command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caller {
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// With a resume: the SHA-256 (hex) of the resume secret the caller presented. A resume
    /// entry without it was logged before resume secrets existed (it is replayed as it was
    /// answered then); the server writes it on every resume it logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
    /// With an open: the bearer token's name (none without a token file), counted against
    /// `caps.per_owner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// With an open: the session caps in force when it was logged (carried in the entry, so a
    /// replay under other flags decides as the live server did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<SessionCaps>,
}

/// The most sessions open at once per bearer token and per namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCaps {
    pub per_owner: u32,
    pub per_namespace: u32,
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
    /// The request's fingerprint (none for keys remembered before fingerprints existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The answer was dropped to keep remembered answers within their byte budget (`output`
    /// is then a placeholder): a repeat is refused with [`Refused::AnswerForgotten`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
}

/// How many idempotency keys the machine remembers (the oldest are forgotten first).
pub const REMEMBERED_KEYS: usize = 10_000;

/// The byte budget of remembered answers by default (`klock serve --idempotency-bytes`).
pub const DEFAULT_ANSWER_BYTES: usize = 64 << 20;

/// Bytes an answer is counted for beside its JSON (the key, the record, the index).
const REMEMBERED_OVERHEAD: usize = 128;

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
    /// The resume-secret hash bound to each open session that has one.
    resumes: BTreeMap<SessionId, String>,
    /// The bearer token name each open session was opened with (none: no token file).
    owners: BTreeMap<SessionId, String>,
    /// Open sessions per namespace and per owner (derived from the kernel and `owners`).
    counts: SessionCounts,
    /// Bytes of the answers remembered and not dropped, their budget, and the position (as
    /// `forgotten + index`) of the oldest answer that may still be dropped.
    answer_bytes: usize,
    answer_budget: usize,
    drop_from: usize,
    /// Whether [`Applied::kernel_calls`] is filled: only a kept history reads it, and copying
    /// every command costs the batch endpoint about a tenth of its throughput.
    record_calls: bool,
    /// The id of a cluster's log ([`Machine::log`]).
    log: Option<String>,
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
    /// Resume-secret hashes of open sessions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resumes: BTreeMap<SessionId, String>,
    /// Bearer token names of open sessions opened with one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owners: BTreeMap<SessionId, String>,
    /// The id of the cluster's log the state belongs to ([`Machine::log`]); none on a single
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// What a consensus layer stores with the snapshot, stored and read back in the same
    /// commit (Raft: the last log id and the membership it includes). Opaque to the machine:
    /// [`Machine::snapshot`] leaves it out, [`Machine::restore`] ignores it; a single node
    /// never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consensus: Option<serde_json::Value>,
}

/// Open sessions by namespace and by owner, and which namespace and owner each one counts for.
#[derive(Clone, Default)]
struct SessionCounts {
    of: HashMap<SessionId, (String, Option<String>)>,
    by_namespace: HashMap<String, u32>,
    by_owner: HashMap<String, u32>,
}

impl SessionCounts {
    fn add(&mut self, session: SessionId, namespace: &str, owner: Option<&str>) {
        if self.of.contains_key(&session) {
            return;
        }
        *self.by_namespace.entry(namespace.to_owned()).or_default() += 1;
        if let Some(o) = owner {
            *self.by_owner.entry(o.to_owned()).or_default() += 1;
        }
        self.of
            .insert(session, (namespace.to_owned(), owner.map(str::to_owned)));
    }

    fn remove(&mut self, session: SessionId) {
        let Some((namespace, owner)) = self.of.remove(&session) else {
            return;
        };
        fn down(map: &mut HashMap<String, u32>, name: &str) {
            if let Some(n) = map.get_mut(name) {
                *n -= 1;
                if *n == 0 {
                    map.remove(name);
                }
            }
        }
        down(&mut self.by_namespace, &namespace);
        if let Some(o) = owner {
            down(&mut self.by_owner, &o);
        }
    }
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
            resumes: BTreeMap::new(),
            owners: BTreeMap::new(),
            counts: SessionCounts::default(),
            answer_bytes: 0,
            answer_budget: DEFAULT_ANSWER_BYTES,
            drop_from: 0,
            record_calls: true,
            log: None,
        })
    }

    /// The id of a cluster's log, which its first [`Entry::LeaderChanged`] named: event ids
    /// (`"<index>.<k>"`) and `Klock-Index` count entries of that log, and mean nothing in
    /// another (docs/SPEC.md §13.9). Replicated, so every node and every snapshot says the
    /// same. A single server applies no such entry: its log is named outside the machine (its
    /// data file's id, or a new one per `--memory` process), so its state is unchanged.
    pub fn log(&self) -> Option<&str> {
        self.log.as_deref()
    }

    /// The byte budget of remembered answers (by default [`DEFAULT_ANSWER_BYTES`]): past it,
    /// the oldest answers are dropped (their keys stay, so a repeat is refused, never applied
    /// twice). Answers that open or resume a session are never dropped: they are small and
    /// a repeat rebinds the session's secrets, which must replay the same under any budget.
    pub fn set_answer_budget(&mut self, bytes: usize) {
        self.answer_budget = bytes;
        self.drop_answers();
    }

    /// The byte budget of remembered answers ([`Machine::set_answer_budget`]).
    pub fn answer_budget(&self) -> usize {
        self.answer_budget
    }

    /// Whether entries fill [`Applied::kernel_calls`] ([`Machine::record_calls`]).
    pub fn records_calls(&self) -> bool {
        self.record_calls
    }

    /// Bytes of remembered answers not dropped.
    pub fn answer_bytes(&self) -> usize {
        self.answer_bytes
    }

    /// Open sessions of `namespace` (as the session cap counts them).
    pub fn sessions_in(&self, namespace: &str) -> u32 {
        self.counts
            .by_namespace
            .get(namespace)
            .copied()
            .unwrap_or(0)
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
            resumes: snapshot.resumes.clone(),
            owners: snapshot.owners.clone(),
            counts: SessionCounts::default(),
            answer_bytes: 0,
            answer_budget: DEFAULT_ANSWER_BYTES,
            drop_from: 0,
            record_calls: true,
            log: snapshot.log.clone(),
        };
        if let Some(id) = machine
            .tokens
            .keys()
            .chain(machine.resumes.keys())
            .chain(machine.owners.keys())
            .find(|id| machine.kernel.session_info_of(**id).is_none())
        {
            return Err(StateError {
                message: format!("snapshot binds a token to session {id}, which is not open"),
            });
        }
        for session in &snapshot.state.sessions {
            let owner = machine.owners.get(&session.session_id).map(String::as_str);
            machine
                .counts
                .add(session.session_id, &session.namespace, owner);
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
            resumes: self.resumes.clone(),
            owners: self.owners.clone(),
            log: self.log.clone(),
            consensus: None,
        }
    }

    /// Moves past the entry at `index`, an entry of a consensus layer's own that carries no
    /// command (a new leader's blank entry, a membership change): nothing in the machine
    /// changes but its last applied index, which so stays the log's. Indexes increase; such
    /// an entry may skip some (a state machine checked on its own, as openraft's storage suite
    /// does, is handed entries that start anywhere).
    pub fn pass(&mut self, index: u64) {
        debug_assert!(index > self.applied, "entries are applied in log order");
        self.applied = index;
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
        let mut all = self.apply_entry(index, entry);
        if all.len() == 1 {
            return all.pop().expect("one");
        }
        // A batch as one: its last answer, every event and kernel call (an empty batch
        // answers `Done`).
        let mut merged = Applied {
            output: Ok(Output::Done),
            events: Vec::new(),
            repeat_of: None,
            kernel_calls: Vec::new(),
        };
        for applied in all {
            merged.events.extend(applied.events);
            merged.kernel_calls.extend(applied.kernel_calls);
            merged.output = applied.output;
            merged.repeat_of = applied.repeat_of;
        }
        merged
    }

    /// Applies the entry at `index` (as [`apply`](Self::apply)) and returns one answer per
    /// command: one for an [`Entry::Command`], `Recovered` or `LeaderChanged`, one per item of
    /// an [`Entry::Batch`], in order. A batch settles its time once, then applies its items one
    /// after another exactly as entries of one command each at that time would be (each is
    /// checked, remembered and answered on its own, and its events are its own); a repeated
    /// key answers what its first answer was, even when that answer came earlier in the same
    /// batch.
    pub fn apply_entry(&mut self, index: u64, entry: &Entry) -> Vec<Applied> {
        debug_assert_eq!(index, self.applied + 1, "entries are applied in log order");
        self.applied = index;
        let now = self.last_now.max(entry.now());
        self.last_now = now;
        self.kernel.advance(now);
        match entry {
            Entry::Command { .. } | Entry::Batch { .. } => entry
                .calls()
                .into_iter()
                .enumerate()
                .map(|(k, call)| {
                    if k > 0 {
                        // Settled again before each later command of a batch, as its own
                        // entry would be: what a command before it made due at `now` is
                        // settled, and its events are this command's.
                        self.kernel.advance(now);
                    }
                    self.apply_call(index, call, now)
                })
                .collect(),
            Entry::Recovered { .. } | Entry::LeaderChanged { .. } => {
                if let Entry::LeaderChanged { log, .. } = entry {
                    if self.log.is_none() {
                        self.log = Some(log.clone());
                    }
                }
                let mut kernel_calls = Vec::new();
                let open = self.kernel.snapshot(now).sessions;
                for session in open {
                    self.kernel
                        .suspend_session(session.session_id, now)
                        .expect("a session listed by the snapshot is open");
                    kernel_calls.push(Command::Suspend {
                        session: session.session_id,
                    });
                }
                let events: Vec<Event> = std::iter::from_fn(|| self.kernel.poll_event()).collect();
                self.track_closed(&events);
                vec![Applied {
                    output: Ok(Output::Done),
                    events,
                    repeat_of: None,
                    kernel_calls,
                }]
            }
        }
    }

    /// One command of the entry `index`, at `now` (the kernel settled there already).
    fn apply_call(&mut self, index: u64, call: Call<'_>, now: u64) -> Applied {
        let mut kernel_calls = Vec::new();
        let (output, repeat_of) = self.decide(index, call, now, &mut kernel_calls);
        let events: Vec<Event> = std::iter::from_fn(|| self.kernel.poll_event()).collect();
        self.track_tokens(call, &output);
        self.track_closed(&events);
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
        call: Call<'_>,
        now: u64,
        kernel_calls: &mut Vec<Command>,
    ) -> (Result<Output, Refused>, Option<(u64, u64)>) {
        let Call {
            command,
            key,
            token,
            caller,
            resume,
            fingerprint,
        } = call;
        // A repeated resume carries the resume secret its first try was sent with, which that
        // try replaced: the fingerprint of its request (which holds that secret) is the proof.
        let repeated_resume = matches!(command, Command::Resume { .. })
            && key
                .as_deref()
                .and_then(|k| self.recall(k))
                .is_some_and(|first| {
                    first.fingerprint.is_some() && first.fingerprint == *fingerprint
                });
        if let (Some(caller), false) = (caller, repeated_resume) {
            if let Err(refused) = self.check_caller(command, caller) {
                return (Err(refused), None);
            }
        }
        if let Some(key) = key {
            if let Some(first) = self.recall(key) {
                let first_at = (first.index, first.now);
                if first.fingerprint.is_some() && first.fingerprint != *fingerprint {
                    return (
                        Err(Refused::KeyReused(String::from(
                            "this Idempotency-Key already answered another request (another \
                             body or query); a key names one request: use a new key",
                        ))),
                        None,
                    );
                }
                if first.dropped {
                    return (
                        Err(Refused::AnswerForgotten(format!(
                            "the request with this Idempotency-Key was applied (log entry {}), \
                             but its answer was dropped to keep remembered answers within their \
                             byte budget (klock serve --idempotency-bytes); it is not applied \
                             again: read the state to learn its outcome",
                            first.index
                        ))),
                        None,
                    );
                }
                let first = first.clone();
                // A retried open or resume hands out new secrets (the first answer may never
                // have arrived): the retry's are the ones that count from now on.
                if let Ok(Output::Session { session }) = &first.output {
                    if self.kernel.session_info_of(session.session_id).is_some() {
                        if let Some(t) = token {
                            self.tokens.insert(session.session_id, t.clone());
                        }
                        if let Some(r) = resume {
                            self.resumes.insert(session.session_id, r.clone());
                        }
                    }
                }
                return (first.output.map_err(Refused::Kernel), Some(first_at));
            }
        }
        if let (Command::Open { namespace, .. }, Some(caller)) = (command, caller) {
            if let Err(refused) = self.check_caps(namespace, caller) {
                return (Err(refused), None);
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
                fingerprint: fingerprint.clone(),
                dropped: false,
            });
        }
        (output.map_err(Refused::Kernel), None)
    }

    /// The session caps an open is logged with: its namespace's and its owner's open sessions.
    fn check_caps(&self, namespace: &str, caller: &Caller) -> Result<(), Refused> {
        let Some(caps) = caller.caps else {
            return Ok(());
        };
        let in_namespace = self.sessions_in(namespace);
        if in_namespace >= caps.per_namespace {
            return Err(Refused::TooManySessions(format!(
                "namespace {namespace:?} has {in_namespace} open sessions, its cap \
                 (klock serve --max-sessions-per-namespace); close one first"
            )));
        }
        if let Some(owner) = &caller.owner {
            let of_owner = self.counts.by_owner.get(owner).copied().unwrap_or(0);
            if of_owner >= caps.per_owner {
                return Err(Refused::TooManySessions(format!(
                    "token {owner:?} has {of_owner} open sessions, its cap \
                     (klock serve --max-sessions-per-token); close one first"
                )));
            }
        }
        Ok(())
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
            // The digest holds only public data (agent, session, priority): the resume secret,
            // handed out only to whoever opened or last resumed the session, is the credential.
            let Some(given) = caller.resume.as_deref() else {
                return Ok(()); // logged before resume secrets existed: replayed as answered then
            };
            return match self.resumes.get(&session) {
                Some(expected) if crate::auth::constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(()),
                Some(_) => Err(Refused::ResumeSecret(String::from(
                    "the resume secret does not match this session (each open or resume hands out a new one and the previous one stops working)",
                ))),
                None => Err(Refused::ResumeSecret(String::from(
                    "this session has no resume secret (it was opened before the server handed them out): open a new session",
                ))),
            };
        }
        let expected = self.tokens.get(&session).map(String::as_bytes);
        match (caller.token.as_deref().map(str::as_bytes), expected) {
            (Some(given), Some(expected)) if crate::auth::constant_time_eq(given, expected) => Ok(()),
            (None, _) => Err(Refused::SessionToken(String::from(
                "this call names a session: send its token (from open or resume) in the Klock-Session-Token header",
            ))),
            _ => Err(Refused::SessionToken(String::from(
                "the session token does not match this session",
            ))),
        }
    }

    /// Binds a new session's token and resume secret (and counts it for its namespace and
    /// owner), or forgets the secrets of a session its command closed.
    fn track_tokens(&mut self, call: Call<'_>, output: &Result<Output, Refused>) {
        let Call {
            token,
            command,
            caller,
            resume,
            ..
        } = call;
        let Ok(out) = output else {
            return;
        };
        match (command, out) {
            (Command::Open { .. } | Command::Resume { .. }, Output::Session { session })
                if self.kernel.session_info_of(session.session_id).is_some() =>
            {
                let id = session.session_id;
                match token {
                    Some(t) => self.tokens.insert(id, t.clone()),
                    None => self.tokens.remove(&id),
                };
                match resume {
                    Some(r) => self.resumes.insert(id, r.clone()),
                    None => self.resumes.remove(&id),
                };
                if let Command::Open { namespace, .. } = command {
                    let owner = caller.and_then(|c| c.owner.as_deref());
                    if let Some(o) = owner {
                        self.owners.insert(id, o.to_owned());
                    }
                    self.counts.add(id, namespace, owner);
                }
            }
            (Command::Close { session }, Output::Done) => self.forget_session(*session),
            _ => {}
        }
    }

    /// Forgets the secrets of the sessions that `events` closed.
    fn track_closed(&mut self, events: &[Event]) {
        for event in events {
            if let Event::SessionClosed { session, .. } = event {
                self.forget_session(*session);
            }
        }
    }

    fn forget_session(&mut self, session: SessionId) {
        self.tokens.remove(&session);
        self.resumes.remove(&session);
        self.owners.remove(&session);
        self.counts.remove(session);
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
            if !oldest.dropped {
                self.answer_bytes -= answer_size(&oldest);
            }
            self.forgotten += 1;
        }
        if !r.dropped {
            self.answer_bytes += answer_size(&r);
        }
        self.by_key
            .insert(r.key.clone(), self.forgotten + self.remembered.len());
        self.remembered.push_back(r);
        self.drop_answers();
    }

    /// Drops the oldest droppable answers until the rest fit the budget (see
    /// [`set_answer_budget`](Self::set_answer_budget)).
    fn drop_answers(&mut self) {
        self.drop_from = self.drop_from.max(self.forgotten);
        while self.answer_bytes > self.answer_budget {
            let Some(r) = self.remembered.get_mut(self.drop_from - self.forgotten) else {
                return; // only answers that are never dropped are left
            };
            self.drop_from += 1;
            if r.dropped || matches!(r.output, Ok(Output::Session { .. })) {
                continue;
            }
            self.answer_bytes -= answer_size(r);
            r.output = Ok(Output::Done);
            r.dropped = true;
        }
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

/// The bytes a remembered answer is counted for: its JSON and a fixed overhead (computed by
/// counting, without building the text).
fn answer_size(r: &Remembered) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = match &r.output {
        Ok(output) => serde_json::to_writer(&mut count, output),
        Err(error) => serde_json::to_writer(&mut count, error),
    };
    REMEMBERED_OVERHEAD + r.key.len() + count.0
}
