//! What this build is: the crate version and, when the `klock` binary knew it at build time,
//! the git commit (cli/build.rs; the binary hands it over with [`set_commit`] at start, so a
//! new commit does not rebuild this library). Shown by `klock --version`, `GET /v1/version`
//! and the `klock_build_info` metric.

use std::sync::OnceLock;

/// The crate version (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

static COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Records the commit the binary was built from (the first call wins; an empty one is none).
pub fn set_commit(commit: &'static str) {
    let _ = COMMIT.set(commit);
}

/// The git commit built from (12 hex digits), if the binary said.
pub fn commit() -> Option<&'static str> {
    COMMIT.get().copied().filter(|c| !c.is_empty())
}

/// `klock 0.1.0 (commit 0123456789ab)`, or `klock 0.1.0` without a known commit.
pub fn long_version() -> String {
    match commit() {
        Some(c) => format!("klock {VERSION} (commit {c})"),
        None => format!("klock {VERSION}"),
    }
}
