//! What the tests of klock-raft share: a state machine on a new machine, and Raft entries.

#![allow(dead_code)] // each test program uses part of it

use klock_core::{AcquireOptions, Command, Config, SessionId};
use klock_raft::state_machine::StateMachine;
use klock_raft::types::{LogId, Proposal, RaftEntry};
use klock_server::applier::Applier;
use klock_server::events::EventHub;
use klock_server::history::History;
use klock_server::log::{Log, MemoryLog};
use klock_server::machine::{Entry, Machine};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::{EntryPayload, Membership};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// A state machine on a new machine with the default kernel configuration, storing its
/// snapshots in `log` (and starting from the one stored there, if any).
pub fn state_machine_on(log: Arc<dyn Log<RaftEntry>>) -> StateMachine {
    let machine = Machine::new(Config::default()).expect("the default config is valid");
    let history = Arc::new(Mutex::new(History::new(&machine, 64)));
    let applier = Applier::new(machine, Arc::new(EventHub::new(1 << 20)), history);
    StateMachine::open(Arc::new(Mutex::new(applier)), log).expect("a state machine")
}

/// A state machine on a new machine, storing its snapshots in a memory log of its own.
pub fn state_machine() -> StateMachine {
    state_machine_on(Arc::new(MemoryLog::<RaftEntry>::default()))
}

/// The log id of Raft entry `index`, proposed in `term` by node 1.
pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

/// A client's command as the log records it, stamped `now`.
pub fn command(now: u64, command: Command) -> Entry {
    Entry::Command {
        now,
        command,
        key: None,
        token: None,
        caller: None,
        resume: None,
        fingerprint: None,
    }
}

/// An open of a session of agent `agent` in namespace `ns`.
pub fn open(now: u64, agent: &str) -> Entry {
    command(
        now,
        Command::Open {
            agent_id: agent.to_owned(),
            namespace: String::from("ns"),
        },
    )
}

/// An acquire of `MUTATES FILE:/<path>` by `session` (30 s lease, no wait).
pub fn acquire(now: u64, session: SessionId, path: &str) -> Entry {
    command(
        now,
        Command::Acquire {
            session,
            intents: vec![format!("MUTATES FILE:/{path}")],
            options: AcquireOptions {
                ttl_ms: Some(30_000),
                wait: false,
                wait_timeout_ms: None,
            },
        },
    )
}

/// A Raft entry carrying `entry` at `index` in term 1.
pub fn normal(index: u64, entry: Entry) -> RaftEntry {
    RaftEntry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(Proposal::new(entry).expect("an entry encodes")),
    }
}

/// A new leader's blank entry at `index` in `term`.
pub fn blank(term: u64, index: u64) -> RaftEntry {
    RaftEntry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

/// A membership entry at `index` in term 1: voters `voters`.
pub fn membership(index: u64, voters: &[u64]) -> RaftEntry {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    RaftEntry {
        log_id: log_id(1, index),
        payload: EntryPayload::Membership(Membership::new_with_defaults(vec![voters], [])),
    }
}
