//! What this build is: the crate version and, when it was known at build time, the git commit
//! (build.rs). Shown by `klock --version`, `GET /v1/version` and the `klock_build_info` metric.

/// The crate version (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit built from (12 hex digits), if the build knew it.
pub fn commit() -> Option<&'static str> {
    Some(env!("KLOCK_BUILD_COMMIT")).filter(|c| !c.is_empty())
}

/// `klock 0.1.0 (commit 0123456789ab)`, or `klock 0.1.0` without a known commit.
pub fn long_version() -> String {
    match commit() {
        Some(c) => format!("klock {VERSION} (commit {c})"),
        None => format!("klock {VERSION}"),
    }
}
