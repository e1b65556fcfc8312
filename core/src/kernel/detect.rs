//! Deadlock detection, `policy = detect` (docs/SPEC.md §6.1, §13.6).
//!
//! Contract:
//! - [`Kernel::find_cycle`] answers whether a request of `requester` that `blockers` block
//!   would close a cycle in the wait-for graph (an edge from each waiting session to every
//!   session blocking one of its tickets, [`Kernel::find_blockers`]), and if so returns the
//!   shortest such cycle: breadth-first from the blockers back to the requester, blockers and
//!   each session's edges in ascending session id, each edge standing for the session's first
//!   ticket (in ticket order) that the other session blocks, so every host finds the same
//!   cycle.
//! - The search runs from both ends. First, backwards from the requester: the sessions that
//!   wait for it, directly or through others ([`Kernel::waiting_for`]), found from the queues
//!   around what each of them holds or has queued. Only when a blocker is among them is there
//!   a cycle, and only then does the breadth-first search run, forwards from the blockers,
//!   through those sessions alone (no other session can lie on a path back to the requester,
//!   so the cycle found is the one an unpruned search finds). A requester that holds and
//!   waits for nothing (the common case: an agent asking for its next piece of work) costs
//!   one lookup; otherwise the cost is bounded by the queues around what the sessions waiting
//!   for it hold, never a scan of the kernel, and the forward search's blocker searches run
//!   only on a cycle.
//! - [`Kernel::has_wait_cycle`] checks the whole graph, for an imported state (a scan, which
//!   only import may afford).
//!
//! Only new requests add wait-for edges (docs/SPEC.md §6.1), so checking each request before
//! it is queued keeps the graph acyclic; the acquire path breaks a cycle found here by killing
//! its youngest member ([`Cycle::victim`]).

use super::scheduler::Blockers;
use super::Kernel;
use crate::predicate::Predicate;
use crate::tree::Want;
use crate::types::{SessionId, TicketId};
use alloc::{
    collections::{btree_map::Entry, BTreeMap, BTreeSet, VecDeque},
    vec::Vec,
};

/// One cycle of the wait-for graph closed by a new request.
pub(super) struct Cycle {
    /// The members following the edges, the requester first; with each the ticket whose
    /// blocker is the next member (`None` for the requester: its edge is the new request).
    pub members: Vec<(SessionId, Option<TicketId>)>,
}

impl Cycle {
    /// The member with the largest priority (the youngest unit of work, docs/SPEC.md §6.1),
    /// with its ticket on the cycle (`None`: the requester).
    pub fn victim(&self, kernel: &Kernel) -> (SessionId, Option<TicketId>) {
        *self
            .members
            .iter()
            .max_by_key(|(s, _)| kernel.sessions[s].priority)
            .expect("a cycle has members")
    }

    /// The members' session ids starting with `first` and following the edges.
    pub fn starting_at(&self, first: SessionId) -> Vec<SessionId> {
        let at = self
            .members
            .iter()
            .position(|&(s, _)| s == first)
            .expect("the victim is a member");
        let ids = self.members.iter().map(|&(s, _)| s);
        ids.clone().skip(at).chain(ids.take(at)).collect()
    }
}

impl Kernel {
    /// The wait-for edges out of `session`: each session blocking one of its waiting tickets,
    /// with that ticket (the first in ticket order), by ascending session id.
    fn wait_edges(&self, session: SessionId) -> Vec<(SessionId, TicketId)> {
        let mut edges: Vec<(SessionId, TicketId)> = Vec::new();
        let mut tickets = self.sessions[&session].tickets.clone();
        tickets.sort_unstable();
        for ticket in tickets {
            let queued = self.tickets[&ticket]
                .intents
                .iter()
                .filter(|i| i.reuse.is_none())
                .map(|i| (i.node, i.predicate));
            for b in &self.find_blockers(session, queued, ticket).sessions {
                if !edges.iter().any(|&(s, _)| s == b.session) {
                    edges.push((b.session, ticket));
                }
            }
        }
        edges.sort_unstable_by_key(|&(s, _)| s);
        edges
    }

    /// Calls `visit` with each session that has a waiting ticket `session` blocks (by a lease,
    /// or by an earlier queued intent; the reverse of [`Self::wait_edges`], so of
    /// [`Kernel::find_blockers`]), possibly more than once.
    fn for_each_waiter_of(&self, session: SessionId, mut visit: impl FnMut(SessionId)) {
        // `after`: a queued intent blocks only the tickets queued after it; a lease, all.
        let mut waiters_on = |node, predicate: Predicate, after: Option<TicketId>| {
            self.tree
                .for_each_overlapping(node, Want::QUEUED, |_, n, _| {
                    for q in n.queued().iter().filter(|q| after < Some(q.ticket)) {
                        if q.session != session && predicate.conflicts_with(q.predicate) {
                            visit(q.session);
                        }
                    }
                });
        };
        let record = &self.sessions[&session];
        for lease in &record.leases {
            let lease = self
                .leases
                .get(lease)
                .expect("a session's leases are active");
            waiters_on(lease.node, lease.predicate, None);
        }
        for &ticket in &record.tickets {
            for i in self.tickets[&ticket].intents.iter() {
                if i.reuse.is_none() {
                    waiters_on(i.node, i.predicate, Some(ticket));
                }
            }
        }
    }

    /// The sessions that wait for `requester`, directly or through other waiting sessions.
    fn waiting_for(&self, requester: SessionId) -> BTreeSet<SessionId> {
        let mut found = BTreeSet::new();
        let mut pending = alloc::vec![requester];
        while let Some(session) = pending.pop() {
            self.for_each_waiter_of(session, |waiter| {
                if waiter != requester && found.insert(waiter) {
                    pending.push(waiter);
                }
            });
        }
        found
    }

    /// The shortest cycle a request of `requester` blocked by `blockers` would close, if any
    /// (see the module contract).
    pub(super) fn find_cycle(&self, requester: SessionId, blockers: &Blockers) -> Option<Cycle> {
        let upstream = self.waiting_for(requester);
        if !blockers
            .sessions
            .iter()
            .any(|b| upstream.contains(&b.session))
        {
            return None;
        }
        // How each reached session was reached: (from, the ticket of `from` on that edge).
        let mut reached: BTreeMap<SessionId, (SessionId, Option<TicketId>)> = BTreeMap::new();
        let mut frontier: VecDeque<SessionId> = VecDeque::new();
        for b in blockers
            .sessions
            .iter()
            .filter(|b| upstream.contains(&b.session))
        {
            reached.insert(b.session, (requester, None));
            frontier.push_back(b.session);
        }
        while let Some(session) = frontier.pop_front() {
            for (next, ticket) in self.wait_edges(session) {
                if next == requester {
                    return Some(self.trace(requester, session, ticket, &reached));
                }
                if !upstream.contains(&next) {
                    continue;
                }
                if let Entry::Vacant(e) = reached.entry(next) {
                    e.insert((session, Some(ticket)));
                    frontier.push_back(next);
                }
            }
        }
        None
    }

    /// The cycle requester → … → `last` → requester, from the search's back links.
    fn trace(
        &self,
        requester: SessionId,
        last: SessionId,
        last_ticket: TicketId,
        reached: &BTreeMap<SessionId, (SessionId, Option<TicketId>)>,
    ) -> Cycle {
        // Walked backwards: each member with its ticket toward the member after it.
        let mut members = alloc::vec![(last, Some(last_ticket))];
        let mut at = last;
        while at != requester {
            let (from, ticket) = reached[&at];
            members.push((from, ticket));
            at = from;
        }
        members.reverse();
        Cycle { members }
    }

    /// Whether the wait-for graph has a cycle anywhere (an imported state's check).
    pub(super) fn has_wait_cycle(&self) -> bool {
        // Kahn's algorithm on the session graph: a cycle leaves sessions never freed.
        let mut waiting: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.tickets.is_empty())
            .map(|(&id, _)| id)
            .collect();
        waiting.sort_unstable();
        let edges: BTreeMap<SessionId, Vec<SessionId>> = waiting
            .iter()
            .map(|&s| (s, self.wait_edges(s).into_iter().map(|(b, _)| b).collect()))
            .collect();
        let mut pending: BTreeMap<SessionId, usize> = BTreeMap::new();
        let mut free: Vec<SessionId> = Vec::new();
        // Out-degrees count only edges to waiting sessions: the others are never on a cycle.
        for (s, out) in &edges {
            let n = out.iter().filter(|b| edges.contains_key(b)).count();
            pending.insert(*s, n);
            if n == 0 {
                free.push(*s);
            }
        }
        let mut done = 0;
        while let Some(s) = free.pop() {
            done += 1;
            for (w, out) in &edges {
                if out.contains(&s) {
                    let n = pending.get_mut(w).expect("every waiter is counted");
                    *n -= 1;
                    if *n == 0 {
                        free.push(*w);
                    }
                }
            }
        }
        done != edges.len()
    }
}
