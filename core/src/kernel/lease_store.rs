//! The active lease records, by lease id.
//!
//! Contract: a map from [`LeaseId`] to record (`get`, `get_mut`, `insert`, `remove`, `len`,
//! `iter` in no particular order). Lease ids are issued by one increasing counter, and most
//! leases end soon after they are granted (an agent's acquire, work, release), so the records
//! of the [`RECENT`] newest ids live in a ring indexed by id, and only a lease still active
//! when [`RECENT`] newer ids have been issued moves, once, into a hash map. An acquire and
//! release pair then touches the ring's next slot, a few cache lines that stay warm, however
//! many long-lived leases the map holds (issue 15: a fresh id's random bucket in a map of
//! 100,000 leases was a cache miss on every grant). Any id may be inserted: one older than the
//! ring's window goes to the map.

use super::{LeaseRecord, Map};
use crate::types::LeaseId;
use alloc::vec::Vec;

/// How many of the newest lease ids the ring covers (a power of two): 1,024 records of
/// 40 bytes, small enough to stay in cache, and a lease granted then released within 1,024
/// grants never reaches the map.
pub(super) const RECENT: u64 = 1024;

#[derive(Clone, Default)]
pub(super) struct LeaseStore {
    /// The ids `window..window + RECENT` live here, id `i` at slot `i % RECENT` (the ring
    /// grows to [`RECENT`] slots as ids are issued, so a kernel that granted little is small).
    ring: Vec<Option<LeaseRecord>>,
    /// The first id the ring covers.
    window: u64,
    /// Active leases older than the window.
    older: Map<LeaseId, LeaseRecord>,
    /// Active leases in the ring.
    in_ring: usize,
}

fn slot(id: LeaseId) -> usize {
    (id.0 % RECENT) as usize
}

impl LeaseStore {
    fn in_window(&self, id: LeaseId) -> bool {
        id.0 >= self.window && id.0 - self.window < RECENT
    }

    pub fn len(&self) -> usize {
        self.in_ring + self.older.len()
    }

    pub fn get(&self, id: &LeaseId) -> Option<&LeaseRecord> {
        match self.in_window(*id) {
            true => self.ring.get(slot(*id))?.as_ref(),
            false => self.older.get(id),
        }
    }

    pub fn get_mut(&mut self, id: &LeaseId) -> Option<&mut LeaseRecord> {
        match self.in_window(*id) {
            true => self.ring.get_mut(slot(*id))?.as_mut(),
            false => self.older.get_mut(id),
        }
    }

    /// Stores the record of `id`, which is not active.
    pub fn insert(&mut self, id: LeaseId, record: LeaseRecord) {
        if id.0 < self.window {
            self.older.insert(id, record);
            return;
        }
        if id.0 - self.window >= RECENT {
            self.advance(id.0 + 1 - RECENT);
        }
        let at = slot(id);
        if self.ring.len() <= at {
            self.ring.resize(at + 1, None);
        }
        debug_assert!(self.ring[at].is_none(), "lease {id} inserted twice");
        self.ring[at] = Some(record);
        self.in_ring += 1;
    }

    /// Moves the window to start at `window`, the records of the ids it leaves to the map.
    fn advance(&mut self, window: u64) {
        let leaving = self.window..window.min(self.window + RECENT);
        for id in leaving.map(LeaseId) {
            if let Some(record) = self.ring.get_mut(slot(id)).and_then(Option::take) {
                self.in_ring -= 1;
                self.older.insert(id, record);
            }
        }
        self.window = window;
    }

    pub fn remove(&mut self, id: &LeaseId) -> Option<LeaseRecord> {
        if !self.in_window(*id) {
            return self.older.remove(id);
        }
        let record = self.ring.get_mut(slot(*id))?.take()?;
        self.in_ring -= 1;
        Some(record)
    }

    /// Every active lease, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (LeaseId, &LeaseRecord)> {
        let window = self.window;
        let ring = self
            .ring
            .iter()
            .enumerate()
            .filter_map(move |(at, record)| {
                // The one id of the window that lands on slot `at`.
                let offset = (at as u64).wrapping_sub(window) % RECENT;
                Some((LeaseId(window + offset), record.as_ref()?))
            });
        ring.chain(self.older.iter().map(|(&id, record)| (id, record)))
    }
}

impl core::ops::Index<&LeaseId> for LeaseStore {
    type Output = LeaseRecord;

    fn index(&self, id: &LeaseId) -> &LeaseRecord {
        self.get(id).expect("active lease")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predicate::Predicate;
    use crate::types::SessionId;

    fn record(ttl_ms: u64) -> LeaseRecord {
        LeaseRecord {
            session: SessionId(1),
            node: 0,
            predicate: Predicate::Mutates,
            has_grace: false,
            acquired_at: 0,
            expires_at: ttl_ms,
            ttl_ms,
        }
    }

    fn ids(store: &LeaseStore) -> Vec<u64> {
        let mut ids: Vec<u64> = store.iter().map(|(id, _)| id.0).collect();
        ids.sort_unstable();
        ids
    }

    /// Against a plain map: long-lived leases that fall out of the window, short-lived ones
    /// that never leave it, jumps of more than a window, and ids older than the window.
    #[test]
    fn behaves_as_a_map_across_the_window() {
        let mut store = LeaseStore::default();
        let mut model: Map<LeaseId, u64> = Map::default();
        let mut next = 1u64;
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..20_000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            match rng % 10 {
                // Mostly grants, some of them after a jump in ids (an imported state).
                0..=5 => {
                    next += if rng % 97 == 0 { 3 * RECENT } else { 1 };
                    let id = LeaseId(next);
                    store.insert(id, record(step));
                    model.insert(id, step);
                }
                // Ends of a recent lease or of any lease.
                6..=8 => {
                    let back = if rng % 3 == 0 { rng % next } else { rng % 8 };
                    let id = LeaseId(next.saturating_sub(back));
                    assert_eq!(
                        store.remove(&id).map(|r| r.ttl_ms),
                        model.remove(&id),
                        "remove {id}"
                    );
                }
                _ => {
                    let id = LeaseId(rng % (next + 1));
                    if let Some(r) = store.get_mut(&id) {
                        r.ttl_ms += 1;
                        *model.get_mut(&id).expect("in the model too") += 1;
                    }
                    assert_eq!(store.get(&id).map(|r| r.ttl_ms), model.get(&id).copied());
                }
            }
            assert_eq!(store.len(), model.len());
        }
        let mut expected: Vec<u64> = model.keys().map(|id| id.0).collect();
        expected.sort_unstable();
        assert_eq!(ids(&store), expected);
        assert!(
            !store.older.is_empty() && store.in_ring > 0,
            "the run used both the ring and the map"
        );
    }

    #[test]
    fn an_id_older_than_the_window_goes_to_the_map() {
        let mut store = LeaseStore::default();
        store.insert(LeaseId(5 * RECENT), record(1));
        store.insert(LeaseId(7), record(2));
        assert_eq!(store[&LeaseId(7)].ttl_ms, 2);
        assert_eq!(store.older.len(), 1);
        assert_eq!(ids(&store), [7, 5 * RECENT]);
        assert_eq!(store.remove(&LeaseId(7)).map(|r| r.ttl_ms), Some(2));
        assert!(store.get(&LeaseId(7)).is_none());
        assert_eq!(store.len(), 1);
    }
}
