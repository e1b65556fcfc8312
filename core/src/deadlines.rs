//! One ordered index of every pending deadline (docs/SPEC.md §2).
//!
//! Contract: the index holds exactly the pending deadlines (entries are removed when a lease,
//! ticket or idle timer changes), so [`Deadlines::next`] is exact and pure. Entries order by
//! time, then kind (lease expiries, then wait timeouts, then idle closes: the order docs/SPEC.md
//! prescribes within one instant), then id (lease and ticket ids grow with grant and arrival
//! order, so this is "oldest lease first" and "ticket order").
//!
//! Each kind has its own ordered lane, and the index answers from the earliest of their
//! first entries. Kept apart, an idle session's close (due in minutes) does not sort in among
//! every lease's expiry: a session that goes idle and busy again with each acquire and
//! release (the common agent loop) touches only the idle lane, whose size is the number of
//! idle sessions, not the number of leases (issue 15).
//!
//! In each lane the newest entries, when they sort after every other, wait in a short sorted
//! tail before joining the tree: a new lease's expiry usually lands at the tree's right end,
//! where its node search (linear within each node) costs most, and a lease released before it
//! expires (the common case) then comes and goes without touching the tree.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

/// What falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DeadlineKind {
    LeaseExpiry = 0,
    WaitTimeout = 1,
    IdleClose = 2,
}

impl DeadlineKind {
    /// In the order the kinds fall due within one instant.
    const ALL: [DeadlineKind; 3] = [
        DeadlineKind::LeaseExpiry,
        DeadlineKind::WaitTimeout,
        DeadlineKind::IdleClose,
    ];
}

/// The deadline that means "never" (docs/SPEC.md §2: deadline arithmetic saturates, and a
/// saturated deadline is not indexed, not reported and never settled).
pub(crate) const NEVER: u64 = u64::MAX;

/// How many entries a lane's tail holds before its oldest joins the tree.
const TAIL: usize = 32;

/// The pending deadlines of one kind, ordered by `(time, id)`.
/// Also the friendly clients' heartbeat schedule (`crate::client::Ledger`).
#[derive(Clone, Default)]
pub(crate) struct Lane {
    /// Every entry not in `tail`.
    entries: BTreeSet<(u64, u64)>,
    /// Ascending, each after every entry of `entries`; at most [`TAIL`].
    tail: Vec<(u64, u64)>,
    /// The earliest entry of the lane. Kept, because every operation asks for it (to settle)
    /// and a tree finds its first entry by walking down its whole height.
    pub(crate) first: Option<(u64, u64)>,
}

impl Lane {
    pub(crate) fn insert(&mut self, entry: (u64, u64)) {
        if self.first.is_none_or(|first| entry < first) {
            self.first = Some(entry);
        }
        // Before the tail's first entry (or, with no tail, the tree's last) it joins the tree;
        // either way every tree entry stays before every tail entry.
        let into_tree = match self.tail.first() {
            Some(first) => entry < *first,
            None => self.entries.last().is_some_and(|last| entry < *last),
        };
        if into_tree {
            self.entries.insert(entry);
            return;
        }
        // Usually the newest deadline of all: appended without a search.
        match self.tail.last() {
            Some(last) if entry < *last => {
                let at = self.tail.partition_point(|e| *e < entry);
                self.tail.insert(at, entry);
            }
            _ => self.tail.push(entry),
        }
        if self.tail.len() > TAIL {
            self.entries.insert(self.tail.remove(0));
        }
    }

    pub(crate) fn remove(&mut self, entry: (u64, u64)) -> bool {
        let removed = match self.tail.first() {
            // Usually the newest (a lease released before any later grant): no search.
            Some(_) if self.tail.last() == Some(&entry) => {
                self.tail.pop();
                true
            }
            Some(first) if entry >= *first => match self.tail.binary_search(&entry) {
                Ok(i) => {
                    self.tail.remove(i);
                    true
                }
                Err(_) => false,
            },
            _ => self.entries.remove(&entry),
        };
        if removed && self.first == Some(entry) {
            self.first = self.entries.first().or(self.tail.first()).copied();
        }
        removed
    }
}

#[derive(Clone, Default)]
pub(crate) struct Deadlines {
    /// One lane per kind, in [`DeadlineKind::ALL`] order.
    lanes: [Lane; 3],
}

impl Deadlines {
    /// Indexes a deadline; [`NEVER`] is not indexed.
    pub fn insert(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        if at != NEVER {
            self.lanes[kind as usize].insert((at, id));
        }
    }

    /// Removes an indexed deadline ([`NEVER`] was never indexed).
    pub fn remove(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        if at == NEVER {
            return;
        }
        let removed = self.lanes[kind as usize].remove((at, id));
        debug_assert!(removed, "deadline ({at}, {kind:?}, {id}) was indexed");
    }

    /// Moves an entry from `old` to `new` (no-op when equal).
    pub fn reschedule(&mut self, old: u64, new: u64, kind: DeadlineKind, id: u64) {
        if old != new {
            self.remove(old, kind, id);
            self.insert(new, kind, id);
        }
    }

    /// The earliest pending deadline.
    pub fn next(&self) -> Option<u64> {
        self.first().map(|(at, _, _)| at)
    }

    /// The earliest entry by `(time, kind, id)`: the lanes' first entries, a tie in time going
    /// to the kind that falls due first.
    fn first(&self) -> Option<(u64, DeadlineKind, u64)> {
        let mut earliest: Option<(u64, DeadlineKind, u64)> = None;
        for (lane, kind) in self.lanes.iter().zip(DeadlineKind::ALL) {
            if let Some((at, id)) = lane.first {
                if earliest.is_none_or(|(t, _, _)| at < t) {
                    earliest = Some((at, kind, id));
                }
            }
        }
        earliest
    }

    /// The earliest entry if it is due at or before `now` (it stays indexed: whoever handles
    /// it removes it as part of changing the state it describes).
    pub fn peek_due(&self, now: u64) -> Option<(u64, DeadlineKind, u64)> {
        self.first().filter(|&(at, _, _)| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_time_then_kind_then_id() {
        let mut d = Deadlines::default();
        d.insert(5, DeadlineKind::IdleClose, 1);
        d.insert(5, DeadlineKind::WaitTimeout, 9);
        d.insert(5, DeadlineKind::LeaseExpiry, 7);
        d.insert(5, DeadlineKind::LeaseExpiry, 3);
        d.insert(4, DeadlineKind::IdleClose, 2);
        let mut seen = Vec::new();
        while let Some((at, kind, id)) = d.peek_due(u64::MAX) {
            d.remove(at, kind, id);
            seen.push((at, kind, id));
        }
        use DeadlineKind::*;
        assert_eq!(
            seen,
            [
                (4, IdleClose, 2),
                (5, LeaseExpiry, 3),
                (5, LeaseExpiry, 7),
                (5, WaitTimeout, 9),
                (5, IdleClose, 1)
            ]
        );
        assert_eq!(d.next(), None);
    }

    /// Against one ordered set of `(time, kind, id)`: random inserts (mostly ascending per
    /// kind, as leases and idle timers arrive, some earlier) and removals of random entries,
    /// the earliest entry checked after every step.
    #[test]
    fn agrees_with_one_ordered_set() {
        let mut d = Deadlines::default();
        let mut model: BTreeSet<(u64, DeadlineKind, u64)> = BTreeSet::new();
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next_id = 1;
        for step in 0..50_000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let kind = DeadlineKind::ALL[(rng % 3) as usize];
            if rng % 5 < 3 || model.is_empty() {
                let at = match rng % 4 {
                    0 => (rng >> 8) % (step + 10),
                    _ => step + (rng >> 8) % 50,
                };
                d.insert(at, kind, next_id);
                model.insert((at, kind, next_id));
                next_id += 1;
            } else {
                let nth = (rng >> 8) as usize % model.len();
                let entry = *model.iter().nth(nth).expect("in range");
                model.remove(&entry);
                d.remove(entry.0, entry.1, entry.2);
            }
            assert_eq!(d.first(), model.first().copied(), "step {step}");
        }
    }

    #[test]
    fn the_tail_keeps_the_order_whatever_the_insertion_order() {
        let mut d = Deadlines::default();
        let mut expected = Vec::new();
        // Ascending runs (into the tail, spilling into the tree), then earlier ones (into the
        // tree), then removals from both.
        for i in 0..100u64 {
            let at = 1_000 + (i % 40) * 10 + i / 40;
            d.insert(at, DeadlineKind::LeaseExpiry, i + 1);
            expected.push((at, DeadlineKind::LeaseExpiry, i + 1));
        }
        for i in (0..100u64).step_by(3) {
            let at = 1_000 + (i % 40) * 10 + i / 40;
            d.remove(at, DeadlineKind::LeaseExpiry, i + 1);
            expected.retain(|e| *e != (at, DeadlineKind::LeaseExpiry, i + 1));
        }
        d.insert(5, DeadlineKind::IdleClose, 7);
        expected.push((5, DeadlineKind::IdleClose, 7));
        d.reschedule(5, 2_000, DeadlineKind::IdleClose, 7);
        expected.retain(|e| e.0 != 5);
        expected.push((2_000, DeadlineKind::IdleClose, 7));
        expected.sort();
        assert_eq!(d.next(), Some(expected[0].0));
        let mut seen = Vec::new();
        while let Some((at, kind, id)) = d.peek_due(u64::MAX) {
            d.remove(at, kind, id);
            seen.push((at, kind, id));
        }
        assert_eq!(seen, expected);
    }
}
