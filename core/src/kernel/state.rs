//! A restorable export of the whole kernel state, for a host's snapshots (the control plane's
//! log compaction, and later Raft snapshots).
//!
//! Contract:
//! - [`Kernel::export_state`] returns the logical state: everything that decides future
//!   outputs (configuration, clock, jitter state, id counters, sessions with their units of
//!   work and remembered ended ids, active leases, waiting tickets, counters, heavy-hitter
//!   tables, events not yet polled), in a canonical order (by id). Indexes (the resource tree,
//!   the deadline index, interned namespaces, idle deadlines) are not part of it: they follow
//!   from it.
//! - [`Kernel::import_state`] checks a state completely before building anything and rebuilds
//!   every index from it. A state that no kernel could have reached (dangling references,
//!   duplicate ids, non-canonical resources, a deadline already due, two conflicting holders,
//!   a waiter with no blocker or out of the policy's waiting order, ...) is a [`StateError`]
//!   naming the problem, never a panic and never a kernel that could panic later. One
//!   exception by design: more remembered ended ids in total than the kernel-wide bound
//!   ([`super::ENDED_MEMORY_PER_KERNEL`]) is accepted, because a kernel from before that bound
//!   wrote such states; the next operation applies it.
//! - A kernel built by `import_state(k.export_state())` gives the same outputs as `k` for the
//!   same calls, and exports an equal state. [`KernelState::hash`] is a 64-bit FNV-1a hash of
//!   the canonical state (integers little-endian, strings length-prefixed), the same on every
//!   platform, so two runs can be compared by hash; it detects accidents, not attacks.

use super::{Kernel, LeaseEnd, LeaseRecord, Session, Set, TicketIntent, TicketRecord};
use crate::backoff::Jitter;
use crate::config::{Config, Policy};
use crate::deadlines::{DeadlineKind, NEVER};
use crate::predicate::Predicate;
use crate::resource::ResourceName;
use crate::stats::{Counters, TopTable, TOP_CAPACITY};
use crate::tree::{HeldEntry, QueuedEntry};
use crate::types::{Event, LeaseId, SessionId, TicketId};
use crate::ENDED_MEMORY_PER_SESSION;
use alloc::{collections::VecDeque, format, string::String, vec::Vec};
use core::fmt;
use core::hash::{Hash, Hasher};

/// The version of the [`KernelState`] layout; a state of another version is refused.
pub const STATE_VERSION: u32 = 1;

/// The whole logical state of a kernel (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct KernelState {
    /// The layout version, [`STATE_VERSION`]; an import refuses any other.
    pub version: u32,
    /// The kernel's configuration.
    pub config: Config,
    /// The largest `now` the kernel has seen.
    pub clock: u64,
    /// The jitter generator's state (splitmix64).
    pub jitter_state: u64,
    /// The next session id to issue.
    pub next_session: u64,
    /// The next priority to assign (at an open, or when a new unit of work begins).
    pub next_priority: u64,
    /// The next lease id to issue; a lease's fence is derived from its id, so neither this
    /// state nor [`LeaseState`] records fences separately.
    pub next_lease: u64,
    /// The next ticket number to issue (the kernel-wide arrival counter).
    pub next_ticket: u64,
    /// By session id.
    pub sessions: Vec<SessionState>,
    /// Active leases, by lease id.
    pub leases: Vec<LeaseState>,
    /// Waiting tickets, by ticket number.
    pub tickets: Vec<TicketState>,
    /// The outcome counters.
    pub counters: Counters,
    /// Contention table entries `(namespace, resource, blocked)`, in table order.
    pub contention: Vec<(String, String, u64)>,
    /// Ghost table entries `(agent_id, expired leases, wait timeouts)`, in table order.
    pub ghosts: Vec<(String, u64, u64)>,
    /// Events queued and not yet polled, oldest first.
    pub events: Vec<Event>,
}

/// One open session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct SessionState {
    /// The session.
    pub session_id: SessionId,
    /// Its agent.
    pub agent_id: String,
    /// Its namespace.
    pub namespace: String,
    /// The priority of its current unit of work (docs/SPEC.md §5).
    pub priority: u64,
    /// The priority it opened with (digests from earlier units carry one in between).
    pub first_priority: u64,
    /// Something was granted since `priority` was assigned.
    pub unit_granted: bool,
    /// A release ended the unit of work: its next valid acquire assigns a new priority.
    pub unit_ended: bool,
    /// 0 when opened, raised by each resume (docs/SPEC.md §13.2).
    pub epoch: u64,
    /// DIEs (DIE verdicts, DIED and WOUNDED events) since its last grant (docs/SPEC.md §8).
    pub die_count: u32,
    /// The later of its last successful call and the last moment it held a lease or a
    /// ticket, in milliseconds: idle closing counts from here.
    pub last_active: u64,
    /// When it was last suspended, in milliseconds; `None` unless suspended and not resumed
    /// since.
    pub suspended_at: Option<u64>,
    /// Its remembered ended leases, oldest first, and whether each was released (or expired).
    pub ended_leases: Vec<(LeaseId, bool)>,
    /// Its remembered ended tickets, oldest first.
    pub ended_tickets: Vec<TicketId>,
}

/// One active lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct LeaseState {
    /// The lease.
    pub lease_id: LeaseId,
    /// The owning session.
    pub session_id: SessionId,
    /// Canonical `TYPE:/path`.
    pub resource: String,
    /// The held predicate.
    pub predicate: Predicate,
    /// When it was granted, in milliseconds.
    pub acquired_at: u64,
    /// Its own expiry in milliseconds, without the suspension grace: the effective expiry is
    /// the later of this and `grace_until`.
    pub expires_at: u64,
    /// The TTL in milliseconds a heartbeat renews it by.
    pub ttl_ms: u64,
    /// The end of its suspension grace in milliseconds, when the lease has one.
    pub grace_until: Option<u64>,
}

/// One waiting ticket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct TicketState {
    /// The ticket.
    pub ticket: TicketId,
    /// The waiting session.
    pub session_id: SessionId,
    /// Every intent of the request, in manifest order: queued, or reusing a held lease.
    pub intents: Vec<TicketIntentState>,
    /// The TTL in milliseconds its leases get when granted (already clamped to `max_ttl_ms`).
    pub ttl_ms: u64,
    /// When the wait times out, in milliseconds; `u64::MAX` means never.
    pub deadline: u64,
}

/// One intent of a waiting ticket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct TicketIntentState {
    /// The requested predicate.
    pub predicate: Predicate,
    /// Canonical `TYPE:/path`.
    pub resource: String,
    /// The session's lease this intent reuses (then it is not queued).
    pub reuse: Option<LeaseId>,
}

/// Why a [`KernelState`] cannot be imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError {
    /// What is wrong, naming the record.
    pub message: String,
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid kernel state: {}", self.message)
    }
}

fn invalid<T>(message: String) -> Result<T, StateError> {
    Err(StateError { message })
}

/// 64-bit FNV-1a with platform-independent integer encoding.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }
    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes());
    }
    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }
    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_isize(&mut self, i: isize) {
        self.write_u64(i as u64);
    }
}

impl KernelState {
    /// The state hash (see the module docs).
    pub fn hash(&self) -> u64 {
        let mut h = Fnv(0xCBF2_9CE4_8422_2325);
        Hash::hash(self, &mut h);
        h.finish()
    }
}

impl Kernel {
    /// The whole logical state, in canonical order (see the module docs).
    pub fn export_state(&self) -> KernelState {
        let mut sessions: Vec<SessionState> = self
            .sessions
            .iter()
            .map(|(&id, s)| SessionState {
                session_id: id,
                agent_id: s.agent_id.clone(),
                namespace: String::from(self.namespaces.name(s.namespace)),
                priority: s.priority,
                first_priority: s.first_priority,
                unit_granted: s.granted_in_unit,
                unit_ended: s.unit_ended,
                epoch: s.epoch,
                die_count: s.die_count,
                last_active: s.last_active,
                suspended_at: s.suspended_at,
                ended_leases: s
                    .ended_leases
                    .iter()
                    .map(|l| (*l, self.ended_leases[l].1 == LeaseEnd::Released))
                    .collect(),
                ended_tickets: s.ended_tickets.iter().copied().collect(),
            })
            .collect();
        sessions.sort_unstable_by_key(|s| s.session_id);
        let mut leases: Vec<LeaseState> = self
            .leases
            .iter()
            .map(|(id, l)| LeaseState {
                lease_id: id,
                session_id: l.session,
                resource: String::from(&*self.tree.node(l.node).name),
                predicate: l.predicate,
                acquired_at: l.acquired_at,
                expires_at: l.expires_at,
                ttl_ms: l.ttl_ms,
                grace_until: l.has_grace.then(|| self.grace[&id]),
            })
            .collect();
        leases.sort_unstable_by_key(|l| l.lease_id);
        let mut tickets: Vec<TicketState> = self
            .tickets
            .iter()
            .map(|(&id, t)| TicketState {
                ticket: id,
                session_id: t.session,
                intents: t
                    .intents
                    .iter()
                    .map(|i| TicketIntentState {
                        predicate: i.predicate,
                        resource: String::from(&*self.tree.node(i.node).name),
                        reuse: i.reuse,
                    })
                    .collect(),
                ttl_ms: t.ttl_ms,
                deadline: t.deadline,
            })
            .collect();
        tickets.sort_unstable_by_key(|t| t.ticket);
        KernelState {
            version: STATE_VERSION,
            config: self.config.clone(),
            clock: self.clock,
            jitter_state: self.jitter.state(),
            next_session: self.next_session,
            next_priority: self.next_priority,
            next_lease: self.next_lease,
            next_ticket: self.next_ticket,
            sessions,
            leases,
            tickets,
            counters: self.counters.clone(),
            contention: self
                .contention
                .entries()
                .iter()
                .map(|((ns, resource), [blocked])| (ns.clone(), resource.clone(), *blocked))
                .collect(),
            ghosts: self
                .ghosts
                .entries()
                .iter()
                .map(|(agent, [expired, timeouts])| (agent.clone(), *expired, *timeouts))
                .collect(),
            events: self.events.iter().cloned().collect(),
        }
    }

    /// A kernel in `state`, every index rebuilt.
    ///
    /// # Errors
    /// [`StateError`] naming the first problem found (see the module docs); nothing is built.
    pub fn import_state(state: &KernelState) -> Result<Kernel, StateError> {
        check_shape(state)?;
        let mut k = Kernel::new(state.config.clone())
            .or_else(|e| invalid(format!("config: {}", e.message)))?;
        k.clock = state.clock;
        k.jitter = Jitter::new(state.jitter_state);
        k.next_session = state.next_session;
        k.next_priority = state.next_priority;
        k.next_lease = state.next_lease;
        k.next_ticket = state.next_ticket;
        k.counters = state.counters.clone();
        k.contention = TopTable::from_entries(
            state
                .contention
                .iter()
                .map(|(ns, r, b)| ((ns.clone(), r.clone()), [*b]))
                .collect(),
        );
        k.ghosts = TopTable::from_entries(
            state
                .ghosts
                .iter()
                .map(|(a, e, t)| (a.clone(), [*e, *t]))
                .collect(),
        );
        k.events = state.events.iter().cloned().collect();
        for s in &state.sessions {
            let namespace = k.namespaces.acquire(&s.namespace);
            let mut ended_leases = VecDeque::new();
            for &(lease, released) in &s.ended_leases {
                let end = if released {
                    LeaseEnd::Released
                } else {
                    LeaseEnd::Expired
                };
                k.ended_leases.insert(lease, (s.session_id, end));
                ended_leases.push_back(lease);
            }
            for &ticket in &s.ended_tickets {
                k.ended_tickets.insert(ticket, s.session_id);
            }
            k.sessions.insert(
                s.session_id,
                Session {
                    agent_id: s.agent_id.clone(),
                    namespace,
                    priority: s.priority,
                    first_priority: s.first_priority,
                    granted_in_unit: s.unit_granted,
                    unit_ended: s.unit_ended,
                    epoch: s.epoch,
                    leases: Set::default(),
                    tickets: Vec::new(),
                    die_count: s.die_count,
                    last_active: s.last_active,
                    idle_deadline: None,
                    suspended_at: s.suspended_at,
                    ended_leases,
                    ended_tickets: s.ended_tickets.iter().copied().collect(),
                },
            );
        }
        for l in &state.leases {
            let namespace = k.sessions[&l.session_id].namespace;
            let node = k.tree.intern(namespace, &l.resource);
            k.tree.add_held(
                node,
                HeldEntry {
                    lease: l.lease_id,
                    session: l.session_id,
                    predicate: l.predicate,
                },
            );
            k.leases.insert(
                l.lease_id,
                LeaseRecord {
                    session: l.session_id,
                    node,
                    predicate: l.predicate,
                    has_grace: l.grace_until.is_some(),
                    acquired_at: l.acquired_at,
                    expires_at: l.expires_at,
                    ttl_ms: l.ttl_ms,
                },
            );
            if let Some(grace) = l.grace_until {
                k.grace.insert(l.lease_id, grace);
            }
            let expiry = k.effective_expiry(l.lease_id);
            k.deadlines
                .insert(expiry, DeadlineKind::LeaseExpiry, l.lease_id.0);
            k.session_mut(l.session_id).leases.insert(l.lease_id);
        }
        for t in &state.tickets {
            let namespace = k.sessions[&t.session_id].namespace;
            let mut intents = Vec::with_capacity(t.intents.len());
            for i in &t.intents {
                let node = k.tree.intern(namespace, &i.resource);
                if i.reuse.is_none() {
                    k.tree.add_queued(
                        node,
                        QueuedEntry {
                            ticket: t.ticket,
                            session: t.session_id,
                            predicate: i.predicate,
                        },
                    );
                }
                intents.push(TicketIntent {
                    node,
                    predicate: i.predicate,
                    reuse: i.reuse,
                });
            }
            k.deadlines
                .insert(t.deadline, DeadlineKind::WaitTimeout, t.ticket.0);
            k.tickets.insert(
                t.ticket,
                TicketRecord {
                    session: t.session_id,
                    intents,
                    ttl_ms: t.ttl_ms,
                    deadline: t.deadline,
                },
            );
            k.session_mut(t.session_id).tickets.push(t.ticket);
        }
        let ids: Vec<SessionId> = state.sessions.iter().map(|s| s.session_id).collect();
        for &id in &ids {
            k.refresh_idle(id);
            let idle = k.sessions[&id].idle_deadline;
            if idle.is_some_and(|at| at <= k.clock && at != NEVER) {
                return invalid(format!(
                    "session {id} is idle and its idle close is already due"
                ));
            }
        }
        check_locks(&k)?;
        Ok(k)
    }
}

/// Checks every record on its own and every reference between records.
fn check_shape(state: &KernelState) -> Result<(), StateError> {
    if state.version != STATE_VERSION {
        return invalid(format!(
            "version {} (this kernel reads version {STATE_VERSION})",
            state.version
        ));
    }
    let now = state.clock;
    let counters = [
        ("next_session", state.next_session),
        ("next_priority", state.next_priority),
        ("next_lease", state.next_lease),
        ("next_ticket", state.next_ticket),
    ];
    for (name, value) in counters {
        if value == 0 || value >= 1 << 62 {
            return invalid(format!("{name} {value} is out of range"));
        }
    }
    let mut sessions: Vec<(SessionId, &SessionState)> = Vec::new();
    let mut priorities: Vec<u64> = Vec::new();
    let mut ended_lease_ids: Vec<LeaseId> = Vec::new();
    let mut ended_ticket_ids: Vec<TicketId> = Vec::new();
    for s in &state.sessions {
        let id = s.session_id;
        if sessions.last().is_some_and(|&(last, _)| last >= id) {
            return invalid(format!("sessions are not in increasing id order at {id}"));
        }
        if id.0 == 0 || id.0 >= state.next_session {
            return invalid(format!("session id {id} was never issued"));
        }
        super::sessions::check_agent_id(&s.agent_id)
            .and_then(|()| super::sessions::check_namespace(&s.namespace))
            .or_else(|e| invalid(format!("session {id}: {}", e.message)))?;
        if !(s.first_priority <= s.priority && s.priority < state.next_priority)
            || s.first_priority == 0
        {
            return invalid(format!("session {id}: priority was never issued"));
        }
        if s.unit_ended && s.die_count > 0 {
            return invalid(format!(
                "session {id}: an ended unit of work with a DIE in it"
            ));
        }
        if s.last_active > now || s.suspended_at.is_some_and(|at| at > now) {
            return invalid(format!("session {id}: a time after the clock"));
        }
        if s.ended_leases.len() > ENDED_MEMORY_PER_SESSION
            || s.ended_tickets.len() > ENDED_MEMORY_PER_SESSION
        {
            return invalid(format!(
                "session {id}: remembers more ended ids than allowed"
            ));
        }
        for &(lease, _) in &s.ended_leases {
            if lease.0 == 0 || lease.0 >= state.next_lease {
                return invalid(format!(
                    "session {id}: ended lease {lease} was never issued"
                ));
            }
            ended_lease_ids.push(lease);
        }
        for &ticket in &s.ended_tickets {
            if ticket.0 == 0 || ticket.0 >= state.next_ticket {
                return invalid(format!(
                    "session {id}: ended ticket {ticket} was never issued"
                ));
            }
            ended_ticket_ids.push(ticket);
        }
        priorities.push(s.priority);
        sessions.push((id, s));
    }
    let session = |id: SessionId, what: &str| {
        sessions
            .binary_search_by_key(&id, |&(sid, _)| sid)
            .map(|i| sessions[i].1)
            .or_else(|_| invalid(format!("{what} names session {id}, which is not open")))
    };
    if duplicated(&mut priorities) {
        return invalid(String::from("two sessions share one priority"));
    }
    // Sorted once, so each active id is looked up by binary search (a state may remember
    // millions of ended ids).
    if duplicated(&mut ended_lease_ids) {
        return invalid(String::from("an ended lease is remembered twice"));
    }
    if duplicated(&mut ended_ticket_ids) {
        return invalid(String::from("an ended ticket is remembered twice"));
    }
    let canonical = |resource: &str, what: &str| match ResourceName::parse(resource) {
        Ok(name) if name.as_str() == resource => Ok(()),
        Ok(name) => invalid(format!(
            "{what}: resource {resource:?} is not canonical (it reads {:?})",
            name.as_str()
        )),
        Err(e) => invalid(format!("{what}: {}", e.message)),
    };
    let mut last_lease = LeaseId(0);
    for l in &state.leases {
        let id = l.lease_id;
        let what = format!("lease {id}");
        if id <= last_lease || id.0 >= state.next_lease {
            return invalid(format!("{what}: out of order or never issued"));
        }
        last_lease = id;
        let owner = session(l.session_id, &what)?;
        canonical(&l.resource, &what)?;
        if l.ttl_ms == 0 || l.acquired_at > now || l.expires_at < l.acquired_at {
            return invalid(format!("{what}: impossible ttl or times"));
        }
        if l.grace_until.is_some() && owner.suspended_at.is_none() {
            return invalid(format!(
                "{what}: a suspension grace, but its session is not suspended"
            ));
        }
        let expiry = l.expires_at.max(l.grace_until.unwrap_or(0));
        if expiry <= now && expiry != NEVER {
            return invalid(format!("{what}: expiry {expiry} is already due at {now}"));
        }
        if ended_lease_ids.binary_search(&id).is_ok() {
            return invalid(format!("{what}: both active and ended"));
        }
    }
    let mut last_ticket = TicketId(0);
    for t in &state.tickets {
        let id = t.ticket;
        let what = format!("ticket {id}");
        if id <= last_ticket || id.0 >= state.next_ticket {
            return invalid(format!("{what}: out of order or never issued"));
        }
        last_ticket = id;
        session(t.session_id, &what)?;
        if t.intents.is_empty() || t.intents.len() > crate::MAX_MANIFEST_INTENTS {
            return invalid(format!("{what}: needs 1 to 256 intents"));
        }
        if t.ttl_ms == 0 || (t.deadline <= now && t.deadline != NEVER) {
            return invalid(format!("{what}: a zero ttl or a deadline already due"));
        }
        if !t.intents.iter().any(|i| i.reuse.is_none()) {
            return invalid(format!("{what}: waits for nothing"));
        }
        for (n, i) in t.intents.iter().enumerate() {
            canonical(&i.resource, &what)?;
            if t.intents[..n]
                .iter()
                .any(|o| o.predicate == i.predicate && o.resource == i.resource)
            {
                return invalid(format!("{what}: a duplicate intent"));
            }
            if let Some(reuse) = i.reuse {
                let held = state.leases.binary_search_by_key(&reuse, |l| l.lease_id);
                let ok = held.is_ok_and(|at| {
                    let l = &state.leases[at];
                    l.session_id == t.session_id
                        && l.predicate == i.predicate
                        && l.resource == i.resource
                });
                if !ok {
                    return invalid(format!(
                        "{what}: reuses lease {reuse}, which its session does not hold for that intent"
                    ));
                }
            }
        }
        if ended_ticket_ids.binary_search(&id).is_ok() {
            return invalid(format!("{what}: both waiting and ended"));
        }
    }
    for t in &state.tickets {
        if session(t.session_id, "ticket")?.unit_ended {
            return invalid(format!(
                "session {}: an ended unit of work that waits",
                t.session_id
            ));
        }
    }
    for l in &state.leases {
        if session(l.session_id, "lease")?.unit_ended {
            return invalid(format!(
                "session {}: an ended unit of work that holds",
                l.session_id
            ));
        }
    }
    let contention = state.contention.iter().map(|(n, r, _)| (n, r)).collect();
    check_table(contention, "contention")?;
    let ghosts = state.ghosts.iter().map(|(a, _, _)| a).collect();
    check_table(ghosts, "ghost")?;
    Ok(())
}

/// Sorts `items` and tells whether one appears twice.
fn duplicated<T: Ord>(items: &mut [T]) -> bool {
    items.sort_unstable();
    items.windows(2).any(|w| w[0] == w[1])
}

/// A heavy-hitters table is bounded and names each key once.
fn check_table<K: Ord>(mut keys: Vec<K>, what: &str) -> Result<(), StateError> {
    if keys.len() > TOP_CAPACITY {
        return invalid(format!(
            "the {what} table has more than {TOP_CAPACITY} entries"
        ));
    }
    if duplicated(&mut keys) {
        return invalid(format!("the {what} table names one key twice"));
    }
    Ok(())
}

/// Checks what only the rebuilt indexes can tell: no two sessions hold conflicting leases on
/// overlapping resources, and every waiter has a blocker, all of them in the policy's waiting
/// order (lanes: a waiter holds nothing and has no other ticket).
fn check_locks(k: &Kernel) -> Result<(), StateError> {
    let mut leases: Vec<(LeaseId, &LeaseRecord)> = k.leases.iter().collect();
    leases.sort_unstable_by_key(|(id, _)| *id);
    for (id, l) in leases {
        let found = k.find_blockers(l.session, [(l.node, l.predicate)].into_iter(), TicketId(0));
        if !found.is_empty() {
            return invalid(format!(
                "lease {id} conflicts with a lease of another session"
            ));
        }
    }
    let mut tickets: Vec<(&TicketId, &TicketRecord)> = k.tickets.iter().collect();
    tickets.sort_unstable_by_key(|(id, _)| **id);
    for (&id, t) in tickets {
        let queued = t
            .intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.node, i.predicate));
        let found = k.find_blockers(t.session, queued, id);
        if found.is_empty() {
            return invalid(format!("ticket {id} waits although nothing blocks it"));
        }
        let waiter = &k.sessions[&t.session];
        let in_order = match k.config.policy {
            Policy::WaitDie => found.sessions.iter().all(|b| b.priority > waiter.priority),
            Policy::WoundWait => found.sessions.iter().all(|b| b.priority < waiter.priority),
            Policy::Lanes => waiter.leases.is_empty() && waiter.tickets.len() == 1,
            // Checked for the whole graph below.
            Policy::Detect => true,
        };
        if !in_order {
            return invalid(format!("ticket {id} breaks the policy's waiting order"));
        }
    }
    if k.config.policy == Policy::Detect && k.has_wait_cycle() {
        return invalid(String::from(
            "the waiters form a cycle (detect breaks every cycle)",
        ));
    }
    Ok(())
}
