//! One ordered index of every pending deadline (SPEC.md §2).
//!
//! Contract: the index holds exactly the pending deadlines (entries are removed when a lease,
//! ticket or idle timer changes), so [`Deadlines::next`] is exact and pure. Entries order by
//! time, then kind (lease expiries, then wait timeouts, then idle closes: the order SPEC.md
//! prescribes within one instant), then id (lease and ticket ids grow with grant and arrival
//! order, so this is "oldest lease first" and "ticket order").

use alloc::collections::BTreeSet;

/// What falls due.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DeadlineKind {
    LeaseExpiry = 0,
    WaitTimeout = 1,
    IdleClose = 2,
}

#[derive(Clone, Default)]
pub(crate) struct Deadlines {
    entries: BTreeSet<(u64, DeadlineKind, u64)>,
}

impl Deadlines {
    pub fn insert(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        self.entries.insert((at, kind, id));
    }

    pub fn remove(&mut self, at: u64, kind: DeadlineKind, id: u64) {
        let removed = self.entries.remove(&(at, kind, id));
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
        self.entries.first().map(|&(at, _, _)| at)
    }

    /// The earliest entry if it is due at or before `now` (it stays indexed: whoever handles
    /// it removes it as part of changing the state it describes).
    pub fn peek_due(&self, now: u64) -> Option<(u64, DeadlineKind, u64)> {
        self.entries
            .first()
            .copied()
            .filter(|&(at, _, _)| at <= now)
    }
}
