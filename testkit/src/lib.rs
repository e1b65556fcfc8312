//! # klock-testkit
//!
//! Klock's test kit: test code only, never a normal dependency of the server library or the
//! `klock` binary (`cli/tests/crate_graph.rs` checks it).
//!
//! - [`server`]: "start a server" for a Rust test, in process through the library's `serve`,
//!   or as a `klock serve` process ([`process`]).
//! - [`support`]: sessions, metrics, certificates and token digests the HTTP tests share.
//! - [`history`]: the work, export and kernel replay the history tests share.
//! - [`http_client`]: a blocking loopback HTTP client.
//! - [`link`]: a TCP link a fault test can cut, delay, freeze and restore;
//!   [`link_process`]: the same as `klock-testkit link`, driven over stdin.
//! - [`cluster`]: a loopback cluster of `klock serve --node-id` processes, for the cluster
//!   tests and the cluster benchmark.
//! - [`manual`]: the resettable manual-clock server (`klock-testkit serve`), which the
//!   Python, Node and dashboard client tests reset between scenarios.
//! - [`rng`]: a seeded generator for tests that choose at random.
//! - [`conformance`]: every conformance vector through the HTTP API (`klock-testkit
//!   conformance PATH...`).

pub mod cluster;
pub mod conformance;
pub mod history;
pub mod http_client;
pub mod link;
pub mod link_process;
pub mod manual;
pub mod process;
pub mod rng;
pub mod server;
pub mod support;
