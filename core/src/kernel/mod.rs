//! The kernel: the state machine every host drives (DESIGN.md §2).
//!
//! Contract: every operation that can change state takes `now` and first settles everything
//! due at or before it ([`time`]), then does its own work, then forgets ended ids over the
//! kernel-wide bound ([`ended`]), then retires resource nodes it emptied (the tree keeps a
//! bounded number of the most recently emptied interned). A failed operation changes nothing
//! beyond that settlement (and the bound's trim of what the settlement, or a restored state
//! from before the bound, left over it). Outputs that are not a direct answer
//! are queued as [`Event`]s for [`Kernel::poll_event`]. The kernel never reads a
//! clock, never does I/O and never draws randomness other than its seeded [`Jitter`].
//!
//! The work is split by concern: [`sessions`] (open/close/suspend/resume/digest/idle),
//! [`acquire`] (validation and the four policies), [`detect`] (wait-for cycles, for `detect`),
//! [`scheduler`] (blockers, queues, grants, wounds), [`leases`] (heartbeat, release, reconcile), [`time`] (settlement),
//! [`observe`] (resource_state, stats, snapshot), [`ended`] (the memory of ended ids and its
//! bounds), [`state`] (export and import of the whole state, for a host's snapshots),
//! [`lease_store`] (the active lease records, by id).

pub(crate) mod acquire;
mod detect;
mod ended;
mod lease_store;
mod leases;
mod observe;
mod scheduler;
pub(crate) mod sessions;
mod state;
mod time;

use crate::backoff::Jitter;
use crate::config::Config;
use crate::deadlines::Deadlines;
use crate::error::{Error, ErrorCode};
use crate::predicate::Predicate;
use crate::stats::{Counters, TopTable};
use crate::tree::{NamespaceId, NodeId, Tree};
use crate::types::{Event, LeaseId, SessionId, TicketId};
use alloc::{collections::VecDeque, format, string::String, vec::Vec};
use foldhash::fast::FixedState;

pub use ended::{ENDED_MEMORY_AFTER_TRIM, ENDED_MEMORY_PER_KERNEL, ENDED_MEMORY_PER_SESSION};
pub use observe::{SessionView, Snapshot, TicketView};
pub use state::{
    KernelState, LeaseState, SessionState, StateError, TicketIntentState, TicketState,
    STATE_VERSION,
};

pub(crate) type Map<K, V> = hashbrown::HashMap<K, V, FixedState>;
pub(crate) type Set<K> = hashbrown::HashSet<K, FixedState>;

/// A live session.
#[derive(Clone)]
struct Session {
    agent_id: String,
    namespace: NamespaceId,
    /// The priority of the current unit of work (docs/SPEC.md §5).
    priority: u64,
    /// The priority the session opened with: every priority it has had lies between this
    /// and `priority`, which is what a resumed digest may carry.
    first_priority: u64,
    /// Whether something was granted since `priority` was assigned.
    granted_in_unit: bool,
    /// Whether a release ended the unit of work: the next valid acquire assigns a new
    /// priority first.
    unit_ended: bool,
    epoch: u64,
    leases: Set<LeaseId>,
    /// Waiting tickets, in arrival order.
    tickets: Vec<TicketId>,
    /// DIEs (verdicts and DIED events) since the last grant.
    die_count: u32,
    /// Later of the last successful call naming the session and the last moment it held
    /// a lease or a ticket.
    last_active: u64,
    /// The idle-close deadline currently indexed, if the session is idle.
    idle_deadline: Option<u64>,
    suspended_at: Option<u64>,
    /// The most recent ended leases and tickets of this session (at most
    /// [`ENDED_MEMORY_PER_SESSION`] each, fewer when the kernel-wide bound cut them), oldest
    /// first.
    ended_leases: VecDeque<LeaseId>,
    ended_tickets: VecDeque<TicketId>,
}

impl Session {
    fn is_idle(&self) -> bool {
        self.leases.is_empty() && self.tickets.is_empty()
    }
}

/// A granted, not yet ended lease.
#[derive(Clone)]
struct LeaseRecord {
    session: SessionId,
    node: NodeId,
    predicate: Predicate,
    /// Whether a suspension grace is recorded for it in `Kernel::grace`.
    has_grace: bool,
    acquired_at: u64,
    expires_at: u64,
    ttl_ms: u64,
}

impl LeaseRecord {
    /// The lease's fence. Fences and lease ids come from one kernel-wide counter that only a
    /// new lease advances, so the fence strictly increases with every grant and needs no
    /// field of its own (a lease record is what every active lease pays for).
    fn fence(id: LeaseId) -> u64 {
        id.0
    }
}

/// How many intents a request keeps inline (on the stack) before its lists go to the heap.
const INLINE_INTENTS: usize = 2;

/// A request's intents on tree nodes, inline up to [`INLINE_INTENTS`]: a granted request
/// needs them only while it runs, a waiting one moves them into its ticket.
type Intents = smallvec::SmallVec<[TicketIntent; INLINE_INTENTS]>;

/// One intent of a waiting ticket: queued on `node`, or already held (`reuse`).
#[derive(Clone, Copy)]
struct TicketIntent {
    node: NodeId,
    predicate: Predicate,
    reuse: Option<LeaseId>,
}

/// A waiting request.
#[derive(Clone)]
struct TicketRecord {
    session: SessionId,
    intents: Vec<TicketIntent>,
    ttl_ms: u64,
    deadline: u64,
}

/// How an ended lease ended, as remembered for idempotent release and reconcile.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LeaseEnd {
    Released,
    Expired,
}

/// Interned namespaces, counted by live sessions.
#[derive(Clone, Default)]
struct Namespaces {
    by_name: Map<String, NamespaceId>,
    entries: Vec<Option<(String, u32)>>,
    free: Vec<NamespaceId>,
}

impl Namespaces {
    fn find(&self, name: &str) -> Option<NamespaceId> {
        self.by_name.get(name).copied()
    }

    fn acquire(&mut self, name: &str) -> NamespaceId {
        if let Some(id) = self.find(name) {
            self.entries[id as usize]
                .as_mut()
                .expect("live namespace")
                .1 += 1;
            return id;
        }
        let entry = Some((String::from(name), 1));
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as NamespaceId
            }
        };
        self.by_name.insert(String::from(name), id);
        id
    }

    fn release(&mut self, id: NamespaceId) {
        let entry = self.entries[id as usize].as_mut().expect("live namespace");
        entry.1 -= 1;
        if entry.1 == 0 {
            let (name, _) = self.entries[id as usize].take().expect("live namespace");
            self.by_name.remove(&name);
            self.free.push(id);
        }
    }

    fn name(&self, id: NamespaceId) -> &str {
        &self.entries[id as usize]
            .as_ref()
            .expect("live namespace")
            .0
    }
}

/// The coordination kernel. See the crate docs for the drive loop. Cloning gives an
/// independent kernel in the same state (model checkers explore from clones).
#[derive(Clone)]
pub struct Kernel {
    config: Config,
    /// The largest `now` seen; time never goes back inside the kernel.
    clock: u64,
    jitter: Jitter,
    tree: Tree,
    namespaces: Namespaces,
    sessions: Map<SessionId, Session>,
    leases: lease_store::LeaseStore,
    /// Suspension grace of the leases that have one: kept at least until then. Apart from
    /// the records because only the leases of suspended sessions need it.
    grace: Map<LeaseId, u64>,
    tickets: Map<TicketId, TicketRecord>,
    ended_leases: Map<LeaseId, (SessionId, LeaseEnd)>,
    ended_tickets: Map<TicketId, SessionId>,
    deadlines: Deadlines,
    events: VecDeque<Event>,
    /// Whether ACQUIRED and RELEASED are emitted ([`Kernel::set_holder_events`]).
    holder_events: bool,
    /// Nodes whose holders or queue shrank during the current operation: grant candidates
    /// are looked up around them, and they are pruned when the operation ends.
    freed: Vec<NodeId>,
    /// Nodes interned by the current operation that may end up empty.
    touched: Vec<NodeId>,
    /// Tickets whose reused lease ended during the current operation (DIED, docs/SPEC.md §6).
    orphaned: Vec<TicketId>,
    next_session: u64,
    next_priority: u64,
    next_lease: u64,
    next_ticket: u64,
    counters: Counters,
    contention: TopTable<(String, String), 1>,
    ghosts: TopTable<String, 2>,
}

/// Keeps the idle-close deadline of `session` (`id`) indexed exactly when it is idle. A free
/// function over the fields it needs, so a caller already holding the session record does
/// not look it up again.
fn index_idle(deadlines: &mut Deadlines, idle_ms: u64, id: SessionId, session: &mut Session) {
    let wanted =
        (session.is_idle() && idle_ms > 0).then(|| session.last_active.saturating_add(idle_ms));
    let current = session.idle_deadline;
    if wanted == current {
        return;
    }
    session.idle_deadline = wanted;
    let key = id.0;
    if let Some(old) = current {
        deadlines.remove(old, crate::deadlines::DeadlineKind::IdleClose, key);
    }
    if let Some(new) = wanted {
        deadlines.insert(new, crate::deadlines::DeadlineKind::IdleClose, key);
    }
}

fn unknown_session(id: SessionId) -> Error {
    Error::new(
        ErrorCode::UnknownSession,
        format!("no open session {id} (closed, expired for idleness, or never opened)"),
    )
}

impl Kernel {
    /// A kernel with `config`.
    ///
    /// # Errors
    /// `INVALID_CONFIG` when a field cannot mean anything (see [`Config::validate`]).
    pub fn new(config: Config) -> Result<Kernel, Error> {
        config.validate()?;
        Ok(Kernel {
            jitter: Jitter::new(config.seed),
            config,
            clock: 0,
            tree: Tree::default(),
            namespaces: Namespaces::default(),
            sessions: Map::default(),
            leases: lease_store::LeaseStore::default(),
            grace: Map::default(),
            tickets: Map::default(),
            ended_leases: Map::default(),
            ended_tickets: Map::default(),
            deadlines: Deadlines::default(),
            events: VecDeque::new(),
            holder_events: true,
            freed: Vec::new(),
            touched: Vec::new(),
            orphaned: Vec::new(),
            next_session: 1,
            next_priority: 1,
            next_lease: 1,
            next_ticket: 1,
            counters: Counters::default(),
            contention: TopTable::default(),
            ghosts: TopTable::default(),
        })
    }

    /// The configuration the kernel runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The largest `now` the kernel has seen.
    pub fn now(&self) -> u64 {
        self.clock
    }

    /// The next queued event, oldest first; `None` when drained.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// How many events wait to be polled.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Whether ACQUIRED and RELEASED are emitted (default `true`, docs/SPEC.md §9). A host
    /// that reads them nowhere may turn them off to keep an uncontended acquire and release
    /// free of their cost (docs/SPEC.md §13.8); every other event is unchanged. A host
    /// setting, not state: clones keep it, an exported state does not carry it.
    pub fn set_holder_events(&mut self, on: bool) {
        self.holder_events = on;
    }

    /// Whether ACQUIRED and RELEASED are emitted (see [`Kernel::set_holder_events`]).
    pub fn holder_events(&self) -> bool {
        self.holder_events
    }

    /// Runs `work` as one operation at `now`: settle time, do the work, hold the memory of
    /// ended ids to its kernel-wide bound ([`ended`]), retire emptied nodes.
    fn operation<R>(&mut self, now: u64, work: impl FnOnce(&mut Kernel) -> R) -> R {
        self.settle(now);
        let result = work(self);
        self.forget_ended_over_bound();
        self.prune_nodes();
        result
    }

    fn prune_nodes(&mut self) {
        while let Some(node) = self.freed.pop() {
            self.tree.retire(node);
        }
        while let Some(node) = self.touched.pop() {
            self.tree.retire(node);
        }
    }

    fn session(&self, id: SessionId) -> Result<&Session, Error> {
        self.sessions.get(&id).ok_or_else(|| unknown_session(id))
    }

    fn session_mut(&mut self, id: SessionId) -> &mut Session {
        self.sessions
            .get_mut(&id)
            .expect("session checked live by the caller")
    }

    /// Records a successful call naming `id`: the idle clock restarts.
    fn touch(&mut self, id: SessionId) {
        let now = self.clock;
        self.update_idle(id, |session| session.last_active = now);
    }

    /// Keeps the session's idle-close deadline indexed exactly when it is idle.
    fn refresh_idle(&mut self, id: SessionId) {
        self.update_idle(id, |_| ());
    }

    /// Marks that the session stops holding or waiting for something at the current time.
    fn note_activity_end(&mut self, id: SessionId) {
        let now = self.clock;
        self.update_idle(id, |session| {
            session.last_active = session.last_active.max(now)
        });
    }

    /// Applies `change` to the session, then keeps its idle-close deadline indexed exactly
    /// when it is idle; one lookup for both (these run several times in every operation).
    fn update_idle(&mut self, id: SessionId, change: impl FnOnce(&mut Session)) {
        let idle_ms = self.config.session_idle_ms;
        let session = self.sessions.get_mut(&id).expect("live session");
        change(session);
        index_idle(&mut self.deadlines, idle_ms, id, session);
    }

    /// The expiry that counts everywhere: `max(expires_at, grace)`.
    fn effective_expiry(&self, id: LeaseId) -> u64 {
        let lease = &self.leases[&id];
        match lease.has_grace {
            true => lease.expires_at.max(self.grace[&id]),
            false => lease.expires_at,
        }
    }

    /// Ends the session's unit of work if a release just left it holding and waiting for
    /// nothing after a success (something granted since its priority was assigned and no DIE
    /// since the last grant); a release after a DIE is a rollback and keeps the priority.
    fn end_unit_if_done(&mut self, id: SessionId) {
        let s = self.session_mut(id);
        if s.is_idle() && s.granted_in_unit && s.die_count == 0 {
            s.unit_ended = true;
        }
    }

    /// What every valid acquire does first, with one lookup of the session: records the call
    /// (as [`touch`](Self::touch)), and starts a new unit of work if the last one ended (the
    /// session becomes the youngest). A unit ends only when the session holds and waits for
    /// nothing, so no wait-for edge reverses.
    fn touch_and_begin_unit(&mut self, id: SessionId) {
        let (now, idle_ms) = (self.clock, self.config.session_idle_ms);
        let s = self.sessions.get_mut(&id).expect("live session");
        s.last_active = now;
        if s.unit_ended {
            debug_assert!(s.is_idle(), "a new unit starts with nothing held or queued");
            s.priority = self.next_priority;
            self.next_priority += 1;
            s.granted_in_unit = false;
            s.unit_ended = false;
        }
        index_idle(&mut self.deadlines, idle_ms, id, s);
    }

    /// Draws the backoff for one more DIE of `session` (a DIE verdict, DIED or WOUNDED
    /// event: docs/SPEC.md §8) and adds it to the session's DIE count. Callers count the outcome.
    fn die_backoff(&mut self, session: SessionId) -> u64 {
        let draw = self.jitter.next_u64();
        let (base, cap) = (self.config.backoff_base_ms, self.config.backoff_cap_ms);
        let s = self.session_mut(session);
        let retry = crate::backoff::retry_after_ms(base, cap, s.die_count, draw);
        s.die_count = s.die_count.saturating_add(1);
        retry
    }
}
