//! The log's recent entries, kept decoded in memory: readable from the moment they are
//! appended, before the log's writer made them durable, and without decoding them again.
//!
//! openraft asks the log store to make appended entries readable at once and to report them
//! durable later (so its core never waits for a disk), and it reads back what it appended: the
//! leader once per follower to replicate it, and every node once more to apply it. The file
//! log answers a read by decoding its records again, which was the largest share of a
//! cluster's work per command. Entries are read soon after they are appended, so the newest
//! are kept here.
//!
//! Contract: [`Recent`] keeps a contiguous run of the newest entries the log store accepted
//! ([`Recent::keep`]), and [`Recent::get`] answers a range wholly inside it. Entries not yet
//! written ([`Recent::written`] moves the mark) are always kept: until then they are nowhere
//! else. The written ones are kept within a number of entries and a budget of their
//! [`Weigh::weight`] ([`Recent::ENTRIES`], [`Recent::BYTES`] by default): the oldest make room.
//! [`Recent::truncated`] and [`Recent::purged`] follow the log's truncation and purge.

use crate::types::RaftEntry;
use klock_server::machine::{Call, Entry};
use openraft::EntryPayload;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// An estimate of the memory an entry holds (its heap data and a fixed part).
pub trait Weigh {
    fn weight(&self) -> usize;
}

/// The newest entries of a log (module contract).
pub struct Recent<E> {
    kept: Mutex<Kept<E>>,
    /// At most this many written entries are kept.
    most_entries: usize,
    /// At most this much of the written entries' weight is kept.
    most_bytes: usize,
}

/// `entries[k]` is entry `first + k`; together they weigh `bytes`; every entry up to
/// `written` is durable in the log.
struct Kept<E> {
    first: u64,
    entries: VecDeque<(E, usize)>,
    bytes: usize,
    written: u64,
}

impl<E> Kept<E> {
    /// The index after the last kept entry.
    fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    fn restart_at(&mut self, first: u64) {
        self.entries.clear();
        self.bytes = 0;
        self.first = first;
    }

    fn pop_front(&mut self) {
        if let Some((_, weight)) = self.entries.pop_front() {
            self.bytes -= weight;
            self.first += 1;
        }
    }
}

impl<E: Clone + Weigh> Default for Recent<E> {
    /// Nothing kept yet, within [`Recent::ENTRIES`] and [`Recent::BYTES`].
    fn default() -> Recent<E> {
        Recent::with_bounds(Recent::<E>::ENTRIES, Recent::<E>::BYTES)
    }
}

impl<E: Clone + Weigh> Recent<E> {
    /// At most this many written entries are kept by default: the operations of about 320
    /// batch requests of 100. A leader replicates from here to a follower that lags: under 64
    /// clients' batches the slower follower fell more than 8,192 entries behind (its commit
    /// needs only the other), and the leader then read and decoded its entries from the file
    /// (8.6% of the leader's CPU in a profile; docs/DECISIONS.md, "Issue 24: the cluster's
    /// entries encoded once").
    pub const ENTRIES: usize = 32_768;
    /// At most this much of their weight is kept by default. An acquire's entry and its JSON
    /// weigh about 700 bytes, so entries of one operation reach the count first (32,768
    /// operations), and a batch request's entry (up to 1,000 operations) reaches this first
    /// (some tens of thousands of operations, by the weight of each).
    pub const BYTES: usize = 32 << 20;

    /// Nothing kept yet, within `most_entries` written entries and `most_bytes` of their weight.
    pub fn with_bounds(most_entries: usize, most_bytes: usize) -> Recent<E> {
        Recent {
            kept: Mutex::new(Kept {
                first: 1,
                entries: VecDeque::new(),
                bytes: 0,
                written: 0,
            }),
            most_entries,
            most_bytes,
        }
    }

    fn kept(&self) -> MutexGuard<'_, Kept<E>> {
        // Every change below leaves the kept entries whole: a panic elsewhere cannot tear them.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `entries` (dense, in order), accepted by the log store but perhaps not written
    /// yet. Entries that do not follow the kept ones start the run again.
    pub fn keep(&self, entries: &[(u64, E)]) {
        let mut kept = self.kept();
        for (index, entry) in entries {
            if kept.end() != *index {
                kept.restart_at(*index);
            }
            let weight = entry.weight();
            kept.entries.push_back((entry.clone(), weight));
            kept.bytes += weight;
        }
        self.make_room(&mut kept);
    }

    /// Every entry up to `index` is now durable in the log.
    pub fn written(&self, index: u64) {
        let mut kept = self.kept();
        kept.written = kept.written.max(index);
        self.make_room(&mut kept);
    }

    /// Drops the oldest written entries while the kept ones are over their bounds.
    fn make_room(&self, kept: &mut Kept<E>) {
        while kept.first <= kept.written
            && (kept.entries.len() > self.most_entries || kept.bytes > self.most_bytes)
        {
            kept.pop_front();
        }
    }

    /// The kept part of the range `from..to`: `(split, entries)`, the entries `split..to`
    /// (`from <= split <= to`); the entries `from..split` are not kept (read them from the
    /// log). A range reaching past the kept entries is not answered here at all (`split` is
    /// `to`): the kept entries are the newest the log store accepted.
    pub fn tail_of(&self, from: u64, to: u64) -> (u64, Vec<(u64, E)>) {
        let kept = self.kept();
        if from >= to || to > kept.end() || to <= kept.first {
            return (to, Vec::new());
        }
        let split = from.max(kept.first);
        let skip = (split - kept.first) as usize;
        let entries = kept.entries.iter().skip(skip).take((to - split) as usize);
        (
            split,
            (split..).zip(entries.map(|(e, _)| e.clone())).collect(),
        )
    }

    /// The entries in `from..to` if every one of them is kept.
    #[cfg(test)]
    fn get(&self, from: u64, to: u64) -> Option<Vec<(u64, E)>> {
        let (split, entries) = self.tail_of(from, to);
        (split == from && from < to).then_some(entries)
    }

    /// The index of the last kept entry, if any.
    pub fn last(&self) -> Option<u64> {
        let kept = self.kept();
        (!kept.entries.is_empty()).then(|| kept.end() - 1)
    }

    /// `(first, last)` of the log whose own bounds are `log` (as [`Log::bounds`]), with the
    /// kept entries not written yet counted in.
    ///
    /// [`Log::bounds`]: klock_server::log::Log::bounds
    pub fn bounds_over(&self, log: (u64, u64)) -> (u64, u64) {
        let (first, last) = log;
        match self.last() {
            Some(kept) if kept > last => (first.min(kept), kept),
            _ => (first, last),
        }
    }

    /// The log kept the entries up to `index` only.
    pub fn truncated(&self, index: u64) {
        let mut kept = self.kept();
        while kept.end() > index + 1 {
            match kept.entries.pop_back() {
                Some((_, weight)) => kept.bytes -= weight,
                None => kept.first = index + 1,
            }
        }
        kept.written = kept.written.min(index);
    }

    /// The log dropped the entries up to `index`.
    pub fn purged(&self, index: u64) {
        let mut kept = self.kept();
        while kept.first <= index && !kept.entries.is_empty() {
            kept.pop_front();
        }
        if kept.entries.is_empty() && kept.first <= index {
            kept.first = index + 1;
        }
    }
}

/// The fixed part of an entry's weight (its enum, the log id, the small fields).
const ENTRY_BASE: usize = 256;

impl Weigh for Entry {
    fn weight(&self) -> usize {
        // A batch: the fixed part once, and each command's fields (a caller the batch names
        // once is counted with each of its commands: more than it holds, never less).
        ENTRY_BASE
            + self
                .calls()
                .into_iter()
                .map(call_weight)
                .fold(0usize, usize::saturating_add)
    }
}

/// The heap data of one command and its fields.
fn call_weight(call: Call<'_>) -> usize {
    use klock_core::Command;
    let Call {
        command,
        key,
        token,
        caller,
        resume,
        fingerprint,
    } = call;
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let caller = caller.map_or(0, |c| {
        c.namespace.len() + text(&c.token) + text(&c.resume) + text(&c.owner) + 64
    });
    let command = match command {
        Command::Open {
            agent_id,
            namespace,
        } => agent_id.len() + namespace.len(),
        Command::Acquire { intents, .. } => intents.iter().map(|i| i.len() + 24).sum(),
        Command::Heartbeat { leases, .. } => leases.as_ref().map_or(0, Vec::len) * 8,
        Command::Reconcile { leases, .. } => leases.len() * 8,
        Command::ResourceState {
            resource,
            namespace,
        } => resource.len() + namespace.len(),
        // A rare entry whose digest may be large: weighed by its encoding.
        Command::Resume { digest } => serde_json::to_vec(digest).map_or(usize::MAX, |b| b.len()),
        _ => 0,
    };
    (text(key) + text(token) + text(resume) + text(fingerprint) + caller).saturating_add(command)
}

impl Weigh for RaftEntry {
    fn weight(&self) -> usize {
        match &self.payload {
            // The entry and its JSON.
            EntryPayload::Normal(proposal) => proposal.entry().weight() + proposal.json().len(),
            EntryPayload::Blank => ENTRY_BASE,
            // A few nodes, each an id and two addresses.
            EntryPayload::Membership(m) => ENTRY_BASE + m.nodes().count() * 256,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_server::log::{Log, MemoryLog};

    impl Weigh for String {
        fn weight(&self) -> usize {
            self.len()
        }
    }

    fn entries(from: u64, to: u64, text: &str) -> Vec<(u64, String)> {
        (from..to).map(|i| (i, format!("{text}{i}"))).collect()
    }

    /// By default a leader keeps the operations of 200 batch requests of 100 acquires, written
    /// already, in memory: a follower that lags that far is replicated to without reading
    /// the file (docs/DECISIONS.md, "Issue 24: the cluster's entries encoded once").
    #[test]
    fn keeps_200_batches_of_acquires_by_default() {
        use crate::types::{LogId, Proposal};
        use klock_core::{AcquireOptions, Command, SessionId};
        use openraft::impls::leader_id_adv::LeaderId;
        let entry = |index: u64| RaftEntry {
            log_id: LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index - 1,
            ),
            payload: openraft::EntryPayload::Normal(
                Proposal::new(Entry::Command {
                    now: index,
                    command: Command::Acquire {
                        session: SessionId(index % 64),
                        intents: vec![format!("MUTATES FILE:/b/{}/{index}", index % 64)],
                        options: AcquireOptions {
                            ttl_ms: Some(30_000),
                            wait: false,
                            wait_timeout_ms: None,
                        },
                    },
                    key: None,
                    token: Some("ab".repeat(32)),
                    caller: None,
                    resume: None,
                    fingerprint: None,
                })
                .unwrap(),
            ),
        };
        let recent = Recent::<RaftEntry>::default();
        let n = 20_000;
        let batch: Vec<(u64, RaftEntry)> = (1..=n).map(|i| (i, entry(i))).collect();
        recent.keep(&batch);
        recent.written(n);
        let (split, kept) = recent.tail_of(1, n + 1);
        assert_eq!((split, kept.len()), (1, n as usize), "every entry kept");
    }

    #[test]
    fn keeps_the_newest_written_entries_within_their_count() {
        let recent = Recent::with_bounds(4, 1000);
        recent.keep(&entries(1, 9, "e"));
        assert_eq!(
            recent.get(1, 9).unwrap(),
            entries(1, 9, "e"),
            "none written: all kept"
        );
        recent.written(8);
        assert_eq!(recent.get(5, 9).unwrap(), entries(5, 9, "e"));
        assert_eq!(recent.get(4, 9), None, "entry 4 made room");
        recent.truncated(6);
        assert_eq!(recent.last(), Some(6));
        recent.keep(&entries(7, 9, "f"));
        assert_eq!(recent.get(7, 9).unwrap(), entries(7, 9, "f"));
        assert_eq!(recent.get(9, 10), None, "past the last entry");
        recent.purged(7);
        assert_eq!(recent.get(7, 8), None);
        assert_eq!(recent.get(8, 9).unwrap(), entries(8, 9, "f"));
    }

    #[test]
    fn keeps_the_written_entries_within_their_weight() {
        let recent = Recent::with_bounds(100, 10);
        recent.keep(&[(1, String::from("aaaa")), (2, String::from("bbbb"))]);
        recent.keep(&[(3, String::from("cccc"))]);
        recent.written(3);
        assert_eq!(recent.get(2, 4).unwrap().len(), 2, "8 of 10 bytes");
        assert_eq!(recent.get(1, 2), None, "entry 1 made room");
        // Unwritten entries are kept whatever they weigh: they are nowhere else yet.
        recent.keep(&[(4, "x".repeat(11)), (5, String::from("e"))]);
        assert_eq!(recent.get(4, 6).unwrap().len(), 2);
        recent.written(5);
        assert_eq!(recent.get(4, 5), None);
        assert_eq!(recent.get(5, 6).unwrap(), vec![(5, String::from("e"))]);
    }

    /// A differential test: a memory log behind the kept entries (written some steps after
    /// being kept, as the log store's writer does) answers every read exactly as the bare
    /// memory log does, through random appends, truncations and purges.
    #[test]
    fn reads_answer_as_the_log_alone() {
        for seed in 1..=20u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n.max(1)
            };
            let plain = MemoryLog::<String>::default();
            let behind = MemoryLog::<String>::default();
            let recent = Recent::with_bounds(6, 40);
            let mut unwritten: Vec<(u64, String)> = Vec::new();
            for step in 0..400 {
                let (first, last) = plain.bounds();
                let at = format!("seed {seed} step {step}");
                match next(7) {
                    0 | 1 => {
                        let batch = entries(last + 1, last + 1 + next(5), &format!("{step}-"));
                        plain.append(&batch).unwrap();
                        recent.keep(&batch);
                        unwritten.extend(batch);
                    }
                    2 => {
                        behind.append(&unwritten).unwrap();
                        if let Some((index, _)) = unwritten.last() {
                            recent.written(*index);
                        }
                        unwritten.clear();
                    }
                    k => {
                        // Truncations, purges and reads meet the writer's queue first (the
                        // log store's writer does them in order after the appends before).
                        behind.append(&unwritten).unwrap();
                        if let Some((index, _)) = unwritten.last() {
                            recent.written(*index);
                        }
                        unwritten.clear();
                        match k {
                            3 => {
                                let index = first.saturating_sub(1) + next(last + 2 - first);
                                plain.truncate_after(index).unwrap();
                                behind.truncate_after(index).unwrap();
                                recent.truncated(index);
                            }
                            4 => {
                                let index = first.saturating_sub(1) + next(last + 3 - first);
                                plain.purge_upto(index).unwrap();
                                behind.purge_upto(index).unwrap();
                                recent.purged(index);
                            }
                            _ => {}
                        }
                    }
                }
                // The bounds, and reads, may be asked at any time, unwritten entries
                // pending or not.
                let (first, last) = plain.bounds();
                assert_eq!(recent.bounds_over(behind.bounds()), (first, last), "{at}");
                let from = first + next(last + 2 - first);
                let to = (from + next(8)).min(last + 1);
                let expected = plain.read(from, to).unwrap();
                let (split, kept) = recent.tail_of(from, to);
                let mut got = behind.read(from, split).unwrap();
                got.extend(kept);
                assert_eq!(got, expected, "{at}: read {from}..{to}");
            }
        }
    }
}
