//! One ordered index of every pending deadline (docs/SPEC.md §2).
//!
//! Contract: the index holds exactly the pending deadlines (entries are removed when a lease,
//! ticket or idle timer changes), so [`Deadlines::next`] is exact and pure. Entries order by
//! time, then kind (lease expiries, then wait timeouts, then idle closes: the order docs/SPEC.md
//! prescribes within one instant), then id (lease and ticket ids grow with grant and arrival
//! order, so this is "oldest lease first" and "ticket order").

use alloc::collections::BTreeSet;
#[cfg(test)]
use alloc::vec::Vec;

/// What falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DeadlineKind {
    LeaseExpiry = 0,
    WaitTimeout = 1,
    IdleClose = 2,
}

impl DeadlineKind {
    const ALL: [DeadlineKind; 3] = [
        DeadlineKind::LeaseExpiry,
        DeadlineKind::WaitTimeout,
        DeadlineKind::IdleClose,
    ];
}

/// The kind sits in the top two bits of the second key half, above the id, so the index
/// orders by (time, kind, id) in 16 bytes an entry. Ids come from counters starting at 1 and
/// stay far below 2^62.
const KIND_SHIFT: u32 = 62;

fn pack(kind: DeadlineKind, id: u64) -> u64 {
    debug_assert!(id < 1 << KIND_SHIFT, "id {id} fits below the kind bits");
    (kind as u64) << KIND_SHIFT | id
}

fn unpack(key: u64) -> (DeadlineKind, u64) {
    let kind = DeadlineKind::ALL[(key >> KIND_SHIFT) as usize];
    (kind, key & ((1 << KIND_SHIFT) - 1))
}

/// The deadline that means "never" (docs/SPEC.md §2: deadline arithmetic saturates, and a
/// saturated deadline is not indexed, not reported and never settled).
pub(crate) const NEVER: u64 = u64::MAX;

#[derive(Clone, Default)]
pub(crate) struct Deadlines {
    entries: BTreeSet<(u64, u64)>,
}

impl Deadlines {
    /// Indexes a deadline; [`NEVER`] is not indexed.
    pub fn insert(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        if at != NEVER {
            self.entries.insert((at, pack(kind, id)));
        }
    }

    /// Removes an indexed deadline ([`NEVER`] was never indexed).
    pub fn remove(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        if at == NEVER {
            return;
        }
        let removed = self.entries.remove(&(at, pack(kind, id)));
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
        self.entries.first().map(|&(at, _)| at)
    }

    /// The earliest entry if it is due at or before `now` (it stays indexed: whoever handles
    /// it removes it as part of changing the state it describes).
    pub fn peek_due(&self, now: u64) -> Option<(u64, DeadlineKind, u64)> {
        let &(at, key) = self.entries.first()?;
        (at <= now).then(|| {
            let (kind, id) = unpack(key);
            (at, kind, id)
        })
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
}
