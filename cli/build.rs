//! Records the git commit the `klock` binary is built from, for `klock --version` and the
//! server's `klock_build_info` metric (main.rs hands it to `klock_server::about`). Here, not
//! in the server library, so that a new commit rebuilds only this small crate.
//!
//! Contract: `KLOCK_BUILD_COMMIT` set in the build's environment wins (a container or a
//! package build without `.git`); else `git rev-parse --short=12 HEAD` when the source is a git
//! checkout and git is installed; else no commit. A build never fails for lack of either,
//! and the same source gives the same binary: only the commit id is recorded (no time, no
//! host, no work-tree state).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KLOCK_BUILD_COMMIT");
    let commit = match std::env::var("KLOCK_BUILD_COMMIT") {
        Ok(given) => Some(given).filter(|c| !c.is_empty()),
        Err(_) => {
            // Built again when HEAD moves: HEAD itself, the branch it names, and packed refs.
            for path in ["HEAD", "packed-refs"] {
                if let Some(p) = git(&["rev-parse", "--git-path", path]) {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        }
    };
    println!(
        "cargo:rustc-env=KLOCK_BUILD_COMMIT={}",
        commit.unwrap_or_default()
    );
}
