//! The friendly clients' ledger: which lease blocks hold which leases, and when each block's
//! next heartbeat is due.
//!
//! A friendly client (Python's `with session.lease(...)`, Node's `withLease`) wraps kernel
//! calls in blocks. Blocks of one session may nest and ask again for a lease an outer block
//! holds: the kernel reuses the lease (docs/SPEC.md §6), so the client must release it only
//! when the last block holding it ends, route a lost lease (expired, wounded, session closed)
//! to every block holding it, and renew each held block a third of the way through its
//! leases' TTL. Those are lease and time rules, so they live here, in the core; the hosts
//! translate. (The Python client uses this ledger through `bindings/python/src/block.rs`, the
//! Node client through the addon's `Ledger`, `bindings/node/src/ledger.rs`.)
//!
//! Contract:
//! - A block is registered by [`Ledger::grant`] and leaves by [`Ledger::finish`]; between the
//!   two it is *held*. [`Ledger::releasable`] names the leases no other held block of the
//!   session holds: the ones the host releases in the kernel when the block ends.
//! - [`Ledger::lose`] forgets a lease (it ended in the kernel): every block holding it is
//!   reported, keeps its other leases and is no longer scheduled for heartbeats.
//! - A held block is scheduled for at most one heartbeat: at its grant, for the earliest
//!   [`HeldLease::renew_at`] of its leases (never, if none expires); then wherever the host
//!   [`Ledger::schedule`]s it after each heartbeat. A lost lease unschedules its blocks.
//!   [`Ledger::pop_due`] hands the host the due ones, moving a block renewed meanwhile to its
//!   new time instead.
//! - The ledger never reads a clock and never calls the kernel: every time is the host's
//!   `now`, every answer says what the host must do.
//! - Each held block carries the host's handle for it (`H`: the host's block object, or what
//!   the host keeps per block), so a host needs no block table of its own (Python keeps none;
//!   Node keeps a `Map` by block id, cheaper than a napi reference per block).

use crate::deadlines::Lane;
use crate::kernel::Map;
use crate::types::{Lease, LeaseId, SessionId};
use alloc::vec::Vec;
use smallvec::SmallVec;

/// A lease block of a friendly client, named by the host (unique among its held blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u64);

/// When a lease with this expiry and TTL should be renewed: a third of the way through its
/// TTL (`expires_at - 2*ttl_ms/3`), so two more renewals can fail before it expires. A lease
/// that never expires (`u64::MAX`) is never due.
pub fn renew_at(expires_at: u64, ttl_ms: u64) -> u64 {
    if expires_at == u64::MAX {
        return u64::MAX;
    }
    let two_thirds = (u128::from(ttl_ms) * 2 / 3) as u64;
    expires_at.saturating_sub(two_thirds)
}

/// One lease as a block holds it, with when it needs renewing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLease {
    /// The kernel's figures at the grant, updated by every renewal and re-acquire.
    pub lease: Lease,
    /// When this lease needs its next heartbeat.
    pub renew_at: u64,
}

#[derive(Clone, Debug)]
struct Holding {
    session: SessionId,
    blocks: SmallVec<[BlockId; 1]>,
}

#[derive(Clone, Debug)]
struct Block<H> {
    /// The host's handle for the block.
    handle: H,
    session: SessionId,
    leases: SmallVec<[HeldLease; 1]>,
    /// When its heartbeat is scheduled (`None`: not scheduled: lost, or not renewable).
    scheduled: Option<u64>,
}

/// The ledger of one friendly client (see the module docs); `H` is the host's handle of a
/// held block.
#[derive(Clone)]
pub struct Ledger<H = ()> {
    blocks: Map<BlockId, Block<H>>,
    /// The held blocks of each lease, oldest first, and its session.
    holders: Map<LeaseId, Holding>,
    /// How many leases (held by a block, not ended) each session holds.
    held_per_session: Map<SessionId, usize>,
    heartbeats: Lane,
}

impl<H> Default for Ledger<H> {
    fn default() -> Ledger<H> {
        Ledger {
            blocks: Map::default(),
            holders: Map::default(),
            held_per_session: Map::default(),
            heartbeats: Lane::default(),
        }
    }
}

impl<H> Ledger<H> {
    /// An empty ledger.
    pub fn new() -> Ledger<H> {
        Ledger::default()
    }

    /// The kernel granted `block` (whose host handle is `handle`) of `session` these leases
    /// at `now` (some may be leases an
    /// outer block of the session holds: reused and renewed, so those blocks follow the new
    /// figures). `renew` is the host's due time per lease (a remote client measures its own
    /// deadlines), or `None` for [`renew_at`] of the kernel's figures. The block is held
    /// and scheduled for its first heartbeat no earlier than `now`; returns that time.
    pub fn grant(
        &mut self,
        block: BlockId,
        handle: H,
        session: SessionId,
        leases: impl IntoIterator<Item = Lease>,
        renew: Option<&[u64]>,
        now: u64,
    ) -> u64 {
        let mut held: SmallVec<[HeldLease; 1]> = SmallVec::new();
        for (i, lease) in leases.into_iter().enumerate() {
            let due = match renew.and_then(|r| r.get(i)) {
                Some(&due) => due,
                None => renew_at(lease.expires_at, lease.ttl_ms),
            };
            held.push(HeldLease {
                lease,
                renew_at: due,
            });
        }
        let mut new_leases = 0;
        for h in &held {
            let id = h.lease.lease_id;
            match self.holders.get_mut(&id) {
                None => {
                    new_leases += 1;
                    self.holders.insert(
                        id,
                        Holding {
                            session,
                            blocks: SmallVec::from_elem(block, 1),
                        },
                    );
                }
                Some(Holding { blocks: others, .. }) => {
                    for other in others.iter() {
                        if let Some(b) = self.blocks.get_mut(other) {
                            for mine in b.leases.iter_mut().filter(|m| m.lease.lease_id == id) {
                                *mine = h.clone();
                            }
                        }
                    }
                    others.push(block);
                }
            }
        }
        if new_leases > 0 {
            *self.held_per_session.entry(session).or_default() += new_leases;
        }
        let due = held
            .iter()
            .map(|h| h.renew_at)
            .min()
            .unwrap_or(u64::MAX)
            .max(now);
        self.blocks.insert(
            block,
            Block {
                handle,
                session,
                leases: held,
                scheduled: None,
            },
        );
        self.schedule(block, due);
        due
    }

    /// The host's handle of the held `block`.
    pub fn handle(&self, block: BlockId) -> Option<&H> {
        self.blocks.get(&block).map(|b| &b.handle)
    }

    /// The host's handles of every held block, in no order.
    pub fn handles(&self) -> impl Iterator<Item = &H> {
        self.blocks.values().map(|b| &b.handle)
    }

    /// Whether `block` is held (granted and not finished).
    pub fn is_held(&self, block: BlockId) -> bool {
        self.blocks.contains_key(&block)
    }

    /// The leases `block` holds, as last reported (lost ones included, until it finishes).
    pub fn leases(&self, block: BlockId) -> &[HeldLease] {
        self.blocks.get(&block).map_or(&[], |b| &b.leases)
    }

    /// The leases of `block` that no other held block holds and that did not end (were not
    /// [`Ledger::lose`]n): the ones to release in the kernel when it ends.
    pub fn releasable(&self, block: BlockId) -> SmallVec<[LeaseId; 1]> {
        let mut out = SmallVec::new();
        for h in self.leases(block) {
            let id = h.lease.lease_id;
            if matches!(self.holders.get(&id), Some(h) if h.blocks.as_slice() == [block]) {
                out.push(id);
            }
        }
        out
    }

    /// `block` ended: it leaves the ledger (unscheduled, no longer a holder), and its handle
    /// and its leases, as last reported, are returned (`None`: it was not held).
    pub fn finish(&mut self, block: BlockId) -> Option<(H, SmallVec<[HeldLease; 1]>)> {
        let b = self.blocks.remove(&block)?;
        if let Some(at) = b.scheduled {
            self.heartbeats.remove((at, block.0));
        }
        let mut ended = 0;
        for h in &b.leases {
            let id = h.lease.lease_id;
            if let Some(holding) = self.holders.get_mut(&id) {
                holding.blocks.retain(|x| *x != block);
                if holding.blocks.is_empty() {
                    self.holders.remove(&id);
                    ended += 1;
                }
            }
        }
        self.forget_held(b.session, ended);
        Some((b.handle, b.leases))
    }

    /// The lease ended in the kernel (expired, released, wounded, its session closed): it is
    /// forgotten, and the held blocks that held it are returned (each keeps its other leases
    /// and is no longer scheduled: a block with a lost lease is not renewed).
    pub fn lose(&mut self, lease: LeaseId) -> SmallVec<[BlockId; 1]> {
        let Some(Holding { session, blocks }) = self.holders.remove(&lease) else {
            return SmallVec::new();
        };
        self.forget_held(session, 1);
        for block in &blocks {
            self.unschedule(*block);
        }
        blocks
    }

    /// `count` leases of `session` are no longer held.
    fn forget_held(&mut self, session: SessionId, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(held) = self.held_per_session.get_mut(&session) {
            *held -= count;
            if *held == 0 {
                self.held_per_session.remove(&session);
            }
        }
    }

    /// The leases held by blocks of `session`, ascending. (Walks every held lease: for the
    /// rare end of a session, not for the hot path.)
    pub fn session_leases(&self, session: SessionId) -> Vec<LeaseId> {
        if !self.holds_leases(session) {
            return Vec::new();
        }
        let mut ids: Vec<LeaseId> = self
            .holders
            .iter()
            .filter(|(_, h)| h.session == session)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether a held block of `session` holds a lease that did not end.
    pub fn holds_leases(&self, session: SessionId) -> bool {
        self.held_per_session.contains_key(&session)
    }

    /// A lease was renewed (heartbeat, resume): every held block holding it sees the new
    /// expiry (and TTL, when given; a heartbeat keeps it), and renews it at `renew` (`None`:
    /// [`renew_at`] of them).
    pub fn renewed(
        &mut self,
        lease: LeaseId,
        expires_at: u64,
        ttl_ms: Option<u64>,
        renew: Option<u64>,
    ) {
        let Some(Holding { blocks, .. }) = self.holders.get(&lease) else {
            return;
        };
        for block in blocks {
            if let Some(b) = self.blocks.get_mut(block) {
                for h in b.leases.iter_mut().filter(|h| h.lease.lease_id == lease) {
                    h.lease.expires_at = expires_at;
                    if let Some(ttl) = ttl_ms {
                        h.lease.ttl_ms = ttl;
                    }
                    h.renew_at = renew.unwrap_or_else(|| renew_at(expires_at, h.lease.ttl_ms));
                }
            }
        }
    }

    /// When `block` needs its next heartbeat: the earliest [`HeldLease::renew_at`] of its
    /// leases that did not end (`u64::MAX`: none).
    pub fn renew_due(&self, block: BlockId) -> u64 {
        self.blocks.get(&block).map_or(u64::MAX, |b| {
            b.leases
                .iter()
                .filter(|h| self.holders.contains_key(&h.lease.lease_id))
                .map(|h| h.renew_at)
                .min()
                .unwrap_or(u64::MAX)
        })
    }

    /// Schedules the held `block`'s heartbeat at `at` (moving one already scheduled).
    pub fn schedule(&mut self, block: BlockId, at: u64) {
        let Some(b) = self.blocks.get_mut(&block) else {
            return;
        };
        if let Some(old) = b.scheduled.take() {
            self.heartbeats.remove((old, block.0));
        }
        if at != u64::MAX {
            b.scheduled = Some(at);
            self.heartbeats.insert((at, block.0));
        }
    }

    /// Takes `block` off the heartbeat schedule.
    pub fn unschedule(&mut self, block: BlockId) {
        if let Some(b) = self.blocks.get_mut(&block) {
            if let Some(at) = b.scheduled.take() {
                self.heartbeats.remove((at, block.0));
            }
        }
    }

    /// Whether `block` has a heartbeat scheduled.
    pub fn is_scheduled(&self, block: BlockId) -> bool {
        self.blocks
            .get(&block)
            .is_some_and(|b| b.scheduled.is_some())
    }

    /// Every block with a heartbeat scheduled, ascending.
    pub fn scheduled_blocks(&self) -> Vec<BlockId> {
        let mut out: Vec<BlockId> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.scheduled.is_some())
            .map(|(id, _)| *id)
            .collect();
        out.sort_unstable();
        out
    }

    /// The earliest scheduled heartbeat.
    pub fn next_heartbeat(&self) -> Option<u64> {
        self.heartbeats.first.map(|(at, _)| at)
    }

    /// The next block whose heartbeat is due at `now`, taken off the schedule, with its
    /// session and the leases to renew (those that did not end); the host renews them and
    /// calls [`Ledger::renewed`] / [`Ledger::lose`] with the answers, then
    /// [`Ledger::schedule`]s the block again. A block whose leases were renewed meanwhile (a
    /// nested block's re-acquire, a heartbeat of a lease it shares) is moved to its new time
    /// instead of being returned.
    pub fn pop_due(&mut self, now: u64) -> Option<(BlockId, SessionId, Vec<LeaseId>)> {
        while let Some((at, id)) = self.heartbeats.first.filter(|&(at, _)| at <= now) {
            let block = BlockId(id);
            self.heartbeats.remove((at, id));
            let due = self.renew_due(block);
            let Some(b) = self.blocks.get_mut(&block) else {
                continue;
            };
            b.scheduled = None;
            if due > now {
                self.schedule(block, due);
                continue;
            }
            let b = &self.blocks[&block];
            let ids = b
                .leases
                .iter()
                .map(|h| h.lease.lease_id)
                .filter(|id| self.holders.contains_key(id))
                .collect();
            return Some((block, b.session, ids));
        }
        None
    }
}

#[cfg(test)]
mod tests;
