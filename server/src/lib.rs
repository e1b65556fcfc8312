//! # klock-server
//!
//! The Klock control plane: one kernel, owned by one task, shared by agents in many processes
//! over HTTP, with every command logged durably before anything it caused leaves the process.
//!
//! - [`machine`]: the state machine (log entries in, answers and events out), pure.
//! - [`store`]: the redb file holding the log and the latest snapshot.
//! - [`engine`]: the task that owns the machine, its timer and the log (group commit).
//! - [`dashboard`]: `klock serve --dashboard`, the page served by the server itself.
//! - [`events`]: per-session streams of the durable events.
//! - [`history`]: the recent kernel calls and checkpoints, for replay (the dashboard).
//! - [`http_client`]: a minimal loopback HTTP client and a `klock serve` child process.
//! - [`metrics`]: the Prometheus text at `/metrics`.
//! - [`recovery`]: building the machine from the store on start.
//! - [`api`]: the HTTP routes (`/v1`), translation only.
//! - [`auth`]: bearer tokens, roles, namespaces and per-token limits.
//! - [`conn`]: accepting and keeping connections within bounds (caps, timeouts).
//! - [`guard`]: what a web page must not do (Host on loopback, JSON bodies only).
//! - [`conformance`]: every vector through the HTTP API of a spawned manual-clock server.
//! - [`agent`]: the tools agents run against a server: `klock exec`, `klock mcp`,
//!   `klock status`, `klock reconcile`.

pub mod agent;
pub mod api;
pub mod applier;
pub mod auth;
pub mod conformance;
pub mod conn;
pub mod dashboard;
pub mod engine;
pub mod events;
pub mod guard;
pub mod history;
pub mod http_client;
pub mod log;
pub mod machine;
pub mod metrics;
pub mod recovery;
pub mod store;
