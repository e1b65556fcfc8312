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
    link_position_dependent();
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

/// The `klock` binary is linked position-dependent (`-no-pie`) on Linux with glibc: a PIE
/// this size carries about 25,000 relative relocations that the dynamic loader applies at
/// every start, dirtying some 110 pages of `.data.rel.ro` and the GOT (224 page faults for
/// `klock --version` against 116 without, 1.08 against 0.82 ms of CPU). `klock exec` is run
/// once per command a script wraps, so its start is what it costs (issue 27: at most 2x
/// `flock`). What it gives up: the executable's own address is no longer randomised (the
/// libraries, stack, heap and mappings still are). Measured and argued in docs/DECISIONS.md,
/// "Issue 27: klock exec start-up"; `KLOCK_PIE=1` in the build's environment keeps a PIE.
fn link_position_dependent() {
    println!("cargo:rerun-if-env-changed=KLOCK_PIE");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let keep_pie = !var("KLOCK_PIE").is_empty() && var("KLOCK_PIE") != "0";
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" && !keep_pie {
        println!("cargo:rustc-link-arg-bin=klock=-no-pie");
    }
}
