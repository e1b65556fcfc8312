//! What the HTTP test files share: the test kit's in-process server and its helpers. Each
//! file uses its own part of it.
#![allow(unused_imports)]

pub use klock_testkit::server::Server;
pub use klock_testkit::support::*;
