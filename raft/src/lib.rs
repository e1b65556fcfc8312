//! # klock-raft
//!
//! Klock's replication on openraft (pinned `=0.10.0-alpha.37`, docs/DECISIONS.md "Replication
//! on openraft"): the server's log, machine and applier under openraft's storage traits. Raft
//! replaces the file log's writer and the proposer, never the machine: every node applies the
//! same log entries through the same [`klock_server::applier::Applier`].
//!
//! - [`types`]: the Raft type configuration ([`types::KlockRaft`]); a log entry's app data is
//!   today's log record (a [`klock_server::machine::Entry`]: command and leader-stamped `now`);
//!   `quick`: the entry decoded without serde's buffer (what a follower does with each).
//! - [`log_store`]: [`log_store::LogStore`], openraft's `RaftLogStorage` and `RaftLogReader`
//!   on the server's [`klock_server::log::Log`] seam (the file store or the memory log);
//!   [`writer`]: the writer (a thread of its own when serving) of its appends (grouped),
//!   truncations and purges, in order;
//!   [`recent`]: its newest entries, readable decoded from memory before and after they are
//!   written.
//! - [`state_machine`]: [`state_machine::StateMachine`], openraft's `RaftStateMachine` and
//!   `RaftSnapshotBuilder` on the applier; snapshots are the machine's.
//!
//! - [`peer`]: the HTTP client a node (or `klock cluster`) reaches a peer's `/raft/*` with.
//! - [`network`]: openraft's network (`RaftNetworkV2`) over those routes.
//! - [`routes`]: the `/raft/*` routes a node serves beside the client API, behind the
//!   cluster secret.
//! - [`node`]: a cluster node (`klock serve --node-id`): the Raft node on the server's
//!   applier (its RPCs over any network: the HTTP one, or the tests' simulated one), the
//!   proposer it gives the engine, and the leader's clock.

pub mod gone;
pub mod log_store;
pub mod network;
pub mod node;
pub mod peer;
mod quick;
pub mod recent;
pub mod routes;
pub mod state_machine;
pub mod types;
pub mod writer;

/// A storage failure as openraft's storage traits report it.
pub(crate) fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
