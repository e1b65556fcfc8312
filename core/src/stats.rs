//! Counters for observability (docs/SPEC.md §10) in bounded memory.
//!
//! Contract: outcome counters are exact. "Top contended resources" and "ghost agents" are kept
//! by the space-saving heavy-hitters algorithm in at most [`TOP_CAPACITY`] entries each, so a
//! stream of distinct names can never grow the kernel: the counts of the top entries are exact
//! while fewer than `TOP_CAPACITY` distinct names were seen, and over-estimate by at most the
//! smallest tracked count otherwise.

use alloc::{string::String, vec::Vec};

/// How many names each heavy-hitters table tracks.
pub const TOP_CAPACITY: usize = 64;

/// Exact counts of every outcome since the kernel was created.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Counters {
    /// Successful `open_session` calls.
    pub sessions_opened: u64,
    /// GRANTED verdicts plus GRANTED events.
    pub granted: u64,
    /// WAIT verdicts.
    pub waited: u64,
    /// DIE verdicts plus DIED events.
    pub died: u64,
    /// WAIT_TIMEOUT events.
    pub timed_out: u64,
    /// LEASE_EXPIRED events.
    pub expired: u64,
    /// WOUNDED events (sessions wounded).
    pub wounded: u64,
    /// Leases that ended released: by `release`, `release_all`, `close_session` or a wound.
    pub released: u64,
    /// Tickets withdrawn by `cancel_wait` (not those withdrawn by a close).
    pub cancelled: u64,
    /// Sessions the kernel closed for idleness (SESSION_CLOSED events).
    pub idle_closed: u64,
    /// Waiters withdrawn with DIED because the policy's waiting order was about to break.
    /// The rules make this impossible; the model checker asserts it stays 0.
    pub defensive_repairs: u64,
}

/// One resource and how often requests for it were blocked (WAIT or DIE verdicts; under
/// `wound_wait` also grants made by wounding the blockers).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Contention {
    /// The namespace the resource was requested in.
    pub namespace: String,
    /// The requested resource, canonical `TYPE:/path`.
    pub resource: String,
    /// How many requested intents on it found a blocker, one per blocked intent of each such
    /// acquire (an upper bound once more than [`TOP_CAPACITY`] resources were seen).
    pub blocked: u64,
}

/// An agent whose leases expired or whose waits timed out ("ghost agents", KLIS-7 §6).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GhostAgent {
    /// The agent id, counted over all its sessions and namespaces.
    pub agent_id: String,
    /// LEASE_EXPIRED events of its sessions.
    pub expired_leases: u64,
    /// WAIT_TIMEOUT events of its sessions.
    pub wait_timeouts: u64,
}

/// Everything [`stats`](crate::Kernel::stats) reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stats {
    /// Exact outcome counts.
    pub counters: Counters,
    /// Sessions open as of the last call.
    pub active_sessions: u64,
    /// Leases active as of the last call (a lease past its expiry counts until a call
    /// settles it).
    pub active_leases: u64,
    /// Tickets waiting as of the last call.
    pub waiting_tickets: u64,
    /// At most [`TOP_CAPACITY`] resources, most blocked first (ties by namespace, then
    /// resource; docs/SPEC.md §13.5).
    pub top_contended: Vec<Contention>,
    /// At most [`TOP_CAPACITY`] agents, most expiries + timeouts first (ties by agent id).
    pub ghost_agents: Vec<GhostAgent>,
}

/// A bounded space-saving table: name → counts.
#[derive(Clone, Debug, Default)]
pub(crate) struct TopTable<K, const N: usize> {
    entries: Vec<(K, [u64; N])>,
}

impl<K: PartialEq + Clone + Ord, const N: usize> TopTable<K, N> {
    /// A table holding `entries` in this order (a restored state; the caller checked them).
    pub(crate) fn from_entries(entries: Vec<(K, [u64; N])>) -> TopTable<K, N> {
        TopTable { entries }
    }

    /// The entries in table order.
    pub(crate) fn entries(&self) -> &[(K, [u64; N])] {
        &self.entries
    }

    /// Adds `amount` to counter `which` of `key`; evicts the smallest entry when full.
    #[cfg(test)]
    pub(crate) fn bump(&mut self, key: &K, which: usize, amount: u64) {
        self.bump_with(|k| k == key, || key.clone(), which, amount);
    }

    /// [`bump`](Self::bump) for the key `is_key` accepts, built by `make` only when the table
    /// takes it as a new entry (a tracked key costs no allocation).
    pub(crate) fn bump_with(
        &mut self,
        is_key: impl Fn(&K) -> bool,
        make: impl FnOnce() -> K,
        which: usize,
        amount: u64,
    ) {
        if let Some(entry) = self.entries.iter_mut().find(|(k, _)| is_key(k)) {
            entry.1[which] += amount;
            return;
        }
        let mut counts = [0; N];
        if self.entries.len() < TOP_CAPACITY {
            counts[which] = amount;
            self.entries.push((make(), counts));
            return;
        }
        // Space-saving: the newcomer inherits the evicted minimum, so its count stays an
        // upper bound on its true count.
        let (index, _) = self
            .entries
            .iter()
            .enumerate()
            // Compared in place: cloning every key to compare would allocate per entry.
            .min_by(|(_, (ka, a)), (_, (kb, b))| {
                (a.iter().sum::<u64>(), ka).cmp(&(b.iter().sum::<u64>(), kb))
            })
            .expect("table is full, so not empty");
        counts = self.entries[index].1;
        counts[which] += amount;
        self.entries[index] = (make(), counts);
    }

    /// Entries by total count, largest first; ties by key.
    pub(crate) fn sorted(&self) -> Vec<(K, [u64; N])> {
        let mut all = self.entries.clone();
        all.sort_by(|(ka, a), (kb, b)| {
            b.iter()
                .sum::<u64>()
                .cmp(&a.iter().sum::<u64>())
                .then_with(|| ka.cmp(kb))
        });
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_bounded_and_keeps_heavy_hitters() {
        let mut t: TopTable<u32, 1> = TopTable::default();
        for _ in 0..1000 {
            t.bump(&7, 0, 1);
        }
        for i in 0..10_000 {
            t.bump(&(100 + i), 0, 1);
        }
        let s = t.sorted();
        assert_eq!(s.len(), TOP_CAPACITY);
        assert_eq!(s[0], (7, [1000]));
    }
}
