//! The Raft type configuration of Klock.
//!
//! Contract: a Raft log entry's app data is a [`Proposal`], which is exactly today's log
//! record (an [`Entry`]: the command and the `now` its leader stamped it with) and is encoded
//! as that record is (serde-transparent), so one encoding serves the single-node log and the
//! replicated one. The answer to a proposal is the applier's [`Reply`]. Nodes are
//! [`openraft::NodeInfo`] (the Raft address and the public API address).

use klock_server::engine::Reply;
use klock_server::machine::Entry;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A log record proposed to the cluster: the command with its leader-stamped time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Proposal(pub Entry);

/// openraft logs its entries' app data with `Display`: the kind and the time, never the
/// command's content (it carries token hashes).
impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Entry::Command { now, command, .. } => write!(f, "{} at {now}", command.name()),
            Entry::Recovered { now } => write!(f, "recovered at {now}"),
            Entry::LeaderChanged { now, .. } => write!(f, "leader changed at {now}"),
        }
    }
}

openraft::declare_raft_types!(
    /// Klock's Raft types: [`Proposal`] in, the applier's [`Reply`] out.
    pub KlockRaft:
        D = Proposal,
        R = Reply,
        Node = openraft::NodeInfo,
);

/// A Raft log entry of Klock (log id and payload).
pub type RaftEntry = openraft::alias::EntryOf<KlockRaft>;
/// A Raft log id of Klock (leader term and node, index).
pub type LogId = openraft::alias::LogIdOf<KlockRaft>;
/// A vote of Klock's Raft.
pub type Vote = openraft::alias::VoteOf<KlockRaft>;
