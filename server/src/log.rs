//! The log interface the engine (and, later, a consensus layer) writes through, and its
//! memory implementation. The file implementation is [`crate::store::Store`].
//!
//! Contract, for every implementation:
//! - Entries are `(index, entry)` with dense indexes. The entry type is a parameter: the
//!   single-node server logs [`Entry`] (the default), a consensus layer its own records (an
//!   `Entry` with its term and log id, or an entry of its own); the contract is the same.
//!   [`Log::append`] takes entries that follow the last one held (or the snapshot, when
//!   none is held) and returns only once they are durable: nothing derived from an entry (an
//!   answer, an event, a grant, a fence) may leave the process before that (output commit).
//! - [`Log::truncate_after`] removes every entry after an index (a conflicting suffix a
//!   leader overwrites); [`Log::purge_upto`] drops every entry up to an index (covered by a
//!   snapshot). Neither touches the other end. Both are durable when they return.
//! - [`Log::read`] returns the entries held in `from..to` (end exclusive), in order; asking
//!   for purged or missing entries is an error naming them, never a shorter answer.
//! - The vote is opaque bytes: the consensus layer's own durable metadata (its vote, and
//!   whatever must survive with it), encoded by that layer; the snapshot is the machine's.
//!   Both are stored durably and read back whole.
//! - Implementations are shared between threads (`Send + Sync`): the engine's writer appends
//!   while readers read.

use crate::machine::{Entry, MachineSnapshot};
use crate::store::StoreError;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A snapshot and its JSON (`serde_json::to_vec` of it), encoded once: a snapshot holds the
/// whole state (megabytes), and its JSON is both what the file store writes and what a
/// consensus layer sends to a node that lags.
pub struct EncodedSnapshot<'a> {
    snapshot: &'a MachineSnapshot,
    json: Vec<u8>,
}

impl<'a> EncodedSnapshot<'a> {
    /// Encodes `snapshot`, into a buffer made room for at once by `expected` bytes (the last
    /// snapshot's length, say; 0 when there is none): its JSON is the same whatever is
    /// expected. A buffer grown by doubling instead copies itself at each step and touches
    /// fresh pages that the kernel zeroes, which was three quarters of the encoding's cost in
    /// a cluster follower's profile (docs/DECISIONS.md, "a snapshot's buffer sized at once").
    ///
    /// # Errors
    /// The snapshot cannot be encoded.
    pub fn new(
        snapshot: &'a MachineSnapshot,
        expected: usize,
    ) -> Result<EncodedSnapshot<'a>, StoreError> {
        // An eighth more: a state that grew a little since still fits.
        let mut json = Vec::with_capacity(expected.saturating_add(expected / 8));
        serde_json::to_writer(&mut json, snapshot)
            .map_err(crate::store::fail("encode the snapshot"))?;
        Ok(EncodedSnapshot { snapshot, json })
    }

    /// The snapshot.
    pub fn snapshot(&self) -> &MachineSnapshot {
        self.snapshot
    }

    /// Its JSON.
    pub fn json(&self) -> &[u8] {
        &self.json
    }

    /// Its JSON, taken.
    pub fn into_json(self) -> Vec<u8> {
        self.json
    }
}

/// Where the entries, the vote and the snapshot are kept (see the module contract).
pub trait Log<E = Entry>: Send + Sync {
    /// Appends `entries` (dense, following the last index) durably.
    ///
    /// # Errors
    /// A storage failure, or entries that do not follow the last index.
    fn append(&self, entries: &[(u64, E)]) -> Result<(), StoreError>;

    /// Removes every entry after `index`.
    ///
    /// # Errors
    /// A storage failure, or `index` before the first entry held (purged).
    fn truncate_after(&self, index: u64) -> Result<(), StoreError>;

    /// Drops every entry up to and including `index`.
    ///
    /// # Errors
    /// A storage failure.
    fn purge_upto(&self, index: u64) -> Result<(), StoreError>;

    /// The entries in `from..to`, in order.
    ///
    /// # Errors
    /// A storage failure, or a range reaching outside the entries held.
    fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, E)>, StoreError>;

    /// `(first, last)`: the indexes the log holds are `first..=last`; when it holds none,
    /// `first == last + 1`, and `last` is the index of the last entry purged (0 for none).
    /// It does not wait for a change under way (an append in its sync): it answers the bounds
    /// as of the last change made whole.
    fn bounds(&self) -> (u64, u64);

    /// Stores the vote (durably).
    ///
    /// # Errors
    /// A storage failure.
    fn save_vote(&self, vote: &[u8]) -> Result<(), StoreError>;

    /// The vote last stored, if any.
    ///
    /// # Errors
    /// A storage failure.
    fn read_vote(&self) -> Result<Option<Vec<u8>>, StoreError>;

    /// Stores `snapshot` (durably), replacing the one held. The entries it covers stay until
    /// purged.
    ///
    /// # Errors
    /// A storage failure.
    fn save_snapshot(&self, snapshot: &EncodedSnapshot<'_>) -> Result<(), StoreError>;

    /// The snapshot last stored, if any.
    ///
    /// # Errors
    /// A storage failure, or a snapshot that cannot be decoded.
    fn read_snapshot(&self) -> Result<Option<MachineSnapshot>, StoreError>;
}

/// The error for entries that do not follow the log's last index.
pub(crate) fn not_following(last: u64, first: u64) -> StoreError {
    StoreError(format!(
        "entries must follow the log's last entry {last}: got {first}"
    ))
}

/// The error for a read outside the entries held.
pub(crate) fn outside(from: u64, to: u64, (first, last): (u64, u64)) -> StoreError {
    StoreError(format!(
        "entries {from}..{to} are not all in the log, which holds {first}..={last}"
    ))
}

/// Checks that `entries` are dense and follow `last`.
pub(crate) fn check_follows<E>(last: u64, entries: &[(u64, E)]) -> Result<(), StoreError> {
    for (offset, (index, _)) in entries.iter().enumerate() {
        if *index != last + 1 + offset as u64 {
            return Err(not_following(last + offset as u64, *index));
        }
    }
    Ok(())
}

/// A log in memory: durable for as long as the process lives (tests, and a consensus
/// layer's tests).
pub struct MemoryLog<E = Entry> {
    inner: Mutex<Memory<E>>,
}

impl<E> Default for MemoryLog<E> {
    fn default() -> Self {
        MemoryLog {
            inner: Mutex::new(Memory {
                before: 0,
                entries: VecDeque::new(),
                vote: None,
                snapshot: None,
            }),
        }
    }
}

struct Memory<E> {
    /// The index of the entry before the first one held.
    before: u64,
    entries: VecDeque<E>,
    vote: Option<Vec<u8>>,
    snapshot: Option<MachineSnapshot>,
}

impl<E> Memory<E> {
    fn bounds(&self) -> (u64, u64) {
        (self.before + 1, self.before + self.entries.len() as u64)
    }
}

impl<E> MemoryLog<E> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Memory<E>> {
        // A panic while holding it leaves whole values behind: the data is still good.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<E: Clone + Send> Log<E> for MemoryLog<E> {
    fn append(&self, entries: &[(u64, E)]) -> Result<(), StoreError> {
        let mut log = self.lock();
        check_follows(log.bounds().1, entries)?;
        log.entries.extend(entries.iter().map(|(_, e)| e.clone()));
        Ok(())
    }

    fn truncate_after(&self, index: u64) -> Result<(), StoreError> {
        let mut log = self.lock();
        if index < log.before {
            return Err(StoreError(format!(
                "cannot truncate after entry {index}: entries up to {} are purged",
                log.before
            )));
        }
        let keep = (index - log.before) as usize;
        log.entries.truncate(keep);
        Ok(())
    }

    fn purge_upto(&self, index: u64) -> Result<(), StoreError> {
        let mut log = self.lock();
        if index <= log.before {
            return Ok(());
        }
        let drop = ((index - log.before) as usize).min(log.entries.len());
        log.entries.drain(..drop);
        log.before = index;
        Ok(())
    }

    fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, E)>, StoreError> {
        let log = self.lock();
        let (first, last) = log.bounds();
        if from > to || (from < to && (from < first || to > last + 1)) {
            return Err(outside(from, to, (first, last)));
        }
        let skip = from.saturating_sub(first) as usize;
        Ok((from..to)
            .zip(log.entries.iter().skip(skip))
            .map(|(i, e)| (i, e.clone()))
            .collect())
    }

    fn bounds(&self) -> (u64, u64) {
        self.lock().bounds()
    }

    fn save_vote(&self, vote: &[u8]) -> Result<(), StoreError> {
        self.lock().vote = Some(vote.to_vec());
        Ok(())
    }

    fn read_vote(&self) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock().vote.clone())
    }

    fn save_snapshot(&self, snapshot: &EncodedSnapshot<'_>) -> Result<(), StoreError> {
        self.lock().snapshot = Some(snapshot.snapshot().clone());
        Ok(())
    }

    fn read_snapshot(&self) -> Result<Option<MachineSnapshot>, StoreError> {
        Ok(self.lock().snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;

    /// The JSON is `serde_json::to_vec`'s whatever length is expected, and a snapshot that
    /// fits what is expected is encoded into the room made at once, never grown.
    #[test]
    fn a_snapshot_is_encoded_the_same_into_the_room_expected() {
        let mut machine = Machine::new(klock_core::Config::default()).unwrap();
        let open = crate::machine::Entry::Command {
            now: 1,
            command: klock_core::Command::Open {
                agent_id: String::from("an-agent-with-a-name"),
                namespace: String::from("default"),
            },
            key: None,
            token: None,
            caller: None,
            resume: None,
            fingerprint: None,
        };
        machine.apply(1, &open);
        let snapshot = machine.snapshot();
        let json = serde_json::to_vec(&snapshot).unwrap();
        for expected in [0, 1, json.len() - 1, json.len(), json.len() * 10] {
            let encoded = EncodedSnapshot::new(&snapshot, expected).unwrap();
            assert_eq!(encoded.json(), &json[..], "expected {expected}");
        }
        let room = json.len() + json.len() / 8;
        let encoded = EncodedSnapshot::new(&snapshot, json.len()).unwrap();
        assert_eq!(encoded.into_json().capacity(), room);
    }
}
