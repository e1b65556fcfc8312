//! Observability (docs/SPEC.md §10): resource_state, stats and snapshot.
//!
//! Contract: these report the state after settling `now` (stats and namespace_snapshot take
//! no `now` and report the state as of the last call). They never change anything else, and their output order
//! is deterministic (ids ascending, queues in queue order), never hash order.

use super::sessions::check_namespace;
use super::{Kernel, LeaseRecord, Session};
use crate::error::Error;
use crate::resource::ResourceName;
use crate::stats::{Contention, GhostAgent, Stats};
use crate::tree::{Node, Relation, Want};
use crate::types::{Holder, Intent, Lease, LeaseId, ResourceState, SessionId, TicketId, Waiter};
use alloc::{string::String, vec::Vec};

/// One session as a dashboard sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SessionView {
    /// The session.
    pub session_id: SessionId,
    /// Its agent.
    pub agent_id: String,
    /// Its namespace.
    pub namespace: String,
    /// The priority of its current unit of work; smaller = older (docs/SPEC.md §5).
    pub priority: u64,
    /// 0 when opened, raised by each resume (docs/SPEC.md §13.2).
    pub epoch: u64,
    /// Suspended and not resumed since (its leases may have a grace, docs/SPEC.md §5).
    pub suspended: bool,
    /// How many active leases it holds.
    pub leases: usize,
    /// Its waiting tickets, in arrival order.
    pub tickets: Vec<TicketId>,
    /// DIEs since the last grant (the next backoff exponent).
    pub die_count: u32,
    /// The later of its last successful call and the last moment it held a lease or a
    /// ticket, in milliseconds: idle closing counts from here (docs/SPEC.md §5).
    pub last_active: u64,
    /// Something was granted since the priority was assigned: a release that leaves the
    /// session with nothing ends the unit of work if `die_count` is 0 (docs/SPEC.md §5).
    pub unit_granted: bool,
    /// The unit of work ended: the next acquire assigns a new (youngest) priority.
    pub unit_ended: bool,
}

/// One waiting ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TicketView {
    /// The ticket.
    pub ticket: TicketId,
    /// The waiting session.
    pub session_id: SessionId,
    /// Its agent.
    pub agent_id: String,
    /// The intents still to be granted (already-held ones are not repeated).
    pub intents: Vec<Intent>,
    /// When the wait times out, in milliseconds; `u64::MAX` means never (docs/SPEC.md §2).
    pub deadline: u64,
}

/// Everything a dashboard needs, in one serialisable value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Snapshot {
    /// The kernel's time after settling: the largest `now` it has seen.
    pub now: u64,
    /// The configured policy.
    pub policy: crate::config::Policy,
    /// The earliest pending deadline in milliseconds; `None` when nothing is pending.
    pub next_deadline: Option<u64>,
    /// Every open session, by session id.
    pub sessions: Vec<SessionView>,
    /// Every active lease, by lease id.
    pub leases: Vec<Lease>,
    /// Every waiting ticket, by ticket number.
    pub tickets: Vec<TicketView>,
    /// What [`Kernel::stats`] reports.
    pub stats: Stats,
}

impl Kernel {
    fn holders_of<'a>(&'a self, node: &'a Node) -> impl Iterator<Item = Holder> + 'a {
        let resource = String::from(&*node.name);
        node.held.iter().map(move |h| Holder {
            session_id: h.session,
            agent_id: self.sessions[&h.session].agent_id.clone(),
            lease_id: h.lease,
            resource: resource.clone(),
            predicate: h.predicate,
            fence: LeaseRecord::fence(h.lease),
            expires_at: self.effective_expiry(h.lease),
        })
    }

    /// Holders and queue of one resource node, and the holders covering it from its ancestors
    /// and descendants.
    ///
    /// # Errors
    /// `INVALID_RESOURCE`, `INVALID_NAMESPACE`.
    pub fn resource_state(
        &mut self,
        resource: &str,
        namespace: &str,
        now: u64,
    ) -> Result<ResourceState, Error> {
        self.operation(now, |k| {
            let name = ResourceName::parse(resource)?;
            check_namespace(namespace)?;
            let mut state = ResourceState {
                resource: String::from(name.as_str()),
                namespace: String::from(namespace),
                holders: Vec::new(),
                waiting: Vec::new(),
                covering: Vec::new(),
            };
            let Some(ns) = k.namespaces.find(namespace) else {
                return Ok(state);
            };
            let Some(node) = k.tree.find(ns, name.as_str()) else {
                // No node: nothing holds or waits on it or below it, but an ancestor may.
                let mut ancestor = name.parent_str();
                while let Some(text) = ancestor {
                    if let Some(id) = k.tree.find(ns, text) {
                        k.tree
                            .for_each_overlapping(id, Want::HELD, |_, n, relation| {
                                if relation != Relation::Descendant {
                                    state.covering.extend(k.holders_of(n));
                                }
                            });
                        break;
                    }
                    ancestor = crate::resource::parent_of(text);
                }
                state.covering.sort_by_key(|h| h.lease_id);
                return Ok(state);
            };
            k.tree
                .for_each_overlapping(node, Want::HELD, |_, n, relation| {
                    let holders = k.holders_of(n);
                    match relation {
                        Relation::Same => state.holders.extend(holders),
                        Relation::Ancestor | Relation::Descendant => state.covering.extend(holders),
                    }
                });
            state.holders.sort_by_key(|h| h.lease_id);
            state.covering.sort_by_key(|h| h.lease_id);
            state.waiting = k
                .tree
                .node(node)
                .queued()
                .iter()
                .enumerate()
                .map(|(position, q)| Waiter {
                    session_id: q.session,
                    agent_id: k.sessions[&q.session].agent_id.clone(),
                    ticket: q.ticket,
                    predicate: q.predicate,
                    position,
                    deadline: k.tickets[&q.ticket].deadline,
                })
                .collect();
            Ok(state)
        })
    }

    /// Outcome counters, live totals, top contended resources and ghost agents.
    pub fn stats(&self) -> Stats {
        Stats {
            counters: self.counters.clone(),
            active_sessions: self.sessions.len() as u64,
            active_leases: self.leases.len() as u64,
            waiting_tickets: self.tickets.len() as u64,
            top_contended: self
                .contention
                .sorted()
                .into_iter()
                .map(|((namespace, resource), [blocked])| Contention {
                    namespace,
                    resource,
                    blocked,
                })
                .collect(),
            ghost_agents: self
                .ghosts
                .sorted()
                .into_iter()
                .map(|(agent_id, [expired_leases, wait_timeouts])| GhostAgent {
                    agent_id,
                    expired_leases,
                    wait_timeouts,
                })
                .collect(),
        }
    }

    /// The whole state after settling `now`, for dashboards.
    pub fn snapshot(&mut self, now: u64) -> Snapshot {
        self.operation(now, |k| k.view(|_| true))
    }

    /// The state at the kernel's own time (nothing is settled) cut to one namespace: its
    /// sessions, their leases and tickets, the live totals of those, and the contended
    /// resources of that namespace. Outcome counters and ghost agents stay kernel-wide (they
    /// are not kept per namespace). An unknown namespace gives empty lists.
    ///
    /// It reads `&self`, so a server can answer a namespace's overview where the kernel
    /// lives, building views of that namespace only, instead of copying the whole kernel to
    /// settle and cut a full [`snapshot`](Self::snapshot).
    ///
    /// # Errors
    /// `INVALID_NAMESPACE`.
    pub fn namespace_snapshot(&self, namespace: &str) -> Result<Snapshot, Error> {
        check_namespace(namespace)?;
        let ns = self.namespaces.find(namespace);
        let mut snapshot = self.view(|s| Some(s.namespace) == ns);
        let stats = &mut snapshot.stats;
        stats.top_contended.retain(|c| c.namespace == namespace);
        stats.active_sessions = snapshot.sessions.len() as u64;
        stats.active_leases = snapshot.leases.len() as u64;
        stats.waiting_tickets = snapshot.tickets.len() as u64;
        Ok(snapshot)
    }

    /// The state as it is, of the sessions `shown` picks (with their leases and tickets).
    fn view(&self, shown: impl Fn(&Session) -> bool) -> Snapshot {
        let shown = |session: &SessionId| shown(&self.sessions[session]);
        let mut session_ids: Vec<SessionId> = self
            .sessions
            .keys()
            .copied()
            .filter(|id| shown(id))
            .collect();
        session_ids.sort_unstable();
        let sessions = session_ids
            .iter()
            .map(|id| {
                let s = &self.sessions[id];
                SessionView {
                    session_id: *id,
                    agent_id: s.agent_id.clone(),
                    namespace: String::from(self.namespaces.name(s.namespace)),
                    priority: s.priority,
                    epoch: s.epoch,
                    suspended: s.suspended_at.is_some(),
                    leases: s.leases.len(),
                    tickets: s.tickets.clone(),
                    die_count: s.die_count,
                    last_active: s.last_active,
                    unit_granted: s.granted_in_unit,
                    unit_ended: s.unit_ended,
                }
            })
            .collect();
        let mut lease_ids: Vec<LeaseId> = (self.leases.iter())
            .filter(|(_, l)| shown(&l.session))
            .map(|(id, _)| id)
            .collect();
        lease_ids.sort_unstable();
        let mut ticket_ids: Vec<TicketId> = (self.tickets.iter())
            .filter(|(_, t)| shown(&t.session))
            .map(|(id, _)| *id)
            .collect();
        ticket_ids.sort_unstable();
        let tickets = ticket_ids
            .iter()
            .map(|t| {
                let r = &self.tickets[t];
                TicketView {
                    ticket: *t,
                    session_id: r.session,
                    agent_id: self.sessions[&r.session].agent_id.clone(),
                    intents: r
                        .intents
                        .iter()
                        .filter(|i| i.reuse.is_none())
                        .map(|i| Intent {
                            predicate: i.predicate,
                            resource: String::from(&*self.tree.node(i.node).name),
                        })
                        .collect(),
                    deadline: r.deadline,
                }
            })
            .collect();
        Snapshot {
            now: self.clock,
            policy: self.config.policy,
            next_deadline: self.next_deadline(),
            sessions,
            leases: lease_ids
                .into_iter()
                .map(|id| self.lease_view(id))
                .collect(),
            tickets,
            stats: self.stats(),
        }
    }
}
