//! Blockers, queues, grants and wounds: the part of the kernel that decides who goes next.
//!
//! Contract:
//! - [`Kernel::find_blockers`] returns every other session holding a lease, or owning a
//!   ticket numbered below `before`, that overlaps (docs/SPEC.md §3) and conflicts (§4) with one of
//!   the given intents; a session's own leases and tickets never block it.
//! - [`Kernel::after_frees`] must run after anything that removed holders or queued intents:
//!   it withdraws tickets whose reused lease ended (DIED) and then grants, in ticket order,
//!   exactly the waiting tickets around the freed nodes that no longer have a blocker. A grant
//!   never unblocks another ticket (the new holder conflicts exactly where its queued intent
//!   did), so one pass in ticket order is complete.
//! - The policy invariant (wait_die: a waiter is older than all it waits for; wound_wait:
//!   younger) holds by construction; [`Kernel::after_frees`] still checks it and repairs a
//!   violation with DIED (counted in `defensive_repairs`, which the model checker asserts is
//!   never used).

use super::{
    index_idle, Intents, Kernel, LeaseEnd, LeaseRecord, TicketIntent, TicketRecord, INLINE_INTENTS,
};
use crate::config::Policy;
use crate::deadlines::DeadlineKind;
use crate::predicate::Predicate;
use crate::tree::{HeldEntry, NodeId, QueuedEntry, Relation, Want};
use crate::types::{Blocker, Event, Intent, Lease, LeaseId, SessionId, TicketId, Verdict};
use alloc::{collections::BTreeSet, string::String, vec::Vec};
use core::ops::ControlFlow;
use smallvec::SmallVec;

/// One blocking session, as found.
pub(super) struct FoundBlocker {
    pub session: SessionId,
    pub priority: u64,
    /// Whether it blocks through a lease it holds (not only through a queued ticket).
    pub via_lease: bool,
    /// Its conflicting intents, sorted and distinct.
    pub intents: SmallVec<[(NodeId, Predicate); 2]>,
}

/// All blockers of a request, by session id; and which requested nodes were blocked. Inline
/// for a few blockers: a contended verdict allocates its answer, not its search.
#[derive(Default)]
pub(super) struct Blockers {
    pub sessions: SmallVec<[FoundBlocker; 2]>,
    pub blocked_nodes: SmallVec<[NodeId; 2]>,
}

impl Blockers {
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

impl Kernel {
    /// Every session blocking `intents` of `session` (see the module contract).
    pub(super) fn find_blockers(
        &self,
        session: SessionId,
        intents: impl Iterator<Item = (NodeId, Predicate)>,
        before: TicketId,
    ) -> Blockers {
        // (session, node, predicate, via_lease)
        let mut hits: SmallVec<[(SessionId, NodeId, Predicate, bool); 8]> = SmallVec::new();
        let mut blocked_nodes = SmallVec::new();
        for (node, wanted) in intents {
            let found_before = hits.len();
            self.tree
                .for_each_overlapping(node, Want::BOTH, |id, n, _| {
                    for h in &n.held {
                        if h.session != session && h.predicate.conflicts_with(wanted) {
                            hits.push((h.session, id, h.predicate, true));
                        }
                    }
                    for q in n.queued().iter().take_while(|q| q.ticket < before) {
                        if q.session != session && q.predicate.conflicts_with(wanted) {
                            hits.push((q.session, id, q.predicate, false));
                        }
                    }
                });
            if hits.len() > found_before {
                blocked_nodes.push(node);
            }
        }
        if hits.is_empty() {
            return Blockers::default();
        }
        hits.sort_unstable_by_key(|&(s, n, p, l)| (s, n, p, !l));
        let mut sessions: SmallVec<[FoundBlocker; 2]> = SmallVec::new();
        for (s, node, predicate, via_lease) in hits {
            match sessions.last_mut() {
                Some(b) if b.session == s => {
                    b.via_lease |= via_lease;
                    if b.intents.last() != Some(&(node, predicate)) {
                        b.intents.push((node, predicate));
                    }
                }
                _ => sessions.push(FoundBlocker {
                    session: s,
                    priority: self.sessions[&s].priority,
                    via_lease,
                    intents: smallvec::smallvec![(node, predicate)],
                }),
            }
        }
        Blockers {
            sessions,
            blocked_nodes,
        }
    }

    /// The first session found blocking a waiting ticket, or `None` when it can be granted.
    /// Stops at the first conflict and allocates nothing: the grant pass asks this of every
    /// ticket around a freed node, so long queues must not cost a full blocker search each.
    fn first_blocker(&self, ticket: TicketId, record: &TicketRecord) -> Option<SessionId> {
        let session = record.session;
        record
            .intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .find_map(|i| {
                let found = self
                    .tree
                    .try_for_each_overlapping(i.node, Want::BOTH, |_, n, _| {
                        let held = n.held.iter().map(|h| (h.session, h.predicate));
                        let queued = n
                            .queued()
                            .iter()
                            .take_while(|q| q.ticket < ticket)
                            .map(|q| (q.session, q.predicate));
                        match held
                            .chain(queued)
                            .find(|&(s, p)| s != session && p.conflicts_with(i.predicate))
                        {
                            Some((s, _)) => ControlFlow::Break(s),
                            None => ControlFlow::Continue(()),
                        }
                    });
                match found {
                    ControlFlow::Break(s) => Some(s),
                    ControlFlow::Continue(()) => None,
                }
            })
    }

    /// `held_by` as reported to clients.
    pub(super) fn describe_blockers<'a>(
        &self,
        found: impl Iterator<Item = &'a FoundBlocker>,
    ) -> Vec<Blocker> {
        found
            .map(|b| {
                let mut intents: Vec<Intent> = b
                    .intents
                    .iter()
                    .map(|&(node, predicate)| Intent {
                        predicate,
                        resource: String::from(&*self.tree.node(node).name),
                    })
                    .collect();
                intents.sort();
                Blocker {
                    session_id: b.session,
                    agent_id: self.sessions[&b.session].agent_id.clone(),
                    intents,
                }
            })
            .collect()
    }

    /// Grants a new lease on `node` to `session` (suspended since `suspended_at`, if it is) at
    /// the current time; the caller adds it to the session's lease set.
    fn create_lease(
        &mut self,
        session: SessionId,
        suspended_at: Option<u64>,
        node: NodeId,
        predicate: Predicate,
        ttl_ms: u64,
    ) -> LeaseId {
        let id = LeaseId(self.next_lease);
        self.next_lease += 1;
        let now = self.clock;
        let mut record = LeaseRecord {
            session,
            node,
            predicate,
            acquired_at: now,
            expires_at: now,
            ttl_ms,
            has_grace: false,
        };
        record.expires_at = self.capped_expiry(&record, now.saturating_add(ttl_ms));
        let grace = suspended_at
            .map(|at| self.capped_expiry(&record, at.saturating_add(self.config.grace_ms)));
        let expires_at = record.expires_at;
        self.deadlines
            .insert(expires_at, DeadlineKind::LeaseExpiry, id.0);
        self.leases.insert(id, record);
        if let Some(grace) = grace {
            // Granted while its session is suspended: kept for the grace too (SPEC §5).
            self.set_lease_expiry(id, expires_at, grace);
        }
        self.tree.add_held(
            node,
            HeldEntry {
                lease: id,
                session,
                predicate,
            },
        );
        id
    }

    /// `wanted` limited by the lease's lifetime cap (docs/SPEC.md §7).
    pub(super) fn capped_expiry(&self, lease: &LeaseRecord, wanted: u64) -> u64 {
        match self.config.max_lease_lifetime_ms {
            0 => wanted,
            cap => wanted.min(lease.acquired_at.saturating_add(cap)),
        }
    }

    /// Sets a lease's expiry and grace (0 = none), keeping the deadline index exact.
    pub(super) fn set_lease_expiry(&mut self, id: LeaseId, expires_at: u64, grace_until: u64) {
        let old = self.effective_expiry(id);
        let lease = self.leases.get_mut(&id).expect("active lease");
        lease.expires_at = expires_at;
        lease.has_grace = grace_until > 0;
        if lease.has_grace {
            self.grace.insert(id, grace_until);
        } else {
            self.grace.remove(&id);
        }
        let new = self.effective_expiry(id);
        self.deadlines
            .reschedule(old, new, DeadlineKind::LeaseExpiry, id.0);
    }

    /// Renews a lease for `ttl_ms` from now, as a heartbeat does, and ends its suspension
    /// grace. Returns false, changing nothing, when the lease already reached its lifetime cap.
    pub(super) fn renew_lease(&mut self, id: LeaseId, ttl_ms: u64) -> bool {
        let lease = &self.leases[&id];
        if self.config.max_lease_lifetime_ms != 0
            && lease.expires_at == self.capped_expiry(lease, u64::MAX)
        {
            return false;
        }
        let wanted = self.capped_expiry(lease, self.clock.saturating_add(ttl_ms));
        self.set_lease_expiry(id, wanted, 0);
        true
    }

    /// The client view of an active lease.
    pub(super) fn lease_view(&self, id: LeaseId) -> Lease {
        let l = &self.leases[&id];
        self.lease_view_of(id, l, &self.sessions[&l.session].agent_id)
    }

    /// [`lease_view`](Self::lease_view) of the record `l` of lease `id`, whose owner is
    /// `agent_id` (a grant names its session once for all its leases).
    fn lease_view_of(&self, id: LeaseId, l: &LeaseRecord, agent_id: &str) -> Lease {
        Lease {
            lease_id: id,
            session_id: l.session,
            agent_id: String::from(agent_id),
            resource: self.tree.node(l.node).name.clone(),
            predicate: l.predicate,
            fence: LeaseRecord::fence(id),
            acquired_at: l.acquired_at,
            expires_at: match l.has_grace {
                true => l.expires_at.max(self.grace[&id]),
                false => l.expires_at,
            },
            ttl_ms: l.ttl_ms,
        }
    }

    /// Ends an active lease. Tickets of the same session that reuse it are withdrawn with
    /// DIED by the next [`after_frees`](Self::after_frees).
    pub(super) fn end_lease(&mut self, id: LeaseId, end: LeaseEnd) {
        let lease = self.leases.remove(&id).expect("active lease");
        // The effective expiry (see `effective_expiry`), from the record just removed.
        let expiry = match lease.has_grace {
            true => lease
                .expires_at
                .max(self.grace.remove(&id).expect("grace recorded")),
            false => lease.expires_at,
        };
        self.deadlines
            .remove(expiry, DeadlineKind::LeaseExpiry, id.0);
        self.tree.remove_held(lease.node, id);
        self.freed.push(lease.node);
        // One lookup of the owner for everything below.
        let session = self
            .sessions
            .get_mut(&lease.session)
            .expect("lease owner is live");
        Kernel::remember_ended_lease(
            &mut self.ended_leases,
            &mut session.ended_leases,
            lease.session,
            id,
            end,
        );
        session.leases.remove(&id);
        for &t in &session.tickets {
            if self.tickets[&t].intents.iter().any(|i| i.reuse == Some(id)) {
                self.orphaned.push(t);
            }
        }
        match end {
            LeaseEnd::Expired => {
                self.counters.expired += 1;
                let agent = &session.agent_id;
                self.ghosts
                    .bump_with(|a| a == agent, || agent.clone(), 0, 1);
                self.events.push_back(Event::LeaseExpired {
                    lease: id,
                    session: lease.session,
                });
            }
            LeaseEnd::Released => self.counters.released += 1,
        }
        // As `note_activity_end`.
        session.last_active = session.last_active.max(self.clock);
        index_idle(
            &mut self.deadlines,
            self.config.session_idle_ms,
            lease.session,
            session,
        );
    }

    /// Queues a new ticket for the not-yet-held intents; returns its number.
    pub(super) fn enqueue(
        &mut self,
        session: SessionId,
        intents: Intents,
        ttl_ms: u64,
        wait_timeout_ms: u64,
    ) -> TicketId {
        let ticket = TicketId(self.next_ticket);
        self.next_ticket += 1;
        for i in intents.iter().filter(|i| i.reuse.is_none()) {
            self.tree.add_queued(
                i.node,
                QueuedEntry {
                    ticket,
                    session,
                    predicate: i.predicate,
                },
            );
        }
        let deadline = self.clock.saturating_add(wait_timeout_ms);
        self.deadlines
            .insert(deadline, DeadlineKind::WaitTimeout, ticket.0);
        self.tickets.insert(
            ticket,
            TicketRecord {
                session,
                intents: intents.into_vec(),
                ttl_ms,
                deadline,
            },
        );
        self.session_mut(session).tickets.push(ticket);
        self.refresh_idle(session);
        self.counters.waited += 1;
        ticket
    }

    /// Takes a ticket out of the queues, the deadline index and its session; it is no longer
    /// waiting (granted or withdrawn).
    fn detach_ticket(&mut self, ticket: TicketId) -> TicketRecord {
        let record = self.tickets.remove(&ticket).expect("waiting ticket");
        self.deadlines
            .remove(record.deadline, DeadlineKind::WaitTimeout, ticket.0);
        for i in record.intents.iter().filter(|i| i.reuse.is_none()) {
            self.tree.remove_queued(i.node, ticket);
        }
        self.session_mut(record.session)
            .tickets
            .retain(|&t| t != ticket);
        self.remember_ended_ticket(record.session, ticket);
        record
    }

    /// Removes a waiting ticket from every queue; the caller reports why.
    pub(super) fn withdraw_ticket(&mut self, ticket: TicketId) -> TicketRecord {
        let record = self.detach_ticket(ticket);
        self.freed.extend(
            record
                .intents
                .iter()
                .filter(|i| i.reuse.is_none())
                .map(|i| i.node),
        );
        self.note_activity_end(record.session);
        record
    }

    /// Withdraws a ticket with a DIED event (counts as a DIE for backoff); `cycle` names the
    /// wait-for cycle it was the victim of under `detect` (empty for any other reason).
    pub(super) fn die_ticket(&mut self, ticket: TicketId, cycle: Vec<SessionId>) {
        let record = self.withdraw_ticket(ticket);
        self.counters.died += 1;
        let retry_after_ms = self.die_backoff(record.session);
        self.events.push_back(Event::Died {
            ticket,
            session: record.session,
            retry_after_ms,
            cycle,
        });
    }

    /// Grants every intent of `intents` to `session` now: new leases for the others, renewal
    /// for reused ones. Leases come back in the given order. Resets the DIE count.
    pub(super) fn grant(
        &mut self,
        session: SessionId,
        intents: &[TicketIntent],
        ttl_ms: u64,
    ) -> Vec<Lease> {
        let suspended_at = self.sessions[&session].suspended_at;
        let ids: SmallVec<[(LeaseId, bool); INLINE_INTENTS]> = intents
            .iter()
            .map(|i| match i.reuse {
                Some(id) => {
                    self.extend_reused_lease(id, ttl_ms);
                    (id, false)
                }
                None => {
                    let id = self.create_lease(session, suspended_at, i.node, i.predicate, ttl_ms);
                    (id, true)
                }
            })
            .collect();
        // One lookup of the session for its new leases, its unit of work and its idle
        // deadline (it holds something now).
        let s = self.sessions.get_mut(&session).expect("live session");
        s.leases
            .extend(ids.iter().filter(|(_, new)| *new).map(|(id, _)| *id));
        s.die_count = 0;
        s.granted_in_unit = true;
        index_idle(&mut self.deadlines, self.config.session_idle_ms, session, s);
        self.counters.granted += 1;
        // Sized exactly: collecting from the inline list would reserve room for 4.
        let mut leases = Vec::with_capacity(ids.len());
        let agent_id = &self.sessions[&session].agent_id;
        leases.extend(
            ids.into_iter()
                .map(|(id, _)| self.lease_view_of(id, &self.leases[&id], agent_id)),
        );
        leases
    }

    /// Grants a request at once (the GRANTED verdict of an acquire) and emits ACQUIRED with
    /// the same leases (docs/SPEC.md §9; unless the host turned them off), at the moment of the grant: after the wounds or the
    /// victim's DIED that made room, before any grant those enable for other tickets.
    pub(super) fn grant_at_once(
        &mut self,
        session: SessionId,
        intents: &[TicketIntent],
        ttl_ms: u64,
    ) -> Verdict {
        let leases = self.grant(session, intents, ttl_ms);
        if self.holder_events {
            self.events.push_back(Event::Acquired {
                session,
                leases: leases.clone(),
            });
        }
        Verdict::Granted { leases }
    }

    /// The lease `session` holds on exactly `node` with `predicate`, if any.
    pub(super) fn held_by(
        &self,
        session: SessionId,
        node: NodeId,
        predicate: Predicate,
    ) -> Option<LeaseId> {
        self.tree
            .node(node)
            .held
            .iter()
            .find(|h| h.session == session && h.predicate == predicate)
            .map(|h| h.lease)
    }

    /// Idempotent re-acquire (docs/SPEC.md §6): the reused lease is renewed and never shortened.
    /// Its TTL becomes the larger of its own and `ttl_ms`; its expiry the later of its current
    /// effective expiry and `now + ttl`, within the lifetime cap (never failing because of
    /// it). A suspension grace is folded into the expiry, so nothing an outer holder relied
    /// on is taken away.
    fn extend_reused_lease(&mut self, id: LeaseId, ttl_ms: u64) {
        let current = self.effective_expiry(id);
        let lease = self.leases.get_mut(&id).expect("reused lease is active");
        lease.ttl_ms = lease.ttl_ms.max(ttl_ms);
        let lease = &self.leases[&id];
        let renewed = self.capped_expiry(lease, self.clock.saturating_add(lease.ttl_ms));
        self.set_lease_expiry(id, renewed.max(current), 0);
    }

    fn grant_ticket(&mut self, ticket: TicketId) {
        let mut record = self.detach_ticket(ticket);
        // An intent the ticket queued may be held by its session by now (an earlier ticket
        // of the session got it): it reuses that lease, so a session never holds two leases
        // with one predicate on one resource (docs/SPEC.md §6).
        for i in record.intents.iter_mut().filter(|i| i.reuse.is_none()) {
            i.reuse = self.held_by(record.session, i.node, i.predicate);
        }
        let leases = self.grant(record.session, &record.intents, record.ttl_ms);
        self.events.push_back(Event::Granted {
            ticket,
            session: record.session,
            leases,
        });
    }

    /// Whether waiting for a blocker of `blocker` priority breaks the policy's waiting order
    /// for a waiter of `waiter` priority.
    fn breaks_wait_order(&self, waiter: u64, blocker: u64) -> bool {
        match self.config.policy {
            Policy::WaitDie => blocker < waiter,
            Policy::WoundWait => blocker > waiter,
            // Cycles are broken before a request is queued (docs/SPEC.md §6.1).
            Policy::Lanes | Policy::Detect => false,
        }
    }

    /// Adds the waiting tickets queued on nodes overlapping `node` to `into`.
    fn collect_candidates(&self, node: NodeId, into: &mut BTreeSet<TicketId>) {
        self.tree
            .for_each_overlapping(node, Want::QUEUED, |_, n, _: Relation| {
                into.extend(n.queued().iter().map(|q| q.ticket));
            });
    }

    /// See the module contract: DIED for orphaned tickets, then grants in ticket order.
    pub(super) fn after_frees(&mut self) {
        if self.orphaned.is_empty() && self.tickets.is_empty() {
            // No ticket to withdraw or grant (an uncontended release).
            self.touched.append(&mut self.freed);
            return;
        }
        // In ticket order, like every other batch of events about several tickets.
        let mut orphaned = core::mem::take(&mut self.orphaned);
        orphaned.sort_unstable();
        orphaned.dedup();
        for &t in &orphaned {
            if self.tickets.contains_key(&t) {
                self.die_ticket(t, Vec::new());
            }
        }
        // The buffer goes back for the next operation (a DIED withdraws, never orphans).
        orphaned.clear();
        if self.orphaned.is_empty() {
            self.orphaned = orphaned;
        }
        let mut work = BTreeSet::new();
        // With no ticket waiting (the DIEs above may have withdrawn the last) there is nothing
        // to grant: the walks around the freed nodes would find no candidate.
        let mut seen = if self.tickets.is_empty() {
            self.freed.len()
        } else {
            0
        };
        while seen < self.freed.len() {
            self.collect_candidates(self.freed[seen], &mut work);
            seen += 1;
        }
        // Nodes already looked around go to the prune list; only new frees remain in `freed`.
        while let Some(ticket) = work.pop_first() {
            let Some(record) = self.tickets.get(&ticket) else {
                continue;
            };
            let Some(blocker) = self.first_blocker(ticket, record) else {
                self.grant_ticket(ticket);
                continue;
            };
            // The defensive repair of SPEC §6: checked against the first blocker found, and
            // in full only when that one already breaks the policy's waiting order.
            let session = record.session;
            let priority = self.sessions[&session].priority;
            if !self.breaks_wait_order(priority, self.sessions[&blocker].priority) {
                continue;
            }
            self.counters.defensive_repairs += 1;
            self.die_ticket(ticket, Vec::new());
            while seen < self.freed.len() {
                let mut more = BTreeSet::new();
                self.collect_candidates(self.freed[seen], &mut more);
                work.extend(more.into_iter().filter(|&t| t > ticket));
                seen += 1;
            }
        }
        // Moved, not taken: `freed` keeps its buffer for the next operation.
        self.touched.append(&mut self.freed);
    }

    /// Wound-wait: `victim` loses all its tickets, and all its leases when it blocks through a
    /// lease; one WOUNDED event says what it lost.
    pub(super) fn wound(&mut self, victim: SessionId, by: SessionId, lose_leases: bool) {
        let lost_tickets = self.sessions[&victim].tickets.clone();
        for &t in &lost_tickets {
            self.withdraw_ticket(t);
        }
        let mut lost_leases: Vec<LeaseId> = Vec::new();
        if lose_leases {
            lost_leases = self.sessions[&victim].leases.iter().copied().collect();
            lost_leases.sort_unstable();
            for &l in &lost_leases {
                self.end_lease(l, LeaseEnd::Released);
            }
        }
        self.counters.wounded += 1;
        // A wound counts as a DIE of the victim (docs/SPEC.md §8): it draws the jitter and sizes
        // the backoff, so the victim keeps its seniority for the retry.
        let retry_after_ms = self.die_backoff(victim);
        self.events.push_back(Event::Wounded {
            session: victim,
            by,
            lost_leases,
            lost_tickets,
            retry_after_ms,
        });
    }
}
