//! # klock-cli
//!
//! The `klock` command (`src/main.rs`) parses its arguments and composes the server library
//! (`klock-server`) and the agent tools (`klock-agent`); it holds nothing else.
//!
//! - [`config_file`]: `klock serve --config FILE`, a TOML file standing for flags.
//! - [`cluster`]: `klock cluster`, a cluster's membership through a node's `/raft/*` routes.
//! - [`serve_args`]: `klock serve`'s flags and help; the test kit starts in-process servers
//!   from the same flags with it.

pub mod cluster;
pub mod config_file;
pub mod serve_args;
