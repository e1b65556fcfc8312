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
//!
//! A log lost and accepted (`--accept-log-loss`, see store.rs) starts from the data file's
//! snapshot moved past anything the lost log can have issued (issue 22 item 13): the lost
//! entries were written after the snapshot's wall-clock time, at most
//! [`MAX_ISSUED_PER_MS`] log entries and leases a millisecond, and server time runs no faster
//! than the wall clock (it stops while the server is down). So the next fence, the next log
//! index and server time start past the snapshot's by the wall-clock time since it times
//! that rate (time by the time since itself), and the raised state is stored at once as the
//! new snapshot. A wall clock reading earlier than the snapshot bounds nothing and is refused
//! (`LOG_LOSS_UNBOUNDED`).

use crate::applier::Applier;
use crate::events::EventHub;
use crate::history::{History, DEFAULT_CAPACITY};
use crate::log::Log as _;
use crate::machine::{Entry, Machine, MachineSnapshot};
use crate::store::{LogLoss, Store, TornTail};
use klock_core::Config;
use std::sync::{Arc, Mutex};

/// More log entries, or leases, than one engine task can make in a millisecond (it makes
/// well under a thousand: each costs a kernel step, and entries a durable write): the bound
/// on what a lost log can have issued per millisecond of wall-clock time.
pub const MAX_ISSUED_PER_MS: u64 = 10_000;

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
pub fn recover(
    store: &Store,
    config: &Config,
    events: &Arc<EventHub>,
) -> Result<Recovered, String> {
    let stored = store.config().map_err(|e| e.to_string())?;
    let loaded = store.load().map_err(|e| e.to_string())?;
    let config = match stored {
        Some(stored) if stored != *config => return Err(config_mismatch(&stored, config)),
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
    if let Some(loss) = &loaded.lost {
        machine = past_the_loss(store, &machine, loss)?;
    }
    let replayed = loaded.entries.len() as u64;
    let history = Arc::new(Mutex::new(History::new(&machine, DEFAULT_CAPACITY)));
    let mut applier = Applier::new(machine, Arc::clone(events), Arc::clone(&history));
    for (index, entry) in &loaded.entries {
        applier.apply(*index, entry);
    }
    let restarted = applier.machine().applied() > 0;
    if restarted {
        let index = applier.machine().applied() + 1;
        let entry = Entry::Recovered {
            now: applier.machine().last_now(),
        };
        store
            .append(&[(index, entry.clone())])
            .map_err(|e| e.to_string())?;
        applier.apply(index, &entry);
    }
    let machine = applier.into_machine();
    // The applier held the only other handle, and is gone.
    let history = Arc::try_unwrap(history)
        .map_err(|_| String::from("the recovered history is still shared"))?
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    Ok(Recovered {
        machine,
        replayed,
        restarted,
        torn: loaded.torn,
        history,
    })
}

/// The machine after an accepted log loss: `machine` (the data file's snapshot) with its next
/// fence, log index and time moved past anything the lost log can have issued, stored as the
/// new snapshot (see the module contract).
fn past_the_loss(store: &Store, machine: &Machine, loss: &LogLoss) -> Result<Machine, String> {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let since = store.wall_ms().map_err(|e| e.to_string())?;
    let Some(elapsed) = since.and_then(|at| wall.checked_sub(at)) else {
        return Err(format!(
            "LOG_LOSS_UNBOUNDED: {} accepted, but the wall clock reads earlier than the data \
             file's last snapshot (or the file records no time): nothing bounds the fences the \
             lost log issued; fix the clock, or restore the log",
            loss.name()
        ));
    };
    let snapshot = raised_past(&machine.snapshot(), elapsed);
    let raised = Machine::restore(&snapshot).map_err(|e| e.to_string())?;
    store
        .compact(&raised.snapshot())
        .map_err(|e| e.to_string())?;
    let aside = match loss {
        LogLoss::Missing => String::new(),
        LogLoss::Mismatch { moved_to } | LogLoss::Newer { moved_to, .. } => {
            format!(" (the log was set aside as {})", moved_to.display())
        }
    };
    tracing::warn!(
        loss = loss.name(),
        snapshot_index = machine.applied(),
        elapsed_ms = elapsed,
        next_fence = snapshot.state.next_lease,
        next_index = snapshot.applied + 1,
        server_time_ms = snapshot.last_now,
        "{} accepted (--accept-log-loss){aside}: started from the snapshot of entry {}, \
         {elapsed} ms of wall-clock time ago; fences now start at {}, log indexes at {}, \
         server time at {} ms",
        loss.name(),
        machine.applied(),
        snapshot.state.next_lease,
        snapshot.applied + 1,
        snapshot.last_now
    );
    Ok(raised)
}

/// `snapshot` moved past anything a server can have issued in `elapsed_ms` of wall-clock
/// time after it (see the module contract): the next fence and the next log index by
/// [`MAX_ISSUED_PER_MS`] a millisecond, server time by the time itself. Used for an accepted
/// log loss and for a restored backup (a backup lags the server it was taken from).
pub fn raised_past(snapshot: &MachineSnapshot, elapsed_ms: u64) -> MachineSnapshot {
    let issued = elapsed_ms
        .saturating_mul(MAX_ISSUED_PER_MS)
        .saturating_add(1);
    let mut snapshot = snapshot.clone();
    snapshot.state.next_lease = snapshot.state.next_lease.saturating_add(issued);
    snapshot.applied = snapshot.applied.saturating_add(issued);
    let now = snapshot
        .last_now
        .max(snapshot.state.clock)
        .saturating_add(elapsed_ms);
    snapshot.last_now = now;
    snapshot.state.clock = now;
    snapshot.hash = snapshot.state.hash();
    snapshot
}

/// `CONFIG_MISMATCH`: each kernel setting in which `asked` differs from the data file's
/// `stored` one, with both values (named as `--config` names them).
pub fn config_mismatch(stored: &Config, asked: &Config) -> String {
    let fields = |c: &Config| match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (stored, asked) = (fields(stored), fields(asked));
    let differing: Vec<String> = stored
        .iter()
        .filter(|(name, value)| asked.get(*name) != Some(value))
        .map(|(name, value)| {
            let other = asked
                .get(name)
                .map_or(String::from("nothing"), |v| v.to_string());
            format!("{name}: the data file has {value}, the flags ask for {other}")
        })
        .collect();
    format!(
        "CONFIG_MISMATCH: the data file was created with other kernel settings ({}); start \
         with the data file's settings (--config NAME=VALUE, or the [kernel] table of the \
         config file), or with a new data file",
        differing.join("; ")
    )
}
