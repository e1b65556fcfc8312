//! Start-up from a data file: the snapshot, the log after it, then a `Recovered` entry.
//!
//! Contract: [`recover`] rebuilds the machine exactly as it was after the last durable entry
//! (the snapshot's state hash is checked, the log must be dense), resumes server time at the
//! last logged `now` (time does not pass while the server is down, so no lease or wait loses
//! the downtime), and logs and applies one `Recovered` entry, which puts every open session in
//! its suspension grace so agents can reconnect, reconcile and heartbeat. Fences continue from
//! the replayed counter: nothing was answered before it was durable, so none repeats. The
//! replayed entries' events go back into the event streams, so an agent that reconnects with
//! the id of the last event it saw misses nothing the log still holds; the snapshot's sessions
//! are bound to their namespaces' streams, and the events it folded in count as dropped, so a
//! reader from before it is told of the gap ([`EventHub::restore`]). A log ending in a torn
//! record (a write cut short) is cut back to its last whole record, and the recovery says so:
//! nothing in it was ever answered. A new file records the configuration it is created with;
//! an existing file keeps its own, and a different one asked for is an error rather than a
//! silent choice.

use crate::events::{EventHub, Membership};
use crate::history::{History, Step, DEFAULT_CAPACITY};
use crate::machine::{Entry, Machine};
use crate::store::{Store, TornTail};
use klock_core::Config;

/// The machine a data file describes, and what was done to get it.
pub struct Recovered {
    pub machine: Machine,
    /// Entries replayed after the snapshot.
    pub replayed: u64,
    /// Whether the file held any history (then a `Recovered` entry was logged).
    pub restarted: bool,
    /// The torn tail the log ended in, cut off: the machine is the prefix before it.
    pub torn: Option<TornTail>,
    /// The kernel's history from the snapshot on: the replayed entries and `Recovered`.
    pub history: History,
}

/// Rebuilds the machine from `store` (see the module contract). `config` is the configuration
/// asked for: stored if the file is new, compared with the stored one otherwise.
///
/// # Errors
/// A storage failure, a damaged file, or a configuration that differs from the file's.
pub fn recover(store: &Store, config: &Config, events: &EventHub) -> Result<Recovered, String> {
    let stored = store.config().map_err(|e| e.to_string())?;
    let loaded = store.load().map_err(|e| e.to_string())?;
    let config = match stored {
        Some(stored) if stored != *config => {
            return Err(format!(
                "the data file was created with another kernel configuration ({stored:?}); \
                 start with the same settings, or with a new data file"
            ))
        }
        Some(stored) => stored,
        None if loaded.snapshot.is_some() || !loaded.entries.is_empty() => {
            // A log without the data file it was written with (say the data file was removed
            // and the log left behind): its history under an unknown configuration.
            return Err(String::from(
                "the log beside the data file holds history, but the data file records no \
                 configuration: they do not belong together; move the log away or restore \
                 its data file",
            ));
        }
        None => {
            store.set_config(config).map_err(|e| e.to_string())?;
            config.clone()
        }
    };
    let mut machine = match &loaded.snapshot {
        Some(snapshot) => {
            let machine = Machine::restore(snapshot).map_err(|e| e.to_string())?;
            // The snapshot's sessions belong to their namespaces' streams too, and the events
            // it folded in are gone: readers from before it learn of a gap.
            let sessions = snapshot.state.sessions.iter();
            events.restore(
                snapshot.applied,
                sessions.map(|s| (s.session_id, s.namespace.as_str())),
            );
            machine
        }
        None => Machine::new(config).map_err(|e| e.message)?,
    };
    let replayed = loaded.entries.len() as u64;
    let mut history = History::new(&machine, DEFAULT_CAPACITY);
    let mut step = |machine: &Machine, commands| {
        let (index, now) = (machine.applied(), machine.last_now());
        history.push(
            Step {
                index,
                now,
                commands,
            },
            machine,
        );
    };
    for (index, entry) in &loaded.entries {
        let applied = machine.apply(*index, entry);
        let membership = Membership::of(entry, &applied.output, applied.repeat_of.is_some());
        events.record(*index, &membership, &applied.events);
        step(&machine, applied.kernel_calls);
    }
    let restarted = machine.applied() > 0;
    if restarted {
        let index = machine.applied() + 1;
        let entry = Entry::Recovered {
            now: machine.last_now(),
        };
        store
            .append(&[(index, entry.clone())])
            .map_err(|e| e.to_string())?;
        let applied = machine.apply(index, &entry);
        let membership = Membership::of(&entry, &applied.output, false);
        events.record(index, &membership, &applied.events);
        step(&machine, applied.kernel_calls);
    }
    Ok(Recovered {
        machine,
        replayed,
        restarted,
        torn: loaded.torn,
        history,
    })
}
