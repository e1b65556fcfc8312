//! # klock-agent
//!
//! The agent side of the control plane: the tools an agent runs against `klock serve`. A
//! client only: it is built on the friendly client's crate, `klock-client` (its transport,
//! typed routes, keeper of leases and acquisition loop), and depends on nothing of
//! `klock-server` (`cli/tests/crate_graph.rs` holds both apart).
//!
//! - [`args`]: the flags the tools share.
//! - [`exec`]: `klock exec`, a command run under leases.
//! - [`elect`]: `klock elect`, a command run while this process leads an election.
//! - [`child`]: that command's process group, its signals, and stopping it.
//! - [`sidecar`]: `klock mcp`, one session per agent behind the MCP tools of `klock-mcp`.
//! - [`replies`]: what it tells the model about its requests.
//! - [`overview`]: `klock status` and `klock reconcile`.
//! - [`names`]: file paths as resource names under a shared root.

pub mod args;
pub mod child;
pub mod elect;
pub mod exec;
pub mod names;
pub mod overview;
pub mod replies;
pub mod sidecar;
