//! # klock-agent
//!
//! The agent side of the control plane: the tools an agent runs against `klock serve`. A
//! client only: it talks to a server over HTTP and depends on nothing of `klock-server`
//! (`cli/tests/crate_graph.rs` holds both apart).
//!
//! - [`http`]: reading one HTTP answer, and percent-encoding.
//! - [`client`]: where the server is, and one bounded request to it (TCP, TLS or Unix socket).
//! - [`conn`]: the kept-alive connections under it.
//! - [`session`]: one session's routes as typed calls.
//! - [`keeper`]: background renewals, and the report of a lost lease.
//! - [`args`]: the flags the tools share.
//! - [`exec`]: `klock exec`, a command run under leases.
//! - [`elect`]: `klock elect`, a command run while this process leads an election.
//! - [`child`]: that command's process group, its signals, and stopping it.
//! - [`sidecar`]: `klock mcp`, one session per agent behind the MCP tools of `klock-mcp`.
//! - [`replies`]: what it tells the model about its requests.
//! - [`overview`]: `klock status` and `klock reconcile`.

pub mod args;
pub mod child;
pub mod client;
pub mod conn;
pub mod elect;
pub mod exec;
pub mod http;
pub mod keeper;
pub mod names;
pub mod overview;
pub mod replies;
pub mod session;
pub mod sidecar;
