//! What the process tests share: the `klock` binary built with them, started as a server by
//! the test kit, and the test kit's helpers. Each file uses its own part of it.
#![allow(dead_code, unused_imports)]

pub mod cluster;

pub use klock_testkit::server::Server;
pub use klock_testkit::support::*;

/// The `klock` binary of this package.
pub fn klock() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_klock"))
}
