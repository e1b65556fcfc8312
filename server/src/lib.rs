//! # klock-server
//!
//! The Klock control plane: one kernel shared by agents in many processes over HTTP, with
//! every command logged durably before it is applied, and so before anything it caused leaves
//! the process.
//!
//! - [`machine`]: the state machine (log entries in, answers and events out), pure.
//! - [`log`]: the log interface (append, truncate, purge, read, vote, snapshot) and a memory
//!   log; [`store`]: the file log and the redb file holding the latest snapshot.
//! - [`applier`]: committed entries in; the machine, the history and the event streams
//!   updated, answers out (shared by recovery and the live path).
//! - [`engine`]: the proposer (stamp, batch, append, then apply), its timer, and group commit.
//! - [`dashboard`]: `klock serve --dashboard`, the page served by the server itself.
//! - [`events`]: per-session streams of the durable events.
//! - [`history`]: the recent kernel calls and checkpoints, for replay (the dashboard).
//! - [`metrics`]: the Prometheus text at `/metrics`; [`process`]: its `process_*` series.
//! - [`about`]: the version and git commit of this build.
//! - [`logging`]: the server's structured logs (`--log-level`, `--log-format`).
//! - [`backup`]: the online backup (`GET /v1/backup`) and the restore of one into a data file.
//! - [`recovery`]: building the machine from the store on start.
//! - [`api`]: the HTTP routes (`/v1`), translation only.
//! - [`auth`]: bearer tokens, roles, namespaces and per-token limits.
//! - [`conn`]: accepting and keeping connections within bounds (caps, timeouts).
//! - [`guard`]: what a web page must not do (Host on loopback, JSON bodies only).
//! - [`serve`]: the whole server composed from a [`serve::ServeConfig`] (what `klock serve`
//!   runs, and what a test starts in its own process).
//!
//! A library only: the `klock` command is `cli/`, the agent tools `agent/`, the test
//! harness `testkit/` (docs/DECISIONS.md, "One crate per program").

pub mod about;
pub mod api;
pub mod applier;
pub mod auth;
pub mod backup;
pub mod conn;
pub mod dashboard;
pub mod engine;
pub mod events;
pub mod guard;
pub mod history;
pub mod log;
pub mod logging;
pub mod machine;
pub mod metrics;
pub mod process;
pub mod recovery;
pub mod relay;
pub mod serve;
pub mod store;
