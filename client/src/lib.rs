#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! The friendly client:
//! - [`client`]: [`Client`], where the server is and the token to show it.
//! - [`session`]: [`Session`], leases as [`LeaseGuard`]s renewed in the background.
//! - [`guard`]: the RAII [`LeaseGuard`].
//! - [`acquire`]: asking until granted, as the core's [`klock_core::client::Acquisition`]
//!   decides.
//! - [`fence`]: [`fence::fenced_write`], the store's side of a fence.
//! - [`blocking`]: the same, blocking, over a private runtime.
//! - [`error`]: the one error type, [`Error`].
//!
//! Under it, shared with the `klock` agent tools (`klock exec`, `klock mcp`, `klock status`):
//! - [`transport`]: one request to the server, or to a cluster's nodes as the core's failover
//!   rules say (TCP, TLS or a Unix socket), on the kept-alive connections of [`conn`], read by
//!   [`http`]; where the servers are is [`endpoint`].
//! - [`routes`]: one session's routes as typed calls.
//! - [`keeper`]: background renewals, and the report of a lost lease.
//! - [`watch`]: one event stream per client and namespace, carrying every session's events
//!   to its keeper.
//! - [`describe`]: leases and blockers as text.

pub mod acquire;
pub mod blocking;
pub mod client;
pub mod conn;
pub mod describe;
pub mod endpoint;
pub mod error;
pub mod fence;
pub mod guard;
pub mod http;
pub mod keeper;
pub mod routes;
pub mod session;
pub mod transport;
pub mod watch;

pub use client::{Client, Connect};
pub use error::Error;
pub use guard::LeaseGuard;
pub use keeper::Loss;
pub use klock_core::client::TimedOut;
pub use klock_core::Lease;
pub use session::{LeaseOptions, Session};
